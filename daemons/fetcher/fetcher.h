/* SPDX-License-Identifier: MIT */
/*
 * The expert fetcher: owns the expert segment (proto/dsv4_expert_shm.h),
 * serves load and prefetch requests from the request ring by reading the
 * six tensors of each expert from the checkpoint into a slot, and keeps the
 * cache policy (leases, per-layer LRU, pinned hot set, prefetch). One thread
 * runs dsv4_fetcher_run; pin/unpin/stop may be called from any thread.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "dsv4_expert_shm.h"
#include "err.h"

typedef struct dsv4_fetcher dsv4_fetcher;

enum dsv4_fetcher_io { DSV4_FETCHER_IO_AUTO, DSV4_FETCHER_IO_BUFFERED, DSV4_FETCHER_IO_PREAD };

struct dsv4_fetcher_opts {
    const char *model_dir;      /* checkpoint directory (config.json + safetensors) */
    const char *run_dir;        /* daemon set's run directory (segment name, hot set file) */
    uint32_t n_slots;           /* cache budget in experts; 0 → 16 */
    uint64_t cache_bytes;       /* else: as many slots as fit this segment size (the plan) */
    uint32_t pin_slots;         /* at most this many pinned slots; default n_slots / 4 */
    bool pin_slots_set;
    uint32_t queue_depth;       /* expert loads in flight, every chunk of each at once; 0 → 16 */
    uint32_t chunk_bytes;       /* largest single read; 0 → 1 MiB */
    enum dsv4_fetcher_io io;    /* also DSV4_IO=pread|buffered in the environment */
    bool numa;                  /* bind I/O thread and segment with hwloc */
    uint32_t repin_every;       /* re-learn the pinned hot set every N demands; 0 → 4096 */
};

/* Load the config and checkpoint, plan every expert's reads, create the segment (or
 * re-attach to the one a killed fetcher left: LOADING slots are discarded, READY ones
 * kept, pending requests resumed). */
int dsv4_fetcher_open(const struct dsv4_fetcher_opts *opts, dsv4_fetcher **ret,
                      struct dsv4_err *err);
/* Serve until dsv4_fetcher_stop. Binds the calling thread when opts.numa. */
int dsv4_fetcher_run(dsv4_fetcher *f);
void dsv4_fetcher_stop(dsv4_fetcher *f);
/* Save the hot set, mark the segment STOPPED, unlink it (if `unlink_shm`) and free. */
dsv4_fetcher *dsv4_fetcher_free(dsv4_fetcher *f, bool unlink_shm);

struct dsv4_expert_shm *dsv4_fetcher_shm(dsv4_fetcher *f);
const char *dsv4_fetcher_shm_name(const dsv4_fetcher *f);
/* Pin (load if needed, then keep) or unpin one expert; -ENOSPC past pin_slots. */
int dsv4_fetcher_pin(dsv4_fetcher *f, int layer, int expert, bool pin, struct dsv4_err *err);
/* Write the hot set (top experts by demand count) to <run_dir>/fetcher-hot.json. */
int dsv4_fetcher_save_hot(dsv4_fetcher *f, struct dsv4_err *err);
/* One line: I/O backend, O_DIRECT or not, registered buffers, NUMA placement. */
const char *dsv4_fetcher_describe(const dsv4_fetcher *f);
/* The most reads that were in flight at once since open (tests, bench-fetcher). */
uint32_t dsv4_fetcher_reads_in_flight_max(const dsv4_fetcher *f);
