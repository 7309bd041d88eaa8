/* SPDX-License-Identifier: MIT */
/*
 * The expert segment's name, layout, attach, rings and slot leases: the one
 * implementation of the contract documented in proto/dsv4_expert_shm.h.
 */
#include "fetcher_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm.h"
#include "util.h"

int dsv4_eshm_name(const char *run_dir, char *buf, size_t n, struct dsv4_err *err)
{
    char id[DSV4_SHM_ID_LEN + 1];
    int rc = dsv4_shm_id_read(run_dir, id, err);
    return rc < 0 ? rc : dsv4_shm_name(id, "experts", buf, n, err);
}

uint64_t dsv4_eshm_layout(struct dsv4_expert_shm *s, const struct dsv4_eshm_geometry *g)
{
    uint64_t n_keys = (uint64_t)g->n_layers * g->n_experts;
    uint64_t off = sizeof(struct dsv4_expert_shm);
    s->n_layers = g->n_layers;
    s->n_experts = g->n_experts;
    s->n_slots = g->n_slots;
    s->ring_size = DSV4_EXPERT_RING_SIZE;
    s->dim = g->dim;
    s->inter = g->inter;
    s->slot_size = g->slot_size;
    s->dir_offset = off;
    off = DSV4_ALIGN_UP(off + n_keys * sizeof(int32_t), 64);
    s->usage_offset = off;
    off = DSV4_ALIGN_UP(off + n_keys * sizeof(uint32_t), 64);
    s->slots_offset = off;
    off += (uint64_t)g->n_slots * sizeof(struct dsv4_expert_slot_shm);
    s->reqs_offset = off;
    off += DSV4_EXPERT_RING_SIZE * sizeof(struct dsv4_expert_req);
    s->comps_offset = off;
    off += DSV4_EXPERT_RING_SIZE * sizeof(struct dsv4_expert_comp);
    s->pending_offset = off;
    off += DSV4_EXPERT_RING_SIZE * sizeof(struct dsv4_expert_pending_shm);
    s->data_offset = DSV4_ALIGN_UP(off, DSV4_EXPERT_DATA_ALIGN);
    uint64_t size = s->data_offset + (uint64_t)g->n_slots * g->slot_size;
    s->hdr.magic = DSV4_EXPERT_SHM_MAGIC;
    s->hdr.abi_major = DSV4_EXPERT_SHM_ABI_MAJOR;
    s->hdr.abi_minor = DSV4_EXPERT_SHM_ABI_MINOR;
    s->hdr.hdr_size = sizeof(struct dsv4_expert_shm);
    s->hdr.kind = DSV4_EXPERT_SHM_KIND_EXPERTS;
    s->hdr.size = size;
    s->hdr.layout_id = dsv4_expert_shm_layout_id();
    return size;
}

int dsv4_eshm_attach(const char *name, struct dsv4_expert_shm **ret, uint64_t *ret_size,
                     struct dsv4_err *err)
{
    int fd = dsv4_shm_open_own(name, O_RDWR, err);
    if (fd < 0)
        return fd;
    struct dsv4_expert_shm want;
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < sizeof(struct dsv4_expert_shm)) {
        rc = dsv4_errf(err, -EPROTO, "shm %s: too small to be an expert segment", name);
        goto out;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        rc = dsv4_errf(err, -errno, "shm %s: mmap: %s", name, strerror(errno));
        goto out;
    }
    struct dsv4_expert_shm *s = p;
    /* Every offset and size is recomputed from the geometry and must match the header and the
     * mapping exactly: nothing a peer wrote is used to address memory unchecked. */
    memset(&want, 0, sizeof(want));
    struct dsv4_eshm_geometry g = { s->n_layers, s->n_experts, s->n_slots, s->dim, s->inter,
                                    s->slot_size };
    bool geom_ok = g.n_layers >= 1 && g.n_layers <= 4096 && g.n_experts >= 1 &&
                   g.n_experts <= 65536 && g.n_slots >= 1 && g.n_slots <= (1u << 24) &&
                   g.slot_size >= DSV4_EXPERT_DIO_ALIGN && g.slot_size <= (1ull << 34) &&
                   g.slot_size % DSV4_EXPERT_DIO_ALIGN == 0;
    uint64_t want_size = geom_ok ? dsv4_eshm_layout(&want, &g) : 0;
    if (s->hdr.magic != DSV4_EXPERT_SHM_MAGIC || s->hdr.abi_major != DSV4_EXPERT_SHM_ABI_MAJOR ||
        s->hdr.kind != DSV4_EXPERT_SHM_KIND_EXPERTS ||
        s->hdr.layout_id != dsv4_expert_shm_layout_id() || s->hdr.size != (uint64_t)st.st_size ||
        s->ring_size != DSV4_EXPERT_RING_SIZE || !geom_ok || want_size != s->hdr.size ||
        s->dir_offset != want.dir_offset || s->usage_offset != want.usage_offset ||
        s->slots_offset != want.slots_offset || s->reqs_offset != want.reqs_offset ||
        s->comps_offset != want.comps_offset || s->pending_offset != want.pending_offset ||
        s->data_offset != want.data_offset) {
        munmap(p, (size_t)st.st_size);
        rc = dsv4_errf(err, -EPROTO,
                       "shm %s: not an expert segment of this build (magic, ABI, layout or size)",
                       name);
        goto out;
    }
    *ret = s;
    *ret_size = (uint64_t)st.st_size;
