/* SPDX-License-Identifier: MIT */
/*
 * Model config: the real Flash, Pro and DSpark-Flash configs load with the
 * right derived constants (values from target spec §2, dspark spec §2/§10),
 * tiny configs load, and every check rejects a config broken in exactly one
 * way with the expected message; the tensor inventory derived from the
 * Flash/Pro/DSpark configs has the spec's counts, bytes and sample shapes
 * (target spec §3.3/§3.4, dspark spec §10).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "inventory.h"
#include "tokenizer.h"
#include <sys/stat.h>
#include <unistd.h>

#define CFG_DIR FIXTURES_DIR "/configs"

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int count_kind(const struct dsv4_config *c, enum dsv4_attn_kind k, int from, int to)
{
    int n = 0;
    for (int i = from; i < to; i++)
        n += c->layer_kind[i] == k;
    return n;
}

static void test_flash(void **state)
{
    (void)state;
    struct dsv4_config *c = malloc(sizeof(*c));
    struct dsv4_err e = { "" };
    assert_int_equal(dsv4_config_load(CFG_DIR "/flash", c, &e), 0);
    assert_int_equal(c->vocab_size, 129280);
    assert_int_equal(c->dim, 4096);
    assert_int_equal(c->n_layers, 43);
    assert_int_equal(c->n_heads, 64);
    assert_int_equal(c->head_dim, 512);
    assert_int_equal(c->rope_head_dim, 64);
    assert_int_equal(c->q_lora_rank, 1024);
    assert_int_equal(c->o_groups, 8);
    assert_int_equal(c->o_lora_rank, 1024);
    assert_int_equal(c->window, 128);
    assert_int_equal(c->index_topk, 512);
    assert_int_equal(c->n_routed_experts, 256);
    assert_int_equal(c->n_activated_experts, 6);
    assert_int_equal(c->moe_inter_dim, 2048);
    assert_int_equal(c->n_hash_layers, 3);
    assert_int_equal(c->n_mtp_layers, 1);
    assert_int_equal(c->dspark_stages, 0);
    assert_int_equal(c->n_compress_ratios, 44);
    assert_int_equal(c->n_blocks, 44);
    assert_int_equal(c->weight_block, 128);
    assert_int_equal(c->original_seq_len, 65536);
    assert_int_equal(c->max_position_embeddings, 1048576);
    assert_int_equal(c->bos_token_id, 0);
    assert_int_equal(c->eos_token_id, 1);
    assert_true(c->route_scale == 1.5);
    assert_true(c->rope_theta == 10000.0 && c->compress_rope_theta == 160000.0);
    assert_true(c->rope_factor == 16.0 && c->beta_fast == 32.0 && c->beta_slow == 1.0);
    assert_true(c->norm_eps == 1e-6 && c->hc_eps == 1e-6 && c->swiglu_limit == 10.0);
    /* §2.2: 0-1 window, even 2..42 CSA, odd 3..41 HCA, MTP window. */
    assert_int_equal(c->layer_kind[0], DSV4_ATTN_WINDOW);
    assert_int_equal(c->layer_kind[1], DSV4_ATTN_WINDOW);
    for (int L = 2; L < 43; L++)
        assert_int_equal(c->layer_kind[L], L % 2 ? DSV4_ATTN_HCA : DSV4_ATTN_CSA);
    assert_int_equal(c->layer_kind[43], DSV4_ATTN_WINDOW);
    assert_int_equal(count_kind(c, DSV4_ATTN_CSA, 0, 43), 21);
    assert_int_equal(count_kind(c, DSV4_ATTN_HCA, 0, 43), 20);
    assert_true(dsv4_config_layer_hashed(c, 2) && !dsv4_config_layer_hashed(c, 3));
    assert_false(dsv4_config_layer_hashed(c, 43));
    /* §2.3 derived constants. */
    assert_int_equal(c->nope_dim, 448);
    assert_int_equal(c->hc_dim, 16384);
    assert_int_equal(c->hc_mix, 24);
    assert_int_equal(c->heads_per_group, 8);
    assert_int_equal(c->wo_a_in, 4096);
    assert_true(fabs(c->attn_scale - 0.0441941738241592) < 1e-15);
    assert_true(fabs(c->index_scale - 0.0110485434560398) < 1e-15);
    free(c);
}

