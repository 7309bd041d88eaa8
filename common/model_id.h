/* SPDX-License-Identifier: MIT */
/*
 * The identity of a model as the engine computes it, for anything cached across processes
 * (the prefix cache's directory and file headers): SHA-256 over the engine's state format
 * version, config.json (and inference/config.json), the checkpoint's tensor table (name,
 * dtype, shape, shard, offset) and each shard's size and content (whole below 16 MiB, else 16
 * evenly spaced 4 KiB samples). Two checkpoints with one config but other weights (the tiny
 * fixtures) get different ids; the same files in another directory get the same one.
 */
#pragma once

#include <stdint.h>

#include "err.h"
#include "safetensors.h"
#include "sha256.h"

/* Bump when the session state's layout or the numerics of any stored value change: every
 * cached state of an older engine becomes a foreign model's. */
#define DSV4_ENGINE_STATE_FORMAT 2

/* id of the model in `model_dir` whose checkpoint is open as `ck` (NULL: opened here). */
int dsv4_model_id(const char *model_dir, const dsv4_checkpoint *ck, uint8_t id[DSV4_SHA256_LEN],
                  struct dsv4_err *err);
