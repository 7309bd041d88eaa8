/* SPDX-License-Identifier: MIT */
/*
 * DeepSeek-V4 config.json parsing and validation. The HF config.json is the
 * primary file; the official inference/config.json, when present, is read
 * too. A field may come from either file (HF name or inference name); when
 * both carry it the values must agree, so a checkpoint whose two files
 * disagree is refused instead of silently picking one. The one deliberate
 * exception is the MTP count: for a DSpark checkpoint HF's
 * num_nextn_predict_layers says 1 while the drafter has the inference file's
 * n_mtp_layers (3) stages (dspark spec §10), so there the inference value
 * counts drafter stages and the HF value is ignored.
 *
 * Every value is checked (type, integrality, range, cross-field consistency)
 * so the engine and the inventory can trust the struct without re-checking.
 */
#include "config.h"
#include "file.h"
#include "json_limits.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#define CONFIG_MAX_BYTES (4u << 20) /* real configs are ~2 KiB */

enum ftype { F_INT, F_I64, F_DBL };

/* One scalar field: where it lives in each file, its type and range. */
struct field {
    const char *hf;       /* HF key, "a.b" = key b of object a; NULL: not in HF */
    const char *inf;      /* inference/config.json key; NULL: not there */
    enum ftype type;
    size_t off;
    double min, max;      /* inclusive; for F_DBL with gt0, min is exclusive */
    bool required;
    bool gt0;             /* doubles: strictly positive */
    double def;           /* default when optional and absent */
};

#define OFF(f) offsetof(struct dsv4_config, f)
#define DIM_MAX 65536.0

static const struct field fields[] = {
    { "vocab_size", "vocab_size", F_INT, OFF(vocab_size), 1, 1 << 24, true, false, 0 },
    { "hidden_size", "dim", F_INT, OFF(dim), 1, DIM_MAX, true, false, 0 },
    { "num_hidden_layers", "n_layers", F_INT, OFF(n_layers), 1, DSV4_CONFIG_MAX_LAYERS - 64,
      true, false, 0 },
    { "num_attention_heads", "n_heads", F_INT, OFF(n_heads), 1, 4096, true, false, 0 },
    { "head_dim", "head_dim", F_INT, OFF(head_dim), 1, 16384, true, false, 0 },
    { "qk_rope_head_dim", "rope_head_dim", F_INT, OFF(rope_head_dim), 2, 16384, true, false, 0 },
    { "q_lora_rank", "q_lora_rank", F_INT, OFF(q_lora_rank), 1, DIM_MAX, true, false, 0 },
    { "o_groups", "o_groups", F_INT, OFF(o_groups), 1, 4096, true, false, 0 },
    { "o_lora_rank", "o_lora_rank", F_INT, OFF(o_lora_rank), 1, DIM_MAX, true, false, 0 },
    { "sliding_window", "window_size", F_INT, OFF(window), 1, 1 << 20, true, false, 0 },
    { "rope_theta", "rope_theta", F_DBL, OFF(rope_theta), 0, 1e12, true, true, 0 },
    { "compress_rope_theta", "compress_rope_theta", F_DBL, OFF(compress_rope_theta), 0, 1e12,
      true, true, 0 },
    { "rope_scaling.factor", "rope_factor", F_DBL, OFF(rope_factor), 0, 1e6, true, true, 0 },
    { "rope_scaling.original_max_position_embeddings", "original_seq_len", F_INT,
      OFF(original_seq_len), 1, 1 << 30, true, false, 0 },
    { "rope_scaling.beta_fast", "beta_fast", F_DBL, OFF(beta_fast), 0, 1e6, true, true, 0 },
    { "rope_scaling.beta_slow", "beta_slow", F_DBL, OFF(beta_slow), 0, 1e6, true, true, 0 },
    /* Absent: original_seq_len × rope_factor (set after parsing; def 0 marks it). */
    { "max_position_embeddings", NULL, F_I64, OFF(max_position_embeddings), 1, 1099511627776.0,
      false, false, 0 },
    { "index_n_heads", "index_n_heads", F_INT, OFF(index_n_heads), 1, 4096, true, false, 0 },
    { "index_head_dim", "index_head_dim", F_INT, OFF(index_head_dim), 1, 16384, true, false, 0 },
    { "index_topk", "index_topk", F_INT, OFF(index_topk), 1, 1 << 24, true, false, 0 },
    { "hc_mult", "hc_mult", F_INT, OFF(hc_mult), 1, DSV4_CONFIG_MAX_HC_MULT, true, false, 0 },
    { "hc_sinkhorn_iters", "hc_sinkhorn_iters", F_INT, OFF(hc_sinkhorn_iters), 1, 1000, true,
      false, 0 },
    /* eps: absent from the inference JSON; the official ModelArgs default is 1e-6. */
    { "hc_eps", "hc_eps", F_DBL, OFF(hc_eps), 0, 1, false, true, 1e-6 },
    { "rms_norm_eps", "norm_eps", F_DBL, OFF(norm_eps), 0, 1, false, true, 1e-6 },
    { "n_routed_experts", "n_routed_experts", F_INT, OFF(n_routed_experts), 1, 65536, true,
      false, 0 },
    { "n_shared_experts", "n_shared_experts", F_INT, OFF(n_shared_experts), 1, 64, true, false,
      0 },
    { "num_experts_per_tok", "n_activated_experts", F_INT, OFF(n_activated_experts), 1, 65536,
      true, false, 0 },
    { "moe_intermediate_size", "moe_inter_dim", F_INT, OFF(moe_inter_dim), 1, DIM_MAX, true,
      false, 0 },
    { "routed_scaling_factor", "route_scale", F_DBL, OFF(route_scale), 0, 1e6, true, true, 0 },
    { "num_hash_layers", "n_hash_layers", F_INT, OFF(n_hash_layers), 0,
      DSV4_CONFIG_MAX_LAYERS, true, false, 0 },
    /* 0 disables the clamp in the official code, so 0 is allowed. */
    { "swiglu_limit", "swiglu_limit", F_DBL, OFF(swiglu_limit), 0, 1e6, true, false, 0 },
    /* DeepSeek's ids; absent from the inference JSON. */
    { "bos_token_id", NULL, F_INT, OFF(bos_token_id), 0, 1 << 24, false, false, 0 },
    { "eos_token_id", NULL, F_INT, OFF(eos_token_id), 0, 1 << 24, false, false, 1 },
};

