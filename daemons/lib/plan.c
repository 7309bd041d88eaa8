/* SPDX-License-Identifier: MIT */
/* The memory plan (plan.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "inventory.h"
#include "dsv4_expert_shm.h"
#include "dsv4_wire.h"
#include "plan.h"
#include "session_layout.h"
#include "util.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define MIB (1024ull * 1024ull)
/* Measured RSS of an idle daemon on the tiny fixture (code, libc, libzmq, hwloc, allocator
 * arenas) is 4–9 MiB; 24 MiB each leaves room for thread stacks and allocator slack. */
#define PROC_OVERHEAD (24 * MIB)
#define N_PROCS 4               /* supervisor, fetcher, compute, scheduler */
/* Checkpoint index (strmap + tensor table) per open checkpoint (compute and fetcher). */
#define INDEX_BYTES_PER_TENSOR 320
/* Tokenizer (scheduler, dsv4ctl): vocabulary, merges and lookup tables per token. */
#define TOKENIZER_BYTES_PER_TOKEN 512

void dsv4_plan_session_bytes(const struct dsv4_config *c, int64_t max_ctx, int chunk,
                             int max_rollback, int n_workers, uint64_t *state,
                             uint64_t *scratch)
{
    struct dsv4_session_layout L, S;
    /* the step scratch is the engine's scratch-only session (daemons/compute/forward.c) */
    if (dsv4_session_layout(c, max_ctx, chunk, max_rollback, n_workers, &L, NULL) < 0 ||
        dsv4_session_layout(c, max_ctx, chunk, 1, n_workers, &S, NULL) < 0) {
        *state = *scratch = UINT64_MAX / 4;    /* options no session accepts: never fits */
        return;
    }
    *state = L.state_bytes;
    *scratch = S.scratch_bytes;
}

/* What weights.c keeps of one dense tensor: the bytes read, except BF16 vectors (norms),
 * kept as their fp32 copy only, and the I64 hash tables, kept as int32 only. */
static uint64_t resident_bytes(const struct dsv4_inv_entry *t)
{
    if (t->dtype == DSV4_DTYPE_BF16 && t->rank == 1)
        return 2 * t->nbytes;
    if (t->dtype == DSV4_DTYPE_I64)
        return t->nbytes / 2;
    return t->nbytes;
}

uint64_t dsv4_plan_default_budget(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024 / 5 * 4;
}

/* The wider prefill step may take this share of the room above the minimum (the rest is the
 * expert cache's: 1/32 costs it about 3 % of its slots). */
#define DSV4_CHUNK_ROOM_SHARE 32

/*
 * Prefill runs a prompt in steps of `chunk` rows, and each routed expert sees about
 * chunk·K/E of them: the larger the step, the more a weight read from RAM is reused
 * (docs/benchmarks.md: chunk 512 prefills ≈ 1.2–1.5× chunk 64 on the synthetic Flash). A
 * wider step costs every session its compressor and KV slack and the one step scratch, so
 * the plan doubles the chunk (up to DSV4_MAX_PREFILL_CHUNK) while that extra stays within
 * `room` bytes. The fixed part is then the chosen chunk's; the minimum stays the default's.
 */
static void widen_chunk(const struct dsv4_config *c, struct dsv4_plan *p, uint64_t room)
{
    const struct dsv4_plan_opts *o = &p->o;
    const uint64_t base = p->sessions_total;
    for (int ch = 2 * o->chunk; ch <= DSV4_MAX_PREFILL_CHUNK; ch *= 2) {
        uint64_t st, sc;
        dsv4_plan_session_bytes(c, o->max_ctx, ch, o->max_rollback, o->threads, &st, &sc);
        uint64_t total = (uint64_t)o->sessions * st + sc;
        if (total - base > room)
            break;
        p->o.chunk = ch;
        p->session_state = st;
        p->session_scratch = sc;
        p->sessions_total = total;
    }
    p->chunk_extra = p->sessions_total - base;
    p->fixed += p->chunk_extra;     /* the minimum stays the default chunk's */
}

