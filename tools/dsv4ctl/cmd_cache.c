/* SPDX-License-Identifier: MIT */
/*
 * `dsv4ctl cache status|clear --model DIR [--prefix-cache-dir DIR]`: the model's on-disk prefix
 * cache (common/prefix_cache.h): its blocks and bytes, or removing it (only the cache's own
 * files, then the directory). Also the cache `run` opens (dsv4ctl_prefix_open).
 */
#include "dsv4ctl.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "engine-args.h"
#include "log.h"
#include "model_id.h"
#include "prefix.h"
#include "util.h"

dsv4_pcache *dsv4ctl_prefix_open(const char *model, const struct dsv4_config *c,
                                 uint64_t ram_mb, double disk_gb, const char *dir)
{
    struct dsv4_err err = { "" };
    dsv4_pcache *pc = NULL;
    if (dsv4_prefix_cache_open(model, c, ram_mb << 20, (uint64_t)(disk_gb * (double)(1ull << 30)),
                               dir, &pc, &err) < 0) {
        fprintf(stderr, "dsv4ctl: prefix cache off: %s\n", err.msg);
        return NULL;
    }
    return pc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: dsv4ctl cache status|clear --model DIR [--prefix-cache-dir DIR]\n"
               "  status  the model's on-disk prefix cache: directory, blocks, bytes\n"
               "  clear   remove it (the cache's own files, then the directory)\n"
               "  The directory is $XDG_CACHE_HOME/dsv4/<model id> (~/.cache/... without\n"
               "  XDG_CACHE_HOME) unless --prefix-cache-dir names it, as for `run`.\n");
}

int dsv4ctl_cache(int argc, char **argv)
{
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' },
        { "prefix-cache-dir", required_argument, NULL, 'd' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *model = NULL, *dir = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'm') {
            model = optarg;
        } else if (c == 'd') {
            dir = optarg;
        } else if (c == 'h') {
            usage(stdout);
            return DSV4_EXIT_OK;
        } else {
            fprintf(stderr, "dsv4ctl cache: %s '%s'\n", c == ':' ? "option needs a value" :
                    "unknown option", argv[optind - 1]);
            return DSV4_EXIT_USAGE;
        }
    }
    const char *what = optind < argc ? argv[optind] : NULL;
    if (!what || optind + 1 != argc || (strcmp(what, "status") && strcmp(what, "clear")) ||
        (!model && !dir)) {
        usage(stderr);
        return DSV4_EXIT_USAGE;
    }
    struct dsv4_err err = { "" };
    char path[4096];
    if (!dir) {
        uint8_t id[DSV4_SHA256_LEN];
        int rc = dsv4_model_id(model, NULL, id, &err);
        if (rc == 0)
            rc = dsv4_pcache_default_dir(id, path, sizeof(path), &err);
        if (rc < 0) {
            fprintf(stderr, "dsv4ctl cache: %s\n", err.msg);
            return rc == -ENOENT ? DSV4_EXIT_NOINPUT : DSV4_EXIT_DATAERR;
        }
        dir = path;
    }
    uint64_t n = 0, bytes = 0;
    int rc = dsv4_pcache_dir_stat(dir, &n, &bytes, &err);
    if (rc == -ENOENT) {
        printf("%s: no prefix cache\n", dir);
        return DSV4_EXIT_OK;
    }
    if (rc == 0 && strcmp(what, "clear") == 0)
        rc = dsv4_pcache_dir_remove(dir, &err);
    if (rc < 0) {
        fprintf(stderr, "dsv4ctl cache: %s\n", err.msg);
        return DSV4_EXIT_DATAERR;
    }
    if (strcmp(what, "clear") == 0)
        printf("%s: removed %llu block(s), %llu bytes\n", dir, (unsigned long long)n,
               (unsigned long long)bytes);
    else
        printf("dir: %s\ndisk_entries: %llu\ndisk_bytes: %llu\n", dir, (unsigned long long)n,
               (unsigned long long)bytes);
    return DSV4_EXIT_OK;
}