/* Keys that name a DSpark drafter (dspark spec §10). */
static const struct field dspark_fields[] = {
    { "dspark_block_size", "dspark_block_size", F_INT, OFF(dspark_block_size), 1, 64, true,
      false, 0 },
    { "dspark_markov_rank", "dspark_markov_rank", F_INT, OFF(dspark_markov_rank), 1, DIM_MAX,
      true, false, 0 },
    { "dspark_noise_token_id", "dspark_noise_token_id", F_INT, OFF(dspark_noise_token_id), 0,
      1 << 24, true, false, 0 },
};

/* Where a value was found, for messages. */
struct src {
    const cJSON *root;
    const char *file;
};

struct parse {
    struct src hf, inf;   /* inf.root NULL when there is no inference file */
    struct dsv4_err *err;
};

/* Object member `key` of `obj`; a key given twice is an error (cJSON keeps
 * both and would silently use the first). */
static int member(const struct src *s, const cJSON *obj, const char *key, const char *what,
                  const cJSON **ret, struct dsv4_err *err)
{
    const cJSON *found = NULL;
    *ret = NULL;
    if (!cJSON_IsObject(obj))
        return 0;
    for (const cJSON *it = obj->child; it; it = it->next) {
        if (!it->string || strcmp(it->string, key) != 0)
            continue;
        if (found)
            return dsv4_errf(err, -EINVAL, "%s: %s: key appears twice", s->file, what);
        found = it;
    }
    *ret = found;
    return 0;
}

/* Look up `path` ("a" or "a.b") in s->root. */
static int lookup(const struct src *s, const char *path, const cJSON **ret, struct dsv4_err *err)
{
    *ret = NULL;
    if (!s->root || !path)
        return 0;
    const char *dot = strchr(path, '.');
    if (!dot)
        return member(s, s->root, path, path, ret, err);
    char outer[64];
    size_t n = (size_t)(dot - path);
    if (n >= sizeof(outer))
        return dsv4_errf(err, -EINVAL, "%s: internal: key too long", path);
    memcpy(outer, path, n);
    outer[n] = '\0';
    const cJSON *o;
    int r = member(s, s->root, outer, outer, &o, err);
    if (r < 0 || !o)
        return r;
    if (!cJSON_IsObject(o))
        return dsv4_errf(err, -EINVAL, "%s: %s: must be an object", s->file, outer);
    return member(s, o, dot + 1, path, ret, err);
}

