/* SPDX-License-Identifier: MIT */
/*
 * Engine open/close and resident weight loading. Every tensor is checked
 * against the shape the config implies (dtype, shape, scale grid) before it
 * is read with pread; FP8 and BF16 matrices stay in their on-disk bytes,
 * only small vectors (norm weights, HC parameters, sinks, ape, bias) become
 * fp32 and tid2eid becomes int32. Routed experts are not loaded here: they
 * come through the expert provider.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "util.h"

static int find(dsv4_engine *e, const char *name, enum dsv4_dtype dt, int rank, uint64_t d0,
                uint64_t d1, const struct dsv4_tensor **ret, struct dsv4_err *err)
{
    const struct dsv4_tensor *t = dsv4_checkpoint_find(e->ckpt, name);
    if (!t)
        return dsv4_errf(err, -ENOENT, "checkpoint: tensor %s is missing", name);
    if (t->dtype != dt)
        return dsv4_errf(err, -EINVAL, "checkpoint: tensor %s has dtype %s, expected %s", name,
                         dsv4_dtype_name(t->dtype), dsv4_dtype_name(dt));
    bool ok = (int)t->rank == rank && t->shape[0] == d0 && (rank == 1 || t->shape[1] == d1);
    if (!ok)
        return dsv4_errf(err, -EINVAL,
                         "checkpoint: tensor %s has shape [%llu%s%llu], expected [%llu, %llu]",
                         name, (unsigned long long)t->shape[0], t->rank > 1 ? ", " : "",
                         t->rank > 1 ? (unsigned long long)t->shape[1] : 0ULL,
                         (unsigned long long)d0, (unsigned long long)d1);
    *ret = t;
    return 0;
}

/* The tensor's bytes in a buffer the caller frees (converted, then dropped). */
static int read_tmp(dsv4_engine *e, const struct dsv4_tensor *t, void **ret, struct dsv4_err *err)
{
    void *buf = dsv4_xaligned_alloc(64, t->nbytes ? t->nbytes : 1);
    int rc = dsv4_checkpoint_read(e->ckpt, t, 0, buf, t->nbytes, err);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *ret = buf;
    return 0;
}

/* The tensor's bytes, resident for the engine's life (freed by dsv4_engine_free). */
static int read_all(dsv4_engine *e, const struct dsv4_tensor *t, void **ret, struct dsv4_err *err)
{
    int rc = read_tmp(e, t, ret, err);
    if (rc == 0)
        engine_track(e, *ret, t->nbytes);
    return rc;
}

/* A vector (or flattened matrix) of n values stored F32 or BF16, as fp32. */
static int load_f32(dsv4_engine *e, const char *name, uint64_t d0, uint64_t d1, float **ret,
                    struct dsv4_err *err)
{
    const struct dsv4_tensor *t = dsv4_checkpoint_find(e->ckpt, name);
    if (!t)
        return dsv4_errf(err, -ENOENT, "checkpoint: tensor %s is missing", name);
    enum dsv4_dtype dt = t->dtype == DSV4_DTYPE_BF16 ? DSV4_DTYPE_BF16 : DSV4_DTYPE_F32;
    int rc = find(e, name, dt, d1 ? 2 : 1, d0, d1, &t, err);
    if (rc < 0)
        return rc;
    void *raw;
    if (dt == DSV4_DTYPE_F32)
        return read_all(e, t, (void **)ret, err);
    if ((rc = read_tmp(e, t, &raw, err)) < 0)
        return rc;
    float *f = dsv4_xmalloc(t->n_elements * sizeof(float));
    engine_track(e, f, t->n_elements * sizeof(float));
    for (uint64_t i = 0; i < t->n_elements; i++)
        f[i] = dsv4_bf16_to_f32(((const uint16_t *)raw)[i]);
    free(raw);      /* only the fp32 copy stays resident */
    *ret = f;
    return 0;
}

static int load_fp8(dsv4_engine *e, const char *prefix, uint32_t rows, uint32_t cols,
                    struct dsv4_fp8_weight *w, struct dsv4_err *err)
{
    char name[256];
    const struct dsv4_tensor *t = NULL;
    uint32_t b = (uint32_t)e->cfg.weight_block;
    void *p;
    int rc;
    snprintf(name, sizeof(name), "%s.weight", prefix);
    if ((rc = find(e, name, DSV4_DTYPE_F8_E4M3, 2, rows, cols, &t, err)) < 0 ||
        (rc = read_all(e, t, &p, err)) < 0)
        return rc;
    w->w = p;
    snprintf(name, sizeof(name), "%s.scale", prefix);
    if ((rc = find(e, name, DSV4_DTYPE_F8_E8M0, 2, (rows + b - 1) / b, (cols + b - 1) / b, &t,
                   err)) < 0 ||
        (rc = read_all(e, t, &p, err)) < 0)
        return rc;
    w->scale = p;
    w->rows = rows;
    w->cols = cols;
    w->block = b;
    /* resident and read-only: screened once here, so the matvecs can skip the per-block
     * NaN screen (kernels.h; same bits) */
    w->nan_free = !dsv4_e4m3_has_nan(w->w, (size_t)rows * cols);
    return 0;
}