out:
    close(fd);
    return rc;
}

void dsv4_eshm_unmap(struct dsv4_expert_shm *s, uint64_t size)
{
    if (s)
        munmap(s, (size_t)size);
}

void dsv4_eshm_futex_wait(_Atomic uint32_t *word, uint32_t val, uint64_t timeout_ns)
{
    struct timespec ts = { (time_t)(timeout_ns / DSV4_NSEC_PER_SEC), (long)(timeout_ns % DSV4_NSEC_PER_SEC) };
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, val, timeout_ns ? &ts : NULL, NULL, 0);
}

void dsv4_eshm_futex_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Publish one more entry on a ring: bump the futex word, wake only if someone sleeps. */
static void notify(_Atomic uint32_t *futex, _Atomic uint32_t *waiters)
{
    atomic_fetch_add_explicit(futex, 1, memory_order_seq_cst);
    if (atomic_load_explicit(waiters, memory_order_seq_cst))
        dsv4_eshm_futex_wake(futex);
}

/* Sleep on a ring's futex unless `head` moved past `tail` (the waiter count is raised
 * before the re-check, so a producer either sees it or we see its head). */
static void ring_wait(_Atomic uint64_t *head, uint64_t tail, _Atomic uint32_t *futex,
                      _Atomic uint32_t *waiters, uint64_t timeout_ns)
{
    atomic_fetch_add_explicit(waiters, 1, memory_order_seq_cst);
    uint32_t v = atomic_load_explicit(futex, memory_order_seq_cst);
    if (atomic_load_explicit(head, memory_order_seq_cst) == tail)
        dsv4_eshm_futex_wait(futex, v, timeout_ns);
    atomic_fetch_sub_explicit(waiters, 1, memory_order_seq_cst);
}

bool dsv4_eshm_req_push(struct dsv4_expert_shm *s, const struct dsv4_expert_req *r)
{
    uint64_t h = atomic_load_explicit(&s->req_head, memory_order_relaxed);
    if (h - atomic_load_explicit(&s->req_tail, memory_order_acquire) >= s->ring_size)
        return false;
    dsv4_expert_shm_reqs(s)[h % s->ring_size] = *r;
    atomic_store_explicit(&s->req_head, h + 1, memory_order_release);
    notify(&s->req_futex, &s->req_waiters);
    return true;
}

bool dsv4_eshm_req_peek(struct dsv4_expert_shm *s, struct dsv4_expert_req *ret)
{
    uint64_t t = atomic_load_explicit(&s->req_tail, memory_order_relaxed);
    if (atomic_load_explicit(&s->req_head, memory_order_acquire) == t)
        return false;
    *ret = dsv4_expert_shm_reqs(s)[t % s->ring_size];
    return true;
}

void dsv4_eshm_req_advance(struct dsv4_expert_shm *s)
{
    uint64_t t = atomic_load_explicit(&s->req_tail, memory_order_relaxed);
    atomic_store_explicit(&s->req_tail, t + 1, memory_order_release);
}

