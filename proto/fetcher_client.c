/* SPDX-License-Identifier: MIT */
/*
 * Expert segment client (see fetcher_client.h and the contract in
 * proto/dsv4_expert_shm.h). A completion whose id this call is not waiting
 * for (a previous call gave up on it, or a restarted fetcher completed a
 * request twice) carries a lease nobody expects: it is released at once.
 */
#include "fetcher_client.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fetcher_shm.h"
#include "util.h"

struct dsv4_fetcher_client {
    struct dsv4_expert_shm *shm;
    uint64_t shm_size, timeout_ns;
    uint64_t next_id;
    struct dsv4_fetcher_expert *views; /* [n_slots] */
    pthread_mutex_t lock;
};

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = { (time_t)(ns / DSV4_NSEC_PER_SEC), (long)(ns % DSV4_NSEC_PER_SEC) };
    nanosleep(&ts, NULL);
}

int dsv4_fetcher_client_open(const char *run_dir, uint64_t timeout_ms, dsv4_fetcher_client **ret,
                             struct dsv4_err *err)
{
    char name[96];
    int rc = dsv4_eshm_name(run_dir, name, sizeof(name), err);
    if (rc < 0)
        return rc;
    uint64_t timeout_ns = (timeout_ms ? timeout_ms : 60000) * DSV4_NSEC_PER_MSEC;
    uint64_t deadline = dsv4_now_ns() + timeout_ns;
    struct dsv4_expert_shm *s = NULL;
    uint64_t size = 0;
    for (;;) {
        rc = dsv4_eshm_attach(name, &s, &size, err);
        if (rc == 0 && atomic_load_explicit(&s->state, memory_order_acquire) == DSV4_FETCHER_READY)
            break;
        if (rc == 0)
            dsv4_eshm_unmap(s, size);
        if (dsv4_now_ns() > deadline)
            return rc < 0 ? rc
                          : dsv4_errf(err, -ETIMEDOUT, "fetcher for %s not ready after %llu ms",
                                      run_dir, (unsigned long long)(timeout_ns / 1000000));
        sleep_ns(10000000);
    }
    dsv4_fetcher_client *c = dsv4_xcalloc(1, sizeof(*c));
    c->shm = s;
    c->shm_size = size;
    c->timeout_ns = timeout_ns;
    c->next_id = ((uint64_t)getpid() << 32) | 1; /* distinct from a previous client's ids */
    c->views = dsv4_xcalloc(s->n_slots, sizeof(*c->views));
    for (uint32_t i = 0; i < s->n_slots; i++)
        c->views[i].gen = UINT32_MAX;
    pthread_mutex_init(&c->lock, NULL);
    *ret = c;
    return 0;
}

dsv4_fetcher_client *dsv4_fetcher_client_free(dsv4_fetcher_client *c)
{
    if (!c)
        return NULL;
    dsv4_eshm_unmap(c->shm, c->shm_size);
    free(c->views);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return NULL;
}

struct dsv4_expert_shm *dsv4_fetcher_client_shm(dsv4_fetcher_client *c)
{
    return c->shm;
}

/* The view of a slot leased at its current generation (rebuilt only when the generation
 * changed, which needs every earlier lease to be released first). */
