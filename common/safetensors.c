/* SPDX-License-Identifier: MIT */
/*
 * Checkpoint reader. A safetensors file is a little-endian u64 header
 * length n, n bytes of JSON {name: {dtype, shape, data_offsets}, ...,
 * "__metadata__": {str: str}}, then the payload; offsets are relative to
 * the end of the header. Everything in a header is untrusted: it is
 * validated completely before a single tensor is added, so the rest of
 * the engine can use shapes, offsets and sizes without checks. Payloads
 * are read with pread, never mapped (see docs/ARCHITECTURE.md).
 *
 * Why one long file: the header validator, the shard/index loader and the reader share one
 * private table and one error vocabulary; split apart they would need an internal header
 * exposing exactly what must stay unexposed (unvalidated headers).
 */
#include "safetensors.h"
#include "json_limits.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strmap.h"
#include "util.h"

/* The format itself caps the header at 100 MB; real shards have well under 1 MB. */
#define MAX_HEADER_LEN (100ull << 20)
#define MAX_INDEX_LEN (512ull << 20)
#define INDEX_NAME "model.safetensors.index.json"
/* Largest JSON number accepted: every integer below it is exact in a double. */
#define MAX_JSON_INT 9007199254740992.0 /* 2^53 */

static const struct {
    const char *name;
    size_t size;
} dtypes[_DSV4_DTYPE_MAX] = {
    [DSV4_DTYPE_BF16] = { "BF16", 2 },
    [DSV4_DTYPE_F16] = { "F16", 2 },
    [DSV4_DTYPE_F32] = { "F32", 4 },
    [DSV4_DTYPE_F8_E4M3] = { "F8_E4M3", 1 },
    [DSV4_DTYPE_F8_E8M0] = { "F8_E8M0", 1 },
    [DSV4_DTYPE_I8] = { "I8", 1 },
    [DSV4_DTYPE_U8] = { "U8", 1 },
    [DSV4_DTYPE_I32] = { "I32", 4 },
    [DSV4_DTYPE_I64] = { "I64", 8 },
};

const char *dsv4_dtype_name(enum dsv4_dtype t)
{
    if ((int)t < 0 || t >= _DSV4_DTYPE_MAX)
        return NULL;
    return dtypes[t].name;
}

enum dsv4_dtype dsv4_dtype_from_name(const char *name)
{
    for (int t = 0; t < _DSV4_DTYPE_MAX; t++)
        if (strcmp(dtypes[t].name, name) == 0)
            return (enum dsv4_dtype)t;
    return _DSV4_DTYPE_INVALID;
}

size_t dsv4_dtype_size(enum dsv4_dtype t)
{
    if ((int)t < 0 || t >= _DSV4_DTYPE_MAX)
        return 0;
    return dtypes[t].size;
}

/* ---- error text ------------------------------------------------------------ */

/* Names come from untrusted JSON: print them on one line, bounded, with
 * control and non-ASCII bytes escaped. */
struct qname {
    char s[200];
};

static const char *q(struct qname *b, const char *name)
{
    size_t o = 0;
    if (!name)
        name = "(null)";
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (o + 8 >= sizeof(b->s)) {
            memcpy(b->s + o, "...", 4);
            return b->s;
        }
        if (*p >= 0x20 && *p < 0x7f && *p != '\\' && *p != '\'')
            b->s[o++] = (char)*p;
        else
            o += (size_t)snprintf(b->s + o, sizeof(b->s) - o, "\\x%02x", *p);
    }
    b->s[o] = '\0';
    return b->s;
}

/* ---- header parsing ---------------------------------------------------------- */

static int check_header_len(uint64_t header_len, uint64_t file_size, const char *file,
                            struct dsv4_err *err)
{
    struct qname qf;
    if (header_len == 0)
        return dsv4_errf(err, -EBADMSG, "file '%s': header length is zero", q(&qf, file));
    /* The value itself is not printed: it is the file's first 8 bytes, and the file may be
     * anything a symlink in a model directory points at. */
    if (header_len > MAX_HEADER_LEN)
        return dsv4_errf(err, -EBADMSG, "file '%s': header length field exceeds the %llu-byte "
                         "limit (not a safetensors file?)", q(&qf, file), MAX_HEADER_LEN);
    if (file_size < 8 || header_len > file_size - 8)
        return dsv4_errf(err, -EBADMSG,
                         "file '%s': header length field runs past the end of the %llu-byte file "
                         "(not a safetensors file?)", q(&qf, file), (unsigned long long)file_size);
    return 0;
}

/* A non-negative integral JSON number below 2^53 (cJSON keeps numbers as
 * doubles; above 2^53 neighbouring integers collapse). */
