/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for sharded checkpoints: each input becomes
 * model.safetensors.index.json in a scratch directory holding two valid
 * shards (a.safetensors: "x"; b.safetensors: "y", "z"), which is then
 * opened. Only an index that maps each shard it names completely and
 * exactly may be accepted; anything else must fail cleanly.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safetensors.h"
#include "util.h"

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "invariant failed: %s\n", #x); abort(); } } while (0)

static char dir[64];
static char index_path[128];

static void write_file(const char *name, const void *data, size_t n)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, data, n) == (ssize_t)n);
    close(fd);
}

static void write_shard(const char *name, const char *header, size_t payload)
{
    size_t hl = strlen(header);
    uint8_t *buf = dsv4_xcalloc(1, 8 + hl + payload);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    write_file(name, buf, 8 + hl + payload);
    free(buf);
}

static void cleanup(void)
{
    static const char *const names[] = { "a.safetensors", "b.safetensors",
                                         "model.safetensors.index.json" };
    char path[128];
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(names); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    /* tmpfs if there is one: file writes per input are the cost here. */
    snprintf(dir, sizeof(dir), "/dev/shm/dsv4-fuzz-index-XXXXXX");
    if (!mkdtemp(dir)) {
        snprintf(dir, sizeof(dir), "/tmp/dsv4-fuzz-index-XXXXXX");
        CHECK(mkdtemp(dir));
    }
    atexit(cleanup);
    snprintf(index_path, sizeof(index_path), "%s/model.safetensors.index.json", dir);
    write_shard("a.safetensors", "{\"x\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
    write_shard("b.safetensors",
                "{\"y\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"z\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[4,4]}}",
                4);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 16))
        return 0;
    write_file("model.safetensors.index.json", data, size);
    struct dsv4_err err;
    dsv4_checkpoint *c = NULL;
    int r = dsv4_checkpoint_open(dir, &c, &err);
    if (getenv("DSV4_FUZZ_VERBOSE")) /* to see what a corpus exercises */
        fprintf(stderr, "  open: %s\n", r < 0 ? err.msg : "accepted");
    if (r < 0) {
        CHECK(c == NULL && err.msg[0] && !strchr(err.msg, '\n'));
        return 0;
    }
    /* An index may use one shard and ignore the other file; whichever
     * shards it uses must come back complete and in place. */
    uint32_t ns = dsv4_checkpoint_n_shards(c);
    CHECK(ns == 1 || ns == 2);
    int32_t sa = -1, sb = -1;
    for (uint32_t s = 0; s < ns; s++) {
        const char *p = dsv4_checkpoint_shard_path(c, s);
        size_t n = strlen(p);
        CHECK(n > 14 && p[n - 14] == '/' && strcmp(p + n - 12, ".safetensors") == 0);
        int32_t *slot = p[n - 13] == 'a' ? &sa : p[n - 13] == 'b' ? &sb : NULL;
        CHECK(slot && *slot < 0);
        *slot = (int32_t)s;
    }
    CHECK(dsv4_checkpoint_n_tensors(c) == (sa >= 0 ? 1u : 0u) + (sb >= 0 ? 2u : 0u));
    static const struct {
        const char *name;
        char shard;
    } want[] = { { "x", 'a' }, { "y", 'b' }, { "z", 'b' } };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(want); i++) {
        const struct dsv4_tensor *t = dsv4_checkpoint_find(c, want[i].name);
        int32_t s = want[i].shard == 'a' ? sa : sb;
        CHECK(s < 0 ? t == NULL : t != NULL && t->shard == (uint32_t)s);
    }
    dsv4_checkpoint_free(c);
    return 0;
}