/* Read a JSON number as an integer in [min, max]. */
static int get_int(const struct src *s, const char *name, const cJSON *v, double min, double max,
                   int64_t *ret, struct dsv4_err *err)
{
    if (!cJSON_IsNumber(v))
        return dsv4_errf(err, -EINVAL, "%s: %s: must be a number", s->file, name);
    double d = v->valuedouble;
    if (!isfinite(d))
        return dsv4_errf(err, -EINVAL, "%s: %s: must be finite", s->file, name);
    if (d != floor(d))
        return dsv4_errf(err, -EINVAL, "%s: %s: must be an integer, got %.17g", s->file, name, d);
    if (d < min || d > max)
        return dsv4_errf(err, -ERANGE, "%s: %s: %.17g is out of range [%.17g, %.17g]", s->file,
                         name, d, min, max);
    *ret = (int64_t)d;
    return 0;
}

static int get_dbl(const struct src *s, const char *name, const cJSON *v, const struct field *f,
                   double *ret, struct dsv4_err *err)
{
    if (!cJSON_IsNumber(v))
        return dsv4_errf(err, -EINVAL, "%s: %s: must be a number", s->file, name);
    double d = v->valuedouble;
    if (!isfinite(d))
        return dsv4_errf(err, -EINVAL, "%s: %s: must be finite", s->file, name);
    if ((f->gt0 ? d <= f->min : d < f->min) || d > f->max)
        return dsv4_errf(err, -ERANGE, "%s: %s: %.17g is out of range %s%.17g, %.17g]", s->file,
                         name, d, f->gt0 ? "(" : "[", f->min, f->max);
    *ret = d;
    return 0;
}

/* Read one scalar from one file; *found tells whether it was there. */
static int read_one(const struct src *s, const char *name, const struct field *f, double *ret,
                    bool *found, struct dsv4_err *err)
{
    const cJSON *v;
    *found = false;
    int r = lookup(s, name, &v, err);
    if (r < 0 || !v)
        return r;
    if (f->type == F_DBL) {
        r = get_dbl(s, name, v, f, ret, err);
    } else {
        int64_t i;
        r = get_int(s, name, v, f->min, f->max, &i, err);
        *ret = (double)i;
    }
    *found = r == 0;
    return r;
}

static void store(struct dsv4_config *c, const struct field *f, double v)
{
    char *p = (char *)c + f->off;
    switch (f->type) {
    case F_INT: { int i = (int)v; memcpy(p, &i, sizeof(i)); break; }
    case F_I64: { int64_t i = (int64_t)v; memcpy(p, &i, sizeof(i)); break; }
    case F_DBL: memcpy(p, &v, sizeof(v)); break;
    }
}

/* Read a field from both files, check agreement, store it. *present tells
 * whether either file had it (optional fields get their default otherwise). */
static int read_field(struct parse *p, struct dsv4_config *c, const struct field *f,
                      bool *present)
{
    double a = 0, b = 0;
    bool in_a, in_b;
    int r = read_one(&p->hf, f->hf, f, &a, &in_a, p->err);
    if (r < 0)
        return r;
    r = read_one(&p->inf, f->inf, f, &b, &in_b, p->err);
    if (r < 0)
        return r;
    if (in_a && in_b && a != b)
        return dsv4_errf(p->err, -EINVAL, "%s: %s = %.17g disagrees with %s: %s = %.17g",
                         p->hf.file, f->hf, a, p->inf.file, f->inf, b);
    *present = in_a || in_b;
    if (!*present) {
        if (f->required)
            return dsv4_errf(p->err, -EINVAL, "%s: %s: required field missing", p->hf.file,
                             f->hf ? f->hf : f->inf);
        a = f->def;
    }
    store(c, f, in_a ? a : in_b ? b : a);
    return 0;
}

