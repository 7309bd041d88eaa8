/* SPDX-License-Identifier: MIT */
/*
 * Checkpoint reader: valid files (single, directory, sharded with index,
 * every dtype) read back byte for byte, and one case per malformed-input
 * class, each asserting the error code and that the message names the file
 * and, where there is one, the tensor. Files are written by a small writer
 * below into a mkdtemp directory under /tmp, removed at the end.
 * (Long: one case per malformed-input class of the reader, by design.)
 */
#include <setjmp.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"
#include "util.h"

static char root[64];
static unsigned serial;

/* ---- writer ------------------------------------------------------------------ */

static uint8_t pattern(uint64_t i, uint8_t salt)
{
    return (uint8_t)(i * 31u + 7u + salt * 101u);
}

/* A fresh directory under the test root. */
static char *new_dir(void)
{
    char *d;
    assert_true(asprintf(&d, "%s/d%u", root, serial++) > 0);
    assert_int_equal(mkdir(d, 0755), 0);
    return d;
}

static char *path_in(const char *dir, const char *name)
{
    char *p;
    assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, n), (ssize_t)n);
    close(fd);
}

/* Raw file: 8-byte LE `declared_len`, `header` (strlen bytes), `payload`
 * pattern bytes. declared_len == UINT64_MAX means strlen(header). */
static void write_raw(const char *path, uint64_t declared_len, const char *header,
                      uint64_t payload, uint8_t salt)
{
    size_t hl = strlen(header);
    if (declared_len == UINT64_MAX)
        declared_len = hl;
    size_t n = 8 + hl + payload;
    uint8_t *buf = dsv4_xmalloc(n);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(declared_len >> (8 * i));
    memcpy(buf + 8, header, hl);
    for (uint64_t i = 0; i < payload; i++)
        buf[8 + hl + i] = pattern(i, salt);
    write_bytes(path, buf, n);
    free(buf);
}

struct spec {
    const char *name;
    const char *dtype;
    uint32_t rank;
    uint64_t shape[9];
};

static uint64_t spec_bytes(const struct spec *s)
{
    uint64_t n = dsv4_dtype_size(dsv4_dtype_from_name(s->dtype));
    for (uint32_t d = 0; d < s->rank; d++)
        n *= s->shape[d];
    return n;
}

/* A valid file holding `n` tensors laid out back to back, payload bytes
 * from pattern(offset_in_payload, salt). */
static void write_valid(const char *path, const struct spec *s, size_t n, uint8_t salt)
{
    char *h = dsv4_xmalloc(65536);
    size_t o = (size_t)snprintf(h, 65536, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        o += (size_t)snprintf(h + o, 65536 - o, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                              s[i].name, s[i].dtype);
        for (uint32_t d = 0; d < s[i].rank; d++)
            o += (size_t)snprintf(h + o, 65536 - o, "%s%llu", d ? "," : "",
                                  (unsigned long long)s[i].shape[d]);
        uint64_t b = spec_bytes(&s[i]);
        o += (size_t)snprintf(h + o, 65536 - o, "],\"data_offsets\":[%llu,%llu]}",
                              (unsigned long long)off, (unsigned long long)(off + b));
        off += b;
    }
    snprintf(h + o, 65536 - o, "}");
    write_raw(path, UINT64_MAX, h, off, salt);
    free(h);
}

/* ---- checks ------------------------------------------------------------------ */

static void check_payload(const dsv4_checkpoint *c, const struct dsv4_tensor *t,
                          uint64_t payload_off, uint8_t salt)
{
    struct dsv4_err err;
    uint8_t *buf = dsv4_xmalloc(t->nbytes);
    assert_int_equal(dsv4_checkpoint_read(c, t, 0, buf, t->nbytes, &err), 0);
    for (uint64_t i = 0; i < t->nbytes; i++)
        assert_int_equal(buf[i], pattern(payload_off + i, salt));
    if (t->nbytes >= 3) { /* a read from inside the payload */
        uint8_t two[2];
        assert_int_equal(dsv4_checkpoint_read(c, t, 1, two, 2, &err), 0);
        assert_int_equal(two[0], pattern(payload_off + 1, salt));
        assert_int_equal(two[1], pattern(payload_off + 2, salt));
    }
    free(buf);
}

/* Open must fail with `code`, and the message must contain each non-NULL
 * needle (the file, the tensor, the reason). */
static void expect_open_fails(const char *path, int code, const char *n1, const char *n2,
                              const char *n3)
{
    struct dsv4_err err = { .msg = "" };
    dsv4_checkpoint *c = NULL;
    int r = dsv4_checkpoint_open(path, &c, &err);
    print_message("# %s\n", err.msg);
    assert_int_equal(r, code);
    assert_null(c);
    assert_null(strchr(err.msg, '\n'));
    const char *needles[] = { n1, n2, n3 };
    for (size_t i = 0; i < 3; i++)
        if (needles[i] && !strstr(err.msg, needles[i]))
            fail_msg("error '%s' lacks '%s'", err.msg, needles[i]);
}

/* One file with `header` (and `payload` bytes after it) must be rejected;
 * the message names the file, `tensor` (if any) and `why`. */