static int load_bf16(dsv4_engine *e, const char *name, uint32_t rows, uint32_t cols,
                     struct dsv4_bf16_weight *w, struct dsv4_err *err)
{
    const struct dsv4_tensor *t = NULL;
    void *p;
    int rc;
    if ((rc = find(e, name, DSV4_DTYPE_BF16, 2, rows, cols, &t, err)) < 0 ||
        (rc = read_all(e, t, &p, err)) < 0)
        return rc;
    w->w = p;
    w->rows = rows;
    w->cols = cols;
    return 0;
}

static int load_compressor(dsv4_engine *e, const char *prefix, int ratio, int c,
                           struct compressor_w *cw, struct dsv4_err *err)
{
    char name[256];
    int rc;
    cw->ratio = ratio;
    cw->coff = ratio == 4 ? 2 : 1;
    cw->c = c;
    uint32_t width = (uint32_t)(cw->coff * c);
    snprintf(name, sizeof(name), "%s.wkv.weight", prefix);
    if ((rc = load_bf16(e, name, width, (uint32_t)e->cfg.dim, &cw->wkv, err)) < 0)
        return rc;
    snprintf(name, sizeof(name), "%s.wgate.weight", prefix);
    if ((rc = load_bf16(e, name, width, (uint32_t)e->cfg.dim, &cw->wgate, err)) < 0)
        return rc;
    snprintf(name, sizeof(name), "%s.ape", prefix);
    if ((rc = load_f32(e, name, (uint64_t)ratio, width, &cw->ape, err)) < 0)
        return rc;
    snprintf(name, sizeof(name), "%s.norm.weight", prefix);
    return load_f32(e, name, (uint64_t)c, 0, &cw->norm, err);
}