static int json_u64(const cJSON *j, uint64_t *ret, const char *file, const char *tensor,
                    const char *field, struct dsv4_err *err)
{
    struct qname qf, qt;
    if (!cJSON_IsNumber(j))
        return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': %s holds a non-number",
                         q(&qf, file), q(&qt, tensor), field);
    double d = j->valuedouble;
    if (!isfinite(d))
        return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': %s holds a non-finite number",
                         q(&qf, file), q(&qt, tensor), field);
    if (d < 0)
        return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': %s holds negative %g",
                         q(&qf, file), q(&qt, tensor), field, d);
    if (d != floor(d))
        return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': %s holds fractional %.17g",
                         q(&qf, file), q(&qt, tensor), field, d);
    if (d >= MAX_JSON_INT)
        return dsv4_errf(err, -EBADMSG,
                         "file '%s': tensor '%s': %s holds %.17g, out of range (max 2^53-1)",
                         q(&qf, file), q(&qt, tensor), field, d);
    *ret = (uint64_t)d;
    return 0;
}

/* One "name": {...} entry into *t (name borrowed from the tree). `begin`
 * is the offset relative to the payload start, for the overlap check. */
static int parse_tensor(const cJSON *item, uint64_t data_start, uint64_t file_size,
                        const char *file, struct dsv4_tensor *t, uint64_t *begin,
                        struct dsv4_err *err)
{
    struct qname qf, qt;
    const char *name = item->string;
    const cJSON *jdtype = NULL, *jshape = NULL, *joffsets = NULL;
    int r;

    if (!cJSON_IsObject(item))
        return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': entry is not an object",
                         q(&qf, file), q(&qt, name));
    /* Field by field rather than cJSON_GetObjectItem, so a duplicate or
     * unknown field is an error and not silently shadowed. */
    for (const cJSON *f = item->child; f; f = f->next) {
        const cJSON **slot;
        if (strcmp(f->string, "dtype") == 0)
            slot = &jdtype;
        else if (strcmp(f->string, "shape") == 0)
            slot = &jshape;
        else if (strcmp(f->string, "data_offsets") == 0)
            slot = &joffsets;
        else
            return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': unknown field '%s'",
                             q(&qf, file), q(&qt, name), q(&(struct qname){ 0 }, f->string));
        if (*slot)
            return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': duplicate field '%s'",
                             q(&qf, file), q(&qt, name), f->string);
        *slot = f;
    }
    if (!jdtype || !jshape || !joffsets)
        return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': missing field '%s'",
                         q(&qf, file), q(&qt, name),
                         !jdtype ? "dtype" : !jshape ? "shape" : "data_offsets");

    if (!cJSON_IsString(jdtype) || !jdtype->valuestring)
        return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': dtype is not a string",
                         q(&qf, file), q(&qt, name));
    t->dtype = dsv4_dtype_from_name(jdtype->valuestring);
    if (t->dtype == _DSV4_DTYPE_INVALID)
        return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': unknown dtype '%s'",
                         q(&qf, file), q(&qt, name),
                         q(&(struct qname){ 0 }, jdtype->valuestring));

    if (!cJSON_IsArray(jshape))
        return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': shape is not an array",
                         q(&qf, file), q(&qt, name));
    int rank = cJSON_GetArraySize(jshape);
    if (rank > DSV4_TENSOR_MAX_RANK)
        return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': rank %d above the maximum %d",
                         q(&qf, file), q(&qt, name), rank, DSV4_TENSOR_MAX_RANK);
    t->rank = (uint32_t)rank;
    uint64_t n = 1;
    bool overflow = false;
    int d = 0;
    for (const cJSON *e = jshape->child; e; e = e->next, d++) {
        r = json_u64(e, &t->shape[d], file, name, "shape", err);
        if (r < 0)
            return r;
        /* A zero dimension makes the product 0 whatever follows; still
         * every later dimension must be in range. */
        if (!dsv4_mul_u64(n, t->shape[d], &n))
            overflow = true;
    }
    for (; d < DSV4_TENSOR_MAX_RANK; d++)
        t->shape[d] = 0;
    /* Overflow only counts when no dimension is zero. */
    if (overflow) {
        bool zero = false;
        for (uint32_t i = 0; i < t->rank; i++)
            zero |= t->shape[i] == 0;
        if (!zero)
            return dsv4_errf(err, -EBADMSG,
                             "file '%s': tensor '%s': shape element count overflows 64 bits",
                             q(&qf, file), q(&qt, name));
        n = 0;
    }
    t->n_elements = n;
    if (!dsv4_mul_u64(n, dsv4_dtype_size(t->dtype), &t->nbytes))
        return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': byte size overflows 64 bits",
                         q(&qf, file), q(&qt, name));

    if (!cJSON_IsArray(joffsets) || cJSON_GetArraySize(joffsets) != 2)
        return dsv4_errf(err, -EBADMSG,
                         "file '%s': tensor '%s': data_offsets is not an array of two numbers",
                         q(&qf, file), q(&qt, name));
    uint64_t b, e;
    if ((r = json_u64(joffsets->child, &b, file, name, "data_offsets", err)) < 0 ||
        (r = json_u64(joffsets->child->next, &e, file, name, "data_offsets", err)) < 0)
        return r;
    if (b > e)
        return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': data_offsets begin %llu > end %llu",
                         q(&qf, file), q(&qt, name), (unsigned long long)b,
                         (unsigned long long)e);
    uint64_t abs_end;
    if (!dsv4_add_u64(data_start, e, &abs_end) || abs_end > file_size)
        return dsv4_errf(err, -EBADMSG,
                         "file '%s': tensor '%s': data_offsets end %llu runs past the end of the "
                         "file (%llu payload bytes; truncated?)",
                         q(&qf, file), q(&qt, name), (unsigned long long)e,
                         (unsigned long long)(file_size - data_start));
    if (e - b != t->nbytes)
        return dsv4_errf(err, -EBADMSG,
                         "file '%s': tensor '%s': data_offsets span %llu bytes but %s x %llu "
                         "elements needs %llu",
                         q(&qf, file), q(&qt, name), (unsigned long long)(e - b),
                         dsv4_dtype_name(t->dtype), (unsigned long long)n,
                         (unsigned long long)t->nbytes);
    t->name = name;
    t->offset = data_start + b;
    t->shard = 0;
    *begin = b;
    return 0;
}