static const struct dsv4_fetcher_expert *view(dsv4_fetcher_client *c, uint32_t slot)
{
    struct dsv4_expert_shm *s = c->shm;
    struct dsv4_expert_slot_shm *sl = &dsv4_expert_shm_slots(s)[slot];
    uint32_t gen = DSV4_SLOT_GEN(atomic_load_explicit(&sl->word, memory_order_acquire));
    struct dsv4_fetcher_expert *v = &c->views[slot];
    if (v->gen == gen)
        return v;
    const uint8_t *base = dsv4_expert_shm_slot_data(s, slot);
    for (int t = 0; t < DSV4_EXPERT_TENSORS; t++) {
        v->tensor[t] = base + sl->off[t];
        v->len[t] = sl->len[t];
    }
    v->w1 = (struct dsv4_fp4_weight){ v->tensor[DSV4_EXPERT_W1], v->tensor[DSV4_EXPERT_W1_SCALE],
                                      s->inter, s->dim };
    v->w3 = (struct dsv4_fp4_weight){ v->tensor[DSV4_EXPERT_W3], v->tensor[DSV4_EXPERT_W3_SCALE],
                                      s->inter, s->dim };
    v->w2 = (struct dsv4_fp4_weight){ v->tensor[DSV4_EXPERT_W2], v->tensor[DSV4_EXPERT_W2_SCALE],
                                      s->dim, s->inter };
    v->slot = slot;
    v->gen = gen;
    return v;
}

static void count_lease(struct dsv4_expert_shm *s, uint32_t slot)
{
    struct dsv4_expert_slot_shm *sl = &dsv4_expert_shm_slots(s)[slot];
    if (atomic_load_explicit(&sl->prefetched, memory_order_relaxed) &&
        atomic_exchange_explicit(&sl->prefetched, 0, memory_order_relaxed))
        atomic_fetch_add_explicit(&s->stats.prefetch_used, 1, memory_order_relaxed);
}

int dsv4_fetcher_client_acquire(dsv4_fetcher_client *c, int layer, const int *ids, int n,
                                const struct dsv4_fetcher_expert **ret, struct dsv4_err *err)
{
    struct dsv4_expert_shm *s = c->shm;
    if (layer < 0 || (uint32_t)layer >= s->n_layers)
        return dsv4_errf(err, -EINVAL, "experts: layer %d out of range", layer);
    if (n < 0 || (uint32_t)n >= s->n_slots)
        return dsv4_errf(err, -ENOSPC, "experts: %d experts exceed the cache of %u slots", n,
                         s->n_slots);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= s->n_experts)
            return dsv4_errf(err, -EINVAL, "experts: expert %d out of range", ids[i]);
    int32_t small[64];
    int32_t *slot = n <= 64 ? small : dsv4_xmalloc((size_t)n * sizeof(*slot));
    int rc = 0, missing = 0;
    pthread_mutex_lock(&c->lock);
    atomic_fetch_add_explicit(&s->stats.client_requests, (uint64_t)n, memory_order_relaxed);
    uint64_t first = c->next_id;
    for (int i = 0; i < n; i++) {
        uint32_t key = (uint32_t)layer * s->n_experts + (uint32_t)ids[i];
        slot[i] = dsv4_eshm_try_lease(s, key);
        if (slot[i] >= 0) {
            atomic_fetch_add_explicit(&s->stats.client_hits, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&dsv4_expert_shm_usage(s)[key], 1, memory_order_relaxed);
            count_lease(s, (uint32_t)slot[i]);
            continue;
        }
        struct dsv4_expert_req r = { .id = first + (uint64_t)i, .op = DSV4_EXPERT_OP_LOAD,
                                     .key = key, .t_ns = dsv4_now_ns() };
        while (!dsv4_eshm_req_push(s, &r))
            sleep_ns(100000); /* the fetcher drains the ring between reads */
        missing++;
    }
    c->next_id = first + (uint64_t)n;
    uint64_t deadline = missing ? dsv4_now_ns() + c->timeout_ns : 0;
    int bad = -1;
    char why[DSV4_EXPERT_COMP_MSG] = "";
    while (missing) {
        struct dsv4_expert_comp cp;
        if (dsv4_eshm_comp_pop(s, &cp)) {
            uint64_t i = cp.id - first;
            bool mine = cp.id >= first && i < (uint64_t)n && slot[i] == -1;
            if (!mine) {
                if (cp.status == 0)
                    dsv4_eshm_release(s, cp.slot);
                continue;
            }
            missing--;
            if (cp.status == 0) {
                slot[i] = (int32_t)cp.slot;
                count_lease(s, cp.slot);
            } else {
                slot[i] = -2; /* answered: failed */
                if (rc == 0) {
                    rc = cp.status;
                    bad = (int)i;
                    memcpy(why, cp.msg, sizeof(why));
                    why[sizeof(why) - 1] = 0;
                }
            }
            continue;
        }
        uint64_t now = dsv4_now_ns();
        if (atomic_load_explicit(&s->state, memory_order_acquire) == DSV4_FETCHER_STOPPED) {
            rc = dsv4_errf(err, -ESHUTDOWN, "experts: layer %d: the fetcher stopped", layer);
            break;
        }
        if (now >= deadline) {
            rc = dsv4_errf(err, -ETIMEDOUT,
                           "experts: layer %d: %d expert(s) not loaded after %llu ms (fetcher "
                           "pid %u)", layer, missing,
                           (unsigned long long)(c->timeout_ns / 1000000),
                           atomic_load_explicit(&s->pid, memory_order_relaxed));
            break;
        }
        dsv4_eshm_comp_wait(s, DSV4_MIN(deadline - now, 100000000ull));
    }
    if (bad >= 0)
        dsv4_errf(err, rc, "experts: layer %d expert %d: %s", layer, ids[bad], why);
    if (rc < 0) {
        for (int i = 0; i < n; i++)
            if (slot[i] >= 0)
                dsv4_eshm_release(s, (uint32_t)slot[i]);
    } else {
        for (int i = 0; i < n; i++)
            ret[i] = view(c, (uint32_t)slot[i]);
    }
    pthread_mutex_unlock(&c->lock);
    if (slot != small)
        free(slot);
    return rc;
}

