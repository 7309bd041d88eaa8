/* SPDX-License-Identifier: MIT */
/* DSML tool calls out of the model's text (dsml.h). */
#include "dsml.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "resp.h"
#include "util.h"

#define D DSV4_CHAT_DSML

struct cur {
    const char *p, *end;
};

/* Like _read_until_stop: the text up to the earliest of the stops, and which one (-1: none). */
static int read_until(struct cur *c, const char *const *stops, int n, const char **seg,
                      size_t *seg_len)
{
    const char *best = NULL;
    int which = -1;
    for (int i = 0; i < n; i++) {
        const char *h = memmem(c->p, (size_t)(c->end - c->p), stops[i], strlen(stops[i]));
        if (h && (!best || h < best)) {
            best = h;
            which = i;
        }
    }
    *seg = c->p;
    *seg_len = (size_t)((best ? best : c->end) - c->p);
    c->p = best ? best + strlen(stops[which]) : c->end;
    return which;
}

static bool is(const char *seg, size_t n, const char *want)
{
    return n == strlen(want) && memcmp(seg, want, n) == 0;
}

/* Python json.dumps(s, ensure_ascii=False) of s[0..n). */
static void json_str(struct dsv4_buf *b, const char *s, size_t n)
{
    dsv4_buf_append(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        const char *x = ch == '"' ? "\\\"" : ch == '\\' ? "\\\\" : ch == '\n' ? "\\n"
                      : ch == '\r' ? "\\r" : ch == '\t' ? "\\t" : ch == '\b' ? "\\b"
                      : ch == '\f' ? "\\f" : NULL;
        if (x) {
            dsv4_buf_append(b, x, 2);
        } else if (ch < 0x20) {
            snprintf(e, sizeof(e), "\\u%04x", ch);
            dsv4_buf_append(b, e, 6);
        } else {
            dsv4_buf_append(b, (const char *)&s[i], 1);
        }
    }
    dsv4_buf_append(b, "\"", 1);
}

static char *dup_n(const char *s, size_t n)
{
    char *r = dsv4_xmalloc(n + 1);
    memcpy(r, s, n);
    r[n] = '\0';
    return r;
}

/* One invoke after "<｜DSML｜invoke": its name and parameters. */
static int invoke(struct cur *c, struct api_tool_call *out)
{
    static const char *const name_stops[] = { "<" D "parameter", "</" D "invoke" };
    static const char *const val_stop[] = { "/" D "parameter" };
    const char *seg;
    size_t n;
    int stop = read_until(c, name_stops, 2, &seg, &n);
    /* ^\s*name="(.*?)">\n$ (Python's $ also matches before a final newline: a call without
     * parameters renders as name="f">\n\n</｜DSML｜invoke>) */
    while (n > 0 && (*seg == ' ' || *seg == '\t' || *seg == '\n' || *seg == '\r')) {
        seg++;
        n--;
    }
    if (n >= 10 && seg[n - 1] == '\n' && seg[n - 2] == '\n')
        n--;
    if (stop < 0 || n < 9 || memcmp(seg, "name=\"", 6) || memcmp(seg + n - 3, "\">\n", 3))
        return -1;
    out->name = dup_n(seg + 6, n - 9);
    struct dsv4_buf args = { 0 };
    dsv4_buf_append(&args, "{", 1);
    char **seen = NULL;
    size_t n_seen = 0;
    int rc = 0;
    while (stop == 0 && rc == 0) {
        /* ^ name="(.*?)" string="(true|false)">(.*?)<$ */
        if (read_until(c, val_stop, 1, &seg, &n) < 0 || n < 8 || memcmp(seg, " name=\"", 7) ||
            seg[n - 1] != '<') {
            rc = -1;
            break;
        }
        const char *t = memmem(seg + 7, n - 7, "\" string=\"true\">", 16);
        const char *f = memmem(seg + 7, n - 7, "\" string=\"false\">", 17);
        bool str = t && (!f || t < f);
        const char *q = str ? t : f;
        if (!q) {
            rc = -1;
            break;
        }
        size_t name_len = (size_t)(q - (seg + 7));
        const char *val = q + (str ? 16 : 17);
        size_t val_len = (size_t)(seg + n - 1 - val);
        for (size_t i = 0; i < n_seen; i++)
            if (strlen(seen[i]) == name_len && !memcmp(seen[i], seg + 7, name_len))
                rc = -1;    /* a duplicate parameter */
        seen = dsv4_xrealloc(seen, (n_seen + 1) * sizeof(*seen));
        seen[n_seen++] = dup_n(seg + 7, name_len);
        if (n_seen > 1)
            dsv4_buf_append(&args, ", ", 2);
        json_str(&args, seg + 7, name_len);
        dsv4_buf_append(&args, ": ", 2);
        if (str)
            json_str(&args, val, val_len);
        else
            dsv4_buf_append(&args, val, val_len);
        stop = read_until(c, name_stops, 2, &seg, &n);
        if (stop < 0 || !is(seg, n, ">\n"))
            rc = -1;
    }
    dsv4_buf_append(&args, "}", 1);
    for (size_t i = 0; i < n_seen; i++)
        free(seen[i]);
    free(seen);
    out->arguments = args.p;
    return rc;
}

int api_dsml_parse(const char *text, size_t len, struct api_tool_call **calls)
{
    static const char *const stops[] = { "<" D "invoke", "</" D "tool_calls>" };
    const size_t start = strlen(DSV4_CHAT_TOOL_CALLS_START) - 1;    /* up to the '>' */
    *calls = NULL;
    if (len < start || memcmp(text, DSV4_CHAT_TOOL_CALLS_START, start))
        return -1;
    if (memchr(text, '\0', len))   /* names and arguments are C strings from here on */
        return -1;
    struct cur c = { text + start, text + len };
    struct api_tool_call *v = NULL;
    int n = 0;
    for (;;) {
        const char *seg;
        size_t sl;
        int stop = read_until(&c, stops, 2, &seg, &sl);
        if (stop < 0 || !is(seg, sl, ">\n"))
            goto bad;
        if (stop == 1)
            break;
        v = dsv4_xrealloc(v, (size_t)(n + 1) * sizeof(*v));
        memset(&v[n], 0, sizeof(v[n]));
        if (invoke(&c, &v[n++]) < 0)     /* leaves c after "</｜DSML｜invoke" */
            goto bad;
    }
    if (c.p != c.end || n == 0)
        goto bad;
    *calls = v;
    return n;
bad:
    api_dsml_free(v, n);
    return -1;
}

void api_dsml_free(struct api_tool_call *calls, int n)
{
    for (int i = 0; i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}
