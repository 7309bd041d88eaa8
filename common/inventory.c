/* SPDX-License-Identifier: MIT */
/*
 * Tensor inventory of a DeepSeek-V4 checkpoint, derived from the config
 * (see inventory.h), and the check of a checkpoint against it.
 */
#include "buf.h"
#include "inventory.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct builder {
    const struct dsv4_config *c;
    struct dsv4_inventory *inv;
    size_t cap;
    int block;
};

static struct dsv4_inv_entry *add(struct builder *b, enum dsv4_dtype dtype, enum dsv4_inv_role role,
                                  uint32_t rank, uint64_t d0, uint64_t d1, const char *fmt, ...)
    DSV4_PRINTF(7, 8);

static struct dsv4_inv_entry *add(struct builder *b, enum dsv4_dtype dtype, enum dsv4_inv_role role,
                                  uint32_t rank, uint64_t d0, uint64_t d1, const char *fmt, ...)
{
    struct dsv4_inventory *inv = b->inv;
    DSV4_GROW(inv->entries, b->cap, inv->n + 1);
    struct dsv4_inv_entry *e = &inv->entries[inv->n++];
    memset(e, 0, sizeof(*e));
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(e->name, sizeof(e->name), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(e->name))
        dsv4_die("inventory: tensor name too long: %s...", e->name);
    e->dtype = dtype;
    e->role = role;
    e->rank = rank;
    e->shape[0] = d0;
    e->shape[1] = rank > 1 ? d1 : 0;
    /* Config limits keep every product far below 2^63. */
    e->nbytes = d0 * (rank > 1 ? d1 : 1) * dsv4_dtype_size(dtype);
    e->block = b->block;
    e->expert = -1;
    return e;
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}

/* FP8 dense linear `p.weight` [out, in] + `p.scale`. */
static void fp8(struct builder *b, const char *p, uint64_t out, uint64_t in)
{
    uint64_t B = (uint64_t)b->c->weight_block;
    add(b, DSV4_DTYPE_F8_E4M3, DSV4_INV_DENSE, 2, out, in, "%s.weight", p);
    add(b, DSV4_DTYPE_F8_E8M0, DSV4_INV_DENSE_SCALE, 2, ceil_div(out, B), ceil_div(in, B),
        "%s.scale", p);
}

static void vec(struct builder *b, enum dsv4_dtype t, uint64_t n, const char *name)
{
    add(b, t, DSV4_INV_DENSE, 1, n, 0, "%s", name);
}

static void mat(struct builder *b, enum dsv4_dtype t, uint64_t r, uint64_t c, const char *name)
{
    add(b, t, DSV4_INV_DENSE, 2, r, c, "%s", name);
}

/* compressor.{wkv,wgate,ape,norm}: ratio 4 pools overlapping windows, so
 * its projections are twice as wide (spec §10). */
static void compressor(struct builder *b, const char *p, uint64_t head, int ratio)
{
    uint64_t w = (ratio == 4 ? 2 : 1) * head, d = (uint64_t)b->c->dim;
    char n[DSV4_INV_NAME_MAX];
    snprintf(n, sizeof(n), "%swkv.weight", p);
    mat(b, DSV4_DTYPE_BF16, w, d, n);
    snprintf(n, sizeof(n), "%swgate.weight", p);
    mat(b, DSV4_DTYPE_BF16, w, d, n);
    snprintf(n, sizeof(n), "%sape", p);
    mat(b, DSV4_DTYPE_F32, (uint64_t)ratio, w, n);
    snprintf(n, sizeof(n), "%snorm.weight", p);
    vec(b, DSV4_DTYPE_BF16, head, n);
}

static void hc_head(struct builder *b, const char *p)
{
    const struct dsv4_config *c = b->c;
    char n[DSV4_INV_NAME_MAX];
    snprintf(n, sizeof(n), "%shc_head_fn", p);
    mat(b, DSV4_DTYPE_F32, (uint64_t)c->hc_mult, (uint64_t)c->hc_dim, n);
    snprintf(n, sizeof(n), "%shc_head_base", p);
    vec(b, DSV4_DTYPE_F32, (uint64_t)c->hc_mult, n);
    snprintf(n, sizeof(n), "%shc_head_scale", p);
    vec(b, DSV4_DTYPE_F32, 1, n);
}