static void reject_header(const char *header, uint64_t payload, const char *tensor,
                          const char *why)
{
    char *dir = new_dir();
    char *p = path_in(dir, "model.safetensors");
    write_raw(p, UINT64_MAX, header, payload, 0);
    expect_open_fails(p, -EBADMSG, p, tensor, why);
    /* The same through the parser entry point the fuzzer uses. */
    struct dsv4_err err;
    assert_int_equal(dsv4_safetensors_parse_header(header, strlen(header),
                                                   8 + strlen(header) + payload, "x", NULL,
                                                   NULL, &err),
                     -EBADMSG);
    free(p);
    free(dir);
}

/* ---- valid input -------------------------------------------------------------- */

static const struct spec every_dtype[] = {
    { "w.bf16", "BF16", 2, { 3, 5 } },
    { "w.f16", "F16", 1, { 7 } },
    { "w.f32", "F32", 3, { 2, 1, 3 } },
    { "w.e4m3", "F8_E4M3", 2, { 4, 4 } },
    { "w.e8m0", "F8_E8M0", 1, { 5 } },
    { "w.i8", "I8", 2, { 2, 8 } },
    { "w.u8", "U8", 1, { 9 } },
    { "w.i32", "I32", 1, { 3 } },
    { "w.i64", "I64", 2, { 1, 2 } },
    { "scalar", "F32", 0, { 0 } },
    { "empty", "BF16", 2, { 0, 4096 } },
    { "rank8", "U8", 8, { 1, 2, 1, 2, 1, 2, 1, 2 } },
};

static void test_dtype_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        size_t size;
    } want[] = {
        { "BF16", 2 }, { "F16", 2 }, { "F32", 4 }, { "F8_E4M3", 1 }, { "F8_E8M0", 1 },
        { "I8", 1 }, { "U8", 1 }, { "I32", 4 }, { "I64", 8 },
    };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(want); i++) {
        enum dsv4_dtype t = dsv4_dtype_from_name(want[i].name);
        assert_int_not_equal(t, _DSV4_DTYPE_INVALID);
        assert_string_equal(dsv4_dtype_name(t), want[i].name);
        assert_int_equal(dsv4_dtype_size(t), want[i].size);
    }
    assert_int_equal(dsv4_dtype_from_name("F64"), _DSV4_DTYPE_INVALID);
    assert_int_equal(dsv4_dtype_from_name("bf16"), _DSV4_DTYPE_INVALID);
    assert_int_equal(dsv4_dtype_from_name(""), _DSV4_DTYPE_INVALID);
    assert_null(dsv4_dtype_name(_DSV4_DTYPE_MAX));
}

static void check_every_dtype(const dsv4_checkpoint *c, uint32_t shard, uint8_t salt)
{
    uint64_t off = 0;
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(every_dtype); i++) {
        const struct spec *s = &every_dtype[i];
        const struct dsv4_tensor *t = dsv4_checkpoint_find(c, s->name);
        assert_non_null(t);
        assert_string_equal(t->name, s->name);
        assert_string_equal(dsv4_dtype_name(t->dtype), s->dtype);
        assert_int_equal(t->rank, s->rank);
        uint64_t n = 1;
        for (uint32_t d = 0; d < s->rank; d++) {
            assert_int_equal(t->shape[d], s->shape[d]);
            n *= s->shape[d];
        }
        assert_int_equal(t->n_elements, n);
        assert_int_equal(t->nbytes, spec_bytes(s));
        assert_int_equal(t->shard, shard);
        check_payload(c, t, off, salt);
        off += t->nbytes;
    }
}

static void test_single_file_every_dtype(void **state)
{
    (void)state;
    char *dir = new_dir();
    char *p = path_in(dir, "x.safetensors");
    write_valid(p, every_dtype, DSV4_ARRAY_SIZE(every_dtype), 3);
    struct dsv4_err err;
    dsv4_checkpoint *c = NULL;
    assert_int_equal(dsv4_checkpoint_open(p, &c, &err), 0);
    assert_int_equal(dsv4_checkpoint_n_tensors(c), DSV4_ARRAY_SIZE(every_dtype));
    assert_int_equal(dsv4_checkpoint_n_shards(c), 1);
    assert_string_equal(dsv4_checkpoint_shard_path(c, 0), p);
    check_every_dtype(c, 0, 3);
    /* Tensors come in header order, by index too. */
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(every_dtype); i++)
        assert_string_equal(dsv4_checkpoint_tensor(c, i)->name, every_dtype[i].name);
    assert_null(dsv4_checkpoint_tensor(c, DSV4_ARRAY_SIZE(every_dtype)));
    assert_null(dsv4_checkpoint_find(c, "absent"));
    assert_null(dsv4_checkpoint_find(c, "w.bf"));
    /* The payload offset is absolute in the file. */
    const struct dsv4_tensor *t = dsv4_checkpoint_find(c, "w.bf16");
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    uint64_t total = 0;
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(every_dtype); i++)
        total += spec_bytes(&every_dtype[i]);
    assert_int_equal(t->offset, (uint64_t)st.st_size - total);
    /* Reads outside the tensor are refused. */
    uint8_t b[8];
    assert_int_equal(dsv4_checkpoint_read(c, t, t->nbytes, b, 1, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "w.bf16"));
    assert_int_equal(dsv4_checkpoint_read(c, t, UINT64_MAX, b, 2, &err), -EINVAL);
    assert_int_equal(dsv4_checkpoint_read(c, t, t->nbytes, b, 0, &err), 0);
    /* The shard fd is close-on-exec. */
    int fd = dsv4_checkpoint_shard_fd(c, 0);
    assert_true(fd >= 0);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(dsv4_checkpoint_shard_fd(c, 1), -EBADF);
    assert_null(dsv4_checkpoint_free(c));
    free(p);
    free(dir);
}