static int check_metadata(const cJSON *meta, const char *file, struct dsv4_err *err)
{
    struct qname qf, qk;
    if (!cJSON_IsObject(meta))
        return dsv4_errf(err, -EBADMSG, "file '%s': __metadata__ is not an object", q(&qf, file));
    for (const cJSON *m = meta->child; m; m = m->next)
        if (!cJSON_IsString(m) || !m->valuestring)
            return dsv4_errf(err, -EBADMSG, "file '%s': __metadata__ value '%s' is not a string",
                             q(&qf, file), q(&qk, m->string));
    return 0;
}

static int cmp_extent(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b; /* {begin, end, index} */
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* Anything but JSON whitespace after the document is an error (writers
 * pad headers with spaces to align the payload). */
static bool only_whitespace(const char *p, const char *end)
{
    for (; p < end; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return false;
    return true;
}

/* Length of the UTF-8 sequence at p (at most n bytes), 0 if invalid:
 * overlong forms, surrogates and code points above U+10FFFF are refused. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, cp = c & 0x07;
    else
        return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* What cJSON does not check: the text must be UTF-8 (safetensors says so)
 * and no string may hold a NUL, escaped or raw, at which cJSON would
 * silently cut the string, so "a\u0000b" would pose as tensor "a".
 * Returns the byte offset of the first problem, or SIZE_MAX. */
static size_t check_text(const char *text, size_t n, const char **why)
{
    const unsigned char *s = (const unsigned char *)text;
    bool in_string = false;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len(s + i, n - i);
        if (k == 0) {
            *why = "invalid UTF-8";
            return i;
        }
        if (k == 1 && in_string && s[i] == '\\') {
            if (i + 1 < n && s[i + 1] == 'u' && i + 5 < n && memcmp(s + i + 2, "0000", 4) == 0) {
                *why = "an escaped NUL (\\u0000) in a string";
                return i;
            }
            i += 2; /* the escaped character is never a quote that ends the string */
            continue;
        }
        if (k == 1 && in_string && s[i] < 0x20) {
            /* JSON forbids raw control characters in strings; a raw NUL
             * would cut the string just like an escaped one. */
            *why = "a raw control character in a string";
            return i;
        }
        if (k == 1 && s[i] == '"')
            in_string = !in_string;
        i += k;
    }
    return SIZE_MAX;
}

/* The whole buffer must be one JSON value. cJSON gets a NUL-terminated
 * copy: the Debian library is not built with sanitizers, so an over-read
 * past a bare length-delimited buffer would go unnoticed. */
static cJSON *parse_json(const char *text, size_t len)
{
    char *copy = dsv4_xmalloc(len + 1);
    memcpy(copy, text, len);
    copy[len] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(copy, len, &end, false);
    if (root && (!end || end < copy || end > copy + len || !only_whitespace(end, copy + len))) {
        cJSON_Delete(root);
        root = NULL;
    }
    free(copy);
    return root;
}

int dsv4_safetensors_parse_header(const char *json, size_t header_len, uint64_t file_size,
                                  const char *file_name, dsv4_safetensors_add_fn add,
                                  void *ctx, struct dsv4_err *err)
{
    struct qname qf, qt;
    int r = check_header_len(header_len, file_size, file_name, err);
    if (r < 0)
        return r;
    const char *why;
    size_t bad = check_text(json, header_len, &why);
    if (bad != SIZE_MAX)
        return dsv4_errf(err, -EBADMSG, "file '%s': header byte %zu: %s", q(&qf, file_name), bad,
                         why);
    /* Bound what the tree may cost before building it: a header is an object of tensors
     * (objects of a dtype, a shape of at most 8 and two offsets) and string metadata. A
     * legitimate header spends well over 6 bytes of text per value (a tensor entry with a
     * one-letter name: 53 bytes, 8 values); a hostile one of "[1,1,…]" spends 2 and would make
     * the parser allocate ~40× its size. What passes costs at most ~15× (cJSON's 64-byte node
     * and key per 6 bytes), within the format's 100 MB header. */
    struct dsv4_json_limits lim = { .max_nodes = header_len / 6 + 256, .max_depth = 4,
                                    .max_array = 16, .max_members = header_len / 6 + 256,
                                    .max_string = 1u << 20 };
    char what[600];
    snprintf(what, sizeof(what), "file '%s': header", q(&qf, file_name));
    if ((r = dsv4_json_prescan(json, header_len, &lim, what, err)) < 0)
        return -EBADMSG;
    cJSON *root = parse_json(json, header_len);
    if (!root)
        return dsv4_errf(err, -EBADMSG, "file '%s': header is not valid JSON", q(&qf, file_name));

    const uint64_t data_start = 8 + (uint64_t)header_len;
    struct dsv4_tensor *ts = NULL;
    uint64_t *ext = NULL; /* {begin, end, index} per tensor */
    dsv4_strmap *names = NULL;
    size_t n = 0;
    bool have_meta = false;

    if (!cJSON_IsObject(root)) {
        r = dsv4_errf(err, -EBADMSG, "file '%s': header root is not a JSON object",
                      q(&qf, file_name));
        goto out;
    }
    size_t count = 0;
    for (const cJSON *it = root->child; it; it = it->next)
        count++;
    ts = dsv4_xcalloc(count, sizeof(*ts));
    ext = dsv4_xcalloc(count, 3 * sizeof(*ext));
    names = dsv4_strmap_new(count);

    for (const cJSON *it = root->child; it; it = it->next) {
        if (!it->string) {
            r = dsv4_errf(err, -EBADMSG, "file '%s': header entry without a name",
                          q(&qf, file_name));
            goto out;
        }
        if (strcmp(it->string, "__metadata__") == 0) {
            if (have_meta) {
                r = dsv4_errf(err, -EBADMSG, "file '%s': duplicate __metadata__",
                              q(&qf, file_name));
                goto out;
            }
            have_meta = true;
            if ((r = check_metadata(it, file_name, err)) < 0)
                goto out;
            continue;
        }
        if (it->string[0] == '\0') {
            r = dsv4_errf(err, -EBADMSG, "file '%s': tensor with an empty name", q(&qf, file_name));
            goto out;
        }
        if (!dsv4_strmap_insert(names, it->string, strlen(it->string), n, NULL)) {
            r = dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': duplicate name in header",
                          q(&qf, file_name), q(&qt, it->string));
            goto out;
        }
        uint64_t begin = 0;
        if ((r = parse_tensor(it, data_start, file_size, file_name, &ts[n], &begin, err)) < 0)
            goto out;
        ext[3 * n] = begin;
        ext[3 * n + 1] = begin + ts[n].nbytes;
        ext[3 * n + 2] = n;
        n++;
    }

    /* Payload ranges must be disjoint; gaps are allowed (a writer may align
     * payloads). Empty tensors occupy no bytes and cannot overlap. */
    qsort(ext, n, 3 * sizeof(*ext), cmp_extent);
    const uint64_t *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        const uint64_t *x = &ext[3 * i];
        if (x[0] == x[1])
            continue;
        if (prev && x[0] < prev[1]) {
            r = dsv4_errf(err, -EBADMSG,
                          "file '%s': tensor '%s': payload [%llu, %llu) overlaps tensor '%s' "
                          "[%llu, %llu)",
                          q(&qf, file_name), q(&qt, ts[x[2]].name), (unsigned long long)x[0],
                          (unsigned long long)x[1], q(&(struct qname){ 0 }, ts[prev[2]].name),
                          (unsigned long long)prev[0], (unsigned long long)prev[1]);
            goto out;
        }
        prev = x;
    }

    for (size_t i = 0; i < n; i++)
        if (add && (r = add(ctx, &ts[i], err)) < 0)
            goto out;
    r = (int)DSV4_MIN(n, (size_t)INT32_MAX);
