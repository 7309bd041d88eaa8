/* SPDX-License-Identifier: MIT */
/*
 * dsv4ctl tokenize / detokenize: text ↔ ids with the model directory's
 * tokenizer.json, the same library calls `run`/`gen` use for text prompts.
 */
#include "dsv4ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "tokenizer.h"
#include "util.h"

static void tokenize_usage(FILE *f)
{
    fprintf(f, "usage: dsv4ctl tokenize --model DIR [--bos] [--chat [--think|--no-think]] TEXT|-\n"
               "  Prints the ids of TEXT (or of standard input's bytes for '-') on one line.\n"
               "  --bos       prepend BOS (not with --chat: the template starts with BOS)\n"
               "  --chat      render TEXT as a single user message with the chat template\n"
               "  --think     thinking mode (the prompt ends with <think>)\n"
               "  --no-think  non-thinking mode (ends with </think>; the default)\n");
}

static void detokenize_usage(FILE *f)
{
    fprintf(f, "usage: dsv4ctl detokenize --model DIR [--special] ID...\n"
               "  Prints the text of the ids. --special renders special tokens too.\n");
}

static char *read_stdin(size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *p = dsv4_xmalloc(cap);
    size_t r;
    while ((r = fread(p + n, 1, cap - n, stdin)) > 0) {
        n += r;
        if (n == cap) {
            cap *= 2;
            p = dsv4_xrealloc(p, cap);
        }
    }
    if (ferror(stdin)) {
        free(p);
        return NULL;
    }
    *len = n;
    return p;
}

static int open_model(const char *dir, dsv4_tokenizer **t)
{
    struct dsv4_err err;
    int rc = dsv4_tokenizer_open_dir(dir, t, &err);
    if (rc) {
        fprintf(stderr, "dsv4ctl: %s\n", err.msg);
        return rc == -ENOENT ? DSV4_EXIT_NOINPUT : DSV4_EXIT_DATAERR;
    }
    return DSV4_EXIT_OK;
}

int dsv4ctl_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL;
    bool bos = false, chat = false, think = false, mode_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            tokenize_usage(stdout);
            return DSV4_EXIT_OK;
        } else if (strcmp(a, "--model") == 0 && i + 1 < argc) {
            model = argv[++i];
        } else if (strcmp(a, "--bos") == 0) {
            bos = true;
        } else if (strcmp(a, "--chat") == 0) {
            chat = true;
        } else if (strcmp(a, "--think") == 0 || strcmp(a, "--no-think") == 0) {
            think = strcmp(a, "--think") == 0;
            mode_set = true;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "dsv4ctl tokenize: unknown option '%s'\n", a);
            return DSV4_EXIT_USAGE;
        } else if (!text) {
            text = a;
        } else {
            fprintf(stderr, "dsv4ctl tokenize: one TEXT only (quote it)\n");
            return DSV4_EXIT_USAGE;
        }
    }
    if (!model || !text) {
        fprintf(stderr, "dsv4ctl tokenize: %s is required\n", !model ? "--model DIR" : "TEXT");
        tokenize_usage(stderr);
        return DSV4_EXIT_USAGE;
    }
    if (mode_set && !chat) {
        fprintf(stderr, "dsv4ctl tokenize: --think/--no-think need --chat\n");
        return DSV4_EXIT_USAGE;
    }
    if (bos && chat) {
        fprintf(stderr, "dsv4ctl tokenize: --bos with --chat would add a second BOS\n");
        return DSV4_EXIT_USAGE;
    }
    dsv4_tokenizer *t;
    int rc = open_model(model, &t);
    if (rc)
        return rc;
    char *owned = NULL;
    size_t len = 0;
    if (strcmp(text, "-") == 0) {
        owned = read_stdin(&len);
        if (!owned) {
            fprintf(stderr, "dsv4ctl tokenize: reading standard input: %s\n", strerror(errno));
            dsv4_tokenizer_free(t);
            return DSV4_EXIT_IOERR;
        }
        text = owned;
    } else {
        len = strlen(text);
    }
    struct dsv4_ids ids = { 0 };
    struct dsv4_err err;
    enum dsv4_prompt_kind kind = chat ? (think ? DSV4_PROMPT_CHAT_THINK : DSV4_PROMPT_CHAT)
                                      : (bos ? DSV4_PROMPT_RAW_BOS : DSV4_PROMPT_RAW);
    rc = DSV4_EXIT_OK;
    if (dsv4_chat_prompt(t, text, len, kind, &ids, &err)) {
        fprintf(stderr, "dsv4ctl tokenize: %s\n", err.msg);
        rc = DSV4_EXIT_DATAERR;
    }
    if (rc == DSV4_EXIT_OK) {
        for (size_t i = 0; i < ids.n; i++)
            printf(i ? " %u" : "%u", ids.v[i]);
        printf("\n");
    }
    dsv4_ids_free(&ids);
    free(owned);
    dsv4_tokenizer_free(t);
    if (rc == DSV4_EXIT_OK && fflush(stdout) != 0)
        return DSV4_EXIT_IOERR;
    return rc;
}

int dsv4ctl_detokenize(int argc, char **argv)
{
    const char *model = NULL;
    bool special = false;
    struct dsv4_ids ids = { 0 };
    int rc = DSV4_EXIT_OK;
    for (int i = 1; i < argc && rc == DSV4_EXIT_OK; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            detokenize_usage(stdout);
            dsv4_ids_free(&ids);
            return DSV4_EXIT_OK;
        } else if (strcmp(a, "--model") == 0 && i + 1 < argc) {
            model = argv[++i];
        } else if (strcmp(a, "--special") == 0) {
            special = true;
        } else {
            char *end;
            errno = 0;
            unsigned long v = strtoul(a, &end, 10);
            if (a[0] < '0' || a[0] > '9' || *end || errno || v > UINT32_MAX) {
                fprintf(stderr, "dsv4ctl detokenize: '%s' is not a token id\n", a);
                rc = DSV4_EXIT_USAGE;
            } else {
                dsv4_ids_push(&ids, (uint32_t)v);
            }
        }
    }
    if (rc == DSV4_EXIT_OK && !model) {
        fprintf(stderr, "dsv4ctl detokenize: --model DIR is required\n");
        detokenize_usage(stderr);
        rc = DSV4_EXIT_USAGE;
    }
    dsv4_tokenizer *t = NULL;
    if (rc == DSV4_EXIT_OK)
        rc = open_model(model, &t);
    if (rc == DSV4_EXIT_OK) {
        char *text;
        size_t len;
        struct dsv4_err err;
        if (dsv4_tokenizer_decode(t, ids.v, ids.n, special, &text, &len, &err)) {
            fprintf(stderr, "dsv4ctl detokenize: %s\n", err.msg);
            rc = DSV4_EXIT_DATAERR;
        } else {
            fwrite(text, 1, len, stdout);
            putchar('\n');
            free(text);
            if (fflush(stdout) != 0)
                rc = DSV4_EXIT_IOERR;
        }
    }
    dsv4_tokenizer_free(t);
    dsv4_ids_free(&ids);
    return rc;
}