void dsv4_fetcher_client_release(dsv4_fetcher_client *c, int layer, const int *ids, int n)
{
    struct dsv4_expert_shm *s = c->shm;
    for (int i = 0; i < n; i++) {
        uint32_t key = (uint32_t)layer * s->n_experts + (uint32_t)ids[i];
        /* A leased slot cannot be evicted, so the directory still points at it. */
        int32_t slot = atomic_load_explicit(&dsv4_expert_shm_dir(s)[key], memory_order_acquire);
        if (slot >= 0)
            dsv4_eshm_release(s, (uint32_t)slot);
    }
    if (atomic_load_explicit(&s->blocked, memory_order_relaxed))
        dsv4_eshm_req_kick(s); /* a demand waits for a slot to free up */
}

static int hint(dsv4_fetcher_client *c, uint32_t op, uint32_t key)
{
    struct dsv4_expert_req r = { .op = op, .key = key, .t_ns = dsv4_now_ns() };
    pthread_mutex_lock(&c->lock);
    bool ok = dsv4_eshm_req_push(c->shm, &r);
    pthread_mutex_unlock(&c->lock);
    if (!ok)
        atomic_fetch_add_explicit(&c->shm->stats.prefetch_dropped, 1, memory_order_relaxed);
    return ok;
}

int dsv4_fetcher_client_prefetch(dsv4_fetcher_client *c, int layer, const int *ids, int n)
{
    struct dsv4_expert_shm *s = c->shm;
    int queued = 0;
    if (layer < 0 || (uint32_t)layer >= s->n_layers)
        return 0;
    for (int i = 0; i < n; i++) {
        uint32_t key = (uint32_t)layer * s->n_experts + (uint32_t)ids[i];
        if (ids[i] < 0 || (uint32_t)ids[i] >= s->n_experts ||
            atomic_load_explicit(&dsv4_expert_shm_dir(s)[key], memory_order_relaxed) >= 0)
            continue;
        queued += hint(c, DSV4_EXPERT_OP_PREFETCH, key);
    }
    return queued;
}

int dsv4_fetcher_client_prefetch_token(dsv4_fetcher_client *c, int32_t token)
{
    return token < 0 ? 0 : hint(c, DSV4_EXPERT_OP_PREFETCH_TOKEN, (uint32_t)token);
}
