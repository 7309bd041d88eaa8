/* SPDX-License-Identifier: MIT */
/* --dspark-proposer parsing (proposer.h). */
#include "proposer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4ctl.h"
#include "util.h"

static int read_ids(const char *path, struct dsv4ctl_proposer *p)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "dsv4ctl: --dspark-proposer: cannot open %s: %s\n", path,
                strerror(errno));
        return DSV4_EXIT_NOINPUT;
    }
    size_t n = 0, cap = 64;
    p->cont = dsv4_xmalloc(cap * sizeof(int32_t));
    int ch;
    long long v = -1;
    while ((ch = fgetc(f)) != EOF || v >= 0) {
        if (ch >= '0' && ch <= '9') {
            v = (v < 0 ? 0 : v) * 10 + (ch - '0');
            if (v > INT32_MAX)
                break;
            continue;
        }
        if (ch != EOF && ch != ' ' && ch != ',' && ch != '\n' && ch != '\t' && ch != '\r') {
            v = INT32_MAX + 1LL;
            break;
        }
        if (v >= 0) {
            if (n == cap)
                p->cont = dsv4_xrealloc(p->cont, (cap *= 2) * sizeof(int32_t));
            p->cont[n++] = (int32_t)v;
            v = -1;
        }
        if (ch == EOF)
            break;
    }
    fclose(f);
    if (v > INT32_MAX || n > INT32_MAX) {
        fprintf(stderr, "dsv4ctl: --dspark-proposer: %s is not a list of token ids\n", path);
        return DSV4_EXIT_DATAERR;
    }
    p->spec.cont = p->cont;
    p->spec.n = (int)n;
    return 0;
}

int dsv4ctl_proposer_parse(const char *arg, int vocab, struct dsv4ctl_proposer *p)
{
    memset(p, 0, sizeof(*p));
    p->spec.agree = -1;
    p->spec.conf = 0.9f;
    p->spec.vocab = vocab;
    if (strncmp(arg, "replay:", 7) != 0) {
        fprintf(stderr, "dsv4ctl: --dspark-proposer wants replay:FILE[:err=..][:agree=P]"
                        "[:conf=C], got '%s'\n", arg);
        return DSV4_EXIT_USAGE;
    }
    char *copy = dsv4_xstrdup(arg + 7), *save = NULL;
    char *file = strtok_r(copy, ":", &save);
    int rc = file ? read_ids(file, p) : DSV4_EXIT_USAGE;
    for (char *opt; rc == 0 && (opt = strtok_r(NULL, ":", &save));) {
        char *end;
        if (strcmp(opt, "draft") == 0) {
            p->draft_cost = true;
        } else if (strcmp(opt, "err=all") == 0) {
            p->spec.err_all = true;
        } else if (strncmp(opt, "err=", 4) == 0) {
            for (char *s = opt + 4; rc == 0;) {
                errno = 0;
                long long v = strtoll(s, &end, 10);
                if (errno || end == s || v < 0 || (*end && *end != ',')) {
                    rc = DSV4_EXIT_USAGE;
                    break;
                }
                p->err = dsv4_xrealloc(p->err, (size_t)(p->spec.n_err + 1) * sizeof(int64_t));
                p->err[p->spec.n_err++] = v;
                if (!*end)
                    break;
                s = end + 1;
            }
        } else if (strncmp(opt, "agree=", 6) == 0) {
            long v = strtol(opt + 6, &end, 10);
            if (*end || end == opt + 6 || v < 0 || v > 100)
                rc = DSV4_EXIT_USAGE;
            p->spec.agree = (int)v;
        } else if (strncmp(opt, "conf=", 5) == 0) {
            double v = strtod(opt + 5, &end);
            if (*end || end == opt + 5 || !(v >= 0.0 && v <= 1.0))
                rc = DSV4_EXIT_USAGE;
            p->spec.conf = (float)v;
        } else {
            rc = DSV4_EXIT_USAGE;
        }
    }
    p->spec.err = p->err;
    free(copy);
    if (rc == DSV4_EXIT_USAGE)
        fprintf(stderr, "dsv4ctl: bad --dspark-proposer '%s' (replay:FILE[:err=N,..|all]"
                        "[:agree=P][:conf=C][:draft])\n", arg);
    if (rc)
        dsv4ctl_proposer_free(p);
    return rc;
}

void dsv4ctl_proposer_free(struct dsv4ctl_proposer *p)
{
    free(p->cont);
    free(p->err);
    p->cont = NULL;
    p->err = NULL;
}