/* One transformer block (main layer, MTP block or DSpark stage) under `p`. */
static void block(struct builder *b, const char *p, int ratio, bool hashed)
{
    const struct dsv4_config *c = b->c;
    uint64_t d = (uint64_t)c->dim, H = (uint64_t)c->n_heads, D = (uint64_t)c->head_dim;
    uint64_t G = (uint64_t)c->o_groups, ql = (uint64_t)c->q_lora_rank;
    char n[DSV4_INV_NAME_MAX];
#define NAME(...) (snprintf(n, sizeof(n), __VA_ARGS__), n)

    static const char *const hc[] = { "attn", "ffn" };
    for (int i = 0; i < 2; i++) {
        mat(b, DSV4_DTYPE_F32, (uint64_t)c->hc_mix, (uint64_t)c->hc_dim, NAME("%shc_%s_fn", p, hc[i]));
        vec(b, DSV4_DTYPE_F32, (uint64_t)c->hc_mix, NAME("%shc_%s_base", p, hc[i]));
        vec(b, DSV4_DTYPE_F32, 3, NAME("%shc_%s_scale", p, hc[i]));
    }
    vec(b, DSV4_DTYPE_BF16, d, NAME("%sattn_norm.weight", p));
    vec(b, DSV4_DTYPE_BF16, d, NAME("%sffn_norm.weight", p));

    vec(b, DSV4_DTYPE_F32, H, NAME("%sattn.attn_sink", p));
    fp8(b, NAME("%sattn.wq_a", p), ql, d);
    vec(b, DSV4_DTYPE_BF16, ql, NAME("%sattn.q_norm.weight", p));
    fp8(b, NAME("%sattn.wq_b", p), H * D, ql);
    fp8(b, NAME("%sattn.wkv", p), D, d);
    vec(b, DSV4_DTYPE_BF16, D, NAME("%sattn.kv_norm.weight", p));
    fp8(b, NAME("%sattn.wo_a", p), G * (uint64_t)c->o_lora_rank, (uint64_t)c->wo_a_in);
    fp8(b, NAME("%sattn.wo_b", p), d, G * (uint64_t)c->o_lora_rank);
    if (ratio != 0)
        compressor(b, NAME("%sattn.compressor.", p), D, ratio);
    if (ratio == 4) {
        uint64_t ih = (uint64_t)c->index_n_heads, id = (uint64_t)c->index_head_dim;
        fp8(b, NAME("%sattn.indexer.wq_b", p), ih * id, ql);
        mat(b, DSV4_DTYPE_BF16, ih, d, NAME("%sattn.indexer.weights_proj.weight", p));
        compressor(b, NAME("%sattn.indexer.compressor.", p), id, ratio);
    }

    uint64_t E = (uint64_t)c->n_routed_experts, I = (uint64_t)c->moe_inter_dim;
    mat(b, DSV4_DTYPE_BF16, E, d, NAME("%sffn.gate.weight", p));
    if (hashed)
        mat(b, DSV4_DTYPE_I64, (uint64_t)c->vocab_size, (uint64_t)c->n_activated_experts,
            NAME("%sffn.gate.tid2eid", p));
    else
        vec(b, DSV4_DTYPE_F32, E, NAME("%sffn.gate.bias", p));
    for (uint64_t e = 0; e < E; e++) {
        static const int projs[3] = { 1, 2, 3 };
        for (int k = 0; k < 3; k++) {
            /* w1, w3: [I, d] (gate, up); w2: [d, I] (down). */
            uint64_t out = projs[k] == 2 ? d : I, in = projs[k] == 2 ? I : d;
            /* Set fields right after each add: the next add may move the array. */
            struct dsv4_inv_entry *t;
            t = add(b, DSV4_DTYPE_I8, DSV4_INV_EXPERT, 2, out, in / 2,
                    "%sffn.experts.%llu.w%d.weight", p, (unsigned long long)e, projs[k]);
            t->expert = (int)e;
            t->proj = projs[k];
            t = add(b, DSV4_DTYPE_F8_E8M0, DSV4_INV_EXPERT_SCALE, 2, out, in / 32,
                    "%sffn.experts.%llu.w%d.scale", p, (unsigned long long)e, projs[k]);
            t->expert = (int)e;
            t->proj = projs[k];
        }
    }
    uint64_t S = (uint64_t)c->n_shared_experts * I;
    fp8(b, NAME("%sffn.shared_experts.w1", p), S, d);
    fp8(b, NAME("%sffn.shared_experts.w2", p), d, S);
    fp8(b, NAME("%sffn.shared_experts.w3", p), S, d);
#undef NAME
}