int dsv4_plan_make(const struct dsv4_config *c, const struct dsv4_plan_opts *opts,
                   struct dsv4_plan *p, struct dsv4_err *err)
{
    memset(p, 0, sizeof(*p));
    struct dsv4_plan_opts o = *opts;
    if (!o.budget_bytes)
        o.budget_bytes = dsv4_plan_default_budget();
    if (!o.max_ctx)
        o.max_ctx = DSV4_DEFAULT_MAX_CTX;
    if (!o.sessions)
        o.sessions = DSV4_DEFAULT_SESSIONS;
    /* no chunk asked: plan at the default, then widen it if the room allows (below) */
    bool chunk_auto = o.chunk == 0;
    if (chunk_auto)
        o.chunk = DSV4_DEFAULT_CHUNK;
    if (!o.max_rollback)
        o.max_rollback = DSV4_DEFAULT_MAX_ROLLBACK;
    if (o.threads < 1)
        o.threads = 1;
    p->o = o;
    p->budget = o.budget_bytes;

    struct dsv4_inventory inv;
    dsv4_inventory_build(c, &inv);
    for (size_t i = 0; i < inv.n; i++) {
        const struct dsv4_inv_entry *t = &inv.entries[i];
        if (t->role == DSV4_INV_EXPERT || t->role == DSV4_INV_EXPERT_SCALE)
            continue;
        uint64_t b = resident_bytes(t);
        if (t->block < 0)
            p->embed_head += b;
        else if (t->block < c->n_layers)
            p->dense += b;
        else
            p->drafter += b;
    }
    p->slot_bytes = dsv4_expert_slot_bytes_for(inv.expert_bytes);
    uint64_t n_tensors = inv.n;
    dsv4_inventory_free(&inv);