static void test_dir_with_one_file(void **state)
{
    (void)state;
    char *dir = new_dir();
    char *p = path_in(dir, "only.safetensors");
    char *other = path_in(dir, "config.json");
    write_valid(p, every_dtype, DSV4_ARRAY_SIZE(every_dtype), 5);
    write_bytes(other, "{}", 2);
    struct dsv4_err err;
    dsv4_checkpoint *c = NULL;
    assert_int_equal(dsv4_checkpoint_open(dir, &c, &err), 0);
    assert_string_equal(dsv4_checkpoint_shard_path(c, 0), p);
    check_every_dtype(c, 0, 5);
    dsv4_checkpoint_free(c);
    free(other);
    free(p);
    free(dir);
}

static void test_padding_gaps_and_empty(void **state)
{
    (void)state;
    /* Space-padded header, a 3-byte gap between payloads, empty tensors
     * sitting at the same offset and at the very end, no __metadata__. */
    char *dir = new_dir();
    char *p = path_in(dir, "m.safetensors");
    write_raw(p, UINT64_MAX,
              "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
              "\"e1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[1,1]},"
              "\"e2\":{\"dtype\":\"F32\",\"shape\":[3,0],\"data_offsets\":[1,1]},"
              "\"big0\":{\"dtype\":\"U8\",\"shape\":[9007199254740991,0],\"data_offsets\":[7,7]},"
              "\"b\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[5,7]}}     \n",
              7, 1);
    struct dsv4_err err;
    dsv4_checkpoint *c = NULL;
    assert_int_equal(dsv4_checkpoint_open(p, &c, &err), 0);
    assert_int_equal(dsv4_checkpoint_n_tensors(c), 5);
    const struct dsv4_tensor *a = dsv4_checkpoint_find(c, "a");
    const struct dsv4_tensor *b = dsv4_checkpoint_find(c, "b");
    const struct dsv4_tensor *e2 = dsv4_checkpoint_find(c, "e2");
    check_payload(c, a, 0, 1);
    check_payload(c, b, 5, 1);
    assert_int_equal(b->offset - a->offset, 5);
    assert_int_equal(e2->n_elements, 0);
    assert_int_equal(e2->nbytes, 0);
    assert_int_equal(dsv4_checkpoint_find(c, "big0")->shape[0], 9007199254740991ull);
    dsv4_checkpoint_free(c);
    free(p);
    free(dir);
}

/* Three shards, tensors split between them as the index says. */
static void make_sharded(char **dir_out, const char *index)
{
    char *dir = new_dir();
    static const char *const shard[] = { "model-00001-of-00003.safetensors",
                                         "model-00002-of-00003.safetensors",
                                         "model-00003-of-00003.safetensors" };
    for (int s = 0; s < 3; s++) {
        char *p = path_in(dir, shard[s]);
        write_valid(p, every_dtype + 4 * s, 4, (uint8_t)(10 + s));
        free(p);
    }
    char *ip = path_in(dir, "model.safetensors.index.json");
    write_bytes(ip, index, strlen(index));
    free(ip);
    *dir_out = dir;
}

/* weight_map for make_sharded; `patch` replaces the entry of tensor
 * "w.i64" (the first of shard 3) when not NULL, `extra` adds entries. */
static char *index_json(const char *patch, const char *extra)
{
    char *s = dsv4_xmalloc(8192);
    size_t o = (size_t)snprintf(s, 8192, "{\"metadata\":{\"total_size\":123},\"weight_map\":{");
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(every_dtype); i++) {
        if (patch && strcmp(every_dtype[i].name, "w.i64") == 0) {
            if (*patch)
                o += (size_t)snprintf(s + o, 8192 - o, "%s,", patch);
            continue;
        }
        o += (size_t)snprintf(s + o, 8192 - o, "\"%s\":\"model-0000%zu-of-00003.safetensors\",",
                              every_dtype[i].name, i / 4 + 1);
    }
    if (extra)
        o += (size_t)snprintf(s + o, 8192 - o, "%s,", extra);
    s[o - 1] = '}';
    snprintf(s + o, 8192 - o, "}");
    return s;
}