/* Integer array `name` ("compress_ratios", ...) of 1..max entries. */
static int read_int_array(const struct src *s, const char *name, int *out, int max, double lo,
                          double hi, int *n_ret, struct dsv4_err *err)
{
    const cJSON *v;
    *n_ret = -1;
    int r = lookup(s, name, &v, err);
    if (r < 0 || !v)
        return r;
    if (!cJSON_IsArray(v))
        return dsv4_errf(err, -EINVAL, "%s: %s: must be an array", s->file, name);
    int n = 0;
    for (const cJSON *it = v->child; it; it = it->next, n++) {
        char what[96];
        if (n >= max)
            return dsv4_errf(err, -ERANGE, "%s: %s: more than %d entries", s->file, name, max);
        snprintf(what, sizeof(what), "%s[%d]", name, n);
        int64_t x = 0;
        r = get_int(s, what, it, lo, hi, &x, err);
        if (r < 0)
            return r;
        out[n] = (int)x;
    }
    if (n == 0)
        return dsv4_errf(err, -EINVAL, "%s: %s: must not be empty", s->file, name);
    *n_ret = n;
    return 0;
}

/* The same array from both files; they must agree. */
static int read_array_both(struct parse *p, const char *hf_name, const char *inf_name, int *out,
                           int max, double lo, double hi, int *n_ret)
{
    int *tmp = dsv4_xcalloc((size_t)max, sizeof(int));
    int na, nb, r;
    r = read_int_array(&p->hf, hf_name, out, max, lo, hi, &na, p->err);
    if (r == 0)
        r = read_int_array(&p->inf, inf_name, tmp, max, lo, hi, &nb, p->err);
    if (r == 0 && na >= 0 && nb >= 0 &&
        (na != nb || memcmp(out, tmp, (size_t)na * sizeof(int)) != 0))
        r = dsv4_errf(p->err, -EINVAL, "%s: %s disagrees with %s: %s", p->hf.file, hf_name,
                      p->inf.file, inf_name);
    if (r == 0 && na < 0 && nb >= 0)
        memcpy(out, tmp, (size_t)nb * sizeof(int));
    free(tmp);
    *n_ret = na >= 0 ? na : nb;
    return r;
}

/* A string field that, when present, must have one of the supported values. */
static int check_string(const struct src *s, const char *name, const char *want,
                        struct dsv4_err *err)
{
    const cJSON *v;
    int r = lookup(s, name, &v, err);
    if (r < 0 || !v)
        return r;
    if (!cJSON_IsString(v))
        return dsv4_errf(err, -EINVAL, "%s: %s: must be a string", s->file, name);
    if (strcmp(v->valuestring, want) != 0)
        return dsv4_errf(err, -ENOTSUP, "%s: %s: \"%.64s\" is not supported (only \"%s\")",
                         s->file, name, v->valuestring, want);
    return 0;
}

/* A boolean field that, when present, must be `want`. */
static int check_bool(const struct src *s, const char *name, bool want, struct dsv4_err *err)
{
    const cJSON *v;
    int r = lookup(s, name, &v, err);
    if (r < 0 || !v)
        return r;
    if (!cJSON_IsBool(v))
        return dsv4_errf(err, -EINVAL, "%s: %s: must be true or false", s->file, name);
    if (cJSON_IsTrue(v) != want)
        return dsv4_errf(err, -ENOTSUP, "%s: %s: only %s is supported", s->file, name,
                         want ? "true" : "false");
    return 0;
}