static int load_block(dsv4_engine *e, const char *p, enum dsv4_attn_kind kind, int ratio,
                       bool hashed, struct layer_w *lw, struct dsv4_err *err)
{
    const struct dsv4_config *c = &e->cfg;
    char n[256];
    int rc;
    uint32_t d = (uint32_t)c->dim;
    lw->kind = kind;
    lw->ratio = ratio;
    lw->hashed = hashed;

#define F32(field, suffix, d0, d1)                                   \
    do {                                                             \
        snprintf(n, sizeof(n), "%s.%s", p, suffix);                  \
        if ((rc = load_f32(e, n, d0, d1, &lw->field, err)) < 0)      \
            return rc;                                               \
    } while (0)
#define FP8(field, suffix, rows, cols)                               \
    do {                                                             \
        snprintf(n, sizeof(n), "%s.%s", p, suffix);                  \
        if ((rc = load_fp8(e, n, rows, cols, &lw->field, err)) < 0)  \
            return rc;                                               \
    } while (0)

    F32(hc_attn_fn, "hc_attn_fn", (uint64_t)c->hc_mix, (uint64_t)c->hc_dim);
    F32(hc_attn_base, "hc_attn_base", (uint64_t)c->hc_mix, 0);
    F32(hc_attn_scale, "hc_attn_scale", 3, 0);
    F32(hc_ffn_fn, "hc_ffn_fn", (uint64_t)c->hc_mix, (uint64_t)c->hc_dim);
    F32(hc_ffn_base, "hc_ffn_base", (uint64_t)c->hc_mix, 0);
    F32(hc_ffn_scale, "hc_ffn_scale", 3, 0);
    F32(attn_norm, "attn_norm.weight", d, 0);
    F32(ffn_norm, "ffn_norm.weight", d, 0);
    F32(attn_sink, "attn.attn_sink", (uint64_t)c->n_heads, 0);
    F32(q_norm, "attn.q_norm.weight", (uint64_t)c->q_lora_rank, 0);
    F32(kv_norm, "attn.kv_norm.weight", (uint64_t)c->head_dim, 0);
    uint32_t hd = (uint32_t)(c->n_heads * c->head_dim);
    uint32_t glr = (uint32_t)(c->o_groups * c->o_lora_rank);
    FP8(wq_a, "attn.wq_a", (uint32_t)c->q_lora_rank, d);
    FP8(wq_b, "attn.wq_b", hd, (uint32_t)c->q_lora_rank);
    FP8(wkv, "attn.wkv", (uint32_t)c->head_dim, d);
    FP8(wo_a, "attn.wo_a", glr, (uint32_t)c->wo_a_in);
    FP8(wo_b, "attn.wo_b", d, glr);
    if (lw->kind != DSV4_ATTN_WINDOW) {
        snprintf(n, sizeof(n), "%s.attn.compressor", p);
        if ((rc = load_compressor(e, n, lw->ratio, c->head_dim, &lw->comp, err)) < 0)
            return rc;
    }
    if (lw->kind == DSV4_ATTN_CSA) {
        snprintf(n, sizeof(n), "%s.attn.indexer.compressor", p);
        if ((rc = load_compressor(e, n, lw->ratio, c->index_head_dim, &lw->icomp, err)) < 0)
            return rc;
        FP8(iwq_b, "attn.indexer.wq_b", (uint32_t)(c->index_n_heads * c->index_head_dim),
            (uint32_t)c->q_lora_rank);
        snprintf(n, sizeof(n), "%s.attn.indexer.weights_proj.weight", p);
        if ((rc = load_bf16(e, n, (uint32_t)c->index_n_heads, d, &lw->weights_proj, err)) < 0)
            return rc;
    }
    snprintf(n, sizeof(n), "%s.ffn.gate.weight", p);
    if ((rc = load_bf16(e, n, (uint32_t)c->n_routed_experts, d, &lw->gate, err)) < 0)
        return rc;
    int K = c->n_activated_experts;
    if (lw->hashed) {
        const struct dsv4_tensor *t = NULL;
        void *raw;
        snprintf(n, sizeof(n), "%s.ffn.gate.tid2eid", p);
        if ((rc = find(e, n, DSV4_DTYPE_I64, 2, (uint64_t)c->vocab_size, (uint64_t)K, &t,
                       err)) < 0 ||
            (rc = read_tmp(e, t, &raw, err)) < 0)
            return rc;
        lw->tid2eid = dsv4_xmalloc(t->n_elements * sizeof(int32_t));
        engine_track(e, lw->tid2eid, t->n_elements * sizeof(int32_t));
        for (uint64_t i = 0; i < t->n_elements; i++) {
            int64_t v;
            memcpy(&v, (const char *)raw + 8 * i, 8);
            if (v < 0 || v >= c->n_routed_experts) {
                free(raw);
                return dsv4_errf(err, -EINVAL, "checkpoint: %s[%llu] = %lld is not an expert id",
                                 n, (unsigned long long)i, (long long)v);
            }
            lw->tid2eid[i] = (int32_t)v;
        }
        free(raw);  /* only the int32 table stays resident */
    } else {
        F32(gate_bias, "ffn.gate.bias", (uint64_t)c->n_routed_experts, 0);
    }
    uint32_t I = (uint32_t)c->moe_inter_dim;
    FP8(sh_w1, "ffn.shared_experts.w1", I, d);
    FP8(sh_w3, "ffn.shared_experts.w3", I, d);
    FP8(sh_w2, "ffn.shared_experts.w2", d, I);
#undef F32
#undef FP8
    return 0;
}

static int load_layer(dsv4_engine *e, int l, struct dsv4_err *err)
{
    const struct dsv4_config *c = &e->cfg;
    char p[64];
    snprintf(p, sizeof(p), "layers.%d", l);
    return load_block(e, p, c->layer_kind[l], c->compress_ratios[l],
                              dsv4_config_layer_hashed(c, l), &e->layers[l], err);
}

/* The DSpark drafter's weights (mtp.0..S-1; dspark spec §3, §10): loaded at open when asked for. */
static void free_dspark(dsv4_engine *e)
{
    if (!e->dspark)
        return;
    dsv4_expert_cache_free(e->dspark->cache);
    free(e->dspark->st);
    free(e->dspark);
    e->dspark = NULL;
}

