/* SPDX-License-Identifier: MIT */
/*
 * dsv4ctl inspect --model DIR: load the config and the checkpoint headers,
 * check the checkpoint against the tensor inventory the config implies, and
 * print what the model is (layer schedule, tensor counts, byte budgets).
 * Problems are printed one per line and the exit status is 1; unreadable or
 * malformed inputs give one error line and a sysexits status.
 */
#include "dsv4ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "inventory.h"
#include "safetensors.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: dsv4ctl inspect --model DIR\n\n"
               "Check the checkpoint in DIR (config.json, optional inference/config.json,\n"
               "model.safetensors.index.json and shards) against the tensors its config\n"
               "implies, then summarise it. Exit 0: complete; 1: problems listed;\n"
               "64 usage, 65 malformed input, 66 missing input, 74 I/O error.\n");
}

static int exit_for(int r)
{
    switch (-r) {
    case ENOENT: case ENOTDIR: case EACCES: return DSV4_EXIT_NOINPUT;
    case EIO: return DSV4_EXIT_IOERR;
    default: return DSV4_EXIT_DATAERR;
    }
}

static void print_problem(void *ctx, const char *line)
{
    (void)ctx;
    printf("%s\n", line);
}

static const char *kind_name(enum dsv4_attn_kind k)
{
    return k == DSV4_ATTN_WINDOW ? "window" : k == DSV4_ATTN_CSA ? "CSA" : "HCA";
}

static void gib(uint64_t b, char *buf, size_t n)
{
    static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, n, "%.2f %s", v, unit[u]);
}

static void summary(const struct dsv4_config *c, const struct dsv4_inventory *inv,
                    const dsv4_checkpoint *ck)
{
    char s[64];
    int n_kind[3] = { 0, 0, 0 };
    for (int L = 0; L < c->n_layers; L++)
        n_kind[c->layer_kind[L]]++;

    printf("model         dim %d, %d heads x %d (rope %d), vocab %d, %d routed experts "
           "(top %d) + %d shared, moe width %d\n",
           c->dim, c->n_heads, c->head_dim, c->rope_head_dim, c->vocab_size,
           c->n_routed_experts, c->n_activated_experts, c->n_shared_experts, c->moe_inter_dim);
    printf("blocks        %d layers + %d MTP + %d DSpark stages\n", c->n_layers, c->n_mtp_layers,
           c->dspark_stages);
    for (int b = 0; b < c->n_blocks; b++) {
        char name[32];
        const char *what = "";
        if (b < c->n_layers) {
            snprintf(name, sizeof(name), "layers.%d", b);
            what = dsv4_config_layer_hashed(c, b) ? "hash-routed" : "";
        } else {
            snprintf(name, sizeof(name), "mtp.%d", b - c->n_layers);
            what = c->dspark_stages ? "DSpark stage" : "MTP";
        }
        printf("  %-11s %-6s ratio %d%s%s\n", name, kind_name(c->layer_kind[b]),
               c->compress_ratios[b], *what ? ", " : "", what);
    }
    printf("layer types   %d window, %d CSA, %d HCA; %d hash-routed\n", n_kind[DSV4_ATTN_WINDOW],
           n_kind[DSV4_ATTN_CSA], n_kind[DSV4_ATTN_HCA], c->n_hash_layers);
    if (c->dspark_stages)
        printf("dspark        block %d, markov rank %d, noise token %d, %d target layers\n",
               c->dspark_block_size, c->dspark_markov_rank, c->dspark_noise_token_id,
               c->dspark_n_target_layers);

    /* Counts and bytes from the checkpoint (equal to the inventory's: the check passed). */
    size_t n = dsv4_checkpoint_n_tensors(ck), per_dtype[_DSV4_DTYPE_MAX] = { 0 };
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const struct dsv4_tensor *t = dsv4_checkpoint_tensor(ck, i);
        per_dtype[t->dtype]++;
        total += t->nbytes;
    }
    printf("tensors       %zu in %u shards\n", n, dsv4_checkpoint_n_shards(ck));
    for (int t = 0; t < _DSV4_DTYPE_MAX; t++)
        if (per_dtype[t])
            printf("  %-11s %zu\n", dsv4_dtype_name((enum dsv4_dtype)t), per_dtype[t]);
    gib(total, s, sizeof(s));
    printf("bytes total   %llu (%s)\n", (unsigned long long)total, s);
    gib(inv->dense_bytes, s, sizeof(s));
    printf("bytes dense   %llu (%s, resident)\n", (unsigned long long)inv->dense_bytes, s);
    uint64_t n_experts = (uint64_t)c->n_routed_experts * (uint64_t)c->n_blocks;
    uint64_t all = inv->total_bytes - inv->dense_bytes;
    gib(all, s, sizeof(s));
    printf("bytes expert  %llu per routed expert (w1, w2, w3 + scales); %llu experts, %llu (%s)\n",
           (unsigned long long)inv->expert_bytes, (unsigned long long)n_experts,
           (unsigned long long)all, s);
    const struct dsv4_inv_entry *h = dsv4_inventory_find(inv, "head.weight");
    printf("head          %s [%llu, %llu], %llu bytes\n", dsv4_dtype_name(h->dtype),
           (unsigned long long)h->shape[0], (unsigned long long)h->shape[1],
           (unsigned long long)h->nbytes);
}

int dsv4ctl_inspect(int argc, char **argv)
{
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return DSV4_EXIT_OK;
        }
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc && !dir) {
            dir = argv[++i];
            continue;
        }
        fprintf(stderr, "dsv4ctl inspect: unexpected argument '%s'\n", argv[i]);
        usage(stderr);
        return DSV4_EXIT_USAGE;
    }
    if (!dir) {
        fprintf(stderr, "dsv4ctl inspect: --model DIR is required\n");
        return DSV4_EXIT_USAGE;
    }

    struct dsv4_err err = { "" };
    struct dsv4_config *c = dsv4_xmalloc(sizeof(*c));
    int r = dsv4_config_load(dir, c, &err);
    if (r < 0) {
        fprintf(stderr, "dsv4ctl inspect: %s\n", err.msg);
        free(c);
        return exit_for(r);
    }
    dsv4_checkpoint *ck = NULL;
    r = dsv4_checkpoint_open(dir, &ck, &err);
    if (r < 0) {
        fprintf(stderr, "dsv4ctl inspect: %s\n", err.msg);
        free(c);
        return exit_for(r);
    }

    struct dsv4_inventory inv;
    dsv4_inventory_build(c, &inv);
    size_t problems = dsv4_inventory_check(&inv, ck, print_problem, NULL);
    int ret = DSV4_EXIT_OK;
    if (problems) {
        fprintf(stderr, "dsv4ctl inspect: %s: %zu problem%s (%zu tensors expected, %zu found)\n",
                dir, problems, problems == 1 ? "" : "s", inv.n, dsv4_checkpoint_n_tensors(ck));
        ret = DSV4_EXIT_FAIL;
    } else {
        summary(c, &inv, ck);
    }
    dsv4_inventory_free(&inv);
    dsv4_checkpoint_free(ck);
    free(c);
    return ret;
}