/* Values the engine implements exactly one of (spec §2.1); absent is fine. */
static int check_supported(struct parse *p)
{
    static const struct { bool hf; const char *key, *want; } strs[] = {
        { true, "model_type", "deepseek_v4" },
        { true, "scoring_func", "sqrtsoftplus" },
        { false, "score_func", "sqrtsoftplus" },
        { true, "topk_method", "noaux_tc" },
        { true, "hidden_act", "silu" },
        { true, "expert_dtype", "fp4" },
        { false, "expert_dtype", "fp4" },
        { true, "quantization_config.quant_method", "fp8" },
        { true, "quantization_config.fmt", "e4m3" },
        { true, "quantization_config.scale_fmt", "ue8m0" },
        { false, "dtype", "fp8" },
        { false, "scale_fmt", "ue8m0" },
        { true, "rope_scaling.type", "yarn" },
    };
    int r;
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(strs); i++)
        if ((r = check_string(strs[i].hf ? &p->hf : &p->inf, strs[i].key, strs[i].want,
                              p->err)) < 0)
            return r;
    if ((r = check_bool(&p->hf, "norm_topk_prob", true, p->err)) < 0 ||
        (r = check_bool(&p->hf, "tie_word_embeddings", false, p->err)) < 0)
        return r;
    const cJSON *v;
    if ((r = lookup(&p->hf, "num_key_value_heads", &v, p->err)) < 0)
        return r;
    if (v) {
        int64_t kv;
        if ((r = get_int(&p->hf, "num_key_value_heads", v, 1, 1, &kv, p->err)) < 0)
            return r;
    }
    /* V4.1 drafters size their own experts; that layout is not this one. */
    static const char *const v41[] = { "dspark_n_routed_experts", "dspark_num_experts_per_tok",
                                       "dspark_n_activated_experts" };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(v41); i++)
        for (int k = 0; k < 2; k++) {
            const struct src *s = k ? &p->inf : &p->hf;
            if ((r = lookup(s, v41[i], &v, p->err)) < 0)
                return r;
            if (v)
                return dsv4_errf(p->err, -ENOTSUP,
                                 "%s: %s: V4.1 drafter layout is not supported", s->file,
                                 v41[i]);
        }
    return 0;
}

/* quantization_config.weight_block_size: [B, B], B a power of two. */
static int read_weight_block(struct parse *p, struct dsv4_config *c)
{
    static const char name[] = "quantization_config.weight_block_size";
    const cJSON *v;
    int r = lookup(&p->hf, name, &v, p->err);
    if (r < 0)
        return r;
    c->weight_block = 128; /* the official layout's block (absent from the inference JSON) */
    if (!v)
        return 0;
    int b[2], n;
    if ((r = read_int_array(&p->hf, name, b, 2, 1, 65536, &n, p->err)) < 0)
        return r;
    if (n != 2)
        return dsv4_errf(p->err, -EINVAL, "%s: %s: must have 2 entries", p->hf.file, name);
    if (b[0] != b[1])
        return dsv4_errf(p->err, -ENOTSUP, "%s: %s: [%d, %d] is not square", p->hf.file, name,
                         b[0], b[1]);
    if (b[0] & (b[0] - 1))
        return dsv4_errf(p->err, -ENOTSUP, "%s: %s: %d is not a power of two", p->hf.file, name,
                         b[0]);
    c->weight_block = b[0];
    return 0;
}

/* MTP / drafter block count: see the banner. */
static int read_blocks(struct parse *p, struct dsv4_config *c, bool dspark)
{
    static const struct field mtp = { "num_nextn_predict_layers", "n_mtp_layers", F_INT,
                                      OFF(n_mtp_layers), 0, 16, false, false, 0 };
    int extra = c->n_compress_ratios - c->n_layers;
    int r;
    bool present;
    if (!dspark) {
        if ((r = read_field(p, c, &mtp, &present)) < 0)
            return r;
        if (extra != c->n_mtp_layers)
            return dsv4_errf(p->err, -EINVAL,
                             "%s: compress_ratios: %d entries, expected num_hidden_layers %d + "
                             "%d MTP blocks (num_nextn_predict_layers)",
                             p->hf.file, c->n_compress_ratios, c->n_layers, c->n_mtp_layers);
        return 0;
    }
    /* DSpark: the inference n_mtp_layers counts stages; HF's count is ignored. */
    struct field st = mtp;
    st.hf = NULL;
    st.off = OFF(dspark_stages);
    if ((r = read_field(p, c, &st, &present)) < 0)
        return r;
    if (!present)
        c->dspark_stages = extra;
    c->n_mtp_layers = 0;
    if (!present && extra < 1)
        return dsv4_errf(p->err, -EINVAL,
                         "%s: compress_ratios: %d entries leave none for a DSpark stage after "
                         "num_hidden_layers %d",
                         p->hf.file, c->n_compress_ratios, c->n_layers);
    if (c->dspark_stages < 1 || extra != c->dspark_stages)
        return dsv4_errf(p->err, -EINVAL,
                         "%s: compress_ratios: %d entries, expected num_hidden_layers %d + %d "
                         "DSpark stages (n_mtp_layers)",
                         p->hf.file, c->n_compress_ratios, c->n_layers, c->dspark_stages);
    for (int s = 0; s < c->dspark_stages; s++)
        if (c->compress_ratios[c->n_layers + s] != 0)
            return dsv4_errf(p->err, -EINVAL,
                             "%s: compress_ratios[%d]: DSpark stage %d must be 0 (window only), "
                             "got %d",
                             p->hf.file, c->n_layers + s, s, c->compress_ratios[c->n_layers + s]);
    return 0;
}