static int load_dspark(dsv4_engine *e, struct dsv4_err *err)
{
    const struct dsv4_config *c = &e->cfg;
    if (c->dspark_stages < 1)
        return dsv4_errf(err, -ENOENT, "dspark: the config declares no DSpark drafter "
                         "(no dspark_* keys)");
    struct dspark_w *w = dsv4_xcalloc(1, sizeof(*w));
    e->dspark = w;
    w->stages = c->dspark_stages;
    w->block = c->dspark_block_size;
    w->rank = c->dspark_markov_rank;
    w->noise = c->dspark_noise_token_id;
    w->n_taps = c->dspark_n_target_layers;
    w->taps = c->dspark_target_layer_ids;
    w->st = dsv4_xcalloc((size_t)w->stages, sizeof(*w->st));
    uint32_t d = (uint32_t)c->dim, V = (uint32_t)c->vocab_size, r = (uint32_t)w->rank;
    char p[64], n[128];
    int rc;
    for (int s = 0; s < w->stages; s++) {
        snprintf(p, sizeof(p), "mtp.%d", s);
        if ((rc = load_block(e, p, DSV4_ATTN_WINDOW, 0, false, &w->st[s], err)) < 0)
            return rc;
    }
    int last = w->stages - 1;
#define NAME(fmt) (snprintf(n, sizeof(n), fmt, last), n)
    if ((rc = load_fp8(e, "mtp.0.main_proj", d, (uint32_t)w->n_taps * d, &w->main_proj,
                               err)) < 0 ||
        (rc = load_f32(e, "mtp.0.main_norm.weight", d, 0, &w->main_norm, err)) < 0 ||
        (rc = load_f32(e, NAME("mtp.%d.norm.weight"), d, 0, &w->norm, err)) < 0 ||
        (rc = load_f32(e, NAME("mtp.%d.hc_head_fn"), (uint64_t)c->hc_mult,
                               (uint64_t)c->hc_dim, &w->hc_head_fn, err)) < 0 ||
        (rc = load_f32(e, NAME("mtp.%d.hc_head_base"), (uint64_t)c->hc_mult, 0,
                               &w->hc_head_base, err)) < 0 ||
        (rc = load_f32(e, NAME("mtp.%d.hc_head_scale"), 1, 0, &w->hc_head_scale,
                               err)) < 0 ||
        (rc = load_bf16(e, NAME("mtp.%d.markov_head.markov_w1.weight"), V, r,
                                &w->markov_w1, err)) < 0 ||
        (rc = load_bf16(e, NAME("mtp.%d.markov_head.markov_w2.weight"), V, r,
                                &w->markov_w2, err)) < 0 ||
        (rc = load_bf16(e, NAME("mtp.%d.confidence_head.proj.weight"), 1, d + r,
                                &w->conf, err)) < 0)
        return rc;
#undef NAME
    /* the stages' experts: their own LRU with the target's budget (S blocks, not 43) */
    if ((rc = dsv4_expert_cache_new_blocks(e->ckpt, c, "mtp", w->stages, e->expert_budget,
                                           &w->cache, err)) < 0)
        return rc;
    w->experts = dsv4_expert_cache_provider(w->cache);
    return 0;
}

/* Shapes the kernels and the blockwise quantisation rely on. */
static int check_config(const struct dsv4_config *c, struct dsv4_err *err)
{
    const char *why = NULL;
    if (c->rope_head_dim % 2 || c->rope_head_dim > c->head_dim ||
             c->rope_head_dim > c->index_head_dim)
        why = "rope_head_dim must be even and fit head_dim and index_head_dim";
    else if ((c->head_dim - c->rope_head_dim) % 64)
        why = "head_dim - rope_head_dim must be a multiple of 64 (KV QDQ blocks)";
    else if (c->index_head_dim < 32 || c->index_head_dim > 1024 ||
             (c->index_head_dim & (c->index_head_dim - 1)))
        why = "index_head_dim must be a power of two in 32..1024 (Hadamard, FP4 blocks)";
    else if (c->n_heads % c->o_groups)
        why = "n_heads must be a multiple of o_groups";
    else if (c->moe_inter_dim % 32 || c->dim % 32)
        why = "dim and moe_intermediate_size must be multiples of 32 (FP4 scale groups)";
    else if (c->n_shared_experts != 1)
        why = "exactly one shared expert is supported";
    else if (c->window < 1 || c->n_activated_experts < 1 ||
             c->n_activated_experts > c->n_routed_experts)
        why = "sliding_window and num_experts_per_tok must be positive (≤ n_routed_experts)";
    for (int l = 0; !why && l < c->n_layers; l++)
        if (c->layer_kind[l] != DSV4_ATTN_WINDOW && c->compress_ratios[l] < 2)
            why = "compress ratios must be 0, 4 or ≥ 2";
    if (why)
        return dsv4_errf(err, -EINVAL, "config: %s", why);
    return 0;
}

