/* SPDX-License-Identifier: MIT */
/*
 * The expert cache segment shared by dsv4-fetcher and its clients (the
 * compute daemon): POD structs only, no pointers (every process maps the
 * segment at its own address; everything is an offset from the base), native
 * byte order (same host, transient memory). One build's layout: attaching
 * requires magic, abi_major and layout_id to match exactly.
 *
 * Segment layout (offsets from the base, all recorded in the header):
 *
 *   0        struct dsv4_expert_shm      header, geometry, ring indices,
 *                                        stats page (4 KiB, fixed)
 *   dir      _Atomic int32_t [n_keys]     (layer, expert) → slot index or -1
 *   usage    _Atomic uint32_t [n_keys]    demand count per expert (hot set)
 *   slots    struct dsv4_expert_slot_shm [n_slots]   slot table
 *   reqs     struct dsv4_expert_req [ring_size]      request ring (client → fetcher)
 *   comps    struct dsv4_expert_comp [ring_size]     completion ring (fetcher → client)
 *   pending  struct dsv4_expert_pending_shm [ring_size]  requests taken, not yet completed
 *   data     n_slots × slot_size bytes, 2 MiB aligned; slot_size is a multiple of
 *            4096 (O_DIRECT) and holds the largest expert's six tensors
 *
 * where n_keys = n_layers × n_experts and key = layer × n_experts + expert.
 *
 * Slot state machine. The whole state of a slot is one 64-bit word
 * (DSV4_SLOT_WORD: generation << 32 | state << 24 | leases), so a lease and
 * an eviction can never both succeed: each is a compare-and-swap on the
 * same word.
 *
 *      FREE ──(fetcher: claim, gen+1)──► LOADING ──(all reads verified)──► READY
 *        ▲                                  │                              │  ▲
 *        │ (fetcher: read failed, gen+1)    │                    (pin)     │  │ (unpin)
 *        └──────────────────────────────────┘                              ▼  │
 *        ▲                                                               PINNED
 *        └──(fetcher: evict READY with leases == 0: CAS to LOADING, gen+1)──┘
 *
 *   - Only the fetcher changes the state and the generation, and only the
 *     fetcher writes key, tensor offsets and payload, always while the slot
 *     is LOADING (no client can hold a lease then). It publishes READY with a
 *     release store of the word after the payload and metadata are written,
 *     and the directory entry after that.
 *   - A client leases with CAS(word, word + 1) after checking, from that same
 *     loaded word (acquire), that the state is READY or PINNED, then reading
 *     key and checking it is the expert wanted. The CAS succeeds only if the
 *     word, hence the generation, did not change since the load, so the key
 *     it checked belongs to the generation it leases and the payload is
 *     complete (the READY store happened before its acquire load).
 *   - A client releases with fetch_sub(1, release) after its last read of the
 *     payload; the fetcher's eviction CAS (acq_rel) then happens after it.
 *   - A slot left LOADING by a killed fetcher is never READY with that
 *     generation: the restarted fetcher moves it to FREE with gen + 1.
 *
 * Rings (single producer, single consumer each). head and tail are 64-bit
 * and only increase; entry = head % ring_size. The producer writes the
 * entry, then stores head with release; the consumer loads head with
 * acquire, reads the entry, then stores tail with release; the producer
 * checks free space with an acquire load of tail. Wake-ups: after publishing,
 * the producer bumps the ring's 32-bit futex word and calls FUTEX_WAKE only
 * when `waiters` is non-zero; a consumer finding the ring empty increments
 * waiters, re-checks head, and sleeps in FUTEX_WAIT on the futex word (shared,
 * not FUTEX_PRIVATE: the peers are other processes). Nobody spins when idle.
 *
 * Requests the fetcher has taken off the request ring are copied into
 * `pending` (state ACTIVE) before tail moves, and cleared after their
 * completion is published, so a restarted fetcher re-runs them. A duplicate
 * completion (crash between publishing and clearing) carries a lease the
 * client does not expect: the client releases it.
 */
#pragma once

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define DSV4_EXPERT_SHM_MAGIC 0x58455344u /* "DSEX" little-endian */
#define DSV4_EXPERT_SHM_ABI_MAJOR 1
#define DSV4_EXPERT_SHM_ABI_MINOR 1
#define DSV4_EXPERT_SHM_KIND_EXPERTS 1u

#define DSV4_EXPERT_TENSORS 6      /* w1, w1 scale, w3, w3 scale, w2, w2 scale */
#define DSV4_EXPERT_DIO_ALIGN 4096 /* O_DIRECT offset, length and address alignment */
#define DSV4_EXPERT_DATA_ALIGN (2u << 20)
#define DSV4_EXPERT_RING_SIZE 1024u /* power of two */