static void test_sharded_with_index(void **state)
{
    (void)state;
    char *idx = index_json(NULL, NULL);
    char *dir;
    make_sharded(&dir, idx);
    /* A stray .safetensors next to an index is ignored (only the index counts). */
    char *stray = path_in(dir, "stray.safetensors");
    write_bytes(stray, "junk", 4);
    struct dsv4_err err;
    dsv4_checkpoint *c = NULL;
    assert_int_equal(dsv4_checkpoint_open(dir, &c, &err), 0);
    assert_int_equal(dsv4_checkpoint_n_shards(c), 3);
    assert_int_equal(dsv4_checkpoint_n_tensors(c), DSV4_ARRAY_SIZE(every_dtype));
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(every_dtype); i++) {
        const struct dsv4_tensor *t = dsv4_checkpoint_find(c, every_dtype[i].name);
        assert_non_null(t);
        assert_int_equal(t->shard, i / 4);
        uint64_t off = 0;
        for (size_t j = i / 4 * 4; j < i; j++)
            off += spec_bytes(&every_dtype[j]);
        check_payload(c, t, off, (uint8_t)(10 + i / 4));
    }
    char *p2 = path_in(dir, "model-00002-of-00003.safetensors");
    assert_string_equal(dsv4_checkpoint_shard_path(c, 1), p2);
    /* Each shard opened once, each its own close-on-exec fd. */
    for (uint32_t s = 0; s < 3; s++) {
        assert_true(fcntl(dsv4_checkpoint_shard_fd(c, s), F_GETFD) & FD_CLOEXEC);
        for (uint32_t u = 0; u < s; u++)
            assert_int_not_equal(dsv4_checkpoint_shard_fd(c, s), dsv4_checkpoint_shard_fd(c, u));
    }
    dsv4_checkpoint_free(c);
    free(p2);
    free(stray);
    free(idx);
    free(dir);
}

static void test_shard_truncated_after_open(void **state)
{
    (void)state;
    char *dir = new_dir();
    char *p = path_in(dir, "t.safetensors");
    write_valid(p, every_dtype, 2, 0);
    struct dsv4_err err;
    dsv4_checkpoint *c = NULL;
    assert_int_equal(dsv4_checkpoint_open(p, &c, &err), 0);
    const struct dsv4_tensor *t = dsv4_checkpoint_find(c, "w.f16");
    assert_int_equal(truncate(p, (off_t)(t->offset + 3)), 0);
    uint8_t buf[14];
    assert_int_equal(dsv4_checkpoint_read(c, t, 0, buf, t->nbytes, &err), -EIO);
    assert_non_null(strstr(err.msg, p));
    assert_non_null(strstr(err.msg, "w.f16"));
    dsv4_checkpoint_free(c);
    free(p);
    free(dir);
}

/* ---- malformed: header length and framing ------------------------------------ */

static void test_reject_header_len_zero(void **state)
{
    (void)state;
    char *dir = new_dir();
    char *p = path_in(dir, "z.safetensors");
    write_raw(p, 0, "{}", 0, 0);
    expect_open_fails(p, -EBADMSG, p, "header length is zero", NULL);
    free(p);
    free(dir);
}

static void test_reject_header_len_over_512mib(void **state)
{
    (void)state;
    char *dir = new_dir();
    char *p = path_in(dir, "h.safetensors");
    write_raw(p, (512ull << 20) + 1, "{}", 0, 0);
    expect_open_fails(p, -EBADMSG, p, "exceeds", NULL);
    free(p);
    free(dir);
}

static void test_reject_header_len_past_eof(void **state)
{
    (void)state;
    char *dir = new_dir();
    char *p = path_in(dir, "e.safetensors");
    write_raw(p, 3, "{}", 0, 0); /* says 3, holds 2 */
    expect_open_fails(p, -EBADMSG, p, "past the end", NULL);
    write_raw(p, UINT64_MAX - 7, "{}", 0, 0); /* 8 + len wraps */
    expect_open_fails(p, -EBADMSG, p, "exceeds", NULL);
    free(p);
    free(dir);
}

static void test_reject_truncated_length_field(void **state)
{
    (void)state;
    char *dir = new_dir();
    char *p = path_in(dir, "s.safetensors");
    write_bytes(p, "\x02\0\0", 3);
    expect_open_fails(p, -EBADMSG, p, "truncated", NULL);
    write_bytes(p, "", 0);
    expect_open_fails(p, -EBADMSG, p, "truncated", NULL);
    free(p);
    free(dir);
}

static void test_reject_invalid_json(void **state)
{
    (void)state;
    reject_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}", 1, NULL,
                  "not valid JSON");
    reject_header("{\"a\":1,}", 0, NULL, "not valid JSON");
    reject_header("{} x", 0, NULL, "not valid JSON");         /* trailing garbage */
    reject_header("{}{}", 0, NULL, "not valid JSON");         /* two documents */
    reject_header("{\"a\":NaN}", 0, NULL, "not valid JSON");   /* no NaN in JSON */
}

static void test_reject_header_with_nul(void **state)
{
    (void)state;
    /* The declared length covers a NUL then more text: not one JSON value. */
    char *dir = new_dir();
    char *p = path_in(dir, "n.safetensors");
    static const char raw[] = "\x07\0\0\0\0\0\0\0{}\0{}xx";
    write_bytes(p, raw, 8 + 7);
    expect_open_fails(p, -EBADMSG, p, "not valid JSON", NULL);
    free(p);
    free(dir);
}