static int cmp_name(const void *a, const void *b, void *ctx)
{
    const struct dsv4_inv_entry *e = ctx;
    return strcmp(e[*(const size_t *)a].name, e[*(const size_t *)b].name);
}

void dsv4_inventory_build(const struct dsv4_config *c, struct dsv4_inventory *ret)
{
    struct builder b = { .c = c, .inv = ret, .block = -1 };
    uint64_t d = (uint64_t)c->dim, V = (uint64_t)c->vocab_size;
    char p[32];

    memset(ret, 0, sizeof(*ret));
    mat(&b, DSV4_DTYPE_BF16, V, d, "embed.weight");
    for (int L = 0; L < c->n_layers; L++) {
        b.block = L;
        snprintf(p, sizeof(p), "layers.%d.", L);
        block(&b, p, c->compress_ratios[L], dsv4_config_layer_hashed(c, L));
    }
    b.block = -1;
    hc_head(&b, "");
    vec(&b, DSV4_DTYPE_BF16, d, "norm.weight");
    mat(&b, DSV4_DTYPE_BF16, V, d, "head.weight");

    /* Legacy MTP (target spec §15): a ratio-0-style block plus the input fusion. */
    for (int m = 0; m < c->n_mtp_layers; m++) {
        char q[64];
        b.block = c->n_layers + m;
        snprintf(p, sizeof(p), "mtp.%d.", m);
        block(&b, p, c->compress_ratios[c->n_layers + m], false);
        snprintf(q, sizeof(q), "%se_proj", p);
        fp8(&b, q, d, d);
        snprintf(q, sizeof(q), "%sh_proj", p);
        fp8(&b, q, d, d);
        snprintf(q, sizeof(q), "%senorm.weight", p);
        vec(&b, DSV4_DTYPE_BF16, d, q);
        snprintf(q, sizeof(q), "%shnorm.weight", p);
        vec(&b, DSV4_DTYPE_BF16, d, q);
        snprintf(q, sizeof(q), "%snorm.weight", p);
        vec(&b, DSV4_DTYPE_BF16, d, q);
        hc_head(&b, p);
    }

    /* DSpark stages (dspark spec §10): first owns main_proj/main_norm, last the head side. */
    for (int s = 0; s < c->dspark_stages; s++) {
        char q[64];
        b.block = c->n_layers + s;
        snprintf(p, sizeof(p), "mtp.%d.", s);
        block(&b, p, 0, false);
        if (s == 0) {
            snprintf(q, sizeof(q), "%smain_proj", p);
            fp8(&b, q, d, (uint64_t)c->dspark_n_target_layers * d);
            snprintf(q, sizeof(q), "%smain_norm.weight", p);
            vec(&b, DSV4_DTYPE_BF16, d, q);
        }
        if (s == c->dspark_stages - 1) {
            uint64_t R = (uint64_t)c->dspark_markov_rank;
            snprintf(q, sizeof(q), "%snorm.weight", p);
            vec(&b, DSV4_DTYPE_BF16, d, q);
            hc_head(&b, p);
            snprintf(q, sizeof(q), "%smarkov_head.markov_w1.weight", p);
            mat(&b, DSV4_DTYPE_BF16, V, R, q);
            snprintf(q, sizeof(q), "%smarkov_head.markov_w2.weight", p);
            mat(&b, DSV4_DTYPE_BF16, V, R, q);
            snprintf(q, sizeof(q), "%sconfidence_head.proj.weight", p);
            mat(&b, DSV4_DTYPE_BF16, 1, d + R, q);
        }
    }

    ret->by_name = dsv4_xmalloc((ret->n ? ret->n : 1) * sizeof(size_t));
    for (size_t i = 0; i < ret->n; i++) {
        const struct dsv4_inv_entry *e = &ret->entries[i];
        ret->by_name[i] = i;
        ret->n_by_dtype[e->dtype]++;
        ret->total_bytes += e->nbytes;
        if (e->role == DSV4_INV_DENSE || e->role == DSV4_INV_DENSE_SCALE)
            ret->dense_bytes += e->nbytes;
        /* All routed experts of all blocks have the same shapes: measure one. */
        if (e->expert == 0 && e->block == 0)
            ret->expert_bytes += e->nbytes;
    }
    qsort_r(ret->by_name, ret->n, sizeof(size_t), cmp_name, ret->entries);
}