static int read_dspark(struct parse *p, struct dsv4_config *c, bool *dspark)
{
    static const char *const keys[] = { "dspark_block_size", "dspark_markov_rank",
                                        "dspark_noise_token_id", "dspark_target_layer_ids" };
    const cJSON *v;
    int r;
    *dspark = false;
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(keys); i++)
        for (int k = 0; k < 2; k++) {
            if ((r = lookup(k ? &p->inf : &p->hf, keys[i], &v, p->err)) < 0)
                return r;
            *dspark |= v != NULL;
        }
    if (!*dspark)
        return 0;
    bool present;
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(dspark_fields); i++)
        if ((r = read_field(p, c, &dspark_fields[i], &present)) < 0)
            return r;
    int n;
    r = read_array_both(p, "dspark_target_layer_ids", "dspark_target_layer_ids",
                        c->dspark_target_layer_ids, (int)DSV4_ARRAY_SIZE(c->dspark_target_layer_ids),
                        0, DSV4_CONFIG_MAX_LAYERS, &n);
    if (r < 0)
        return r;
    if (n < 0)
        return dsv4_errf(p->err, -EINVAL, "%s: dspark_target_layer_ids: required field missing",
                         p->hf.file);
    c->dspark_n_target_layers = n;
    return 0;
}