    dsv4_plan_session_bytes(c, o.max_ctx, o.chunk, o.max_rollback, o.threads, &p->session_state,
                            &p->session_scratch);
    if (o.dspark)
        p->session_dspark = dsv4_dspark_session_bytes(c, o.chunk, o.threads);
    p->sessions_total = (uint64_t)o.sessions * (p->session_state + p->session_dspark) +
                        p->session_scratch;
    uint64_t V = (uint64_t)c->vocab_size;
    p->compute_scratch = DSV4_WIRE_MAX_ALL_ROWS * V * sizeof(float)          /* logits of scored rows */
                         + 2 * V * (sizeof(float) + 16)            /* reply buffer, top-k */
                         + (uint64_t)c->n_blocks * c->n_routed_experts * 64;  /* lease table */
    p->overhead = N_PROCS * PROC_OVERHEAD + 2 * n_tensors * INDEX_BYTES_PER_TENSOR +
                  2 * V * TOKENIZER_BYTES_PER_TOKEN;
    /* The drafter's routed experts live in compute's own LRU (daemons/compute/dspark.c), not
     * in the fetcher's segment: room for one drafted block's union in every stage (γ rows ×
     * K experts), or all of the stages' experts if fewer. */
    if (o.dspark && c->dspark_stages > 0) {
        uint64_t all = (uint64_t)c->dspark_stages * c->n_routed_experts;
        uint64_t block = (uint64_t)c->dspark_stages * DSV4_MAX(c->dspark_block_size, 1) *
                         c->n_activated_experts;
        p->drafter_cache = DSV4_MIN(all, block) * p->slot_bytes;
    }
    /* an explicit prefix-cache RAM tier is part of the minimum; the default one is carved
     * from the room above the minimum (below) */
    bool prefix_default = o.prefix_ram == DSV4_PLAN_PREFIX_DEFAULT;
    p->prefix_ram = prefix_default ? 0 : o.prefix_ram;
    p->fixed = p->dense + p->embed_head + p->drafter + p->drafter_cache + p->sessions_total +
               p->compute_scratch + p->prefix_ram + p->overhead;
    p->experts_total = (uint64_t)c->n_layers * c->n_routed_experts;
    /* Segment header: directory and usage words per expert, slot table, rings; the payload
     * starts 2 MiB aligned (proto/dsv4_expert_shm.h). */
    p->cache_header = DSV4_ALIGN_UP(MIB + p->experts_total * (8 + 128), 2 * MIB);
    /* One decode row's experts, plus one layer of prefetch. */
    p->min_slots = 2 * (uint64_t)c->n_activated_experts;
    p->minimum = p->fixed + p->cache_header + p->min_slots * p->slot_bytes;
    if (prefix_default && p->budget > p->minimum) {
        /* an eighth of the room the expert cache would get, at most 256 MiB */
        p->prefix_ram = DSV4_MIN(256 * MIB, (p->budget - p->minimum) / 8);
        p->fixed += p->prefix_ram;
    }
    /* (DSpark feeds its drafter in 64-row pieces whatever the step: daemons/compute/speculate.c) */
    if (chunk_auto && !o.dspark && p->budget > p->minimum)
        widen_chunk(c, p, (p->budget - p->minimum) / DSV4_CHUNK_ROOM_SHARE);
    if (p->budget >= p->minimum) {
        p->n_slots = DSV4_MIN((p->budget - p->fixed - p->cache_header) / p->slot_bytes,
                              p->experts_total);
        /* The fetcher's segment lives in /dev/shm (tmpfs, often half of RAM): a segment
         * larger than its free space would fault (SIGBUS) when first touched. */
        uint64_t shm = o.shm_avail;
        if (shm && !o.in_process && p->cache_header + p->n_slots * p->slot_bytes > shm) {
            p->n_slots = shm > p->cache_header ? (shm - p->cache_header) / p->slot_bytes : 0;
            p->shm_limited = true;
        }
        p->cache_bytes = p->cache_header + p->n_slots * p->slot_bytes;
    }
    /* The fetcher may hold some slots pinned; the rest must fit one acquire. */
    p->max_lease = dsv4_expert_max_lease(p->n_slots, c->n_routed_experts);
    if (p->budget < p->minimum)
        p->max_lease = 0;
    if (p->budget >= p->minimum && p->n_slots < p->min_slots) {
        p->max_lease = 0;
        return dsv4_errf(err, -ENOSPC,
                         "/dev/shm has %.2f GiB free, too little for %llu expert slots of %.1f MiB "
                         "(enlarge it: mount -o remount,size=... /dev/shm)",
                         o.shm_avail / GIB, (unsigned long long)p->min_slots,
                         p->slot_bytes / (double)MIB);
    }
    if (p->budget < p->minimum)
        return dsv4_errf(err, -ENOSPC,
                         "memory budget %.2f GiB is below the minimum %.2f GiB for this model "
                         "(%.2f GiB resident weights, %.2f GiB for %d sessions of %lld positions, "
                         "%.2f GiB scratch and processes, %llu expert slots of %.1f MiB)",
                         p->budget / GIB, p->minimum / GIB,
                         (p->dense + p->embed_head + p->drafter + p->drafter_cache) / GIB, p->sessions_total / GIB,
                         o.sessions, (long long)o.max_ctx,
                         (p->compute_scratch + p->overhead) / GIB,
                         (unsigned long long)p->min_slots, p->slot_bytes / (double)MIB);
    return 0;
}

static void row(FILE *f, const char *what, uint64_t b, const char *note)
{
    if (b >= (uint64_t)GIB)
        fprintf(f, "  %-18s %9.2f GiB  %s\n", what, b / GIB, note);
    else
        fprintf(f, "  %-18s %9.1f MiB  %s\n", what, b / (double)MIB, note);
}