/*
 * Pinning: by default the fetcher may keep a quarter of its slots pinned (the learned hot
 * set), and never all of them; so a client never leases more than the unpinned rest at once
 * (0 = no limit: the unpinned slots hold every routed expert of a layer). The fetcher, the
 * compute daemon and the memory plan all use these two.
 */
static inline uint32_t dsv4_expert_pin_slots_default(uint32_t n_slots)
{
    return n_slots / 4;
}

static inline int dsv4_expert_max_lease(uint64_t n_slots, int n_routed_experts)
{
    uint64_t free_slots = n_slots - n_slots / 4;
    if (free_slots >= (uint64_t)n_routed_experts)
        return 0;
    return free_slots > 1 ? (int)free_slots : 1;
}

/* A slot holds the expert's tensors read as O_DIRECT-aligned spans (≤ 2 pages more each). */
static inline uint64_t dsv4_expert_slot_bytes_for(uint64_t expert_bytes)
{
    uint64_t a = DSV4_EXPERT_DIO_ALIGN;
    return (expert_bytes + 2 * a * DSV4_EXPERT_TENSORS + a - 1) / a * a;
}

/* Tensor index inside a slot (the engine's w1/w3/w2 order, weight then scale). */
enum dsv4_expert_tensor {
    DSV4_EXPERT_W1,
    DSV4_EXPERT_W1_SCALE,
    DSV4_EXPERT_W3,
    DSV4_EXPERT_W3_SCALE,
    DSV4_EXPERT_W2,
    DSV4_EXPERT_W2_SCALE,
};

enum dsv4_slot_state {
    DSV4_SLOT_FREE = 0,
    DSV4_SLOT_LOADING = 1,
    DSV4_SLOT_READY = 2,
    DSV4_SLOT_PINNED = 3,
};

#define DSV4_SLOT_LEASE_MAX 0xffffffu
#define DSV4_SLOT_WORD(gen, state, leases) \
    (((uint64_t)(gen) << 32) | ((uint64_t)(state) << 24) | (uint64_t)(leases))
#define DSV4_SLOT_GEN(w) ((uint32_t)((w) >> 32))
#define DSV4_SLOT_STATE(w) ((uint32_t)(((w) >> 24) & 0xff))
#define DSV4_SLOT_LEASES(w) ((uint32_t)((w) & DSV4_SLOT_LEASE_MAX))

/* Fetcher life cycle, in the header (clients and dsv4ctl read it). */
enum dsv4_fetcher_state {
    DSV4_FETCHER_STARTING = 0,
    DSV4_FETCHER_READY = 1,
    DSV4_FETCHER_STOPPED = 2, /* clean shutdown (the segment is unlinked right after) */
};

enum dsv4_expert_op {
    DSV4_EXPERT_OP_LOAD = 1,        /* demand: complete with one lease for the client */
    DSV4_EXPERT_OP_PREFETCH = 2,    /* hint: load if a slot can be had, no completion */
    DSV4_EXPERT_OP_PREFETCH_TOKEN = 3, /* hint: the hash-routed layers' experts of token `key` */
};

struct dsv4_expert_req {
    uint64_t id;     /* client-chosen, echoed in the completion */
    uint32_t op;     /* enum dsv4_expert_op */
    uint32_t key;    /* layer × n_experts + expert, or a token id (PREFETCH_TOKEN) */
    uint64_t t_ns;   /* client's monotonic clock at submission (for tracing) */
    uint64_t reserved;
};
_Static_assert(sizeof(struct dsv4_expert_req) == 32, "ABI");

#define DSV4_EXPERT_COMP_MSG 96
struct dsv4_expert_comp {
    uint64_t id;
    int32_t status;  /* 0, or a negative errno (-EIO, -ENOSPC, ...) */
    uint32_t key;
    uint32_t slot;   /* status 0: the slot, leased once on the client's behalf */
    uint32_t gen;    /* ... at this generation */
    uint64_t reserved;
    char msg[DSV4_EXPERT_COMP_MSG]; /* status < 0: one line for a person, NUL-terminated */
};
_Static_assert(sizeof(struct dsv4_expert_comp) == 128, "ABI");

enum { DSV4_PENDING_NONE = 0, DSV4_PENDING_ACTIVE = 1 };
struct dsv4_expert_pending_shm {
    _Atomic uint32_t state;
    uint32_t reserved;
    struct dsv4_expert_req req;
};
_Static_assert(sizeof(struct dsv4_expert_pending_shm) == 40, "ABI");

