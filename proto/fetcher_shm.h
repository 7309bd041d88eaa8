/* SPDX-License-Identifier: MIT */
/*
 * Helpers over the expert segment (proto/dsv4_expert_shm.h) shared by the
 * fetcher and its clients: the segment's name and layout, map/create/attach,
 * the two SPSC rings with futex wake-ups, and the lease/release CAS on a
 * slot word. Everything that touches the memory-ordering contract lives here,
 * so the contract is implemented once.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "dsv4_expert_shm.h"
#include "err.h"

struct dsv4_eshm_geometry {
    uint32_t n_layers, n_experts, n_slots, dim, inter;
    uint64_t slot_size; /* multiple of DSV4_EXPERT_DIO_ALIGN */
};

/* "/dsv4-<uid>-<the set's random id>-experts" (common/shm.h: the id is in RUN_DIR/shm-id). */
int dsv4_eshm_name(const char *run_dir, char *buf, size_t n, struct dsv4_err *err);

/* Fill the geometry and offsets of a fresh header and return the segment size. */
uint64_t dsv4_eshm_layout(struct dsv4_expert_shm *s, const struct dsv4_eshm_geometry *g);

/* Map an existing segment read-write after checking that it is ours alone (owner, mode 0600),
 * then magic, ABI, layout id, size and every offset against the geometry it declares.
 * -ENOENT if it does not exist, -EPERM if another user could have touched it, -EPROTO if it is
 * not one of ours. */
int dsv4_eshm_attach(const char *name, struct dsv4_expert_shm **ret, uint64_t *ret_size,
                     struct dsv4_err *err);
void dsv4_eshm_unmap(struct dsv4_expert_shm *s, uint64_t size);

/* Futex on a 32-bit word of a MAP_SHARED segment (never FUTEX_PRIVATE). timeout_ns 0 =
 * no timeout. Returns after a wake-up, a timeout, a signal or when *word != val. */
void dsv4_eshm_futex_wait(_Atomic uint32_t *word, uint32_t val, uint64_t timeout_ns);
void dsv4_eshm_futex_wake(_Atomic uint32_t *word);

/* Request ring: the client pushes (false when full), the fetcher peeks and advances. */
bool dsv4_eshm_req_push(struct dsv4_expert_shm *s, const struct dsv4_expert_req *r);
bool dsv4_eshm_req_peek(struct dsv4_expert_shm *s, struct dsv4_expert_req *ret);
void dsv4_eshm_req_advance(struct dsv4_expert_shm *s);
/* Sleep until the request ring is non-empty, a wake-up or the timeout. */
void dsv4_eshm_req_wait(struct dsv4_expert_shm *s, uint64_t timeout_ns);
/* Wake a fetcher sleeping in dsv4_eshm_req_wait (shutdown, releases). */
void dsv4_eshm_req_kick(struct dsv4_expert_shm *s);

/* Completion ring: the fetcher pushes, the client pops. */
bool dsv4_eshm_comp_push(struct dsv4_expert_shm *s, const struct dsv4_expert_comp *c);
bool dsv4_eshm_comp_pop(struct dsv4_expert_shm *s, struct dsv4_expert_comp *ret);
void dsv4_eshm_comp_wait(struct dsv4_expert_shm *s, uint64_t timeout_ns);

/* Client-side lease of a READY/PINNED slot holding `key`, without the fetcher.
 * Returns the slot index or -1 (not cached, loading, or evicted under us). */
int dsv4_eshm_try_lease(struct dsv4_expert_shm *s, uint32_t key);
/* Take one more lease on a slot already known to hold key at generation gen (fetcher side:
 * granting a lease with a completion). False if the slot changed. */
bool dsv4_eshm_lease_slot(struct dsv4_expert_shm *s, uint32_t slot, uint32_t key);
/* Give back one lease (after the last read of the payload). */
void dsv4_eshm_release(struct dsv4_expert_shm *s, uint32_t slot);