static void test_pro(void **state)
{
    (void)state;
    struct dsv4_config *c = malloc(sizeof(*c));
    struct dsv4_err e = { "" };
    assert_int_equal(dsv4_config_load(CFG_DIR "/pro", c, &e), 0);
    assert_int_equal(c->dim, 7168);
    assert_int_equal(c->n_layers, 61);
    assert_int_equal(c->n_heads, 128);
    assert_int_equal(c->q_lora_rank, 1536);
    assert_int_equal(c->o_groups, 16);
    assert_int_equal(c->index_topk, 1024);
    assert_int_equal(c->n_routed_experts, 384);
    assert_int_equal(c->moe_inter_dim, 3072);
    assert_true(c->route_scale == 2.5);
    assert_int_equal(c->n_compress_ratios, 62);
    assert_int_equal(c->n_mtp_layers, 1);
    /* Pro has no window-only main layer: 0-1 HCA, 30 CSA, 31 HCA. */
    assert_int_equal(c->layer_kind[0], DSV4_ATTN_HCA);
    assert_int_equal(c->layer_kind[1], DSV4_ATTN_HCA);
    assert_int_equal(count_kind(c, DSV4_ATTN_WINDOW, 0, 61), 0);
    assert_int_equal(count_kind(c, DSV4_ATTN_CSA, 0, 61), 30);
    assert_int_equal(count_kind(c, DSV4_ATTN_HCA, 0, 61), 31);
    assert_int_equal(c->layer_kind[61], DSV4_ATTN_WINDOW);
    assert_int_equal(c->hc_dim, 28672);
    assert_int_equal(c->heads_per_group, 8);
    assert_int_equal(c->wo_a_in, 4096);
    free(c);
}

static void test_flash_dspark(void **state)
{
    (void)state;
    struct dsv4_config *c = malloc(sizeof(*c));
    struct dsv4_err e = { "" };
    assert_int_equal(dsv4_config_load(CFG_DIR "/flash-dspark", c, &e), 0);
    assert_int_equal(c->n_layers, 43);
    assert_int_equal(c->n_compress_ratios, 46);
    assert_int_equal(c->n_blocks, 46);
    assert_int_equal(c->n_mtp_layers, 0);      /* num_nextn_predict_layers 1 is ignored */
    assert_int_equal(c->dspark_stages, 3);     /* inference/config.json n_mtp_layers */
    assert_int_equal(c->dspark_block_size, 5);
    assert_int_equal(c->dspark_markov_rank, 256);
    assert_int_equal(c->dspark_noise_token_id, 128799);
    assert_int_equal(c->dspark_n_target_layers, 3);
    assert_int_equal(c->dspark_target_layer_ids[0], 40);
    assert_int_equal(c->dspark_target_layer_ids[1], 41);
    assert_int_equal(c->dspark_target_layer_ids[2], 42);
    for (int s = 43; s < 46; s++)
        assert_int_equal(c->layer_kind[s], DSV4_ATTN_WINDOW);

    /* Without inference/config.json the stage count comes from compress_ratios. */
    char *hf = read_text(CFG_DIR "/flash-dspark/config.json");
    assert_int_equal(dsv4_config_parse(hf, strlen(hf), "config.json", c, &e), 0);
    assert_int_equal(c->dspark_stages, 3);
    free(hf);
    free(c);
}