struct dsv4_expert_slot_shm {
    _Atomic uint64_t word;      /* DSV4_SLOT_WORD(gen, state, leases) */
    _Atomic uint32_t key;       /* valid while READY/PINNED; UINT32_MAX when never loaded */
    _Atomic uint32_t prefetched; /* loaded by a hint and not leased since (stats) */
    _Atomic uint64_t last_use;  /* LRU tick (header clock) at the last lease or release */
    uint32_t off[DSV4_EXPERT_TENSORS]; /* tensor start, bytes from the slot's data start */
    uint32_t len[DSV4_EXPERT_TENSORS]; /* tensor length in bytes */
    uint8_t reserved[56];
};
_Static_assert(sizeof(struct dsv4_expert_slot_shm) == 128, "two cache lines");
_Static_assert(offsetof(struct dsv4_expert_slot_shm, off) == 24, "ABI");

#define DSV4_EXPERT_LAT_BUCKETS 16 /* read latency histogram: bucket i < 2^i × 64 µs, last = rest */

/* Counters: written by their owner only (the fetcher, except client_* and lease ops),
 * relaxed atomics, kept across fetcher restarts (the segment survives them). */
struct dsv4_expert_stats_shm {
    _Atomic uint64_t requests;          /* LOAD requests taken by the fetcher */
    _Atomic uint64_t hits;              /* ... found READY */
    _Atomic uint64_t misses;            /* ... that needed a read (or joined one) */
    _Atomic uint64_t failures;          /* ... completed with an error */
    _Atomic uint64_t prefetch_issued;   /* hint loads started */
    _Atomic uint64_t prefetch_used;     /* hinted slots leased later */
    _Atomic uint64_t prefetch_dropped;  /* hints refused (no evictable slot, ring full) */
    _Atomic uint64_t bytes_read;        /* payload bytes read from the checkpoint */
    _Atomic uint64_t reads;             /* read operations completed */
    _Atomic uint64_t evictions;
    _Atomic uint64_t pinned;            /* slots PINNED now */
    _Atomic uint64_t restarts;          /* fetcher attaches to an existing segment */
    _Atomic uint64_t discarded_loading; /* slots found LOADING at such an attach */
    _Atomic uint64_t buffered_reads;    /* reads done without O_DIRECT (fallback) */
    _Atomic uint64_t client_hits;       /* leases taken by clients without a request */
    _Atomic uint64_t client_requests;   /* experts clients asked for */
    _Atomic uint64_t lat_hist[DSV4_EXPERT_LAT_BUCKETS]; /* per expert load: first read to READY */
    _Atomic uint64_t progress;          /* bumped by the fetcher loop (liveness) */
    _Atomic uint64_t lat_sum_us;        /* sum of the loads counted in lat_hist, µs */
    uint64_t reserved[14];
};
_Static_assert(sizeof(struct dsv4_expert_stats_shm) == 384, "ABI");

struct dsv4_expert_shm_hdr {
    uint32_t magic;                     /* DSV4_EXPERT_SHM_MAGIC */
    uint16_t abi_major, abi_minor;
    uint32_t hdr_size;                  /* sizeof(struct dsv4_expert_shm) */
    uint32_t kind;                      /* DSV4_EXPERT_SHM_KIND_EXPERTS */
    uint64_t size;                      /* whole segment, bytes */
    uint64_t layout_id;                 /* dsv4_expert_shm_layout_id(): must match */
    _Atomic uint64_t epoch;             /* bumped by every fetcher start */
    uint8_t reserved[24];
};
_Static_assert(sizeof(struct dsv4_expert_shm_hdr) == 64, "one cache line");
_Static_assert(offsetof(struct dsv4_expert_shm_hdr, epoch) == 32, "ABI");