static void test_reject_nul_in_string(void **state)
{
    (void)state;
    /* cJSON would cut the name at the NUL and accept tensor "a". */
    reject_header("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                  NULL, "escaped NUL");
    reject_header("{\"a\":{\"dtype\":\"U8\\u0000x\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                  1, NULL, "escaped NUL");
    reject_header("{\"a\tb\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, NULL,
                  "control character");
    /* An escaped backslash followed by "u0000" is a plain string. */
    char *dir = new_dir();
    char *p = path_in(dir, "ok.safetensors");
    write_raw(p, UINT64_MAX,
              "{\"a\\\\u0000\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0);
    struct dsv4_err err;
    dsv4_checkpoint *c = NULL;
    assert_int_equal(dsv4_checkpoint_open(p, &c, &err), 0);
    assert_non_null(dsv4_checkpoint_find(c, "a\\u0000"));
    dsv4_checkpoint_free(c);
    free(p);
    free(dir);
}

static void test_reject_invalid_utf8(void **state)
{
    (void)state;
    reject_header("{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, NULL,
                  "invalid UTF-8");
    reject_header("{\"\xc0\xaf\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                  NULL, "invalid UTF-8"); /* overlong '/' */
    reject_header("{\"\xed\xa0\x80\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                  1, NULL, "invalid UTF-8"); /* surrogate */
    /* Valid multi-byte names are fine. */
    char *dir = new_dir();
    char *p = path_in(dir, "u.safetensors");
    write_raw(p, UINT64_MAX,
              "{\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":{\"dtype\":\"U8\",\"shape\":[1],"
              "\"data_offsets\":[0,1]}}",
              1, 0);
    struct dsv4_err err;
    dsv4_checkpoint *c = NULL;
    assert_int_equal(dsv4_checkpoint_open(p, &c, &err), 0);
    assert_non_null(dsv4_checkpoint_find(c, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));
    dsv4_checkpoint_free(c);
    free(p);
    free(dir);
}

static void test_reject_root_not_object(void **state)
{
    (void)state;
    reject_header("[]", 0, NULL, "root is not a JSON object");
    reject_header("\"x\"", 0, NULL, "root is not a JSON object");
    reject_header("17", 0, NULL, "root is not a JSON object");
    reject_header("null", 0, NULL, "root is not a JSON object");
}

/* ---- malformed: field types ------------------------------------------------------ */

static void test_reject_entry_not_object(void **state)
{
    (void)state;
    reject_header("{\"t\":[1]}", 0, "'t'", "not an object");
    reject_header("{\"t\":\"U8\"}", 0, "'t'", "not an object");
}

static void test_reject_dtype_type(void **state)
{
    (void)state;
    reject_header("{\"t\":{\"dtype\":1,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "'t'",
                  "dtype is not a string");
    reject_header("{\"t\":{\"dtype\":[\"U8\"],\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "'t'",
                  "dtype is not a string");
}

static void test_reject_shape_type(void **state)
{
    (void)state;
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", 1, "'t'",
                  "shape is not an array");
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":{\"0\":1},\"data_offsets\":[0,1]}}", 1,
                  "'t'", "shape is not an array");
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[\"1\"],\"data_offsets\":[0,1]}}", 1, "'t'",
                  "non-number");
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[[1]],\"data_offsets\":[0,1]}}", 1, "'t'",
                  "non-number");
}

static void test_reject_data_offsets_type(void **state)
{
    (void)state;
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":\"0,1\"}}", 1, "'t'",
                  "data_offsets is not an array of two");
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1, "'t'",
                  "data_offsets is not an array of two");
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,1]}}", 1, "'t'",
                  "data_offsets is not an array of two");
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,null]}}", 1, "'t'",
                  "non-number");
}

static void test_reject_missing_or_unknown_field(void **state)
{
    (void)state;
    reject_header("{\"t\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "'t'",
                  "missing field 'dtype'");
    reject_header("{\"t\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, "'t'",
                  "missing field 'shape'");
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "'t'",
                  "missing field 'data_offsets'");
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", 1,
                  "'t'", "unknown field 'x'");
}

static void test_reject_duplicate_field(void **state)
{
    (void)state;
    reject_header("{\"t\":{\"dtype\":\"U8\",\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,1]}}",
                  1, "'t'", "duplicate field 'dtype'");
}

static void test_reject_metadata_type(void **state)
{
    (void)state;
    reject_header("{\"__metadata__\":[]}", 0, NULL, "__metadata__ is not an object");
    reject_header("{\"__metadata__\":\"pt\"}", 0, NULL, "__metadata__ is not an object");
    reject_header("{\"__metadata__\":{\"format\":1}}", 0, "'format'", "is not a string");
    reject_header("{\"__metadata__\":{\"a\":\"b\",\"c\":{}}}", 0, "'c'", "is not a string");
    reject_header("{\"__metadata__\":{},\"__metadata__\":{}}", 0, NULL, "duplicate __metadata__");
}

static void test_reject_unknown_dtype(void **state)
{
    (void)state;
    reject_header("{\"t\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, "'t'",
                  "unknown dtype 'F64'");
    reject_header("{\"t\":{\"dtype\":\"bf16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2, "'t'",
                  "unknown dtype");
    reject_header("{\"t\":{\"dtype\":\"\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2, "'t'",
                  "unknown dtype");
}

/* ---- malformed: numbers ------------------------------------------------------------ */

static void test_reject_negative_number(void **state)
{
    (void)state;
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1, "'t'",
                  "negative");
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 1, "'t'",
                  "negative");
}

static void test_reject_fractional_number(void **state)
{
    (void)state;
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}", 2, "'t'",
                  "fractional");
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1e-3]}}", 1, "'t'",
                  "fractional");
}

static void test_reject_non_finite_number(void **state)
{
    (void)state;
    /* JSON has no NaN/Inf literals (see test_reject_invalid_json); an
     * overflowing exponent is how Inf reaches the parser. */
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1e400],\"data_offsets\":[0,1]}}", 1, "'t'",
                  "non-finite");
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,-1e400]}}", 1, "'t'",
                  "non-finite");
}