/* Tiny configs: spec §20 and the tiny fixture's (tools/make_tiny_model.py). */
static void test_tiny(void **state)
{
    (void)state;
    static const char *const tiny[] = {
        "{\"vocab_size\":1024,\"hidden_size\":128,\"num_hidden_layers\":6,"
        "\"compress_ratios\":[0,128,4,128,4,0,0],\"num_nextn_predict_layers\":1,"
        "\"num_hash_layers\":3,\"num_attention_heads\":4,\"head_dim\":128,\"qk_rope_head_dim\":64,"
        "\"q_lora_rank\":128,\"o_groups\":2,\"o_lora_rank\":64,\"sliding_window\":32,"
        "\"index_n_heads\":4,\"index_head_dim\":128,\"index_topk\":8,\"n_routed_experts\":8,"
        "\"num_experts_per_tok\":2,\"n_shared_experts\":1,\"moe_intermediate_size\":128,"
        "\"routed_scaling_factor\":1.5,\"swiglu_limit\":0.5,\"hc_mult\":4,"
        "\"hc_sinkhorn_iters\":20,\"hc_eps\":1e-6,\"rms_norm_eps\":1e-6,\"rope_theta\":10000,"
        "\"compress_rope_theta\":160000,\"rope_scaling\":{\"factor\":16,"
        "\"original_max_position_embeddings\":65536,\"beta_fast\":32,\"beta_slow\":1}}",
        "{\"vocab_size\":256,\"hidden_size\":128,\"num_hidden_layers\":5,"
        "\"compress_ratios\":[0,4,8,4,16,0],\"num_nextn_predict_layers\":1,\"num_hash_layers\":2,"
        "\"num_attention_heads\":4,\"head_dim\":128,\"qk_rope_head_dim\":64,\"q_lora_rank\":128,"
        "\"o_groups\":2,\"o_lora_rank\":64,\"sliding_window\":32,\"index_n_heads\":4,"
        "\"index_head_dim\":128,\"index_topk\":24,\"n_routed_experts\":6,"
        "\"num_experts_per_tok\":2,\"n_shared_experts\":1,\"moe_intermediate_size\":128,"
        "\"routed_scaling_factor\":1.5,\"swiglu_limit\":10.0,\"hc_mult\":4,"
        "\"hc_sinkhorn_iters\":20,\"rope_theta\":10000,\"compress_rope_theta\":160000,"
        "\"max_position_embeddings\":4096,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":16,"
        "\"original_max_position_embeddings\":512,\"beta_fast\":32,\"beta_slow\":1}}",
    };
    struct dsv4_config *c = malloc(sizeof(*c));
    struct dsv4_err e = { "" };
    assert_int_equal(dsv4_config_parse(tiny[0], strlen(tiny[0]), "tiny0", c, &e), 0);
    assert_int_equal(c->n_blocks, 7);
    assert_int_equal(c->layer_kind[1], DSV4_ATTN_HCA);
    assert_int_equal(c->layer_kind[2], DSV4_ATTN_CSA);
    assert_int_equal(c->nope_dim, 64);
    assert_true(c->norm_eps == 1e-6);
    assert_int_equal(c->max_position_embeddings, 65536 * 16); /* default: original × factor */
    assert_int_equal(dsv4_config_parse(tiny[1], strlen(tiny[1]), "tiny1", c, &e), 0);
    assert_int_equal(c->layer_kind[2], DSV4_ATTN_HCA);
    assert_int_equal(c->compress_ratios[4], 16);
    assert_int_equal(c->max_position_embeddings, 4096);
    assert_true(c->hc_eps == 1e-6); /* default when absent */
    free(c);
}

/* One broken config: set `path` (a.b nests) in the HF JSON, the inference
 * JSON or both to `value` (JSON text; NULL deletes), expect `msg` (NULL:
 * expect success). */
enum { HF, INF, BOTH };
struct mutation {
    const char *fixture;
    int where;
    const char *path;
    const char *value;
    const char *msg;
};