int dsv4_engine_open(const char *model_dir, const struct dsv4_engine_opts *opts,
                     dsv4_engine **ret, struct dsv4_err *err)
{
    struct dsv4_engine_opts o = opts ? *opts : (struct dsv4_engine_opts){ 0 };
    dsv4_engine *e = dsv4_xcalloc(1, sizeof(*e));
    struct dsv4_config *c = &e->cfg;
    int rc;
    if ((rc = dsv4_config_load(model_dir, c, err)) < 0 || (rc = check_config(c, err)) < 0 ||
        (rc = dsv4_checkpoint_open(model_dir, &e->ckpt, err)) < 0)
        goto fail;
    const struct dsv4_tensor *t = NULL;
    void *p;
    uint32_t d = (uint32_t)c->dim;
    if ((rc = find(e, "embed.weight", DSV4_DTYPE_BF16, 2, (uint64_t)c->vocab_size, d, &t, err)) <
            0 ||
        (rc = read_all(e, t, &p, err)) < 0)
        goto fail;
    e->embed = (struct dsv4_bf16_weight){ p, (uint32_t)c->vocab_size, d };
    if ((rc = load_bf16(e, "head.weight", (uint32_t)c->vocab_size, d, &e->head, err)) < 0 ||
        (rc = load_f32(e, "norm.weight", d, 0, &e->norm, err)) < 0 ||
        (rc = load_f32(e, "hc_head_fn", (uint64_t)c->hc_mult, (uint64_t)c->hc_dim,
                       &e->hc_head_fn, err)) < 0 ||
        (rc = load_f32(e, "hc_head_base", (uint64_t)c->hc_mult, 0, &e->hc_head_base, err)) < 0 ||
        (rc = load_f32(e, "hc_head_scale", 1, 0, &e->hc_head_scale, err)) < 0)
        goto fail;
    e->layers = dsv4_xcalloc((size_t)c->n_layers, sizeof(*e->layers));
    for (int l = 0; l < c->n_layers; l++)
        if ((rc = load_layer(e, l, err)) < 0)
            goto fail;
    rope_table_init(e, &e->rope_plain, c->rope_theta, false);
    rope_table_init(e, &e->rope_comp, c->compress_rope_theta, true);
    e->on_layer = o.on_layer;
    e->on_layer_ctx = o.on_layer_ctx;
    e->expert_budget = o.expert_cache_bytes ? o.expert_cache_bytes : (1ULL << 30);
    if (o.experts) {
        e->experts = *o.experts;
    } else {
        uint64_t budget = o.expert_cache_bytes ? o.expert_cache_bytes : (1ULL << 30);
        if ((rc = dsv4_expert_cache_new(e->ckpt, c, budget, &e->cache, err)) < 0)
            goto fail;
        e->experts = dsv4_expert_cache_provider(e->cache);
    }
    if (o.dspark && (rc = load_dspark(e, err)) < 0)
        goto fail;
    e->pool = dsv4_pool_new(o.n_threads > 0 ? o.n_threads : 1);
    e->rows_par_min = engine_rows_par_min();
    e->max_lease = o.max_lease > 0 ? o.max_lease : 0;
    e->step_rows = o.step_rows > 0 ? o.step_rows : DSV4_DEFAULT_CHUNK;
    if (e->step_rows > DSV4_MAX_CHUNK) {
        rc = dsv4_errf(err, -EINVAL, "engine: step_rows %d out of range [1, %d]", e->step_rows,
                       DSV4_MAX_CHUNK);
        goto fail;
    }
    *ret = e;
    return 0;
fail:
    dsv4_engine_free(e);
    return rc;
}

dsv4_engine *dsv4_engine_free(dsv4_engine *e)
{
    if (!e)
        return NULL;
    dsv4_session_free(e->step);
    free(e->step_logits);
    dsv4_pool_free(e->pool);
    dsv4_expert_cache_free(e->cache);
    free_dspark(e);
    for (size_t i = 0; i < e->n_allocs; i++)
        free(e->allocs[i]);
    free(e->allocs);
    free(e->layers);
    dsv4_checkpoint_free(e->ckpt);
    free(e);
    return NULL;
}

const struct dsv4_config *dsv4_engine_config(const dsv4_engine *e)
{
    return &e->cfg;
}

uint64_t dsv4_engine_resident_bytes(const dsv4_engine *e)
{
    return e->resident_bytes;
}

void dsv4_engine_lookahead_stats(const dsv4_engine *e, uint64_t *asked, uint64_t *right)
{
    *asked = e->lookahead_asked;
    *right = e->lookahead_right;
}

int dsv4_engine_expert_stats(const dsv4_engine *e, struct dsv4_expert_cache_stats *ret)
{
    if (!e->cache)
        return -ENOENT;
    dsv4_expert_cache_get_stats(e->cache, ret);
    return 0;
}
