/* SPDX-License-Identifier: MIT */
/*
 * dsv4-fetcher: the expert fetcher daemon. Creates (or re-attaches to) the
 * expert segment of its run directory, serves the compute daemon's requests
 * from the checkpoint, answers control messages on ipc://<run_dir>/fetcher.sock,
 * and on SIGTERM/SIGINT or a shutdown message finishes its reads, saves the hot
 * set and removes the segment.
 *
 *   dsv4-fetcher --model DIR [--run-dir DIR] [--slots N | --cache-bytes N] [--pin-slots N]
 *                [--queue-depth N] [--chunk-kib N] [--io auto|buffered|pread] [--no-numa]
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fetcher.h"
#include "fetcher_ctl.h"
#include "log.h"

#define TOPIC "fetcher"

static void *run_thread(void *arg)
{
    dsv4_fetcher_run(arg);
    return NULL;
}

/* $DSV4_RUNTIME_DIR, else $XDG_RUNTIME_DIR/dsv4/default, else /tmp/dsv4-$UID/default. */
static int resolve_run_dir(char *buf, size_t n)
{
    const char *env = getenv("DSV4_RUNTIME_DIR");
    if (env && *env) {
        snprintf(buf, n, "%s", env);
    } else {
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        char base[2048];
        if (xdg && *xdg)
            snprintf(base, sizeof(base), "%s/dsv4", xdg);
        else
            snprintf(base, sizeof(base), "/tmp/dsv4-%u", (unsigned)getuid());
        mkdir(base, 0700);
        snprintf(buf, n, "%s/default", base);
    }
    if (mkdir(buf, 0700) < 0 && errno != EEXIST)
        return -errno;
    struct stat st;
    if (lstat(buf, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid())
        return -EPERM;
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: dsv4-fetcher --model DIR [--run-dir DIR] [--slots N | --cache-bytes N]\n"
                    "       [--pin-slots N]\n"
                    "       [--queue-depth N] [--chunk-kib N] [--io auto|buffered|pread] "
                    "[--no-numa]\n");
}

int main(int argc, char **argv)
{
    struct dsv4_fetcher_opts o = { .numa = true };
    char run_dir[4096] = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-numa")) {
            o.numa = false;
            continue;
        }
        if (!v) {
            usage();
            return 64;
        }
        i++;
        if (!strcmp(a, "--model"))
            o.model_dir = v;
        else if (!strcmp(a, "--run-dir"))
            snprintf(run_dir, sizeof(run_dir), "%s", v);
        else if (!strcmp(a, "--slots"))
            o.n_slots = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--cache-bytes"))
            o.cache_bytes = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--pin-slots"))
            o.pin_slots = (uint32_t)strtoul(v, NULL, 10), o.pin_slots_set = true;
        else if (!strcmp(a, "--queue-depth"))
            o.queue_depth = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--chunk-kib"))
            o.chunk_bytes = (uint32_t)strtoul(v, NULL, 10) * 1024;
        else if (!strcmp(a, "--io"))
            o.io = !strcmp(v, "pread")      ? DSV4_FETCHER_IO_PREAD
                   : !strcmp(v, "buffered") ? DSV4_FETCHER_IO_BUFFERED
                                            : DSV4_FETCHER_IO_AUTO;
        else {
            usage();
            return 64;
        }
    }
    if (!o.model_dir) {
        usage();
        return 64;
    }
    if (!run_dir[0] && resolve_run_dir(run_dir, sizeof(run_dir)) < 0) {
        dsv4_log_error(TOPIC, "run dir %s unusable (must be ours, mode 0700)", run_dir);
        return 73;
    }
    o.run_dir = run_dir;

    /* Block before any thread exists; signals arrive through the signalfd. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    int sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);

    struct dsv4_err err;
    dsv4_fetcher *f;
    if (dsv4_fetcher_open(&o, &f, &err) < 0) {
        dsv4_log_error(TOPIC, "%s", err.msg);
        return 78;
    }
    pthread_t th;
    pthread_create(&th, NULL, run_thread, f);
    int rc = dsv4_fetcher_ctl_serve(f, run_dir, sigfd, &err);
    if (rc < 0) {
        dsv4_log_error(TOPIC, "%s", err.msg);
        dsv4_fetcher_stop(f);
    }
    pthread_join(th, NULL);
    dsv4_fetcher_free(f, true);
    dsv4_log_info(TOPIC, "stopped; segment removed");
    close(sigfd);
    return rc < 0 ? 71 : 0;
}
