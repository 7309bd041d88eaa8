/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the checkpoint reader. Each input is used two ways:
 *  1. as header JSON for dsv4_safetensors_parse_header, against a file
 *     with 64 KiB of payload behind it;
 *  2. as a whole safetensors file (8-byte length, header, payload), put in
 *     a memfd and opened with dsv4_checkpoint_open; every tensor accepted
 *     is then read back and compared with the input bytes. An input that
 *     starts with '{' is also wrapped into such a file as its header.
 * Beyond "no crash, no leak", accepted tensors must satisfy the invariants
 * the rest of the engine relies on; a violation aborts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "safetensors.h"
#include "util.h"

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "invariant failed: %s\n", #x); abort(); } } while (0)

struct ctx {
    uint64_t file_size;
    uint64_t data_start;
    size_t n;
};

static void check_tensor(const struct dsv4_tensor *t, uint64_t file_size, uint64_t data_start)
{
    CHECK(t->name && t->name[0]);
    CHECK(t->dtype >= 0 && t->dtype < _DSV4_DTYPE_MAX);
    CHECK(t->rank <= DSV4_TENSOR_MAX_RANK);
    uint64_t n = 1;
    bool zero = false, overflow = false;
    for (uint32_t d = 0; d < t->rank; d++) {
        zero |= t->shape[d] == 0;
        overflow |= !dsv4_mul_u64(n, t->shape[d], &n);
    }
    CHECK(zero ? t->n_elements == 0 : !overflow && t->n_elements == n);
    CHECK(t->nbytes == t->n_elements * dsv4_dtype_size(t->dtype));
    CHECK(t->offset >= data_start);
    CHECK(t->offset <= file_size && t->nbytes <= file_size - t->offset);
}

static int add(void *vctx, const struct dsv4_tensor *t, struct dsv4_err *err)
{
    struct ctx *c = vctx;
    check_tensor(t, c->file_size, c->data_start);
    c->n++;
    return 0;
}

static void as_header(const uint8_t *data, size_t size)
{
    struct dsv4_err err;
    struct ctx c = { .file_size = 8 + (uint64_t)size + 65536, .data_start = 8 + (uint64_t)size };
    int r = dsv4_safetensors_parse_header((const char *)data, size, c.file_size, "fuzz", add, &c,
                                          &err);
    CHECK(r < 0 ? r == -EBADMSG && err.msg[0] && !strchr(err.msg, '\n') : (size_t)r == c.n);
}

static void as_file(const uint8_t *data, size_t size)
{
    /* Fails with EMFILE if the reader leaks descriptors. */
    int fd = memfd_create("fuzz-safetensors", MFD_CLOEXEC);
    CHECK(fd >= 0);
    size_t done = 0;
    while (done < size) {
        ssize_t k = write(fd, data + done, size - done);
        if (k <= 0) {
            close(fd);
            return;
        }
        done += (size_t)k;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    struct dsv4_err err;
    dsv4_checkpoint *ck = NULL;
    int r = dsv4_checkpoint_open(path, &ck, &err);
    if (getenv("DSV4_FUZZ_VERBOSE")) /* to see what a corpus exercises */
        fprintf(stderr, "  open: %s\n", r < 0 ? err.msg : "accepted");
    if (r == 0) {
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--)
            hlen = hlen << 8 | data[i];
        CHECK(dsv4_checkpoint_n_shards(ck) == 1);
        for (size_t i = 0; i < dsv4_checkpoint_n_tensors(ck); i++) {
            const struct dsv4_tensor *t = dsv4_checkpoint_tensor(ck, i);
            check_tensor(t, size, 8 + hlen);
            CHECK(dsv4_checkpoint_find(ck, t->name) == t);
            uint8_t *buf = dsv4_xmalloc(t->nbytes);
            CHECK(dsv4_checkpoint_read(ck, t, 0, buf, t->nbytes, &err) == 0);
            CHECK(t->nbytes == 0 || memcmp(buf, data + t->offset, t->nbytes) == 0);
            free(buf);
        }
        dsv4_checkpoint_free(ck);
    } else {
        CHECK(ck == NULL && err.msg[0] && !strchr(err.msg, '\n'));
    }
    close(fd);
}

/* An input that looks like header JSON is also tried as a whole file with
 * that header and 256 payload bytes, so mutated headers reach the
 * open/read path too and not just the length check. */
static void as_wrapped_file(const uint8_t *data, size_t size)
{
    size_t n = 8 + size + 256;
    uint8_t *f = dsv4_xmalloc(n);
    for (int i = 0; i < 8; i++)
        f[i] = (uint8_t)((uint64_t)size >> (8 * i));
    memcpy(f + 8, data, size);
    for (size_t i = 0; i < 256; i++)
        f[8 + size + i] = (uint8_t)(i * 37u + 11u);
    as_file(f, n);
    free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0; /* big inputs only slow the search down */
    as_header(data, size);
    as_file(data, size);
    if (size > 0 && data[0] == '{')
        as_wrapped_file(data, size);
    return 0;
}