void dsv4_eshm_req_wait(struct dsv4_expert_shm *s, uint64_t timeout_ns)
{
    ring_wait(&s->req_head, atomic_load_explicit(&s->req_tail, memory_order_relaxed),
              &s->req_futex, &s->req_waiters, timeout_ns);
}

void dsv4_eshm_req_kick(struct dsv4_expert_shm *s)
{
    atomic_fetch_add_explicit(&s->req_futex, 1, memory_order_seq_cst);
    dsv4_eshm_futex_wake(&s->req_futex);
}

bool dsv4_eshm_comp_push(struct dsv4_expert_shm *s, const struct dsv4_expert_comp *c)
{
    uint64_t h = atomic_load_explicit(&s->comp_head, memory_order_relaxed);
    if (h - atomic_load_explicit(&s->comp_tail, memory_order_acquire) >= s->ring_size)
        return false;
    dsv4_expert_shm_comps(s)[h % s->ring_size] = *c;
    atomic_store_explicit(&s->comp_head, h + 1, memory_order_release);
    notify(&s->comp_futex, &s->comp_waiters);
    return true;
}

bool dsv4_eshm_comp_pop(struct dsv4_expert_shm *s, struct dsv4_expert_comp *ret)
{
    uint64_t t = atomic_load_explicit(&s->comp_tail, memory_order_relaxed);
    if (atomic_load_explicit(&s->comp_head, memory_order_acquire) == t)
        return false;
    *ret = dsv4_expert_shm_comps(s)[t % s->ring_size];
    atomic_store_explicit(&s->comp_tail, t + 1, memory_order_release);
    return true;
}

void dsv4_eshm_comp_wait(struct dsv4_expert_shm *s, uint64_t timeout_ns)
{
    ring_wait(&s->comp_head, atomic_load_explicit(&s->comp_tail, memory_order_relaxed),
              &s->comp_futex, &s->comp_waiters, timeout_ns);
}

int dsv4_eshm_try_lease(struct dsv4_expert_shm *s, uint32_t key)
{
    int32_t slot = atomic_load_explicit(&dsv4_expert_shm_dir(s)[key], memory_order_acquire);
    if (slot < 0 || (uint32_t)slot >= s->n_slots)
        return -1;
    struct dsv4_expert_slot_shm *sl = &dsv4_expert_shm_slots(s)[slot];
    uint64_t w = atomic_load_explicit(&sl->word, memory_order_acquire);
    for (;;) {
        uint32_t st = DSV4_SLOT_STATE(w);
        if ((st != DSV4_SLOT_READY && st != DSV4_SLOT_PINNED) ||
            DSV4_SLOT_LEASES(w) == DSV4_SLOT_LEASE_MAX)
            return -1;
        if (atomic_load_explicit(&sl->key, memory_order_relaxed) != key)
            return -1;
        /* Success only if the word (hence the generation the key belongs to) is unchanged. */
        if (atomic_compare_exchange_weak_explicit(&sl->word, &w, w + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            break;
    }
    atomic_store_explicit(&sl->last_use,
                          atomic_fetch_add_explicit(&s->clock, 1, memory_order_relaxed),
                          memory_order_relaxed);
    return slot;
}

bool dsv4_eshm_lease_slot(struct dsv4_expert_shm *s, uint32_t slot, uint32_t key)
{
    struct dsv4_expert_slot_shm *sl = &dsv4_expert_shm_slots(s)[slot];
    uint64_t w = atomic_load_explicit(&sl->word, memory_order_acquire);
    for (;;) {
        uint32_t st = DSV4_SLOT_STATE(w);
        if ((st != DSV4_SLOT_READY && st != DSV4_SLOT_PINNED) ||
            atomic_load_explicit(&sl->key, memory_order_relaxed) != key ||
            DSV4_SLOT_LEASES(w) == DSV4_SLOT_LEASE_MAX)
            return false;
        if (atomic_compare_exchange_weak_explicit(&sl->word, &w, w + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return true;
    }
}

void dsv4_eshm_release(struct dsv4_expert_shm *s, uint32_t slot)
{
    struct dsv4_expert_slot_shm *sl = &dsv4_expert_shm_slots(s)[slot];
    atomic_store_explicit(&sl->last_use,
                          atomic_fetch_add_explicit(&s->clock, 1, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_fetch_sub_explicit(&sl->word, 1, memory_order_release);
}