/* Cross-field checks and derived values. */
static int finish(struct parse *p, struct dsv4_config *c, bool dspark)
{
    const char *f = p->hf.file;
    struct dsv4_err *e = p->err;

    if (c->n_heads % c->o_groups)
        return dsv4_errf(e, -EINVAL, "%s: num_attention_heads %d is not a multiple of o_groups %d",
                         f, c->n_heads, c->o_groups);
    if (c->rope_head_dim >= c->head_dim)
        return dsv4_errf(e, -EINVAL, "%s: qk_rope_head_dim %d must be below head_dim %d", f,
                         c->rope_head_dim, c->head_dim);
    if (c->rope_head_dim % 2)
        return dsv4_errf(e, -EINVAL, "%s: qk_rope_head_dim %d must be even (rotated in pairs)", f,
                         c->rope_head_dim);
    if ((c->head_dim - c->rope_head_dim) % 64)
        return dsv4_errf(e, -EINVAL,
                         "%s: head_dim - qk_rope_head_dim = %d must be a multiple of 64 "
                         "(KV FP8 fake-quant blocks)",
                         f, c->head_dim - c->rope_head_dim);
    if (c->index_head_dim & (c->index_head_dim - 1) || c->index_head_dim < 32 ||
        c->index_head_dim < c->rope_head_dim)
        return dsv4_errf(e, -EINVAL,
                         "%s: index_head_dim %d must be a power of two, at least 32 and at least "
                         "qk_rope_head_dim %d (Hadamard, FP4 blocks of 32, RoPE tail)",
                         f, c->index_head_dim, c->rope_head_dim);
    /* Inputs of quantised GEMMs are fake-quantised in 128-blocks (spec §16). */
    static const struct { const char *name; size_t off; } k128[] = {
        { "hidden_size", OFF(dim) },
        { "q_lora_rank", OFF(q_lora_rank) },
        { "moe_intermediate_size", OFF(moe_inter_dim) },
    };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(k128); i++) {
        int v;
        memcpy(&v, (char *)c + k128[i].off, sizeof(v));
        if (v % 128)
            return dsv4_errf(e, -EINVAL,
                             "%s: %s %d must be a multiple of 128 (activation quant blocks)", f,
                             k128[i].name, v);
    }
    if ((int64_t)c->o_groups * c->o_lora_rank % 128)
        return dsv4_errf(e, -EINVAL,
                         "%s: o_groups * o_lora_rank = %lld must be a multiple of 128 "
                         "(activation quant blocks)",
                         f, (long long)c->o_groups * c->o_lora_rank);
    if ((int64_t)c->o_groups * c->o_lora_rank > (1 << 20) ||
        (int64_t)c->n_heads * c->head_dim > (1 << 24))
        return dsv4_errf(e, -ERANGE, "%s: attention projections too large", f);
    /* Keep the tensor inventory (6 tensors per routed expert per block) bounded. */
    if ((int64_t)c->n_compress_ratios * (6 * (int64_t)c->n_routed_experts + 64) > (1 << 24))
        return dsv4_errf(e, -ERANGE, "%s: %d blocks x %d routed experts: more than %d tensors", f,
                         c->n_compress_ratios, c->n_routed_experts, 1 << 24);
    if (c->n_activated_experts > c->n_routed_experts)
        return dsv4_errf(e, -EINVAL, "%s: num_experts_per_tok %d exceeds n_routed_experts %d", f,
                         c->n_activated_experts, c->n_routed_experts);
    if (c->n_hash_layers > c->n_layers)
        return dsv4_errf(e, -EINVAL, "%s: num_hash_layers %d exceeds num_hidden_layers %d", f,
                         c->n_hash_layers, c->n_layers);
    if (c->bos_token_id >= c->vocab_size || c->eos_token_id >= c->vocab_size)
        return dsv4_errf(e, -EINVAL, "%s: bos_token_id %d / eos_token_id %d must be below "
                         "vocab_size %d", f, c->bos_token_id, c->eos_token_id, c->vocab_size);
    if (c->max_position_embeddings == 0)
        c->max_position_embeddings = (int64_t)((double)c->original_seq_len * c->rope_factor);
    if (c->max_position_embeddings < 1)
        c->max_position_embeddings = c->original_seq_len;
    if (dspark) {
        if (c->dspark_noise_token_id >= c->vocab_size)
            return dsv4_errf(e, -EINVAL, "%s: dspark_noise_token_id %d must be below vocab_size %d",
                             f, c->dspark_noise_token_id, c->vocab_size);
        for (int i = 0; i < c->dspark_n_target_layers; i++) {
            int id = c->dspark_target_layer_ids[i];
            if (id >= c->n_layers || (i && id <= c->dspark_target_layer_ids[i - 1]))
                return dsv4_errf(e, -EINVAL,
                                 "%s: dspark_target_layer_ids[%d] = %d: ids must be increasing "
                                 "and below num_hidden_layers %d",
                                 f, i, id, c->n_layers);
        }
        if ((int64_t)c->dspark_n_target_layers * c->dim % 128)
            return dsv4_errf(e, -EINVAL, "%s: main_proj input must be a multiple of 128", f);
    }

    for (int i = 0; i < c->n_compress_ratios; i++) {
        int r = c->compress_ratios[i];
        c->layer_kind[i] = r == 0 ? DSV4_ATTN_WINDOW : r == 4 ? DSV4_ATTN_CSA : DSV4_ATTN_HCA;
    }
    c->n_blocks = c->n_compress_ratios;
    c->nope_dim = c->head_dim - c->rope_head_dim;
    c->hc_dim = c->hc_mult * c->dim;
    c->hc_mix = (2 + c->hc_mult) * c->hc_mult;
    c->heads_per_group = c->n_heads / c->o_groups;
    c->wo_a_in = c->heads_per_group * c->head_dim;
    c->attn_scale = 1.0 / sqrt((double)c->head_dim);
    c->index_scale = 1.0 / sqrt((double)c->index_head_dim) / sqrt((double)c->index_n_heads);
    return 0;
}

