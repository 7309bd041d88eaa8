/* SPDX-License-Identifier: MIT */
/*
 * Checkpoint reader: one safetensors file, or a sharded checkpoint described
 * by model.safetensors.index.json. Opening parses every shard header into a
 * name → tensor table and validates it (dtype, shape, offsets, overlaps,
 * payload sizes, shard presence) so later code can trust every entry.
 * Payloads are never mapped: they are read with pread (dsv4_checkpoint_read)
 * or, for the expert fetcher, with O_DIRECT from the shard's fd and offset.
 */
#pragma once

#include <stdint.h>
#include <stddef.h>

#include "err.h"

enum dsv4_dtype {
    DSV4_DTYPE_BF16,
    DSV4_DTYPE_F16,
    DSV4_DTYPE_F32,
    DSV4_DTYPE_F8_E4M3,
    DSV4_DTYPE_F8_E8M0,
    DSV4_DTYPE_I8,
    DSV4_DTYPE_U8,
    DSV4_DTYPE_I32,
    DSV4_DTYPE_I64,
    _DSV4_DTYPE_MAX,
    _DSV4_DTYPE_INVALID = -1,
};

#define DSV4_TENSOR_MAX_RANK 8

/* "BF16", "F8_E4M3", ... as written in safetensors headers. */
const char *dsv4_dtype_name(enum dsv4_dtype t);
/* Returns _DSV4_DTYPE_INVALID for an unknown name. */
enum dsv4_dtype dsv4_dtype_from_name(const char *name);
size_t dsv4_dtype_size(enum dsv4_dtype t);

struct dsv4_tensor {
    const char *name;        /* owned by the checkpoint */
    enum dsv4_dtype dtype;
    uint32_t rank;
    uint64_t shape[DSV4_TENSOR_MAX_RANK];
    uint64_t n_elements;
    uint32_t shard;          /* index into the checkpoint's shard table */
    uint64_t offset;         /* absolute byte offset of the payload in the shard file */
    uint64_t nbytes;
};

typedef struct dsv4_checkpoint dsv4_checkpoint;

/* `path` is a directory (with model.safetensors.index.json, or exactly one
 * *.safetensors file) or a single .safetensors file. With an index, each
 * shard is opened once and the index and the shard headers must agree
 * exactly: a tensor the index lists must be in the shard it names, and a
 * shard tensor the index does not list is an error too (a stale or foreign
 * shard). Within a file payload ranges must be disjoint; gaps between them
 * are allowed (alignment padding). Errors are -EBADMSG for malformed
 * content, or the errno of a failed open/read. */
int dsv4_checkpoint_open(const char *path, dsv4_checkpoint **ret, struct dsv4_err *err);
dsv4_checkpoint *dsv4_checkpoint_free(dsv4_checkpoint *c);

size_t dsv4_checkpoint_n_tensors(const dsv4_checkpoint *c);
const struct dsv4_tensor *dsv4_checkpoint_tensor(const dsv4_checkpoint *c, size_t i);
/* NULL if absent. */
const struct dsv4_tensor *dsv4_checkpoint_find(const dsv4_checkpoint *c, const char *name);

uint32_t dsv4_checkpoint_n_shards(const dsv4_checkpoint *c);
const char *dsv4_checkpoint_shard_path(const dsv4_checkpoint *c, uint32_t shard);
/* The shard's O_RDONLY|O_CLOEXEC descriptor, owned by the checkpoint. */
int dsv4_checkpoint_shard_fd(const dsv4_checkpoint *c, uint32_t shard);

/* Read `n` bytes starting `offset` bytes into tensor `t`'s payload (pread
 * loop; a short file is an error naming the shard and tensor). */
int dsv4_checkpoint_read(const dsv4_checkpoint *c, const struct dsv4_tensor *t,
                         uint64_t offset, void *buf, uint64_t n, struct dsv4_err *err);
/* Ask the kernel to drop tensor `t`'s payload from the page cache (advice only): a reader
 * that keeps its own bounded copy (the in-process expert cache) so does not also hold a
 * shadow copy outside its budget. */
void dsv4_checkpoint_forget(const dsv4_checkpoint *c, const struct dsv4_tensor *t);

/* Parse and validate one safetensors header (the JSON text after the 8-byte
 * length) against a file of `file_size` bytes whose header is `header_len`
 * bytes long. Used by dsv4_checkpoint_open and by the fuzzer. On success the
 * tensors are appended through `add` (called once per tensor, name not
 * owned past the call); returns the number of tensors or a negative errno. */
typedef int (*dsv4_safetensors_add_fn)(void *ctx, const struct dsv4_tensor *t, struct dsv4_err *err);
int dsv4_safetensors_parse_header(const char *json, size_t header_len, uint64_t file_size,
                                  const char *file_name, dsv4_safetensors_add_fn add,
                                  void *ctx, struct dsv4_err *err);