static void test_reject_out_of_range_number(void **state)
{
    (void)state;
    /* 2^53: the first integer whose successor a double cannot hold. */
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[9007199254740992,0],"
                  "\"data_offsets\":[0,0]}}",
                  0, "'t'", "out of range");
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[1e300,1e300]}}", 0,
                  "'t'", "out of range");
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[0],"
                  "\"data_offsets\":[18446744073709551617,18446744073709551617]}}",
                  0, "'t'", "out of range");
}

/* ---- malformed: shapes and sizes ----------------------------------------------------- */

static void test_reject_rank_above_8(void **state)
{
    (void)state;
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
                  1, "'t'", "rank 9");
}

static void test_reject_shape_product_overflow(void **state)
{
    (void)state;
    /* 2^32 x 2^32 elements = 2^64. */
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],"
                  "\"data_offsets\":[0,1]}}",
                  1, "'t'", "element count overflows");
    /* 2^62 elements fit, but x 4 bytes do not. */
    reject_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648],"
                  "\"data_offsets\":[0,1]}}",
                  1, "'t'", "byte size overflows");
}

static void test_reject_offset_overflow(void **state)
{
    (void)state;
    /* The largest accepted offset plus the header: far past any file. */
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],"
                  "\"data_offsets\":[9007199254740990,9007199254740991]}}",
                  1, "'t'", "past the end");
}

static void test_reject_begin_after_end(void **state)
{
    (void)state;
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,1]}}", 2, "'t'",
                  "begin 2 > end 1");
}

static void test_reject_end_past_file(void **state)
{
    (void)state;
    /* A truncated shard: the header promises 16 bytes, 15 are there. */
    reject_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 15, "'t'",
                  "past the end");
}

static void test_reject_payload_size_mismatch(void **state)
{
    (void)state;
    reject_header("{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,15]}}", 16, "'t'",
                  "span 15 bytes but F32 x 4 elements needs 16");
    reject_header("{\"t\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[0,2]}}", 2, "'t'",
                  "needs 0");
    reject_header("{\"t\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,0]}}", 8, "'t'",
                  "needs 8");
}

/* ---- malformed: overlaps and duplicates ------------------------------------------------- */

static void test_reject_overlapping_tensors(void **state)
{
    (void)state;
    reject_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                  "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}",
                  5, "'b'", "overlaps tensor 'a'");
    /* Identical ranges (one tensor's bytes aliased under two names). */
    reject_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                  "\"b\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                  4, "overlaps", NULL);
    /* Contained in a larger one, listed before it. */
    reject_header("{\"in\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[5,6]},"
                  "\"out\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[2,10]}}",
                  10, "'in'", "overlaps tensor 'out'");
}

