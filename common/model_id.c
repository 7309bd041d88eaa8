/* SPDX-License-Identifier: MIT */
/* The model identity (model_id.h). */
#include "model_id.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "util.h"

#define WHOLE_MAX (16u << 20)
#define SAMPLES 16
#define SAMPLE 4096

static void put_u64(struct dsv4_sha256 *h, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    dsv4_sha256_update(h, b, 8);
}

/* A file's bytes (length-prefixed; absent: length 2^64-1) into the hash. */
static int put_file(struct dsv4_sha256 *h, const char *path, bool optional, struct dsv4_err *err)
{
    char *buf;
    size_t n;
    int rc = dsv4_read_file(path, 64u << 20, &buf, &n, err);
    if (rc == -ENOENT && optional) {
        put_u64(h, UINT64_MAX);
        return 0;
    }
    if (rc < 0)
        return rc;
    put_u64(h, n);
    dsv4_sha256_update(h, buf, n);
    free(buf);
    return 0;
}

static int put_shard(struct dsv4_sha256 *h, const dsv4_checkpoint *ck, uint32_t i,
                     struct dsv4_err *err)
{
    int fd = dsv4_checkpoint_shard_fd(ck, i);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return dsv4_errf(err, -errno, "model id: %s: %s", dsv4_checkpoint_shard_path(ck, i),
                         strerror(errno));
    uint64_t size = (uint64_t)st.st_size;
    put_u64(h, size);
    uint8_t *buf = dsv4_xmalloc(SAMPLE);
    uint64_t step = size <= WHOLE_MAX ? SAMPLE : (size - SAMPLE) / (SAMPLES - 1);
    int rc = 0;
    for (uint64_t off = 0; off < size && rc == 0; off += step) {
        size_t want = size - off < SAMPLE ? (size_t)(size - off) : SAMPLE;
        ssize_t k = pread(fd, buf, want, (off_t)off);
        if (k != (ssize_t)want)
            rc = dsv4_errf(err, k < 0 ? -errno : -EIO, "model id: %s: short read",
                           dsv4_checkpoint_shard_path(ck, i));
        else
            dsv4_sha256_update(h, buf, want);
    }
    free(buf);
    return rc;
}

int dsv4_model_id(const char *model_dir, const dsv4_checkpoint *ck, uint8_t id[DSV4_SHA256_LEN],
                  struct dsv4_err *err)
{
    dsv4_checkpoint *own = NULL;
    int rc = 0;
    if (!ck) {
        if ((rc = dsv4_checkpoint_open(model_dir, &own, err)) < 0)
            return rc;
        ck = own;
    }
    struct dsv4_sha256 h;
    dsv4_sha256_init(&h);
    static const char tag[] = "dsv4-model-id";
    dsv4_sha256_update(&h, tag, sizeof(tag));
    put_u64(&h, DSV4_ENGINE_STATE_FORMAT);
    char path[4200];
    snprintf(path, sizeof(path), "%s/config.json", model_dir);
    rc = put_file(&h, path, false, err);
    snprintf(path, sizeof(path), "%s/inference/config.json", model_dir);
    if (rc == 0)
        rc = put_file(&h, path, true, err);
    size_t nt = dsv4_checkpoint_n_tensors(ck);
    put_u64(&h, nt);
    for (size_t i = 0; i < nt && rc == 0; i++) {
        const struct dsv4_tensor *t = dsv4_checkpoint_tensor(ck, i);
        dsv4_sha256_update(&h, t->name, strlen(t->name) + 1);
        put_u64(&h, (uint64_t)t->dtype);
        put_u64(&h, t->rank);
        for (uint32_t k = 0; k < t->rank; k++)
            put_u64(&h, t->shape[k]);
        put_u64(&h, t->shard);
        put_u64(&h, t->offset);
        put_u64(&h, t->nbytes);
    }
    uint32_t ns = dsv4_checkpoint_n_shards(ck);
    put_u64(&h, ns);
    for (uint32_t i = 0; i < ns && rc == 0; i++)
        rc = put_shard(&h, ck, i, err);
    dsv4_checkpoint_free(own);
    if (rc == 0)
        dsv4_sha256_final(&h, id);
    return rc;
}