static const struct mutation mutations[] = {
    { "flash", HF, "hidden_size", NULL, "config.json: hidden_size: required field missing" },
    { "flash", HF, "hidden_size", "4096.5", "hidden_size: must be an integer, got 4096.5" },
    { "flash", HF, "hidden_size", "\"4096\"", "hidden_size: must be a number" },
    { "flash", HF, "hidden_size", "true", "hidden_size: must be a number" },
    { "flash", HF, "num_attention_heads", "0", "num_attention_heads: 0 is out of range [1, 4096]" },
    { "flash", HF, "vocab_size", "1e30", "vocab_size: 1e+30 is out of range [1, 16777216]" },
    { "flash", HF, "rope_theta", "0", "rope_theta: 0 is out of range (0," },
    { "flash", HF, "rope_theta", "-10000", "rope_theta: -10000 is out of range" },
    { "flash", HF, "rms_norm_eps", "2", "rms_norm_eps: 2 is out of range" },
    { "flash", HF, "rope_scaling", "16", "rope_scaling: must be an object" },
    { "flash", HF, "rope_scaling.factor", NULL, "rope_scaling.factor: required field missing" },
    { "flash", HF, "rope_scaling.type", "\"linear\"", "rope_scaling.type: \"linear\" is not supported" },
    { "flash", HF, "compress_ratios", NULL, "compress_ratios: required field missing" },
    { "flash", HF, "compress_ratios", "4", "compress_ratios: must be an array" },
    { "flash", HF, "compress_ratios", "[]", "compress_ratios: must not be empty" },
    { "flash", HF, "compress_ratios", "[0,0,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,"
      "128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4]",
      "compress_ratios: 43 entries, expected num_hidden_layers 43 + 1 MTP blocks" },
    { "flash", HF, "compress_ratios", "[0,0,4,128,4,1,4,128,4,128,4,128,4,128,4,128,4,128,4,"
      "128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,0]",
      "compress_ratios[5]: 1 is not a ratio" },
    { "flash", HF, "compress_ratios", "[0,0,-4,128]", "compress_ratios[2]: -4 is out of range" },
    { "flash", HF, "compress_ratios", "[0,0,4.5,128]", "compress_ratios[2]: must be an integer" },
    { "flash", HF, "num_nextn_predict_layers", "2",
      "compress_ratios: 44 entries, expected num_hidden_layers 43 + 2 MTP blocks" },
    { "flash", HF, "o_groups", "6", "num_attention_heads 64 is not a multiple of o_groups 6" },
    { "flash", HF, "qk_rope_head_dim", "512", "qk_rope_head_dim 512 must be below head_dim 512" },
    { "flash", HF, "qk_rope_head_dim", "63", "qk_rope_head_dim 63 must be even" },
    { "flash", HF, "head_dim", "500", "head_dim - qk_rope_head_dim = 436 must be a multiple of 64" },
    { "flash", HF, "index_head_dim", "96", "index_head_dim 96 must be a power of two" },
    { "flash", HF, "index_head_dim", "16", "index_head_dim 16 must be a power of two, at least 32" },
    { "flash", HF, "hidden_size", "4000", "hidden_size 4000 must be a multiple of 128" },
    { "flash", HF, "moe_intermediate_size", "2000", "moe_intermediate_size 2000 must be a multiple of 128" },
    { "flash", HF, "moe_intermediate_size", "0", "moe_intermediate_size: 0 is out of range" },
    { "flash", HF, "o_lora_rank", "8", "o_groups * o_lora_rank = 64 must be a multiple of 128" },
    { "flash", HF, "num_experts_per_tok", "300", "num_experts_per_tok 300 exceeds n_routed_experts 256" },
    { "flash", HF, "n_routed_experts", "65536",
      "44 blocks x 65536 routed experts: more than 16777216 tensors" },
    { "flash", HF, "num_hash_layers", "44", "num_hash_layers 44 exceeds num_hidden_layers 43" },
    { "flash", HF, "sliding_window", "0", "sliding_window: 0 is out of range" },
    { "flash", HF, "eos_token_id", "129280", "eos_token_id 129280 must be below vocab_size 129280" },
    { "flash", HF, "quantization_config.weight_block_size", "[128,64]",
      "weight_block_size: [128, 64] is not square" },
    { "flash", HF, "quantization_config.weight_block_size", "[96,96]",
      "weight_block_size: 96 is not a power of two" },
    { "flash", HF, "quantization_config.weight_block_size", "[128]",
      "weight_block_size: must have 2 entries" },
    { "flash", HF, "quantization_config.scale_fmt", "\"fp32\"", "scale_fmt: \"fp32\" is not supported" },
    { "flash", HF, "scoring_func", "\"sigmoid\"", "scoring_func: \"sigmoid\" is not supported" },
    { "flash", HF, "expert_dtype", "\"fp8\"", "expert_dtype: \"fp8\" is not supported" },
    { "flash", HF, "num_key_value_heads", "8", "num_key_value_heads: 8 is out of range [1, 1]" },
    { "flash", HF, "tie_word_embeddings", "true", "tie_word_embeddings: only false is supported" },
    /* DSpark keys. */
    { "flash", HF, "dspark_block_size", "5", "dspark_markov_rank: required field missing" },
    /* Present in one file is enough. */
    { "flash-dspark", HF, "dspark_markov_rank", NULL, NULL },
    { "flash-dspark", INF, "dspark_markov_rank", NULL, NULL },
    { "flash-dspark", BOTH, "dspark_target_layer_ids", "[40,42,41]",
      "dspark_target_layer_ids[2] = 41: ids must be increasing" },
    { "flash-dspark", BOTH, "dspark_target_layer_ids", "[41,42,43]",
      "dspark_target_layer_ids[2] = 43: ids must be increasing and below num_hidden_layers 43" },
    { "flash-dspark", BOTH, "dspark_noise_token_id", "129280",
      "dspark_noise_token_id 129280 must be below vocab_size 129280" },
    { "flash-dspark", HF, "dspark_n_routed_experts", "128",
      "dspark_n_routed_experts: V4.1 drafter layout is not supported" },
    { "flash-dspark", INF, "n_mtp_layers", "2",
      "compress_ratios: 46 entries, expected num_hidden_layers 43 + 2 DSpark stages" },
    { "flash-dspark", INF, "n_mtp_layers", "0",
      "compress_ratios: 46 entries, expected num_hidden_layers 43 + 0 DSpark stages" },
    /* The two files must agree. */
    { "flash-dspark", INF, "dim", "7168",
      "config.json: hidden_size = 4096 disagrees with" },
    { "flash-dspark", INF, "route_scale", "2.5",
      "config.json: routed_scaling_factor = 1.5 disagrees with" },
    { "flash-dspark", INF, "dspark_target_layer_ids", "[39,41,42]",
      "dspark_target_layer_ids disagrees with" },
    { "flash-dspark", INF, "compress_ratios", "[0,0,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,"
      "128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,128,4,0,0,4]",
      "compress_ratios disagrees with" },
    { "flash-dspark", INF, "score_func", "\"sigmoid\"", "score_func: \"sigmoid\" is not supported" },
    { "flash-dspark", INF, "window_size", "-1", "inference/config.json: window_size: -1 is out of range" },
};

