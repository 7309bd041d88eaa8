/* SPDX-License-Identifier: MIT */
/*
 * The tensor inventory: every tensor a DeepSeek-V4 checkpoint must hold,
 * with its dtype and shape, derived from the config alone (target spec
 * §3.2/§3.3, the legacy MTP block mtp.0 when the config declares one, the
 * DSpark drafter stages mtp.0..S-1 of dspark spec §10 when dspark_* keys are
 * present). The engine walks it to bind weights by block and role instead of
 * building names by hand; `dsv4ctl inspect` checks a checkpoint against it.
 *
 * Storage formats: FP8 dense weights are F8_E4M3 [out, in] with an F8_E8M0
 * `.scale` [ceil(out/B), ceil(in/B)], B = weight_block_size; FP4 routed
 * experts are I8 [out, in/2] (two E2M1 codes per byte) with an F8_E8M0
 * `.scale` [out, in/32].
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "safetensors.h"

#define DSV4_INV_NAME_MAX 80

enum dsv4_inv_role {
    DSV4_INV_DENSE,         /* resident weight (everything but routed experts) */
    DSV4_INV_DENSE_SCALE,   /* E8M0 block scale of an FP8 dense weight */
    DSV4_INV_EXPERT,        /* routed expert FP4 weight (streamed from NVMe) */
    DSV4_INV_EXPERT_SCALE,  /* its per-32 E8M0 scale (streamed with it) */
};

struct dsv4_inv_entry {
    char name[DSV4_INV_NAME_MAX];
    enum dsv4_dtype dtype;
    uint32_t rank;
    uint64_t shape[2];
    uint64_t nbytes;
    enum dsv4_inv_role role;
    int block;              /* -1: top level; 0..n_blocks-1: layers.L / mtp.(L-n_layers) */
    int expert;             /* routed expert id, else -1 */
    int proj;               /* routed expert projection 1, 2, 3 (w1/w2/w3), else 0 */
};

struct dsv4_inventory {
    struct dsv4_inv_entry *entries;   /* in checkpoint order: embed, layers, head, mtp */
    size_t n;
    size_t *by_name;                  /* indices sorted by name, for lookups */
    /* Totals. */
    size_t n_by_dtype[_DSV4_DTYPE_MAX];
    uint64_t total_bytes;
    uint64_t dense_bytes;             /* DENSE + DENSE_SCALE */
    uint64_t expert_bytes;            /* one routed expert: w1, w2, w3 and their scales */
};

/* Build the inventory of a validated config. Cannot fail (the config
 * checks guarantee every shape); allocation failure is fatal. */
void dsv4_inventory_build(const struct dsv4_config *c, struct dsv4_inventory *ret);
void dsv4_inventory_free(struct dsv4_inventory *inv);

/* NULL if the inventory has no such name. */
const struct dsv4_inv_entry *dsv4_inventory_find(const struct dsv4_inventory *inv,
                                                 const char *name);

/* Compare a checkpoint with the inventory. Every problem (missing,
 * unexpected, wrong dtype, wrong shape) is passed to `report` as one line;
 * returns the number of problems. Lines come in a stable order: inventory
 * order for missing/wrong tensors, checkpoint order for unexpected ones. */
typedef void (*dsv4_inventory_report_fn)(void *ctx, const char *line);
size_t dsv4_inventory_check(const struct dsv4_inventory *inv, const dsv4_checkpoint *ck,
                            dsv4_inventory_report_fn report, void *ctx);

/* "[2048, 128]" into buf. */
const char *dsv4_inventory_shape_str(uint32_t rank, const uint64_t *shape, char *buf, size_t n);