void dsv4_inventory_free(struct dsv4_inventory *inv)
{
    free(inv->entries);
    free(inv->by_name);
    memset(inv, 0, sizeof(*inv));
}

const struct dsv4_inv_entry *dsv4_inventory_find(const struct dsv4_inventory *inv,
                                                 const char *name)
{
    size_t lo = 0, hi = inv->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct dsv4_inv_entry *e = &inv->entries[inv->by_name[mid]];
        int r = strcmp(name, e->name);
        if (r == 0)
            return e;
        if (r < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *dsv4_inventory_shape_str(uint32_t rank, const uint64_t *shape, char *buf, size_t n)
{
    size_t off = 0;
    if (n == 0)
        return buf;
    buf[0] = '\0';
    off += (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < rank && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%llu", i ? ", " : "",
                                (unsigned long long)shape[i]);
    if (off < n)
        snprintf(buf + off, n - off, "]");
    return buf;
}

static void reportf(dsv4_inventory_report_fn report, void *ctx, const char *fmt, ...)
    DSV4_PRINTF(3, 4);

static void reportf(dsv4_inventory_report_fn report, void *ctx, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    report(ctx, line);
}

size_t dsv4_inventory_check(const struct dsv4_inventory *inv, const dsv4_checkpoint *ck,
                            dsv4_inventory_report_fn report, void *ctx)
{
    size_t problems = 0;
    char want[128], got[128];

    for (size_t i = 0; i < inv->n; i++) {
        const struct dsv4_inv_entry *e = &inv->entries[i];
        const struct dsv4_tensor *t = dsv4_checkpoint_find(ck, e->name);
        dsv4_inventory_shape_str(e->rank, e->shape, want, sizeof(want));
        if (!t) {
            reportf(report, ctx, "missing tensor %s (expected %s %s)", e->name,
                    dsv4_dtype_name(e->dtype), want);
            problems++;
            continue;
        }
        if (t->dtype != e->dtype) {
            reportf(report, ctx, "wrong dtype for %s: %s, expected %s", e->name,
                    dsv4_dtype_name(t->dtype), dsv4_dtype_name(e->dtype));
            problems++;
        }
        bool same = t->rank == e->rank;
        for (uint32_t k = 0; same && k < e->rank; k++)
            same = t->shape[k] == e->shape[k];
        if (!same) {
            reportf(report, ctx, "wrong shape for %s: %s, expected %s", e->name,
                    dsv4_inventory_shape_str(t->rank, t->shape, got, sizeof(got)), want);
            problems++;
        }
    }
    size_t n = dsv4_checkpoint_n_tensors(ck);
    for (size_t i = 0; i < n; i++) {
        const struct dsv4_tensor *t = dsv4_checkpoint_tensor(ck, i);
        if (dsv4_inventory_find(inv, t->name))
            continue;
        reportf(report, ctx, "unexpected tensor %s (%s %s)", t->name, dsv4_dtype_name(t->dtype),
                dsv4_inventory_shape_str(t->rank, t->shape, got, sizeof(got)));
        problems++;
    }
    return problems;
}