static void set_path(cJSON *root, const char *path, const char *value)
{
    char outer[64];
    const char *dot = strchr(path, '.');
    cJSON *obj = root;
    if (dot) {
        snprintf(outer, sizeof(outer), "%.*s", (int)(dot - path), path);
        obj = cJSON_GetObjectItemCaseSensitive(root, outer);
        assert_non_null(obj);
        path = dot + 1;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(obj, path);
    if (value) {
        cJSON *v = cJSON_Parse(value);
        assert_non_null(v);
        cJSON_AddItemToObject(obj, path, v);
    }
}

static void test_malformed(void **state)
{
    (void)state;
    struct dsv4_config *c = malloc(sizeof(*c));
    for (size_t i = 0; i < sizeof(mutations) / sizeof(mutations[0]); i++) {
        const struct mutation *m = &mutations[i];
        char path[256];
        snprintf(path, sizeof(path), CFG_DIR "/%s/config.json", m->fixture);
        char *hf = read_text(path);
        snprintf(path, sizeof(path), CFG_DIR "/%s/inference/config.json", m->fixture);
        char *inf = strcmp(m->fixture, "flash-dspark") == 0 ? read_text(path) : NULL;
        char *texts[2] = { hf, inf };
        for (int k = 0; k < 2; k++) {
            if (!(m->where == BOTH || m->where == k))
                continue;
            cJSON *root = cJSON_Parse(texts[k]);
            assert_non_null(root);
            set_path(root, m->path, m->value);
            texts[k] = cJSON_PrintUnformatted(root);
            cJSON_Delete(root);
        }
        struct dsv4_err e = { "" };
        int r = dsv4_config_parse_pair(texts[0], strlen(texts[0]), "x/config.json", texts[1],
                                       texts[1] ? strlen(texts[1]) : 0,
                                       "x/inference/config.json", c, &e);
        if (!m->msg) {
            if (r != 0)
                fail_msg("case %zu (%s %s): unexpected error: %s", i, m->fixture, m->path, e.msg);
        } else if (r >= 0 || !strstr(e.msg, m->msg)) {
            fail_msg("case %zu (%s %s): got r=%d '%s', expected '%s'", i, m->fixture, m->path, r,
                     e.msg, m->msg);
        }
        for (int k = 0; k < 2; k++)
            if (texts[k] != hf && texts[k] != inf)
                free(texts[k]);
        free(hf);
        free(inf);
    }
    free(c);
}

/* Breakage that needs the raw text. */
static void test_malformed_text(void **state)
{
    (void)state;
    static const struct { const char *text, *msg; } cases[] = {
        { "[1, 2]", "cfg.json: top level must be a JSON object" },
        { "{\"hidden_size\": 4096", "cfg.json: not valid JSON" },
        { "", "cfg.json: not valid JSON" },
        { "{\"vocab_size\": -1e400}", "vocab_size: must be finite" },
        { "{\"vocab_size\": 4096, \"vocab_size\": 4096}", "vocab_size: key appears twice" },
        { "{\"quantization_config\": {\"quant_method\": \"fp8\", \"quant_method\": \"fp8\"}}",
          "quantization_config.quant_method: key appears twice" },
    };
    struct dsv4_config *c = malloc(sizeof(*c));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dsv4_err e = { "" };
        int r = dsv4_config_parse(cases[i].text, strlen(cases[i].text), "cfg.json", c, &e);
        if (r >= 0 || !strstr(e.msg, cases[i].msg))
            fail_msg("case %zu: got r=%d '%s', expected '%s'", i, r, e.msg, cases[i].msg);
    }
    /* Duplicate key in the real file. */
    char *hf = read_text(CFG_DIR "/flash/config.json");
    size_t n = strlen(hf);
    char *dup = malloc(n + 64);
    snprintf(dup, n + 64, "{\"num_hash_layers\": 3,%s", hf + 1);
    struct dsv4_err e = { "" };
    assert_true(dsv4_config_parse(dup, strlen(dup), "cfg.json", c, &e) < 0);
    assert_non_null(strstr(e.msg, "cfg.json: num_hash_layers: key appears twice"));
    free(dup);
    free(hf);

    /* Missing directory: the path is named. */
    assert_int_equal(dsv4_config_load(CFG_DIR "/no-such-model", c, &e), -ENOENT);
    assert_non_null(strstr(e.msg, "no-such-model/config.json: cannot open"));
    free(c);
}