void dsv4_plan_print(FILE *f, const struct dsv4_plan *p)
{
    char note[160];
    fprintf(f, "memory plan: budget %.3f GiB (minimum %.3f GiB), %d sessions of %lld positions\n",
            p->budget / GIB, p->minimum / GIB, p->o.sessions, (long long)p->o.max_ctx);
    row(f, "dense weights", p->dense, "target layers: FP8 attention, shared experts, norms");
    row(f, "embedding + head", p->embed_head, "BF16");
    row(f, "drafter", p->drafter, p->drafter ? "MTP/DSpark stages" : "none in this model");
    if (p->drafter_cache)
        row(f, "drafter experts", p->drafter_cache, "compute's LRU: one drafted block per stage");
    if (p->session_dspark)
        snprintf(note, sizeof(note),
                 "%d × (%.1f MiB state at %lld positions + %.1f MiB DSpark) + %.1f MiB step "
                 "scratch (%d-row steps)",
                 p->o.sessions, p->session_state / (double)MIB, (long long)p->o.max_ctx,
                 p->session_dspark / (double)MIB, p->session_scratch / (double)MIB, p->o.chunk);
    else
        snprintf(note, sizeof(note),
                 "%d × %.1f MiB state at %lld positions + %.1f MiB step scratch (%d-row steps)",
                 p->o.sessions, p->session_state / (double)MIB, (long long)p->o.max_ctx,
                 p->session_scratch / (double)MIB, p->o.chunk);
    row(f, "sessions", p->sessions_total, note);
    row(f, "compute scratch", p->compute_scratch, "logits rows, replies, lease table");
    row(f, "prefix cache", p->prefix_ram, p->prefix_ram ? "RAM tier of the prefix cache (LRU)"
                                                        : "off");
    row(f, "processes", p->overhead, "4 processes, checkpoint index, tokenizer");
    snprintf(note, sizeof(note), "%llu of %llu experts (%.1f %%), %.2f MiB per slot, one pool",
             (unsigned long long)p->n_slots, (unsigned long long)p->experts_total,
             100.0 * (double)p->n_slots / (double)p->experts_total,
             p->slot_bytes / (double)MIB);
    row(f, "expert cache", p->cache_bytes, note);
    if (p->shm_limited)
        fprintf(f, "  the cache is cut to the %.2f GiB free in /dev/shm (less than the budget "
                   "allows)\n", p->o.shm_avail / GIB);
    if (p->max_lease)
        fprintf(f, "  a prefill chunk leases at most %d experts at a time\n", p->max_lease);
    if (p->budget < p->minimum)
        fprintf(f, "  budget too small: at least %.3f GiB (%llu expert slots) is needed\n",
                p->minimum / GIB, (unsigned long long)p->min_slots);
}

void dsv4_plan_print_json(FILE *f, const struct dsv4_plan *p)
{
    fprintf(f,
            "{\"budget\":%" PRIu64 ",\"minimum\":%" PRIu64 ",\"dense\":%" PRIu64
            ",\"embed_head\":%" PRIu64 ",\"drafter\":%" PRIu64 ",\"drafter_cache\":%" PRIu64
            ",\"session_state\":%" PRIu64
            ",\"session_scratch\":%" PRIu64 ",\"session_dspark\":%" PRIu64
            ",\"chunk\":%d,\"sessions\":%d,\"max_ctx\":%lld"
            ",\"sessions_total\":%" PRIu64 ",\"compute_scratch\":%" PRIu64
            ",\"overhead\":%" PRIu64 ",\"fixed\":%" PRIu64 ",\"slot_bytes\":%" PRIu64
            ",\"cache_header\":%" PRIu64 ",\"cache_bytes\":%" PRIu64 ",\"n_slots\":%" PRIu64
            ",\"min_slots\":%" PRIu64
            ",\"experts_total\":%" PRIu64 ",\"max_lease\":%d,\"prefix_ram\":%" PRIu64 "}\n",
            p->budget, p->minimum, p->dense, p->embed_head, p->drafter, p->drafter_cache,
            p->session_state,
            p->session_scratch, p->session_dspark, p->o.chunk, p->o.sessions,
            (long long)p->o.max_ctx,
            p->sessions_total,
            p->compute_scratch, p->overhead, p->fixed, p->slot_bytes, p->cache_header,
            p->cache_bytes,
            p->n_slots, p->min_slots, p->experts_total, p->max_lease, p->prefix_ram);
}