out:
    dsv4_strmap_free(names);
    free(ext);
    free(ts);
    cJSON_Delete(root);
    return r;
}

/* ---- files -------------------------------------------------------------------- */

struct shard {
    char *path;
    int fd;
    uint64_t size;
};

struct dsv4_checkpoint {
    struct shard *shards;
    uint32_t n_shards;
    /* Tensor i is entry i of `names`, whose key storage owns t->name. */
    dsv4_strmap *names;
    struct dsv4_tensor *tensors;
    size_t n_tensors, cap_tensors;
};

/* pread until n bytes or EOF; returns bytes read or a negative errno. */
static int64_t pread_full(int fd, void *buf, uint64_t n, uint64_t off)
{
    uint64_t done = 0;
    while (done < n) {
        size_t chunk = (size_t)DSV4_MIN(n - done, (uint64_t)1 << 30);
        ssize_t k = pread(fd, (char *)buf + done, chunk, (off_t)(off + done));
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (k == 0)
            break;
        done += (uint64_t)k;
    }
    return (int64_t)done;
}

static char *read_whole(int fd, uint64_t size, uint64_t limit, const char *path, int *rc,
                        struct dsv4_err *err)
{
    struct qname qf;
    if (size > limit) {
        *rc = dsv4_errf(err, -EFBIG, "file '%s': %llu bytes exceeds the %llu-byte limit",
                        q(&qf, path), (unsigned long long)size, (unsigned long long)limit);
        return NULL;
    }
    char *buf = dsv4_xmalloc((size_t)size + 1);
    int64_t k = pread_full(fd, buf, size, 0);
    if (k < 0 || (uint64_t)k != size) {
        *rc = dsv4_errf(err, k < 0 ? (int)k : -EIO, "file '%s': read failed: %s", q(&qf, path),
                        k < 0 ? strerror((int)-k) : "file shrank while reading");
        free(buf);
        return NULL;
    }
    buf[size] = '\0';
    return buf;
}