static void test_reject_duplicate_tensor_key(void **state)
{
    (void)state;
    /* cJSON keeps both members; disjoint payloads, so only the name clashes. */
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                  "\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                  2, "'t'", "duplicate name");
    /* Also for empty tensors, which cannot overlap. */
    reject_header("{\"t\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                  "\"t\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                  0, "'t'", "duplicate name");
}

static void test_reject_empty_tensor_name(void **state)
{
    (void)state;
    reject_header("{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, NULL,
                  "empty name");
}

static void test_error_names_are_escaped(void **state)
{
    (void)state;
    /* A name with a newline and a quote stays on one line, escaped. */
    reject_header("{\"a\\nb'\":{\"dtype\":\"X\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                  "a\\x0ab\\x27", "unknown dtype");
}

/* ---- malformed: directories and indexes --------------------------------------------------- */

static void test_reject_dir_without_safetensors(void **state)
{
    (void)state;
    char *dir = new_dir();
    expect_open_fails(dir, -ENOENT, dir, "neither", NULL);
    char *a = path_in(dir, "a.safetensors"), *b = path_in(dir, "b.safetensors");
    write_valid(a, every_dtype, 1, 0);
    write_valid(b, every_dtype, 1, 0);
    expect_open_fails(dir, -EINVAL, dir, "several .safetensors", NULL);
    free(a);
    free(b);
    free(dir);
}

static void test_reject_path_missing(void **state)
{
    (void)state;
    char *dir = new_dir();
    char *p = path_in(dir, "nope.safetensors");
    expect_open_fails(p, -ENOENT, p, NULL, NULL);
    free(p);
    free(dir);
}

/* Peak RSS (KiB) of a child that opens `path` (and must fail with -EBADMSG). */
static long child_peak_kib(const char *path)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dsv4_checkpoint *c = NULL;
        struct dsv4_err err;
        _exit(dsv4_checkpoint_open(path, &c, &err) == -EBADMSG ? 0 : 1);
    }
    int st;
    struct rusage ru;
    assert_int_equal(wait4(pid, &st, 0, &ru), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return ru.ru_maxrss;
}

/*
 * A hostile header costs about its own size, not dozens of times it: 4 MB of "[1,1,1,…]" in
 * a shape (2 M values, which a JSON tree would hold as ~2 M nodes) is refused before any
 * tree is built, as is a header of many tensors whose values are packed 4 bytes each. The bound is checked as peak memory of
 * a process that only opens the file, against the same process opening a 4 MB header that
 * is refused for its first byte (the baseline: reading the header itself).
 */
static void test_reject_header_amplification(void **state)
{
    (void)state;
    char *dir = new_dir();
    const size_t n = 2u << 20;
    char *hdr = dsv4_xmalloc(16 * n + 128);
    size_t k = (size_t)sprintf(hdr, "{\"t\":{\"dtype\":\"F32\",\"shape\":[");
    for (size_t i = 0; i < n; i++)
        k += (size_t)sprintf(hdr + k, i ? ",1" : "1");
    k += (size_t)sprintf(hdr + k, "],\"data_offsets\":[0,4]}}");
    char *p = path_in(dir, "model.safetensors");
    write_raw(p, UINT64_MAX, hdr, 4, 0);
    expect_open_fails(p, -EBADMSG, p, "array of more than 16 entries", NULL);
    long wide = child_peak_kib(p);
    /* many tensors with 16-dimension shapes: 4 bytes of text per value, over the budget */
    k = (size_t)sprintf(hdr, "{");
    for (size_t i = 0; i < n / 20; i++)
        k += (size_t)sprintf(hdr + k, "%s\"%zx\":{\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}",
                             i ? "," : "", i);
    k += (size_t)sprintf(hdr + k, "}");
    char *p2 = path_in(dir, "b.safetensors");
    write_raw(p2, UINT64_MAX, hdr, 4, 0);
    expect_open_fails(p2, -EBADMSG, p2, "JSON values", NULL);
    long many = child_peak_kib(p2);
    /* baseline: a header of the same size refused at byte 0 (not JSON text) */
    memset(hdr, 0x01, 4u << 20);
    hdr[4u << 20] = '\0';
    char *p3 = path_in(dir, "c.safetensors");
    write_raw(p3, UINT64_MAX, hdr, 4, 0);
    long base = child_peak_kib(p3);
    print_message("# peak RSS: baseline %ld KiB, 2 M-value shape %ld KiB, dense shapes %ld KiB\n",
                  base, wide, many);
    assert_true(wide < base + 16 * 1024);     /* was ~170 MB more */
    assert_true(many < base + 16 * 1024);
    free(p);
    free(p2);
    free(p3);
    free(hdr);
    free(dir);
}

static void test_reject_fifo(void **state)
{
    (void)state;
    /* Neither the checkpoint path nor a shard may hang the open. */
    char *dir = new_dir();
    char *p = path_in(dir, "f.safetensors");
    assert_int_equal(mkfifo(p, 0600), 0);
    expect_open_fails(p, -EINVAL, p, "neither a file nor a directory", NULL);
    expect_open_fails(dir, -EINVAL, p, "not a regular file", NULL);
    char *ip = path_in(dir, "model.safetensors.index.json");
    static const char idx[] = "{\"weight_map\":{\"t\":\"f.safetensors\"}}";
    write_bytes(ip, idx, strlen(idx));
    expect_open_fails(dir, -EINVAL, p, "not a regular file", NULL);
    unlink(ip);
    assert_int_equal(mkfifo(ip, 0600), 0);
    expect_open_fails(dir, -EINVAL, ip, "not a regular file", NULL);
    free(ip);
    free(p);
    free(dir);
}

static void reject_index(const char *index, int code, const char *n1, const char *n2)
{
    char *dir;
    make_sharded(&dir, index);
    expect_open_fails(dir, code, n1, n2, NULL);
    free(dir);
}

static void test_reject_index_missing_shard(void **state)
{
    (void)state;
    char *idx = index_json("\"w.i64\":\"model-00009-of-00003.safetensors\"", NULL);
    reject_index(idx, -ENOENT, "model-00009-of-00003.safetensors", "'w.i64'");
    free(idx);
}

static void test_reject_index_tensor_missing_from_shard(void **state)
{
    (void)state;
    char *idx = index_json(NULL, "\"ghost\":\"model-00002-of-00003.safetensors\"");
    reject_index(idx, -EBADMSG, "model-00002-of-00003.safetensors", "'ghost'");
    free(idx);
}

static void test_reject_shard_tensor_not_in_index(void **state)
{
    (void)state;
    char *idx = index_json("", NULL); /* w.i64 (in shard 3) left out */
    reject_index(idx, -EBADMSG, "model-00003-of-00003.safetensors", "'w.i64'");
    free(idx);
}

static void test_reject_index_names_wrong_shard(void **state)
{
    (void)state;
    /* Also what a tensor present in two shards looks like: the copy in the
     * shard the index does not name is refused. */
    char *idx = index_json("\"w.i64\":\"model-00001-of-00003.safetensors\"", NULL);
    reject_index(idx, -EBADMSG, "model-00003-of-00003.safetensors", "'w.i64'");
    free(idx);
}

static void test_reject_index_invalid_json(void **state)
{
    (void)state;
    reject_index("{\"weight_map\":{", -EBADMSG, "model.safetensors.index.json", "not valid JSON");
    reject_index("", -EBADMSG, "model.safetensors.index.json", "not valid JSON");
    reject_index("[]", -EBADMSG, "model.safetensors.index.json", "root is not a JSON object");
    reject_index("{\"weight_map\":{\"a\\u0000\":\"x.safetensors\"}}", -EBADMSG, "index.json",
                 "escaped NUL");
    reject_index("{\"weight_map\":{\"a\":\"x\xfe.safetensors\"}}", -EBADMSG, "index.json",
                 "invalid UTF-8");
}

static void test_reject_index_weight_map_type(void **state)
{
    (void)state;
    reject_index("{\"metadata\":{}}", -EBADMSG, "index.json", "no weight_map");
    reject_index("{\"weight_map\":[]}", -EBADMSG, "index.json", "weight_map is not an object");
    reject_index("{\"weight_map\":\"x\"}", -EBADMSG, "index.json", "weight_map is not an object");
    reject_index("{\"weight_map\":{}}", -EBADMSG, "index.json", "weight_map is empty");
    reject_index("{\"metadata\":1,\"weight_map\":{}}", -EBADMSG, "index.json",
                 "metadata is not an object");
    reject_index("{\"weight_map\":{},\"weight_map\":{}}", -EBADMSG, "index.json",
                 "duplicate key 'weight_map'");
}

static void test_reject_index_non_string_value(void **state)
{
    (void)state;
    char *idx = index_json("\"w.i64\":3", NULL);
    reject_index(idx, -EBADMSG, "index.json", "'w.i64': value is not a string");
    free(idx);
    idx = index_json("\"w.i64\":null", NULL);
    reject_index(idx, -EBADMSG, "index.json", "'w.i64': value is not a string");
    free(idx);
}

static void test_reject_index_duplicate_tensor(void **state)
{
    (void)state;
    char *idx = index_json(NULL, "\"w.i64\":\"model-00003-of-00003.safetensors\"");
    reject_index(idx, -EBADMSG, "index.json", "'w.i64' listed twice");
    free(idx);
}

static void test_reject_index_path_traversal(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "\"w.i64\":\"../model-00003-of-00003.safetensors\"",
        "\"w.i64\":\"/etc/passwd\"",
        "\"w.i64\":\"sub/model.safetensors\"",
        "\"w.i64\":\"..\"",
        "\"w.i64\":\".\"",
        "\"w.i64\":\"\"",
    };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(bad); i++) {
        char *idx = index_json(bad[i], NULL);
        reject_index(idx, -EBADMSG, "'w.i64'", "not a plain file name");
        free(idx);
    }
}