struct dsv4_expert_shm {
    struct dsv4_expert_shm_hdr hdr;     /* 0 */
    /* Geometry, immutable after creation (64). */
    alignas(64) uint32_t n_layers; /* alignas applies to one declarator */
    uint32_t n_experts, n_slots, ring_size;
    uint32_t dim, inter;                /* hidden size, expert intermediate size */
    uint64_t slot_size;
    uint64_t dir_offset, usage_offset, slots_offset, reqs_offset, comps_offset,
        pending_offset, data_offset;
    /* Fetcher status (192). */
    alignas(64) _Atomic uint32_t state; /* enum dsv4_fetcher_state */
    _Atomic uint32_t pid;
    _Atomic uint32_t io_direct;         /* 1 = O_DIRECT reads, 0 = buffered fallback */
    _Atomic uint32_t io_uring;          /* 1 = io_uring, 0 = pread */
    _Atomic uint64_t clock;             /* LRU tick source (fetch_add by anyone) */
    _Atomic uint32_t blocked;           /* 1 while a demand waits for a lease to end */
    /* Request ring: head/futex/waiters written by the client (256), tail by the fetcher (320). */
    alignas(64) _Atomic uint64_t req_head;
    _Atomic uint32_t req_futex, req_waiters;
    alignas(64) _Atomic uint64_t req_tail;
    /* Completion ring: head/futex by the fetcher (384), tail/waiters by the client (448). */
    alignas(64) _Atomic uint64_t comp_head;
    _Atomic uint32_t comp_futex, comp_waiters;
    alignas(64) _Atomic uint64_t comp_tail;
    alignas(64) struct dsv4_expert_stats_shm stats; /* 512 */
    uint8_t reserved[4096 - 512 - sizeof(struct dsv4_expert_stats_shm)];
};
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shm atomics must be lock-free");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "shm atomics must be lock-free");
_Static_assert(sizeof(struct dsv4_expert_shm) == 4096, "header page");
_Static_assert(offsetof(struct dsv4_expert_shm, n_layers) == 64, "ABI");
_Static_assert(offsetof(struct dsv4_expert_shm, state) == 192, "ABI");
_Static_assert(offsetof(struct dsv4_expert_shm, req_head) == 256, "ABI");
_Static_assert(offsetof(struct dsv4_expert_shm, req_tail) == 320, "ABI");
_Static_assert(offsetof(struct dsv4_expert_shm, comp_head) == 384, "ABI");
_Static_assert(offsetof(struct dsv4_expert_shm, comp_tail) == 448, "ABI");
_Static_assert(offsetof(struct dsv4_expert_shm, stats) == 512, "ABI");

/* A fingerprint of every size and offset above: two builds with different layouts never
 * attach to each other's segment. */
static inline uint64_t dsv4_expert_shm_layout_id(void)
{
    static const uint64_t parts[] = {
        DSV4_EXPERT_SHM_ABI_MAJOR, DSV4_EXPERT_SHM_ABI_MINOR, DSV4_EXPERT_RING_SIZE,
        sizeof(struct dsv4_expert_shm), sizeof(struct dsv4_expert_slot_shm),
        sizeof(struct dsv4_expert_req), sizeof(struct dsv4_expert_comp),
        sizeof(struct dsv4_expert_pending_shm), sizeof(struct dsv4_expert_stats_shm),
        offsetof(struct dsv4_expert_shm, stats), offsetof(struct dsv4_expert_slot_shm, off),
        DSV4_EXPERT_TENSORS, DSV4_EXPERT_DIO_ALIGN, DSV4_EXPERT_LAT_BUCKETS,
    };
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the 64-bit values */
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
        for (int b = 0; b < 8; b++) {
            h ^= (parts[i] >> (8 * b)) & 0xff;
            h *= 0x100000001b3ull;
        }
    return h;
}

static inline _Atomic int32_t *dsv4_expert_shm_dir(struct dsv4_expert_shm *s)
{
    return (_Atomic int32_t *)(void *)((char *)s + s->dir_offset);
}
static inline _Atomic uint32_t *dsv4_expert_shm_usage(struct dsv4_expert_shm *s)
{
    return (_Atomic uint32_t *)(void *)((char *)s + s->usage_offset);
}
static inline struct dsv4_expert_slot_shm *dsv4_expert_shm_slots(struct dsv4_expert_shm *s)
{
    return (struct dsv4_expert_slot_shm *)(void *)((char *)s + s->slots_offset);
}
static inline struct dsv4_expert_req *dsv4_expert_shm_reqs(struct dsv4_expert_shm *s)
{
    return (struct dsv4_expert_req *)(void *)((char *)s + s->reqs_offset);
}
static inline struct dsv4_expert_comp *dsv4_expert_shm_comps(struct dsv4_expert_shm *s)
{
    return (struct dsv4_expert_comp *)(void *)((char *)s + s->comps_offset);
}
static inline struct dsv4_expert_pending_shm *dsv4_expert_shm_pending(struct dsv4_expert_shm *s)
{
    return (struct dsv4_expert_pending_shm *)(void *)((char *)s + s->pending_offset);
}
static inline uint8_t *dsv4_expert_shm_slot_data(struct dsv4_expert_shm *s, uint32_t slot)
{
    return (uint8_t *)s + s->data_offset + (uint64_t)slot * s->slot_size;
}