/* Inventory counts straight from the config against spec §3.4 [CKPT]. */
static void check_hist(const struct dsv4_inventory *inv, const size_t want[_DSV4_DTYPE_MAX])
{
    for (int t = 0; t < _DSV4_DTYPE_MAX; t++)
        if (inv->n_by_dtype[t] != want[t])
            fail_msg("%s: %zu, expected %zu", dsv4_dtype_name((enum dsv4_dtype)t),
                     inv->n_by_dtype[t], want[t]);
}

static void expect(const struct dsv4_inventory *inv, const char *name, enum dsv4_dtype t,
                   uint64_t d0, uint64_t d1)
{
    const struct dsv4_inv_entry *e = dsv4_inventory_find(inv, name);
    if (!e)
        fail_msg("%s: not in the inventory", name);
    if (e->dtype != t || e->shape[0] != d0 || e->shape[1] != d1)
        fail_msg("%s: %s [%llu, %llu], expected %s [%llu, %llu]", name, dsv4_dtype_name(e->dtype),
                 (unsigned long long)e->shape[0], (unsigned long long)e->shape[1],
                 dsv4_dtype_name(t), (unsigned long long)d0, (unsigned long long)d1);
}

static void test_inventory(void **state)
{
    (void)state;
    struct dsv4_config *c = malloc(sizeof(*c));
    struct dsv4_err e = { "" };
    struct dsv4_inventory inv;

    assert_int_equal(dsv4_config_load(CFG_DIR "/flash", c, &e), 0);
    dsv4_inventory_build(c, &inv);
    assert_int_equal(inv.n, 69187);
    assert_int_equal(inv.total_bytes, 159609485896ull);
    check_hist(&inv, (const size_t[_DSV4_DTYPE_MAX]){
        [DSV4_DTYPE_BF16] = 433, [DSV4_DTYPE_F32] = 417, [DSV4_DTYPE_F8_E4M3] = 375,
        [DSV4_DTYPE_F8_E8M0] = 34167, [DSV4_DTYPE_I64] = 3, [DSV4_DTYPE_I8] = 33792 });
    /* Shard-header samples quoted in spec §3.3. */
    expect(&inv, "layers.0.ffn.gate.tid2eid", DSV4_DTYPE_I64, 129280, 6);
    expect(&inv, "layers.0.ffn.gate.weight", DSV4_DTYPE_BF16, 256, 4096);
    expect(&inv, "layers.0.attn.wo_a.weight", DSV4_DTYPE_F8_E4M3, 8192, 4096);
    expect(&inv, "layers.0.attn.wo_a.scale", DSV4_DTYPE_F8_E8M0, 64, 32);
    expect(&inv, "layers.0.attn.wq_a.scale", DSV4_DTYPE_F8_E8M0, 8, 32);
    expect(&inv, "layers.0.ffn.experts.0.w1.weight", DSV4_DTYPE_I8, 2048, 2048);
    expect(&inv, "layers.0.ffn.experts.0.w1.scale", DSV4_DTYPE_F8_E8M0, 2048, 128);
    expect(&inv, "layers.2.attn.compressor.ape", DSV4_DTYPE_F32, 4, 1024);
    expect(&inv, "layers.3.attn.compressor.ape", DSV4_DTYPE_F32, 128, 512);
    expect(&inv, "layers.2.attn.indexer.compressor.wkv.weight", DSV4_DTYPE_BF16, 256, 4096);
    expect(&inv, "mtp.0.e_proj.scale", DSV4_DTYPE_F8_E8M0, 32, 32);
    expect(&inv, "hc_head_scale", DSV4_DTYPE_F32, 1, 0);
    assert_null(dsv4_inventory_find(&inv, "layers.0.ffn.gate.bias"));   /* hash layer */
    assert_null(dsv4_inventory_find(&inv, "layers.0.attn.compressor.ape")); /* window */
    assert_null(dsv4_inventory_find(&inv, "layers.3.attn.indexer.wq_b.weight")); /* HCA */
    const struct dsv4_inv_entry *w2 = dsv4_inventory_find(&inv, "layers.9.ffn.experts.77.w2.scale");
    assert_non_null(w2);
    assert_int_equal(w2->role, DSV4_INV_EXPERT_SCALE);
    assert_int_equal(w2->block, 9);
    assert_int_equal(w2->expert, 77);
    assert_int_equal(w2->proj, 2);
    assert_int_equal(dsv4_inventory_find(&inv, "mtp.0.attn.wkv.weight")->block, 43);
    assert_int_equal(dsv4_inventory_find(&inv, "embed.weight")->block, -1);
    assert_int_equal(inv.expert_bytes, 3ull * (2048 * 2048 + 2048 * 128));
    assert_int_equal(inv.total_bytes - inv.dense_bytes, inv.expert_bytes * 256 * 44);
    assert_string_equal(inv.entries[0].name, "embed.weight");
    dsv4_inventory_free(&inv);

    assert_int_equal(dsv4_config_load(CFG_DIR "/pro", c, &e), 0);
    dsv4_inventory_build(c, &inv);
    assert_int_equal(inv.n, 145116);
    assert_int_equal(inv.total_bytes, 864704792696ull); /* index metadata.total_size */
    check_hist(&inv, (const size_t[_DSV4_DTYPE_MAX]){
        [DSV4_DTYPE_BF16] = 619, [DSV4_DTYPE_F32] = 590, [DSV4_DTYPE_F8_E4M3] = 528,
        [DSV4_DTYPE_F8_E8M0] = 71952, [DSV4_DTYPE_I64] = 3, [DSV4_DTYPE_I8] = 71424 });
    expect(&inv, "layers.0.attn.compressor.wkv.weight", DSV4_DTYPE_BF16, 512, 7168);
    expect(&inv, "layers.7.ffn.experts.383.w2.weight", DSV4_DTYPE_I8, 7168, 1536);
    expect(&inv, "layers.7.ffn.experts.383.w2.scale", DSV4_DTYPE_F8_E8M0, 7168, 96);
    expect(&inv, "layers.10.attn.indexer.wq_b.scale", DSV4_DTYPE_F8_E8M0, 64, 12);
    expect(&inv, "layers.5.attn.wo_b.scale", DSV4_DTYPE_F8_E8M0, 56, 128);
    dsv4_inventory_free(&inv);

    /* DSpark: mtp.0-2 hold 4705 tensors (dspark spec §10), the legacy MTP block is gone. */
    assert_int_equal(dsv4_config_load(CFG_DIR "/flash-dspark", c, &e), 0);
    dsv4_inventory_build(c, &inv);
    size_t n_mtp = 0;
    for (size_t i = 0; i < inv.n; i++)
        n_mtp += strncmp(inv.entries[i].name, "mtp.", 4) == 0;
    assert_int_equal(n_mtp, 4705);
    assert_int_equal(inv.n, 69187 - 1575 + 4705);
    expect(&inv, "mtp.0.main_proj.weight", DSV4_DTYPE_F8_E4M3, 4096, 12288);
    expect(&inv, "mtp.0.main_proj.scale", DSV4_DTYPE_F8_E8M0, 32, 96);
    expect(&inv, "mtp.2.markov_head.markov_w1.weight", DSV4_DTYPE_BF16, 129280, 256);
    expect(&inv, "mtp.2.confidence_head.proj.weight", DSV4_DTYPE_BF16, 1, 4352);
    expect(&inv, "mtp.1.ffn.experts.255.w3.weight", DSV4_DTYPE_I8, 2048, 2048);
    assert_null(dsv4_inventory_find(&inv, "mtp.0.e_proj.weight"));
    assert_null(dsv4_inventory_find(&inv, "mtp.1.norm.weight"));
    assert_null(dsv4_inventory_find(&inv, "mtp.2.main_norm.weight"));
    dsv4_inventory_free(&inv);
    free(c);
}