/* openat that cannot hang on a FIFO or device: O_NONBLOCK for the open,
 * cleared again on a regular file (io_uring would otherwise answer reads
 * on the shard fd with -EAGAIN). Returns the fd or a negative errno. */
static int open_nohang(int dirfd, const char *name, struct stat *st)
{
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    if (fstat(fd, st) < 0) {
        int r = -errno;
        close(fd);
        return r;
    }
    if (S_ISREG(st->st_mode)) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
            int r = -errno;
            close(fd);
            return r;
        }
    }
    return fd;
}

static int open_regular(int dirfd, const char *name, const char *path, int *fd_out,
                        uint64_t *size_out, struct dsv4_err *err)
{
    struct qname qf;
    struct stat st;
    int fd = open_nohang(dirfd, name, &st);
    if (fd < 0)
        return dsv4_errf(err, fd, "file '%s': %s", q(&qf, path), strerror(-fd));
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return dsv4_errf(err, -EINVAL, "file '%s': not a regular file", q(&qf, path));
    }
    *fd_out = fd;
    *size_out = (uint64_t)st.st_size;
    return 0;
}

/* What an index says: tensor name → shard number, and the shard names. */
struct index {
    dsv4_strmap *tensor_shard; /* name → shard number */
    dsv4_strmap *shard_names;  /* shard file name → shard number (insertion order) */
};

struct add_ctx {
    dsv4_checkpoint *c;
    uint32_t shard;
    const struct index *idx; /* NULL for a single file */
};

static int add_tensor(void *ctx, const struct dsv4_tensor *t, struct dsv4_err *err)
{
    struct add_ctx *a = ctx;
    dsv4_checkpoint *c = a->c;
    const char *path = c->shards[a->shard].path;
    struct qname qf, qt, qo;
    size_t len = strlen(t->name), i;

    if (a->idx) {
        uint64_t want;
        if (!dsv4_strmap_get(a->idx->tensor_shard, t->name, len, &want))
            return dsv4_errf(err, -EBADMSG,
                             "file '%s': tensor '%s': not listed in the index's weight_map",
                             q(&qf, path), q(&qt, t->name));
        if (want != a->shard)
            return dsv4_errf(err, -EBADMSG,
                             "file '%s': tensor '%s': the index places it in shard '%s'",
                             q(&qf, path), q(&qt, t->name),
                             q(&qo, dsv4_strmap_key(a->idx->shard_names, (size_t)want, NULL)));
    }
    if (!dsv4_strmap_insert(c->names, t->name, len, 0, &i)) {
        return dsv4_errf(err, -EBADMSG, "file '%s': tensor '%s': duplicate, also in '%s'",
                         q(&qf, path), q(&qt, t->name),
                         q(&qo, c->shards[c->tensors[i].shard].path));
    }
    if (c->n_tensors == c->cap_tensors) {
        c->cap_tensors = c->cap_tensors ? 2 * c->cap_tensors : 256;
        c->tensors = dsv4_xrealloc(c->tensors, c->cap_tensors * sizeof(*c->tensors));
    }
    struct dsv4_tensor *dst = &c->tensors[c->n_tensors++];
    *dst = *t;
    dst->name = dsv4_strmap_key(c->names, i, NULL);
    dst->shard = a->shard;
    return 0;
}

static int load_shard(dsv4_checkpoint *c, uint32_t s, const struct index *idx,
                      struct dsv4_err *err)
{
    struct shard *sh = &c->shards[s];
    struct qname qf;
    unsigned char lenbuf[8];
    if (sh->size < 8)
        return dsv4_errf(err, -EBADMSG,
                         "file '%s': truncated: %llu bytes, shorter than the 8-byte header length",
                         q(&qf, sh->path), (unsigned long long)sh->size);
    int64_t k = pread_full(sh->fd, lenbuf, 8, 0);
    if (k != 8)
        return dsv4_errf(err, k < 0 ? (int)k : -EIO, "file '%s': cannot read header length",
                         q(&qf, sh->path));
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | lenbuf[i];
    int r = check_header_len(hlen, sh->size, sh->path, err);
    if (r < 0)
        return r;
    char *hdr = dsv4_xmalloc((size_t)hlen);
    k = pread_full(sh->fd, hdr, hlen, 8);
    if (k < 0 || (uint64_t)k != hlen) {
        free(hdr);
        return dsv4_errf(err, k < 0 ? (int)k : -EIO, "file '%s': cannot read the header",
                         q(&qf, sh->path));
    }
    struct add_ctx a = { .c = c, .shard = s, .idx = idx };
    r = dsv4_safetensors_parse_header(hdr, (size_t)hlen, sh->size, sh->path, add_tensor, &a,
                                      err);
    free(hdr);
    return r < 0 ? r : 0;
}

