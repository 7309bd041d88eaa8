/* SPDX-License-Identifier: MIT */
/*
 * Client side of the expert segment, for the compute daemon: lease the
 * routed experts of a layer (all or nothing), read them in place, release
 * them; send prefetch hints. Hits are served by a CAS on the slot word
 * without the fetcher; misses go through the request ring and wait on the
 * completion ring (futex, no spinning). The shapes of dsv4_expert_provider
 * (daemons/compute/expert.h): acquire(layer, ids, n) → one view per id,
 * release(layer, ids, n). Thread-safe (one mutex around the rings).
 */
#pragma once

#include <stdint.h>

#include "dsv4_expert_shm.h"
#include "err.h"
#include "kernels.h"

typedef struct dsv4_fetcher_client dsv4_fetcher_client;

/* One leased expert, valid until its release: the three FP4 matrices in the engine's
 * order (w1 gate, w3 up, w2 down) and the raw tensors in slot order. */
struct dsv4_fetcher_expert {
    struct dsv4_fp4_weight w1, w3, w2;
    const uint8_t *tensor[DSV4_EXPERT_TENSORS];
    uint32_t len[DSV4_EXPERT_TENSORS];
    uint32_t slot, gen;
};

/* Attach to the segment of the fetcher serving `run_dir`, waiting up to timeout_ms for it
 * to be created and READY. `timeout_ms` is also the longest an acquire waits for a load
 * (0 → 60 s). */
int dsv4_fetcher_client_open(const char *run_dir, uint64_t timeout_ms, dsv4_fetcher_client **ret,
                             struct dsv4_err *err);
dsv4_fetcher_client *dsv4_fetcher_client_free(dsv4_fetcher_client *c);

/* Lease experts ids[0..n) (distinct) of `layer`: ret[i] views expert ids[i]. On error
 * nothing stays leased and err names the layer, the expert and the fetcher's reason. */
int dsv4_fetcher_client_acquire(dsv4_fetcher_client *c, int layer, const int *ids, int n,
                                const struct dsv4_fetcher_expert **ret, struct dsv4_err *err);
/* Give back the leases of one acquire. */
void dsv4_fetcher_client_release(dsv4_fetcher_client *c, int layer, const int *ids, int n);
/* Hints (router lookahead, batch union): load if a slot can be had; never blocks, never
 * evicts a leased or pinned slot. Returns how many hints were queued. */
int dsv4_fetcher_client_prefetch(dsv4_fetcher_client *c, int layer, const int *ids, int n);
/* Hint: the hash-routed layers' experts of a just-sampled token. */
int dsv4_fetcher_client_prefetch_token(dsv4_fetcher_client *c, int32_t token);

struct dsv4_expert_shm *dsv4_fetcher_client_shm(dsv4_fetcher_client *c);
