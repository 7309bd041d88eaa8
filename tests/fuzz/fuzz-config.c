/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the model config and the tensor inventory. The input is
 * config.json text, optionally followed by a NUL byte and inference/
 * config.json text; it is parsed as the pair and (the part before any NUL)
 * alone. An accepted config must satisfy the invariants the engine relies
 * on; when its inventory is small enough to build quickly, the inventory is
 * built and checked too (unique names, consistent byte counts). A violation
 * aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "inventory.h"
#include "util.h"

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "invariant failed: %s\n", #x); abort(); } } while (0)

static void check_config(const struct dsv4_config *c)
{
    CHECK(c->n_layers >= 1 && c->n_blocks == c->n_compress_ratios);
    CHECK(c->n_blocks == c->n_layers + c->n_mtp_layers + c->dspark_stages);
    CHECK(c->n_blocks <= DSV4_CONFIG_MAX_LAYERS);
    CHECK(!(c->n_mtp_layers && c->dspark_stages));
    CHECK(c->n_heads % c->o_groups == 0 && c->heads_per_group * c->o_groups == c->n_heads);
    CHECK(c->nope_dim > 0 && c->nope_dim % 64 == 0 && c->rope_head_dim % 2 == 0);
    CHECK(c->dim % 128 == 0 && c->moe_inter_dim % 128 == 0 && c->q_lora_rank % 128 == 0);
    CHECK(c->index_head_dim >= 32 && (c->index_head_dim & (c->index_head_dim - 1)) == 0);
    CHECK(c->n_activated_experts <= c->n_routed_experts && c->n_hash_layers <= c->n_layers);
    CHECK(c->bos_token_id < c->vocab_size && c->eos_token_id < c->vocab_size);
    CHECK(c->weight_block >= 1 && (c->weight_block & (c->weight_block - 1)) == 0);
    CHECK(c->norm_eps > 0 && c->hc_eps > 0 && c->rope_theta > 0 && c->route_scale > 0);
    CHECK(c->max_position_embeddings >= 1);
    for (int i = 0; i < c->n_blocks; i++) {
        int r = c->compress_ratios[i];
        CHECK(r == 0 || r >= 2);
        CHECK(c->layer_kind[i] == (r == 0 ? DSV4_ATTN_WINDOW : r == 4 ? DSV4_ATTN_CSA
                                                                      : DSV4_ATTN_HCA));
    }
    for (int s = 0; s < c->dspark_stages; s++)
        CHECK(c->compress_ratios[c->n_layers + s] == 0);
    for (int i = 0; i < c->dspark_n_target_layers; i++)
        CHECK(c->dspark_target_layer_ids[i] < c->n_layers);
}

static void check_inventory(const struct dsv4_config *c)
{
    /* Bounded work per input: skip configs with big inventories. */
    if ((int64_t)c->n_blocks * c->n_routed_experts > 4096)
        return;
    struct dsv4_inventory inv;
    dsv4_inventory_build(c, &inv);
    uint64_t total = 0;
    size_t n_dtype = 0;
    for (size_t i = 0; i < inv.n; i++) {
        const struct dsv4_inv_entry *e = &inv.entries[i];
        uint64_t n = e->shape[0] * (e->rank > 1 ? e->shape[1] : 1);
        CHECK(e->rank >= 1 && e->rank <= 2 && n > 0);
        CHECK(e->nbytes == n * dsv4_dtype_size(e->dtype));
        CHECK(dsv4_inventory_find(&inv, e->name) == e);
        if (i)
            CHECK(strcmp(inv.entries[inv.by_name[i - 1]].name,
                         inv.entries[inv.by_name[i]].name) < 0);
        total += e->nbytes;
    }
    for (int t = 0; t < _DSV4_DTYPE_MAX; t++)
        n_dtype += inv.n_by_dtype[t];
    CHECK(n_dtype == inv.n && total == inv.total_bytes);
    CHECK(inv.expert_bytes * (uint64_t)c->n_routed_experts * (uint64_t)c->n_blocks ==
          inv.total_bytes - inv.dense_bytes);
    dsv4_inventory_free(&inv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    const char *nul = memchr(data, '\0', size);
    size_t hf_len = nul ? (size_t)(nul - text) : size;
    struct dsv4_config *c = dsv4_xmalloc(sizeof(*c));
    struct dsv4_err err;

    if (dsv4_config_parse(text, hf_len, "config.json", c, &err) == 0) {
        check_config(c);
        check_inventory(c);
    } else {
        CHECK(err.msg[0] != '\0');
    }
    if (nul && dsv4_config_parse_pair(text, hf_len, "config.json", nul + 1, size - hf_len - 1,
                                      "inference/config.json", c, &err) == 0) {
        check_config(c);
        check_inventory(c);
    }
    free(c);
    return 0;
}