/* A model directory's small files never hang the open and never exceed their cap: a FIFO
 * named config.json or tokenizer.json is refused at once (it used to block `inspect` and
 * `tokenize` for ever), and so is a config.json that is too large or too deeply nested. */
static void test_model_dir_files(void **state)
{
    (void)state;
    char dir[64] = "/tmp/dsv4-cfgdir-XXXXXX", path[128];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/config.json", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    struct dsv4_config c;
    struct dsv4_err err = { "" };
    assert_int_equal(dsv4_config_load(dir, &c, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "not a regular file"));
    unlink(path);
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    dsv4_tokenizer *t = NULL;
    assert_int_equal(dsv4_tokenizer_open_dir(dir, &t, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "not a regular file"));
    unlink(path);
    /* nesting a config never has: refused before a tree is built */
    snprintf(path, sizeof(path), "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 100000; i++)
        fputc('[', f);
    fclose(f);
    assert_true(dsv4_config_load(dir, &c, &err) < 0);
    assert_non_null(strstr(err.msg, "nesting deeper"));
    /* a file past the cap is refused by its size, unread */
    assert_int_equal(truncate(path, 64 << 20), 0);
    assert_int_equal(dsv4_config_load(dir, &c, &err), -EFBIG);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flash),
        cmocka_unit_test(test_pro),
        cmocka_unit_test(test_flash_dspark),
        cmocka_unit_test(test_tiny),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_malformed_text),
        cmocka_unit_test(test_inventory),
        cmocka_unit_test(test_model_dir_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