/* ---- fixture -------------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/dsv4-test-st-XXXXXX");
    return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_table),
        cmocka_unit_test(test_single_file_every_dtype),
        cmocka_unit_test(test_dir_with_one_file),
        cmocka_unit_test(test_padding_gaps_and_empty),
        cmocka_unit_test(test_sharded_with_index),
        cmocka_unit_test(test_shard_truncated_after_open),
        cmocka_unit_test(test_reject_header_len_zero),
        cmocka_unit_test(test_reject_header_len_over_512mib),
        cmocka_unit_test(test_reject_header_len_past_eof),
        cmocka_unit_test(test_reject_truncated_length_field),
        cmocka_unit_test(test_reject_invalid_json),
        cmocka_unit_test(test_reject_header_with_nul),
        cmocka_unit_test(test_reject_nul_in_string),
        cmocka_unit_test(test_reject_invalid_utf8),
        cmocka_unit_test(test_reject_root_not_object),
        cmocka_unit_test(test_reject_entry_not_object),
        cmocka_unit_test(test_reject_dtype_type),
        cmocka_unit_test(test_reject_shape_type),
        cmocka_unit_test(test_reject_data_offsets_type),
        cmocka_unit_test(test_reject_missing_or_unknown_field),
        cmocka_unit_test(test_reject_duplicate_field),
        cmocka_unit_test(test_reject_metadata_type),
        cmocka_unit_test(test_reject_unknown_dtype),
        cmocka_unit_test(test_reject_negative_number),
        cmocka_unit_test(test_reject_fractional_number),
        cmocka_unit_test(test_reject_non_finite_number),
        cmocka_unit_test(test_reject_out_of_range_number),
        cmocka_unit_test(test_reject_rank_above_8),
        cmocka_unit_test(test_reject_shape_product_overflow),
        cmocka_unit_test(test_reject_offset_overflow),
        cmocka_unit_test(test_reject_begin_after_end),
        cmocka_unit_test(test_reject_end_past_file),
        cmocka_unit_test(test_reject_payload_size_mismatch),
        cmocka_unit_test(test_reject_overlapping_tensors),
        cmocka_unit_test(test_reject_duplicate_tensor_key),
        cmocka_unit_test(test_reject_empty_tensor_name),
        cmocka_unit_test(test_error_names_are_escaped),
        cmocka_unit_test(test_reject_dir_without_safetensors),
        cmocka_unit_test(test_reject_path_missing),
        cmocka_unit_test(test_reject_fifo),
        cmocka_unit_test(test_reject_header_amplification),
        cmocka_unit_test(test_reject_index_missing_shard),
        cmocka_unit_test(test_reject_index_tensor_missing_from_shard),
        cmocka_unit_test(test_reject_shard_tensor_not_in_index),
        cmocka_unit_test(test_reject_index_names_wrong_shard),
        cmocka_unit_test(test_reject_index_invalid_json),
        cmocka_unit_test(test_reject_index_weight_map_type),
        cmocka_unit_test(test_reject_index_non_string_value),
        cmocka_unit_test(test_reject_index_duplicate_tensor),
        cmocka_unit_test(test_reject_index_path_traversal),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