static void add_shard(dsv4_checkpoint *c, char *path, int fd, uint64_t size)
{
    c->shards = dsv4_xrealloc(c->shards, (c->n_shards + 1) * sizeof(*c->shards));
    c->shards[c->n_shards++] = (struct shard){ .path = path, .fd = fd, .size = size };
}

static char *join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = dsv4_xmalloc(a + b + 2);
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* Shard names must name a file in the checkpoint directory itself. */
static bool shard_name_ok(const char *s)
{
    return s[0] != '\0' && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int parse_index(const char *text, size_t len, const char *path, struct index *idx,
                       struct dsv4_err *err)
{
    struct qname qf, qt, qs;
    int r = 0;
    const char *why;
    size_t bad = check_text(text, len, &why);
    if (bad != SIZE_MAX)
        return dsv4_errf(err, -EBADMSG, "index '%s': byte %zu: %s", q(&qf, path), bad, why);
    /* an object of a metadata object and a weight_map of name → file strings */
    struct dsv4_json_limits lim = { .max_nodes = len / 4 + 64, .max_depth = 3, .max_array = 16,
                                    .max_members = len / 4 + 64, .max_string = 1u << 20 };
    char what[600];
    snprintf(what, sizeof(what), "index '%s'", q(&qf, path));
    if ((r = dsv4_json_prescan(text, len, &lim, what, err)) < 0)
        return -EBADMSG;
    cJSON *root = parse_json(text, len);
    if (!root)
        return dsv4_errf(err, -EBADMSG, "index '%s': not valid JSON", q(&qf, path));
    const cJSON *wm = NULL, *meta = NULL;
    if (!cJSON_IsObject(root)) {
        r = dsv4_errf(err, -EBADMSG, "index '%s': root is not a JSON object", q(&qf, path));
        goto out;
    }
    for (const cJSON *it = root->child; it; it = it->next) {
        const cJSON **slot = strcmp(it->string, "weight_map") == 0 ? &wm
                           : strcmp(it->string, "metadata") == 0 ? &meta : NULL;
        if (!slot)
            continue; /* other top-level keys are not ours to judge */
        if (*slot) {
            r = dsv4_errf(err, -EBADMSG, "index '%s': duplicate key '%s'", q(&qf, path),
                          it->string);
            goto out;
        }
        *slot = it;
    }
    if (meta && !cJSON_IsObject(meta)) {
        r = dsv4_errf(err, -EBADMSG, "index '%s': metadata is not an object", q(&qf, path));
        goto out;
    }
    if (!wm) {
        r = dsv4_errf(err, -EBADMSG, "index '%s': no weight_map", q(&qf, path));
        goto out;
    }
    if (!cJSON_IsObject(wm)) {
        r = dsv4_errf(err, -EBADMSG, "index '%s': weight_map is not an object", q(&qf, path));
        goto out;
    }
    size_t count = 0;
    for (const cJSON *it = wm->child; it; it = it->next)
        count++;
    idx->tensor_shard = dsv4_strmap_new(count);
    idx->shard_names = dsv4_strmap_new(0);
    for (const cJSON *it = wm->child; it; it = it->next) {
        if (!cJSON_IsString(it) || !it->valuestring) {
            r = dsv4_errf(err, -EBADMSG, "index '%s': weight_map: tensor '%s': value is not a string",
                          q(&qf, path), q(&qt, it->string));
            goto out;
        }
        if (!shard_name_ok(it->valuestring)) {
            r = dsv4_errf(err, -EBADMSG,
                          "index '%s': weight_map: tensor '%s': shard '%s' is not a plain file "
                          "name in the checkpoint directory",
                          q(&qf, path), q(&qt, it->string), q(&qs, it->valuestring));
            goto out;
        }
        if (it->string[0] == '\0') {
            r = dsv4_errf(err, -EBADMSG, "index '%s': weight_map: empty tensor name", q(&qf, path));
            goto out;
        }
        size_t s;
        dsv4_strmap_insert(idx->shard_names, it->valuestring, strlen(it->valuestring),
                           0, &s);
        if (!dsv4_strmap_insert(idx->tensor_shard, it->string, strlen(it->string), s, NULL)) {
            r = dsv4_errf(err, -EBADMSG, "index '%s': weight_map: tensor '%s' listed twice",
                          q(&qf, path), q(&qt, it->string));
            goto out;
        }
    }
    if (dsv4_strmap_size(idx->shard_names) == 0)
        r = dsv4_errf(err, -EBADMSG, "index '%s': weight_map is empty", q(&qf, path));
    else if (dsv4_strmap_size(idx->shard_names) > UINT32_MAX)
        r = dsv4_errf(err, -EBADMSG, "index '%s': too many shards", q(&qf, path));
out:
    cJSON_Delete(root);
    return r;
}

static int open_indexed(dsv4_checkpoint *c, const char *dir, int dirfd, int ifd,
                        uint64_t isize, struct dsv4_err *err)
{
    struct qname qf, qt, qs;
    struct index idx = { 0 };
    char *ipath = join(dir, INDEX_NAME);
    int r = -EIO;
    char *text = read_whole(ifd, isize, MAX_INDEX_LEN, ipath, &r, err);
    if (!text)
        goto out;
    r = parse_index(text, (size_t)isize, ipath, &idx, err);
    free(text);
    if (r < 0)
        goto out;

    uint32_t ns = (uint32_t)dsv4_strmap_size(idx.shard_names);
    for (uint32_t s = 0; s < ns; s++) {
        const char *name = dsv4_strmap_key(idx.shard_names, s, NULL);
        char *path = join(dir, name);
        int fd;
        uint64_t size;
        if ((r = open_regular(dirfd, name, path, &fd, &size, err)) < 0) {
            /* Name one tensor the index expects there. */
            const char *t = "?";
            for (size_t i = 0; i < dsv4_strmap_size(idx.tensor_shard); i++)
                if (dsv4_strmap_value(idx.tensor_shard, i) == s) {
                    t = dsv4_strmap_key(idx.tensor_shard, i, NULL);
                    break;
                }
            char msg[sizeof(err->msg)];
            snprintf(msg, sizeof(msg), "%s", err ? err->msg : "");
            r = dsv4_errf(err, r, "index '%s': shard '%s' (holding tensor '%s', ...): %s",
                          q(&qf, ipath), q(&qs, name), q(&qt, t), msg);
            free(path);
            goto out;
        }
        add_shard(c, path, fd, size);
    }
    for (uint32_t s = 0; s < ns; s++)
        if ((r = load_shard(c, s, &idx, err)) < 0)
            goto out;
    /* Every tensor the index lists must have been found in its shard. */
    if (c->n_tensors != dsv4_strmap_size(idx.tensor_shard)) {
        for (size_t i = 0; i < dsv4_strmap_size(idx.tensor_shard); i++) {
            size_t len;
            const char *t = dsv4_strmap_key(idx.tensor_shard, i, &len);
            if (dsv4_strmap_index(c->names, t, len) == SIZE_MAX) {
                uint64_t s = dsv4_strmap_value(idx.tensor_shard, i);
                r = dsv4_errf(err, -EBADMSG,
                              "file '%s': tensor '%s': listed by the index but missing from "
                              "this shard",
                              q(&qf, c->shards[s].path), q(&qt, t));
                goto out;
            }
        }
    }
    r = 0;
out:
    dsv4_strmap_free(idx.tensor_shard);
    dsv4_strmap_free(idx.shard_names);
    free(ipath);
    return r;
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* No index: the directory must hold exactly one *.safetensors. */
static int open_single_in_dir(dsv4_checkpoint *c, const char *dir, int dirfd,
                              struct dsv4_err *err)
{
    struct qname qf, qa, qb;
    int dfd = dup(dirfd);
    if (dfd < 0)
        return dsv4_errf(err, -errno, "directory '%s': %s", q(&qf, dir), strerror(errno));
    DIR *d = fdopendir(dfd);
    if (!d) {
        int r = -errno;
        close(dfd);
        return dsv4_errf(err, r, "directory '%s': %s", q(&qf, dir), strerror(-r));
    }
    char *found = NULL;
    int r = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!has_suffix(de->d_name, ".safetensors") || de->d_name[0] == '.')
            continue;
        if (found) {
            r = dsv4_errf(err, -EINVAL,
                          "directory '%s': no %s and several .safetensors files ('%s', '%s')",
                          q(&qf, dir), INDEX_NAME, q(&qa, found), q(&qb, de->d_name));
            break;
        }
        found = dsv4_xstrdup(de->d_name);
    }
    closedir(d);
    if (r == 0 && !found)
        r = dsv4_errf(err, -ENOENT, "directory '%s': neither %s nor a .safetensors file",
                      q(&qf, dir), INDEX_NAME);
    if (r == 0) {
        char *path = join(dir, found);
        int fd;
        uint64_t size;
        r = open_regular(dirfd, found, path, &fd, &size, err);
        if (r == 0)
            add_shard(c, path, fd, size);
        else
            free(path);
    }
    free(found);
    if (r == 0)
        r = load_shard(c, 0, NULL, err);
    return r;
}