static int parse_roots(struct parse *p, struct dsv4_config *c)
{
    int r;
    bool present, dspark;

    memset(c, 0, sizeof(*c));
    if (!cJSON_IsObject(p->hf.root))
        return dsv4_errf(p->err, -EINVAL, "%s: top level must be a JSON object", p->hf.file);
    if (p->inf.root && !cJSON_IsObject(p->inf.root))
        return dsv4_errf(p->err, -EINVAL, "%s: top level must be a JSON object", p->inf.file);
    if ((r = check_supported(p)) < 0)
        return r;
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(fields); i++)
        if ((r = read_field(p, c, &fields[i], &present)) < 0)
            return r;
    if ((r = read_weight_block(p, c)) < 0)
        return r;
    /* 0 = window only, 1 is meaningless, ≥ 2 a compression ratio. */
    r = read_array_both(p, "compress_ratios", "compress_ratios", c->compress_ratios,
                        DSV4_CONFIG_MAX_LAYERS, 0, 65536, &c->n_compress_ratios);
    if (r < 0)
        return r;
    if (c->n_compress_ratios < 0)
        return dsv4_errf(p->err, -EINVAL, "%s: compress_ratios: required field missing",
                         p->hf.file);
    for (int i = 0; i < c->n_compress_ratios; i++)
        if (c->compress_ratios[i] == 1)
            return dsv4_errf(p->err, -EINVAL,
                             "%s: compress_ratios[%d]: 1 is not a ratio (0 = window only, "
                             "otherwise >= 2)",
                             p->hf.file, i);
    if ((r = read_dspark(p, c, &dspark)) < 0 || (r = read_blocks(p, c, dspark)) < 0)
        return r;
    return finish(p, c, dspark);
}

static cJSON *parse_json(const char *json, size_t len, const char *file, int *r,
                         struct dsv4_err *err)
{
    *r = 0;
    if (len > CONFIG_MAX_BYTES) {
        *r = dsv4_errf(err, -EFBIG, "%s: larger than %u bytes", file, CONFIG_MAX_BYTES);
        return NULL;
    }
    /* a config is a few KiB of scalars and per-layer lists */
    struct dsv4_json_limits lim = { .max_nodes = 1u << 20, .max_depth = 8, .max_array = 1u << 16,
                                    .max_members = 4096, .max_string = 1u << 16 };
    if ((*r = dsv4_json_prescan(json, len, &lim, file, err)) < 0)
        return NULL;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= json && at <= json + len ? (long)(at - json) : -1;
        *r = dsv4_errf(err, -EINVAL, "%s: not valid JSON (near byte %ld)", file, off);
    }
    return root;
}

int dsv4_config_parse_pair(const char *json, size_t len, const char *file_name,
                           const char *inf_json, size_t inf_len, const char *inf_file_name,
                           struct dsv4_config *ret, struct dsv4_err *err)
{
    int r;
    cJSON *hf, *inf = NULL;
    hf = parse_json(json, len, file_name, &r, err);
    if (hf && inf_json)
        inf = parse_json(inf_json, inf_len, inf_file_name, &r, err);
    if (r == 0) {
        struct parse p = { .hf = { hf, file_name }, .inf = { inf, inf_file_name }, .err = err };
        r = parse_roots(&p, ret);
    }
    cJSON_Delete(hf);
    cJSON_Delete(inf);
    return r;
}

int dsv4_config_parse(const char *json, size_t len, const char *file_name,
                      struct dsv4_config *ret, struct dsv4_err *err)
{
    return dsv4_config_parse_pair(json, len, file_name, NULL, 0, NULL, ret, err);
}

/* Whole file into a NUL-terminated buffer. -ENOENT is returned as is so the
 * caller can treat a missing optional file as absent. */
static int slurp(const char *path, char **ret, size_t *len, struct dsv4_err *err)
{
    return dsv4_read_file(path, CONFIG_MAX_BYTES, ret, len, err);
}

int dsv4_config_load(const char *model_dir, struct dsv4_config *ret, struct dsv4_err *err)
{
    size_t n = strlen(model_dir) + 32;
    char *hf_path = dsv4_xmalloc(n), *inf_path = dsv4_xmalloc(n);
    char *hf = NULL, *inf = NULL;
    size_t hf_len = 0, inf_len = 0;
    snprintf(hf_path, n, "%s/config.json", model_dir);
    snprintf(inf_path, n, "%s/inference/config.json", model_dir);
    int r = slurp(hf_path, &hf, &hf_len, err);
    if (r == 0) {
        r = slurp(inf_path, &inf, &inf_len, err);
        if (r == -ENOENT)
            r = 0;
    }
    if (r == 0)
        r = dsv4_config_parse_pair(hf, hf_len, hf_path, inf, inf_len, inf_path, ret, err);
    free(hf);
    free(inf);
    free(hf_path);
    free(inf_path);
    return r;
}
