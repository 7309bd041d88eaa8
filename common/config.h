/* SPDX-License-Identifier: MIT */
/*
 * DeepSeek-V4 model configuration: config.json (HF field names; the official
 * inference/config.json is read too when present) parsed into one immutable
 * struct with the derived constants. Everything about a model's shape comes
 * from here: there are no fixed Flash constants anywhere in the engine.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define DSV4_CONFIG_MAX_LAYERS 1024
#define DSV4_CONFIG_MAX_HC_MULT 8     /* the engine's mHC mix is sized for (2 + 8) * 8 */

enum dsv4_attn_kind {
    DSV4_ATTN_WINDOW,  /* compress ratio 0: sliding window only */
    DSV4_ATTN_CSA,     /* ratio 4: overlapping compressor + lightning indexer */
    DSV4_ATTN_HCA,     /* any other ratio ≥ 2: plain compressor, all rows attended */
};

struct dsv4_config {
    /* --- fields as read (HF names in comments where they differ) --- */
    int vocab_size;
    int dim;                    /* hidden_size */
    int n_layers;               /* num_hidden_layers (MTP/drafter excluded) */
    int n_heads;                /* num_attention_heads */
    int head_dim;
    int rope_head_dim;          /* qk_rope_head_dim */
    int q_lora_rank;
    int o_groups;
    int o_lora_rank;
    int window;                 /* sliding_window */
    int n_compress_ratios;      /* length of compress_ratios (n_layers + n_mtp blocks) */
    int compress_ratios[DSV4_CONFIG_MAX_LAYERS];
    double rope_theta;
    double compress_rope_theta;
    double rope_factor;         /* rope_scaling.factor */
    int original_seq_len;       /* rope_scaling.original_max_position_embeddings */
    double beta_fast, beta_slow;
    int64_t max_position_embeddings;
    int index_n_heads;
    int index_head_dim;
    int index_topk;
    int hc_mult;
    int hc_sinkhorn_iters;
    double hc_eps;
    double norm_eps;            /* rms_norm_eps */
    int n_routed_experts;
    int n_shared_experts;
    int n_activated_experts;    /* num_experts_per_tok */
    int moe_inter_dim;          /* moe_intermediate_size */
    double route_scale;         /* routed_scaling_factor */
    int n_hash_layers;          /* num_hash_layers */
    double swiglu_limit;
    int n_mtp_layers;           /* legacy MTP blocks (num_nextn_predict_layers) */
    int weight_block;           /* quantization_config.weight_block_size (square), 128 */
    int bos_token_id, eos_token_id;

    /* DSpark drafter (0 stages when the config declares none). */
    int dspark_stages;          /* inference n_mtp_layers when dspark_* keys exist */
    int dspark_block_size;
    int dspark_markov_rank;
    int dspark_noise_token_id;
    int dspark_n_target_layers;
    int dspark_target_layer_ids[16];

    /* --- derived --- */
    int n_blocks;               /* n_layers + n_mtp_layers + dspark_stages = n_compress_ratios */
    enum dsv4_attn_kind layer_kind[DSV4_CONFIG_MAX_LAYERS]; /* per entry of compress_ratios */
    int nope_dim;               /* head_dim - rope_head_dim */
    int hc_dim;                 /* hc_mult * dim */
    int hc_mix;                 /* (2 + hc_mult) * hc_mult */
    int heads_per_group;        /* n_heads / o_groups */
    int wo_a_in;                /* heads_per_group * head_dim */
    double attn_scale;          /* head_dim^-0.5 */
    double index_scale;         /* index_head_dim^-0.5 * index_n_heads^-0.5 */
};

/* `model_dir` holds config.json (and optionally inference/config.json).
 * Precedence: a field may come from either file; when both carry it the
 * values must agree (else an error naming both). Exception: with dspark_*
 * keys, inference n_mtp_layers counts drafter stages and HF's
 * num_nextn_predict_layers is ignored (dspark spec §10). */
int dsv4_config_load(const char *model_dir, struct dsv4_config *ret, struct dsv4_err *err);
/* Parse one config.json text; `file_name` is used in error messages. */
int dsv4_config_parse(const char *json, size_t len, const char *file_name,
                      struct dsv4_config *ret, struct dsv4_err *err);

/* Both texts at once; `inf_json` may be NULL (no inference/config.json). */
int dsv4_config_parse_pair(const char *json, size_t len, const char *file_name,
                           const char *inf_json, size_t inf_len, const char *inf_file_name,
                           struct dsv4_config *ret, struct dsv4_err *err);

static inline bool dsv4_config_layer_hashed(const struct dsv4_config *c, int layer)
{
    return layer < c->n_hash_layers;
}