int dsv4_checkpoint_open(const char *path, dsv4_checkpoint **ret, struct dsv4_err *err)
{
    struct qname qf;
    dsv4_checkpoint *c = dsv4_xcalloc(1, sizeof(*c));
    c->names = dsv4_strmap_new(0);
    int r = 0;
    struct stat st;
    int fd = open_nohang(AT_FDCWD, path, &st);
    if (fd < 0) {
        r = dsv4_errf(err, fd, "checkpoint '%s': %s", q(&qf, path), strerror(-fd));
        goto fail;
    }
    if (S_ISREG(st.st_mode)) {
        add_shard(c, dsv4_xstrdup(path), fd, (uint64_t)st.st_size);
        r = load_shard(c, 0, NULL, err);
    } else if (S_ISDIR(st.st_mode)) {
        char *ipath = join(path, INDEX_NAME);
        int ifd;
        uint64_t isize;
        r = open_regular(fd, INDEX_NAME, ipath, &ifd, &isize, err);
        free(ipath);
        if (r == 0) {
            r = open_indexed(c, path, fd, ifd, isize, err);
            close(ifd);
        } else if (r == -ENOENT) {
            r = open_single_in_dir(c, path, fd, err);
        }
        close(fd);
    } else {
        close(fd);
        r = dsv4_errf(err, -EINVAL, "checkpoint '%s': neither a file nor a directory",
                      q(&qf, path));
    }
    if (r < 0)
        goto fail;
    *ret = c;
    return 0;
fail:
    dsv4_checkpoint_free(c);
    return r;
}

