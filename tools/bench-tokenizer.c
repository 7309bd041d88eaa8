/* SPDX-License-Identifier: MIT */
/*
 * Tokenizer encode throughput, C against the JS reference on the same text
 * in the same run (and the ids must agree). The text is the test corpus
 * generator's mix (code, CJK, emoji, marks, digits, white space, added
 * tokens, invalid bytes, long words) with successive seeds until it
 * reaches --mb megabytes, one corpus string per line. Both sides encode it
 * line by line (each line with its newline), as a server encodes many
 * prompts; the reference is much slower still on one 10 MB string.
 *   bench-tokenizer --model DIR [--mb N] [--node NODE] [--npm NODE_MODULES] [--runs N]
 * Run from the repository root (the JS half is tools/bench-tokenizer.js).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "corpus.h"
#include "tokenizer.h"
#include "parse.h"
#include "util.h"

static void hardware_line(void)
{
    char model[256];
    dsv4_cpu_model(model, sizeof model);
    double load[3] = { 0 };
    getloadavg(load, 3);
    printf("hardware: %s, %ld cores online, load average %.2f (shared machine)\n", model,
           sysconf(_SC_NPROCESSORS_ONLN), load[0]);
}

int main(int argc, char **argv)
{
    const char *model = NULL, *node = "node", *npm = "tools/npm/node_modules";
    double mb = 10;
    int runs = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc)
            mb = dsv4_parse_double_or_exit("--mb", argv[++i], 0.001, 1e6);
        else if (strcmp(argv[i], "--node") == 0 && i + 1 < argc)
            node = argv[++i];
        else if (strcmp(argv[i], "--npm") == 0 && i + 1 < argc)
            npm = argv[++i];
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = dsv4_parse_int_or_exit("--runs", argv[++i], 1, 1000);
        else {
            fprintf(stderr, "usage: %s --model DIR [--mb N] [--node NODE] [--npm DIR] [--runs N]\n",
                    argv[0]);
            return 64;
        }
    }
    if (!model || mb <= 0 || runs < 1) {
        fprintf(stderr, "bench-tokenizer: --model DIR is required\n");
        return 64;
    }
    hardware_line();

    /* The text. */
    size_t want = (size_t)(mb * 1e6), len = 0, cap = want + (1 << 20);
    char *text = dsv4_xmalloc(cap);
    for (uint64_t seed = 1; len < want; seed++) {
        struct corpus c;
        corpus_generate(&c, seed, 2400);
        for (size_t i = 0; i < c.n; i++) {
            if (len + c.len[i] + 1 > cap)
                text = dsv4_xrealloc(text, cap = (len + c.len[i] + 1) * 2);
            memcpy(text + len, c.s[i], c.len[i]);
            len += c.len[i];
            text[len++] = '\n';
        }
        corpus_free(&c);
    }
    char path[] = "/tmp/dsv4-bench-tokenizer-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, text, len) != (ssize_t)len || close(fd) != 0) {
        perror("bench-tokenizer: temp file");
        return 74;
    }

    /* C. */
    uint64_t t0 = dsv4_now_ns();
    dsv4_tokenizer *t;
    struct dsv4_err err;
    if (dsv4_tokenizer_open_dir(model, &t, &err)) {
        fprintf(stderr, "bench-tokenizer: %s\n", err.msg);
        return 65;
    }
    double c_load = (double)(dsv4_now_ns() - t0) / 1e9, c_best = 1e30;
    struct dsv4_ids ids = { 0 };
    for (int r = 0; r < runs; r++) {
        ids.n = 0;
        uint64_t a = dsv4_now_ns();
        for (size_t off = 0; off < len;) {
            const char *nl = memchr(text + off, '\n', len - off);
            size_t end = nl ? (size_t)(nl - text) + 1 : len;
            dsv4_tokenizer_encode(t, text + off, end - off, false, &ids);
            off = end;
        }
        double s = (double)(dsv4_now_ns() - a) / 1e9;
        c_best = DSV4_MIN(c_best, s);
    }

    /* JS, same text. */
    char out[sizeof(path) + 8], cmd[8192];
    snprintf(out, sizeof(out), "%s.ids", path);
    snprintf(cmd, sizeof(cmd), "NODE_PATH='%s' '%s' tools/bench-tokenizer.js '%s' '%s' '%s'", npm,
             node, model, path, out);
    FILE *p = popen(cmd, "r");
    double js_load = 0, js_enc = 0;
    size_t js_n = 0;
    int ok = p && fscanf(p, "%lf %lf %zu", &js_load, &js_enc, &js_n) == 3;
    if (p && pclose(p) != 0)
        ok = 0;
    int rc = 0;
    if (!ok) {
        fprintf(stderr, "bench-tokenizer: the JS run failed (%s)\n", cmd);
        rc = 70;
    } else {
        FILE *f = fopen(out, "rb");
        uint32_t *js = dsv4_xmalloc((js_n + 1) * 4);
        size_t got = f ? fread(js, 4, js_n, f) : 0;
        if (f)
            fclose(f);
        bool same = got == js_n && js_n == ids.n && memcmp(js, ids.v, js_n * 4) == 0;
        free(js);
        double mbytes = (double)len / 1e6;
        printf("text: %.2f MB (%zu bytes), %zu ids; ids identical to JS: %s\n", mbytes, len, ids.n,
               same ? "yes" : "NO");
        printf("C : load %.2f s, encode %.3f s (best of %d) = %.2f MB/s\n", c_load, c_best, runs,
               mbytes / c_best);
        printf("JS: load %.2f s, encode %.3f s (one run)   = %.2f MB/s\n", js_load, js_enc,
               mbytes / js_enc);
        printf("C/JS encode speed: %.1fx\n", js_enc / c_best);
        if (!same)
            rc = 1;
    }
    unlink(out);
    unlink(path);
    dsv4_ids_free(&ids);
    dsv4_tokenizer_free(t);
    free(text);
    return rc;
}