dsv4_checkpoint *dsv4_checkpoint_free(dsv4_checkpoint *c)
{
    if (!c)
        return NULL;
    for (uint32_t s = 0; s < c->n_shards; s++) {
        if (c->shards[s].fd >= 0)
            close(c->shards[s].fd);
        free(c->shards[s].path);
    }
    free(c->shards);
    free(c->tensors);
    dsv4_strmap_free(c->names);
    free(c);
    return NULL;
}

size_t dsv4_checkpoint_n_tensors(const dsv4_checkpoint *c)
{
    return c->n_tensors;
}

const struct dsv4_tensor *dsv4_checkpoint_tensor(const dsv4_checkpoint *c, size_t i)
{
    return i < c->n_tensors ? &c->tensors[i] : NULL;
}

const struct dsv4_tensor *dsv4_checkpoint_find(const dsv4_checkpoint *c, const char *name)
{
    size_t i = dsv4_strmap_index(c->names, name, strlen(name));
    return i == SIZE_MAX ? NULL : &c->tensors[i];
}

uint32_t dsv4_checkpoint_n_shards(const dsv4_checkpoint *c)
{
    return c->n_shards;
}

const char *dsv4_checkpoint_shard_path(const dsv4_checkpoint *c, uint32_t shard)
{
    return shard < c->n_shards ? c->shards[shard].path : NULL;
}

int dsv4_checkpoint_shard_fd(const dsv4_checkpoint *c, uint32_t shard)
{
    return shard < c->n_shards ? c->shards[shard].fd : -EBADF;
}

void dsv4_checkpoint_forget(const dsv4_checkpoint *c, const struct dsv4_tensor *t)
{
    if (t->shard >= c->n_shards)
        return;
    /* no readahead from here on either: it would cache the neighbouring tensors (other
     * experts) and leave them behind (measured: 40 % of the experts' bytes stayed) */
    int fd = c->shards[t->shard].fd;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    (void)posix_fadvise(fd, (off_t)t->offset, (off_t)t->nbytes, POSIX_FADV_DONTNEED);
}

int dsv4_checkpoint_read(const dsv4_checkpoint *c, const struct dsv4_tensor *t,
                         uint64_t offset, void *buf, uint64_t n, struct dsv4_err *err)
{
    struct qname qf, qt;
    if (t->shard >= c->n_shards)
        return dsv4_errf(err, -EINVAL, "tensor '%s': no shard %u", q(&qt, t->name), t->shard);
    const struct shard *sh = &c->shards[t->shard];
    uint64_t end;
    if (!dsv4_add_u64(offset, n, &end) || end > t->nbytes)
        return dsv4_errf(err, -EINVAL,
                         "file '%s': tensor '%s': read of %llu bytes at %llu past its %llu bytes",
                         q(&qf, sh->path), q(&qt, t->name), (unsigned long long)n,
                         (unsigned long long)offset, (unsigned long long)t->nbytes);
    int64_t k = pread_full(sh->fd, buf, n, t->offset + offset);
    if (k < 0)
        return dsv4_errf(err, (int)k, "file '%s': tensor '%s': read failed: %s",
                         q(&qf, sh->path), q(&qt, t->name), strerror((int)-k));
    if ((uint64_t)k != n)
        return dsv4_errf(err, -EIO,
                         "file '%s': tensor '%s': short read (%llu of %llu bytes; file truncated "
                         "since open?)",
                         q(&qf, sh->path), q(&qt, t->name), (unsigned long long)k,
                         (unsigned long long)n);
    return 0;
}
