/* SPDX-License-Identifier: MIT */
/*
 * Why one long file: every function here runs on the one thread that owns the slot states
 * (or under its lock for pin/save-hot); keeping them together keeps that ownership visible.
 * I/O backends are fetcher_io.c, NUMA placement fetcher_numa.c, the segment fetcher_shm.c.
 *
 * dsv4-fetcher's engine. One thread (dsv4_fetcher_run) owns every slot
 * state change: it takes requests off the shm request ring, decides hits,
 * joins loads already running, claims slots (free, else the least recently
 * used unleased one, over-quota layers first), reads the expert's aligned
 * spans with the fio backend, verifies every completion's length and
 * publishes READY (or fails the waiters with the error). Clients lease and
 * release slots by CAS without talking to this thread (fetcher_shm.c).
 *
 * Reads: the six tensors of an expert are sorted by (shard, offset) and
 * merged into spans (a gap under 64 KiB is read through); each span is
 * widened to 4 KiB boundaries, placed at a 4 KiB boundary of the slot and
 * read in chunks of at most chunk_bytes, so O_DIRECT's alignment rules hold
 * and the tensor starts are recorded in the slot (off[], len[]).
 *
 * Queue depth counts expert loads, not reads: up to queue_depth loads run at
 * once and every chunk of each is in flight together (the ring holds
 * queue_depth × the chunks of the largest expert), as fio's iodepth counts
 * whole expert-sized reads that the kernel splits. A batch of experts is thus
 * wholly queued at the disk: it does not drain while this thread waits for a
 * CPU to refill the queue chunk by chunk (a starved thread cost batches 0.68
 * of fio that way, 0.74-0.77 now: docs/benchmarks.md).
 */
#include "fetcher.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "fetcher_io.h"
#include "fetcher_numa.h"
#include "fetcher_shm.h"
#include "buf.h"
#include "file.h"
#include "log.h"
#include "shm.h"
#include "safetensors.h"
#include "util.h"

#define TOPIC "fetcher"
#define SPAN_GAP_MAX (64u << 10)
/* While reads are in flight the thread sleeps in io_uring and sees new requests at the next
 * completion or after this long. Requests reaching it are misses and hints, whose reads queue
 * behind those in flight anyway; polling every 250 µs cost the otherwise idle thread about a
 * tenth of a CPU for as long as the disk was busy (bench-fetcher's CPU column). */
#define BUSY_POLL_NS 2000000u
#define READS_MAX 8192u /* reads in flight at most, whatever queue depth × chunks asks */

struct span {
    uint32_t shard, dst, alen; /* dst: offset in the slot; alen: aligned length */
    uint64_t astart, data_end; /* aligned file offset; end of the real bytes in the file */
};

struct plan {
    uint32_t n_spans;
    struct span spans[DSV4_EXPERT_TENSORS];
    uint32_t off[DSV4_EXPERT_TENSORS], len[DSV4_EXPERT_TENSORS];
};

struct load {
    bool active, prefetch, pin;
    uint32_t key, gen;
    uint32_t chunks_left;
    uint32_t next_span;        /* chunk issue cursor */
    uint64_t next_pos;         /* ... byte offset inside that span */
    int status;
    char msg[DSV4_EXPERT_COMP_MSG];
    uint64_t t_start;
    uint32_t n_waiters;
    size_t cap_waiters;
    uint32_t *waiters;         /* pending-table indices */
};

struct work {
    uint32_t key;
    int32_t pending;           /* demand: pending-table index; prefetch: -1 */
    bool pin;
};

struct fifo {
    struct work *v;
    size_t head, n, cap;
};

struct retry {
    uint32_t slot, span;
    uint64_t pos;
};

struct mail {
    uint32_t key;
    bool pin;
};

struct dsv4_fetcher {
    struct dsv4_fetcher_opts opts;
    char run_dir[4096];
    dsv4_checkpoint *ckpt;
    struct dsv4_config cfg;
    uint32_t n_keys, chunk;
    struct plan *plans;        /* [n_keys] */
    int *direct_fd;            /* [n_shards], -1 when buffered */
    uint32_t n_shards;
    int32_t *tid2eid;          /* [n_hash_layers][vocab][topk] or NULL */
    uint32_t n_hash, topk;

    char shm_name[96];
    struct dsv4_expert_shm *shm;
    uint64_t shm_size;
    int lock_fd;

    dsv4_fio *io;
    uint32_t n_active;         /* loads started and not finished (≤ opts.queue_depth) */
    _Atomic uint32_t reads_max; /* most reads in flight at once; read by other threads */
    struct load *loads;        /* [n_slots] */
    int32_t *loading;          /* [n_keys] → slot being loaded, -1 */
    uint32_t *free_slots, n_free;
    uint32_t *layer_count;     /* READY/PINNED slots per layer */
    uint32_t *issue, n_issue;  /* slots with chunks still to issue, in order */
    struct retry *retries;
    uint32_t n_retries;
    size_t cap_retries;
    struct fifo demand, prefetch;
    uint32_t pin_pending;
    uint32_t pending_cursor;
    uint8_t *manual_pin;       /* [n_slots]: pinned by a pin command (never auto-unpinned) */
    uint64_t last_repin;       /* stats.requests at the last hot-set pass */
    uint32_t *sorted;          /* [n_keys] scratch for the hot-set threshold */

    pthread_mutex_t mail_lock;
    struct mail *mail;
    uint32_t n_mail;
    size_t cap_mail;
    _Atomic bool stop;

    hwloc_topology_t topo;
    hwloc_cpuset_t cpus;
    hwloc_nodeset_t nodes;
    char describe[512];
};

/* ---- small containers ---- */

static void fifo_push(struct fifo *q, struct work w)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        struct work *v = dsv4_xcalloc(cap, sizeof(*v));
        for (size_t i = 0; i < q->n; i++)
            v[i] = q->v[(q->head + i) % q->cap];
        free(q->v);
        q->v = v;
        q->head = 0;
        q->cap = cap;
    }
    q->v[(q->head + q->n) % q->cap] = w;
    q->n++;
}

static struct work *fifo_front(struct fifo *q)
{
    return q->n ? &q->v[q->head] : NULL;
}

static void fifo_pop(struct fifo *q)
{
    q->head = (q->head + 1) % q->cap;
    q->n--;
}

/* ---- planning ---- */

static const char *const part_name[3] = { "w1", "w3", "w2" };

static int find_tensor(dsv4_fetcher *f, int layer, int ex, int part, bool scale,
                       const struct dsv4_tensor **ret, struct dsv4_err *err)
{
    char name[160];
    snprintf(name, sizeof(name), "layers.%d.ffn.experts.%d.%s.%s", layer, ex, part_name[part],
             scale ? "scale" : "weight");
    const struct dsv4_tensor *t = dsv4_checkpoint_find(f->ckpt, name);
    if (!t)
        return dsv4_errf(err, -ENOENT, "checkpoint: tensor %s is missing", name);
    uint64_t rows = part == 2 ? (uint64_t)f->cfg.dim : (uint64_t)f->cfg.moe_inter_dim;
    uint64_t cols = part == 2 ? (uint64_t)f->cfg.moe_inter_dim : (uint64_t)f->cfg.dim;
    uint64_t want = scale ? cols / 32 : cols / 2;
    if (t->rank != 2 || t->shape[0] != rows || t->shape[1] != want || t->nbytes != rows * want)
        return dsv4_errf(err, -EINVAL, "checkpoint: tensor %s must be [%llu, %llu] bytes", name,
                         (unsigned long long)rows, (unsigned long long)want);
    *ret = t;
    return 0;
}

static int plan_expert(dsv4_fetcher *f, int layer, int ex, struct plan *p, uint64_t *ret_size,
                       struct dsv4_err *err)
{
    const struct dsv4_tensor *t[DSV4_EXPERT_TENSORS];
    for (int i = 0; i < DSV4_EXPERT_TENSORS; i++) {
        int rc = find_tensor(f, layer, ex, i / 2, i & 1, &t[i], err);
        if (rc < 0)
            return rc;
    }
    int order[DSV4_EXPERT_TENSORS];
    for (int i = 0; i < DSV4_EXPERT_TENSORS; i++)
        order[i] = i;
    for (int i = 1; i < DSV4_EXPERT_TENSORS; i++) /* insertion sort by (shard, offset) */
        for (int j = i; j > 0; j--) {
            const struct dsv4_tensor *a = t[order[j - 1]], *b = t[order[j]];
            if (a->shard < b->shard || (a->shard == b->shard && a->offset <= b->offset))
                break;
            int tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    memset(p, 0, sizeof(*p));
    uint64_t dst = 0;
    struct span *cur = NULL;
    uint64_t cur_end = 0; /* unaligned end of the current span's data */
    for (int k = 0; k < DSV4_EXPERT_TENSORS; k++) {
        const struct dsv4_tensor *x = t[order[k]];
        if (!cur || x->shard != cur->shard || x->offset > cur_end + SPAN_GAP_MAX) {
            if (cur) {
                uint64_t aend = DSV4_ALIGN_UP(cur_end, DSV4_EXPERT_DIO_ALIGN);
                cur->alen = (uint32_t)(aend - cur->astart);
                cur->data_end = cur_end;
                dst += cur->alen;
            }
            cur = &p->spans[p->n_spans++];
            cur->shard = x->shard;
            cur->astart = x->offset / DSV4_EXPERT_DIO_ALIGN * DSV4_EXPERT_DIO_ALIGN;
            cur->dst = (uint32_t)dst;
            cur_end = x->offset;
        }
        p->off[order[k]] = (uint32_t)(cur->dst + (x->offset - cur->astart));
        p->len[order[k]] = (uint32_t)x->nbytes;
        if (x->offset + x->nbytes > cur_end)
            cur_end = x->offset + x->nbytes;
    }
    uint64_t aend = DSV4_ALIGN_UP(cur_end, DSV4_EXPERT_DIO_ALIGN);
    cur->alen = (uint32_t)(aend - cur->astart);
    cur->data_end = cur_end;
    dst += cur->alen;
    *ret_size = dst;
    return 0;
}

/* The hash-routed layers' token → expert tables (I32 or I64 [vocab, topk]). */
static int load_tid2eid(dsv4_fetcher *f, struct dsv4_err *err)
{
    f->n_hash = (uint32_t)f->cfg.n_hash_layers;
    f->topk = (uint32_t)f->cfg.n_activated_experts;
    if (!f->n_hash)
        return 0;
    size_t per = (size_t)f->cfg.vocab_size * f->topk;
    f->tid2eid = dsv4_xcalloc(f->n_hash * per, sizeof(int32_t));
    for (uint32_t l = 0; l < f->n_hash; l++) {
        char name[96];
        snprintf(name, sizeof(name), "layers.%u.ffn.gate.tid2eid", l);
        const struct dsv4_tensor *t = dsv4_checkpoint_find(f->ckpt, name);
        if (!t || t->n_elements != per ||
            (t->dtype != DSV4_DTYPE_I32 && t->dtype != DSV4_DTYPE_I64))
            return dsv4_errf(err, -EINVAL, "checkpoint: %s missing or not I32/I64 [%d, %u]",
                             name, f->cfg.vocab_size, f->topk);
        void *buf = dsv4_xmalloc(t->nbytes);
        int rc = dsv4_checkpoint_read(f->ckpt, t, 0, buf, t->nbytes, err);
        for (size_t i = 0; rc == 0 && i < per; i++) {
            int64_t v = t->dtype == DSV4_DTYPE_I32 ? ((int32_t *)buf)[i] : ((int64_t *)buf)[i];
            if (v < 0 || v >= f->cfg.n_routed_experts)
                rc = dsv4_errf(err, -EINVAL, "checkpoint: %s[%zu] = %lld is not an expert",
                               name, i, (long long)v);
            f->tid2eid[l * per + i] = (int32_t)v;
        }
        free(buf);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- segment ---- */

static void init_tables(dsv4_fetcher *f, bool fresh)
{
    struct dsv4_expert_shm *s = f->shm;
    _Atomic int32_t *dir = dsv4_expert_shm_dir(s);
    struct dsv4_expert_slot_shm *slots = dsv4_expert_shm_slots(s);
    for (uint32_t k = 0; k < f->n_keys; k++)
        atomic_store_explicit(&dir[k], -1, memory_order_relaxed);
    f->n_free = 0;
    uint64_t pinned = 0, discarded = 0;
    for (uint32_t i = s->n_slots; i-- > 0;) { /* descending: the free list pops slot 0 first */
        struct dsv4_expert_slot_shm *sl = &slots[i];
        uint64_t w = atomic_load_explicit(&sl->word, memory_order_acquire);
        uint32_t st = DSV4_SLOT_STATE(w), key = atomic_load_explicit(&sl->key, memory_order_relaxed);
        if (fresh || st == DSV4_SLOT_FREE || st == DSV4_SLOT_LOADING || key >= f->n_keys) {
            if (!fresh && st == DSV4_SLOT_LOADING)
                discarded++;
            /* A half-written slot never becomes READY under its generation. */
            atomic_store_explicit(&sl->word,
                                  DSV4_SLOT_WORD(fresh ? 0 : DSV4_SLOT_GEN(w) + 1, DSV4_SLOT_FREE, 0),
                                  memory_order_release);
            atomic_store_explicit(&sl->key, UINT32_MAX, memory_order_relaxed);
            f->free_slots[f->n_free++] = i;
            continue;
        }
        atomic_store_explicit(&dir[key], (int32_t)i, memory_order_release);
        f->layer_count[key / s->n_experts]++;
        if (st == DSV4_SLOT_PINNED)
            pinned++;
    }
    atomic_store_explicit(&s->stats.pinned, pinned, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->stats.discarded_loading, discarded, memory_order_relaxed);
    if (discarded)
        dsv4_log_warn(TOPIC, "discarded %llu slot(s) left loading by the previous fetcher",
                      (unsigned long long)discarded);
}

static int create_segment(dsv4_fetcher *f, const struct dsv4_eshm_geometry *g,
                          struct dsv4_err *err)
{
    struct dsv4_expert_shm tmpl;
    memset(&tmpl, 0, sizeof(tmpl));
    uint64_t size = dsv4_eshm_layout(&tmpl, g);
    int fd = dsv4_shm_open_own(f->shm_name, O_RDWR | O_CREAT | O_EXCL, err);
    if (fd < 0)
        return fd;
    if (ftruncate(fd, (off_t)size) < 0) {
        int rc = dsv4_errf(err, -errno, "shm %s: size %llu: %s", f->shm_name,
                           (unsigned long long)size, strerror(errno));
        close(fd);
        shm_unlink(f->shm_name);
        return rc;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        shm_unlink(f->shm_name);
        return dsv4_errf(err, -errno, "shm %s: mmap: %s", f->shm_name, strerror(errno));
    }
    f->shm = p;
    f->shm_size = size;
    /* Placement before the first touch (hwloc rule: policy, then fault, then register). */
    if (f->topo && hwloc_set_area_membind(f->topo, p, size, f->nodes, HWLOC_MEMBIND_BIND,
                                          HWLOC_MEMBIND_BYNODESET) < 0)
        dsv4_log_warn(TOPIC, "membind of the segment failed: %s", strerror(errno));
    memcpy(p, &tmpl, sizeof(tmpl));
    return 0;
}

static bool same_geometry(const struct dsv4_expert_shm *s, const struct dsv4_eshm_geometry *g)
{
    return s->n_layers == g->n_layers && s->n_experts == g->n_experts &&
           s->n_slots == g->n_slots && s->slot_size == g->slot_size && s->dim == g->dim &&
           s->inter == g->inter;
}

/* ---- requests ---- */

static uint32_t alloc_pending(dsv4_fetcher *f, const struct dsv4_expert_req *r)
{
    struct dsv4_expert_pending_shm *pend = dsv4_expert_shm_pending(f->shm);
    for (uint32_t n = 0; n < f->shm->ring_size; n++) {
        uint32_t i = (f->pending_cursor + n) % f->shm->ring_size;
        if (atomic_load_explicit(&pend[i].state, memory_order_relaxed) == DSV4_PENDING_NONE) {
            pend[i].req = *r;
            atomic_store_explicit(&pend[i].state, DSV4_PENDING_ACTIVE, memory_order_release);
            f->pending_cursor = i + 1;
            return i;
        }
    }
    return UINT32_MAX; /* cannot happen: clients keep at most ring_size loads outstanding */
}

static void complete(dsv4_fetcher *f, uint32_t pidx, int status, uint32_t slot, uint32_t gen,
                     const char *msg)
{
    struct dsv4_expert_pending_shm *pe = &dsv4_expert_shm_pending(f->shm)[pidx];
    struct dsv4_expert_comp c;
    memset(&c, 0, sizeof(c));
    c.id = pe->req.id;
    c.key = pe->req.key;
    c.status = status;
    c.slot = slot;
    c.gen = gen;
    if (msg)
        snprintf(c.msg, sizeof(c.msg), "%s", msg);
    if (status < 0)
        atomic_fetch_add_explicit(&f->shm->stats.failures, 1, memory_order_relaxed);
    if (!dsv4_eshm_comp_push(f->shm, &c))
        dsv4_log_error(TOPIC, "completion ring full: client exceeded its outstanding limit");
    atomic_store_explicit(&pe->state, DSV4_PENDING_NONE, memory_order_release);
}

static void add_waiter(struct load *l, uint32_t pidx)
{
    DSV4_GROW(l->waiters, l->cap_waiters, (size_t)l->n_waiters + 1);
    l->waiters[l->n_waiters++] = pidx;
}

/* A demand for key: a hit completes now, a running load gets a waiter, else queue it. */
static void demand(dsv4_fetcher *f, uint32_t key, uint32_t pidx, bool count)
{
    struct dsv4_expert_shm *s = f->shm;
    if (key >= f->n_keys) {
        complete(f, pidx, -EINVAL, 0, 0, "request for an expert outside the model");
        return;
    }
    if (count) {
        atomic_fetch_add_explicit(&s->stats.requests, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&dsv4_expert_shm_usage(s)[key], 1, memory_order_relaxed);
    }
    int32_t slot = atomic_load_explicit(&dsv4_expert_shm_dir(s)[key], memory_order_acquire);
    if (slot >= 0 && dsv4_eshm_lease_slot(s, (uint32_t)slot, key)) {
        struct dsv4_expert_slot_shm *sl = &dsv4_expert_shm_slots(s)[slot];
        if (count)
            atomic_fetch_add_explicit(&s->stats.hits, 1, memory_order_relaxed);
        if (atomic_exchange_explicit(&sl->prefetched, 0, memory_order_relaxed))
            atomic_fetch_add_explicit(&s->stats.prefetch_used, 1, memory_order_relaxed);
        uint64_t w = atomic_load_explicit(&sl->word, memory_order_relaxed);
        complete(f, pidx, 0, (uint32_t)slot, DSV4_SLOT_GEN(w), NULL);
        return;
    }
    if (count)
        atomic_fetch_add_explicit(&s->stats.misses, 1, memory_order_relaxed);
    if (f->loading[key] >= 0) {
        struct load *l = &f->loads[f->loading[key]];
        if (l->prefetch) {
            l->prefetch = false;
            atomic_fetch_add_explicit(&s->stats.prefetch_used, 1, memory_order_relaxed);
        }
        add_waiter(l, pidx);
        return;
    }
    fifo_push(&f->demand, (struct work){ key, (int32_t)pidx, false });
}

static void hint(dsv4_fetcher *f, uint32_t key, bool pin)
{
    if (key >= f->n_keys)
        return;
    if (atomic_load_explicit(&dsv4_expert_shm_dir(f->shm)[key], memory_order_acquire) >= 0 ||
        f->loading[key] >= 0)
        return;
    fifo_push(&f->prefetch, (struct work){ key, -1, pin });
}

static void handle_request(dsv4_fetcher *f, const struct dsv4_expert_req *r, uint32_t pidx)
{
    switch (r->op) {
    case DSV4_EXPERT_OP_LOAD:
        demand(f, r->key, pidx, true);
        break;
    case DSV4_EXPERT_OP_PREFETCH:
        hint(f, r->key, false);
        break;
    case DSV4_EXPERT_OP_PREFETCH_TOKEN:
        if (r->key < (uint32_t)f->cfg.vocab_size)
            for (uint32_t l = 0; l < f->n_hash; l++)
                for (uint32_t k = 0; k < f->topk; k++) {
                    size_t i = ((size_t)l * f->cfg.vocab_size + r->key) * f->topk + k;
                    hint(f, l * f->shm->n_experts + (uint32_t)f->tid2eid[i], false);
                }
        break;
    default:
        break;
    }
}

static void drain_requests(dsv4_fetcher *f)
{
    struct dsv4_expert_req r;
    while (dsv4_eshm_req_peek(f->shm, &r)) {
        uint32_t pidx = UINT32_MAX;
        if (r.op == DSV4_EXPERT_OP_LOAD)
            pidx = alloc_pending(f, &r); /* recorded before the ring forgets it */
        dsv4_eshm_req_advance(f->shm);
        if (r.op == DSV4_EXPERT_OP_LOAD && pidx == UINT32_MAX) {
            dsv4_log_error(TOPIC, "pending table full; request %llu dropped",
                           (unsigned long long)r.id);
            continue;
        }
        handle_request(f, &r, pidx);
    }
}

static bool set_pinned(dsv4_fetcher *f, uint32_t slot, bool pin);

static void drain_mail(dsv4_fetcher *f)
{
    pthread_mutex_lock(&f->mail_lock);
    for (uint32_t i = 0; i < f->n_mail; i++) {
        uint32_t key = f->mail[i].key;
        struct dsv4_expert_shm *s = f->shm;
        int32_t slot = atomic_load_explicit(&dsv4_expert_shm_dir(s)[key], memory_order_acquire);
        if (slot >= 0) {
            set_pinned(f, (uint32_t)slot, f->mail[i].pin);
            f->manual_pin[slot] = f->mail[i].pin;
        } else if (f->mail[i].pin && f->loading[key] >= 0) {
            f->loads[f->loading[key]].pin = true;
        } else if (f->mail[i].pin) {
            hint(f, key, true);
        }
        if (f->mail[i].pin && f->pin_pending)
            f->pin_pending--;
    }
    f->n_mail = 0;
    pthread_mutex_unlock(&f->mail_lock);
}

/* Change a READY slot to PINNED or back (leases kept); false if it was not in `from`. */
static bool set_pinned(dsv4_fetcher *f, uint32_t slot, bool pin)
{
    struct dsv4_expert_slot_shm *sl = &dsv4_expert_shm_slots(f->shm)[slot];
    uint32_t from = pin ? DSV4_SLOT_READY : DSV4_SLOT_PINNED;
    uint32_t to = pin ? DSV4_SLOT_PINNED : DSV4_SLOT_READY;
    uint64_t w = atomic_load_explicit(&sl->word, memory_order_acquire);
    while (DSV4_SLOT_STATE(w) == from)
        if (atomic_compare_exchange_weak_explicit(
                &sl->word, &w, DSV4_SLOT_WORD(DSV4_SLOT_GEN(w), to, DSV4_SLOT_LEASES(w)),
                memory_order_acq_rel, memory_order_acquire)) {
            atomic_fetch_add_explicit(&f->shm->stats.pinned, pin ? 1 : (uint64_t)-1,
                                      memory_order_relaxed);
            return true;
        }
    return false;
}

static int cmp_desc(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x < y) - (x > y);
}

/* Learn the hot set while running: every repin_every demands (fetcher or client hits), the pin_slots experts with
 * the highest demand counts that are cached get pinned; automatically pinned slots that fell
 * out of that set are unpinned (slots pinned by a command stay). */
static void repin(dsv4_fetcher *f)
{
    struct dsv4_expert_shm *s = f->shm;
    uint64_t req = atomic_load_explicit(&s->stats.requests, memory_order_relaxed) +
                   atomic_load_explicit(&s->stats.client_hits, memory_order_relaxed);
    if (!f->opts.pin_slots || req - f->last_repin < f->opts.repin_every)
        return;
    f->last_repin = req;
    _Atomic uint32_t *usage = dsv4_expert_shm_usage(s);
    for (uint32_t k = 0; k < f->n_keys; k++)
        f->sorted[k] = atomic_load_explicit(&usage[k], memory_order_relaxed);
    qsort(f->sorted, f->n_keys, sizeof(*f->sorted), cmp_desc);
    uint32_t t = f->sorted[DSV4_MIN(f->opts.pin_slots, f->n_keys) - 1];
    if (t < 2)
        t = 2; /* an expert used once is not hot */
    struct dsv4_expert_slot_shm *slots = dsv4_expert_shm_slots(s);
    for (uint32_t i = 0; i < s->n_slots; i++) {
        uint32_t key = atomic_load_explicit(&slots[i].key, memory_order_relaxed);
        uint32_t st = DSV4_SLOT_STATE(atomic_load_explicit(&slots[i].word, memory_order_relaxed));
        if (key >= f->n_keys)
            continue;
        uint32_t u = atomic_load_explicit(&usage[key], memory_order_relaxed);
        if (st == DSV4_SLOT_PINNED && !f->manual_pin[i] && u < t)
            set_pinned(f, i, false);
        else if (st == DSV4_SLOT_READY && u >= t &&
                 atomic_load_explicit(&s->stats.pinned, memory_order_relaxed) + f->pin_pending <
                     f->opts.pin_slots)
            set_pinned(f, i, true);
    }
}

/* ---- slots ---- */

static int32_t claim_slot(dsv4_fetcher *f)
{
    struct dsv4_expert_shm *s = f->shm;
    struct dsv4_expert_slot_shm *slots = dsv4_expert_shm_slots(s);
    if (f->n_free) {
        uint32_t i = f->free_slots[--f->n_free];
        uint64_t w = atomic_load_explicit(&slots[i].word, memory_order_relaxed);
        atomic_store_explicit(&slots[i].word,
                              DSV4_SLOT_WORD(DSV4_SLOT_GEN(w) + 1, DSV4_SLOT_LOADING, 0),
                              memory_order_release);
        return (int32_t)i;
    }
    /* Per-layer LRU: the least recently used unleased READY slot of a layer holding more
     * than its share of the budget; else the least recently used one overall. */
    uint32_t share = s->n_slots / s->n_layers ? s->n_slots / s->n_layers : 1;
    for (int attempt = 0; attempt < 8; attempt++) {
        int32_t best_over = -1, best_any = -1;
        uint64_t t_over = UINT64_MAX, t_any = UINT64_MAX;
        for (uint32_t i = 0; i < s->n_slots; i++) {
            uint64_t w = atomic_load_explicit(&slots[i].word, memory_order_relaxed);
            if (DSV4_SLOT_STATE(w) != DSV4_SLOT_READY || DSV4_SLOT_LEASES(w))
                continue;
            uint64_t t = atomic_load_explicit(&slots[i].last_use, memory_order_relaxed);
            uint32_t key = atomic_load_explicit(&slots[i].key, memory_order_relaxed);
            if (t < t_any)
                t_any = t, best_any = (int32_t)i;
            if (f->layer_count[key / s->n_experts] > share && t < t_over)
                t_over = t, best_over = (int32_t)i;
        }
        int32_t v = best_over >= 0 ? best_over : best_any;
        if (v < 0)
            return -1;
        struct dsv4_expert_slot_shm *sl = &slots[v];
        uint64_t w = atomic_load_explicit(&sl->word, memory_order_acquire);
        if (DSV4_SLOT_STATE(w) != DSV4_SLOT_READY || DSV4_SLOT_LEASES(w))
            continue;
        /* Fails if a client leased it since the scan: then look again. */
        if (!atomic_compare_exchange_strong_explicit(
                &sl->word, &w, DSV4_SLOT_WORD(DSV4_SLOT_GEN(w) + 1, DSV4_SLOT_LOADING, 0),
                memory_order_acq_rel, memory_order_acquire))
            continue;
        uint32_t old = atomic_load_explicit(&sl->key, memory_order_relaxed);
        int32_t expect = v;
        atomic_compare_exchange_strong_explicit(&dsv4_expert_shm_dir(s)[old], &expect, -1,
                                                memory_order_release, memory_order_relaxed);
        f->layer_count[old / s->n_experts]--;
        atomic_fetch_add_explicit(&s->stats.evictions, 1, memory_order_relaxed);
        return v;
    }
    return -1;
}

static void start_load(dsv4_fetcher *f, uint32_t slot, uint32_t key, bool prefetch, bool pin)
{
    struct dsv4_expert_slot_shm *sl = &dsv4_expert_shm_slots(f->shm)[slot];
    const struct plan *p = &f->plans[key];
    atomic_store_explicit(&sl->key, key, memory_order_relaxed);
    atomic_store_explicit(&sl->prefetched, prefetch, memory_order_relaxed);
    memcpy(sl->off, p->off, sizeof(sl->off));
    memcpy(sl->len, p->len, sizeof(sl->len));
    struct load *l = &f->loads[slot];
    l->active = true;
    l->prefetch = prefetch;
    l->pin = pin;
    l->key = key;
    l->gen = DSV4_SLOT_GEN(atomic_load_explicit(&sl->word, memory_order_relaxed));
    l->chunks_left = 0;
    for (uint32_t i = 0; i < p->n_spans; i++)
        l->chunks_left += (p->spans[i].alen + f->chunk - 1) / f->chunk;
    l->next_span = 0;
    l->next_pos = 0;
    l->status = 0;
    l->msg[0] = 0;
    l->t_start = dsv4_now_ns();
    l->n_waiters = 0;
    f->n_active++;
    f->loading[key] = (int32_t)slot;
    f->issue[f->n_issue++] = slot;
    if (prefetch)
        atomic_fetch_add_explicit(&f->shm->stats.prefetch_issued, 1, memory_order_relaxed);
}

static void finish_load(dsv4_fetcher *f, uint32_t slot)
{
    struct dsv4_expert_shm *s = f->shm;
    struct dsv4_expert_slot_shm *sl = &dsv4_expert_shm_slots(s)[slot];
    struct load *l = &f->loads[slot];
    f->loading[l->key] = -1;
    l->active = false;
    f->n_active--;
    if (l->status == 0) {
        uint32_t state = l->pin ? DSV4_SLOT_PINNED : DSV4_SLOT_READY;
        if (l->n_waiters)
            atomic_store_explicit(&sl->prefetched, 0, memory_order_relaxed);
        atomic_store_explicit(&sl->last_use,
                              atomic_fetch_add_explicit(&s->clock, 1, memory_order_relaxed),
                              memory_order_relaxed);
        /* Payload and metadata before the word, the word before the directory. */
        atomic_store_explicit(&sl->word, DSV4_SLOT_WORD(l->gen, state, l->n_waiters),
                              memory_order_release);
        atomic_store_explicit(&dsv4_expert_shm_dir(s)[l->key], (int32_t)slot,
                              memory_order_release);
        f->layer_count[l->key / s->n_experts]++;
        f->manual_pin[slot] = l->pin;
        if (l->pin)
            atomic_fetch_add_explicit(&s->stats.pinned, 1, memory_order_relaxed);
        uint64_t us = (dsv4_now_ns() - l->t_start) / 1000;
        int b = 0;
        while (b < DSV4_EXPERT_LAT_BUCKETS - 1 && us >= (64ull << b))
            b++;
        atomic_fetch_add_explicit(&s->stats.lat_hist[b], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->stats.lat_sum_us, us, memory_order_relaxed);
        for (uint32_t i = 0; i < l->n_waiters; i++)
            complete(f, l->waiters[i], 0, slot, l->gen, NULL);
    } else {
        atomic_store_explicit(&sl->key, UINT32_MAX, memory_order_relaxed);
        atomic_store_explicit(&sl->word, DSV4_SLOT_WORD(l->gen + 1, DSV4_SLOT_FREE, 0),
                              memory_order_release);
        f->free_slots[f->n_free++] = slot;
        dsv4_log_rl(DSV4_LOG_ERROR, TOPIC, "layer %u expert %u: %s", l->key / s->n_experts,
                    l->key % s->n_experts, l->msg);
        for (uint32_t i = 0; i < l->n_waiters; i++)
            complete(f, l->waiters[i], l->status, 0, 0, l->msg);
    }
    l->n_waiters = 0;
}

static void start_loads(dsv4_fetcher *f, bool *blocked)
{
    *blocked = false;
    while (f->n_active < f->opts.queue_depth) {
        struct fifo *q = f->demand.n ? &f->demand : &f->prefetch;
        struct work *w = fifo_front(q);
        if (!w)
            break;
        struct work cur = *w;
        bool cached = atomic_load_explicit(&dsv4_expert_shm_dir(f->shm)[cur.key],
                                           memory_order_acquire) >= 0;
        if (cached || f->loading[cur.key] >= 0) {
            /* Loaded or started since it was queued: a demand re-decides, a hint is done. */
            fifo_pop(q);
            if (cur.pending >= 0)
                demand(f, cur.key, (uint32_t)cur.pending, false);
            continue;
        }
        int32_t slot = claim_slot(f);
        if (slot < 0) {
            if (cur.pending >= 0) {
                *blocked = true; /* waits for a release */
                break;
            }
            fifo_pop(q);
            atomic_fetch_add_explicit(&f->shm->stats.prefetch_dropped, 1, memory_order_relaxed);
            continue;
        }
        fifo_pop(q);
        start_load(f, (uint32_t)slot, cur.key, cur.pending < 0 && !cur.pin, cur.pin);
        if (cur.pending >= 0)
            add_waiter(&f->loads[slot], (uint32_t)cur.pending);
    }
}

/* ---- reads ---- */

#define TAG(slot, span, pos) ((uint64_t)(slot) | ((uint64_t)(span) << 24) | ((uint64_t)(pos) << 32))

static int issue_chunk(dsv4_fetcher *f, uint32_t slot, uint32_t span, uint64_t pos)
{
    const struct load *l = &f->loads[slot];
    const struct span *sp = &f->plans[l->key].spans[span];
    uint32_t len = (uint32_t)DSV4_MIN((uint64_t)f->chunk, sp->alen - pos);
    int fd = f->direct_fd[sp->shard] >= 0 ? f->direct_fd[sp->shard]
                                          : dsv4_checkpoint_shard_fd(f->ckpt, sp->shard);
    uint8_t *dst = dsv4_expert_shm_slot_data(f->shm, slot) + sp->dst + pos;
    return dsv4_fio_read(f->io, fd, dst, len, sp->astart + pos, (int)slot,
                         TAG(slot, span, pos / DSV4_EXPERT_DIO_ALIGN));
}

static void pump(dsv4_fetcher *f)
{
    while (f->n_retries && dsv4_fio_in_flight(f->io) < dsv4_fio_queue_depth(f->io)) {
        struct retry r = f->retries[--f->n_retries];
        if (issue_chunk(f, r.slot, r.span, r.pos) < 0) {
            f->n_retries++;
            return;
        }
    }
    while (f->n_issue && dsv4_fio_in_flight(f->io) < dsv4_fio_queue_depth(f->io)) {
        uint32_t slot = f->issue[0];
        struct load *l = &f->loads[slot];
        const struct plan *p = &f->plans[l->key];
        if (issue_chunk(f, slot, l->next_span, l->next_pos) < 0)
            return;
        l->next_pos += f->chunk;
        if (l->next_pos >= p->spans[l->next_span].alen) {
            l->next_span++;
            l->next_pos = 0;
        }
        if (l->next_span == p->n_spans) {
            memmove(f->issue, f->issue + 1, (f->n_issue - 1) * sizeof(*f->issue));
            f->n_issue--;
        }
    }
    uint32_t now = dsv4_fio_in_flight(f->io); /* only this thread writes reads_max */
    if (now > atomic_load_explicit(&f->reads_max, memory_order_relaxed))
        atomic_store_explicit(&f->reads_max, now, memory_order_relaxed);
}

static void on_read(dsv4_fetcher *f, const struct dsv4_fio_done *d)
{
    uint32_t slot = (uint32_t)(d->tag & 0xffffff), span = (uint32_t)((d->tag >> 24) & 0xff);
    uint64_t pos = (d->tag >> 32) * DSV4_EXPERT_DIO_ALIGN;
    struct load *l = &f->loads[slot];
    const struct span *sp = &f->plans[l->key].spans[span];
    struct dsv4_expert_shm *s = f->shm;
    uint64_t off = sp->astart + pos;
    uint64_t len = DSV4_MIN((uint64_t)f->chunk, sp->alen - pos);
    /* Bytes that must arrive: up to the end of the span's real data (past it, the aligned
     * tail may run into end of file). */
    uint64_t need = sp->data_end > off ? DSV4_MIN(len, sp->data_end - off) : 0;
    const char *shard = dsv4_checkpoint_shard_path(f->ckpt, sp->shard);
    const char *base = strrchr(shard, '/') ? strrchr(shard, '/') + 1 : shard;
    if (d->res == -EINVAL && f->direct_fd[sp->shard] >= 0) {
        dsv4_log_warn(TOPIC, "%s: O_DIRECT read refused (EINVAL): buffered reads from now on",
                      shard);
        close(f->direct_fd[sp->shard]);
        f->direct_fd[sp->shard] = -1;
        atomic_store_explicit(&s->io_direct, 0, memory_order_relaxed);
        DSV4_GROW(f->retries, f->cap_retries, (size_t)f->n_retries + 1);
        f->retries[f->n_retries++] = (struct retry){ slot, span, pos };
        return;
    }
    atomic_fetch_add_explicit(&s->stats.reads, 1, memory_order_relaxed);
    if (f->direct_fd[sp->shard] < 0)
        atomic_fetch_add_explicit(&s->stats.buffered_reads, 1, memory_order_relaxed);
    if (d->res < 0 && l->status == 0) {
        l->status = (int)d->res;
        snprintf(l->msg, sizeof(l->msg), "%s reading %s at %llu", strerror((int)-d->res), base,
                 (unsigned long long)off);
    } else if (d->res >= 0 && (uint64_t)d->res < need && l->status == 0) {
        l->status = -EIO;
        snprintf(l->msg, sizeof(l->msg), "short read: %lld of %llu bytes of %s at %llu (truncated?)",
                 (long long)d->res, (unsigned long long)need, base, (unsigned long long)off);
    }
    if (d->res > 0)
        atomic_fetch_add_explicit(&s->stats.bytes_read, (uint64_t)DSV4_MIN((uint64_t)d->res, need),
                                  memory_order_relaxed);
    if (--l->chunks_left == 0)
        finish_load(f, slot);
}

/* ---- life cycle ---- */

static int open_direct(dsv4_fetcher *f)
{
    const char *env = getenv("DSV4_IO");
    bool buffered = f->opts.io != DSV4_FETCHER_IO_AUTO || (env && strcmp(env, "auto") != 0);
    int direct = 0;
    for (uint32_t i = 0; i < f->n_shards; i++) {
        f->direct_fd[i] = -1;
        if (buffered)
            continue;
        f->direct_fd[i] = open(dsv4_checkpoint_shard_path(f->ckpt, i),
                               O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (f->direct_fd[i] < 0)
            dsv4_log_warn(TOPIC, "%s: O_DIRECT refused (%s): buffered reads",
                          dsv4_checkpoint_shard_path(f->ckpt, i), strerror(errno));
        else
            direct++;
    }
    return direct == (int)f->n_shards && f->n_shards;
}

static void load_hot(dsv4_fetcher *f)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/fetcher-hot.json", f->run_dir);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return;
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = 0;
    cJSON *root = cJSON_ParseWithLength(buf, n);
    cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "experts");
    cJSON *e;
    uint32_t pinned = 0;
    cJSON_ArrayForEach(e, list)
    {
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) < 2)
            continue;
        int layer = cJSON_GetArrayItem(e, 0)->valueint, ex = cJSON_GetArrayItem(e, 1)->valueint;
        if (dsv4_fetcher_pin(f, layer, ex, true, NULL) == 0)
            pinned++;
    }
    cJSON_Delete(root);
    dsv4_log_info(TOPIC, "hot set %s: pinning %u expert(s)", path, pinned);
}

int dsv4_fetcher_save_hot(dsv4_fetcher *f, struct dsv4_err *err)
{
    _Atomic uint32_t *usage = dsv4_expert_shm_usage(f->shm);
    uint32_t want = f->opts.pin_slots, n = 0;
    uint32_t *top = dsv4_xcalloc(want + 1, sizeof(*top));
    for (uint32_t k = 0; k < f->n_keys; k++) { /* keep the `want` most used, insertion */
        uint32_t c = atomic_load_explicit(&usage[k], memory_order_relaxed);
        if (!c)
            continue;
        uint32_t i = n < want ? n++ : want;
        while (i > 0 && atomic_load_explicit(&usage[top[i - 1]], memory_order_relaxed) < c) {
            if (i < want)
                top[i] = top[i - 1];
            i--;
        }
        if (i < want)
            top[i] = k;
    }
    cJSON *root = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(root, "experts");
    cJSON_AddNumberToObject(root, "v", 1);
    for (uint32_t i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateArray();
        cJSON_AddItemToArray(e, cJSON_CreateNumber(top[i] / f->shm->n_experts));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(top[i] % f->shm->n_experts));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(atomic_load_explicit(&usage[top[i]],
                                                                         memory_order_relaxed)));
        cJSON_AddItemToArray(list, e);
    }
    free(top);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    char path[4200];
    snprintf(path, sizeof(path), "%s/fetcher-hot.json", f->run_dir);
    /* never a half-written file, never a temp file left behind (a full disk) */
    int rc = dsv4_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

int dsv4_fetcher_open(const struct dsv4_fetcher_opts *opts, dsv4_fetcher **ret,
                      struct dsv4_err *err)
{
    dsv4_fetcher *f = dsv4_xcalloc(1, sizeof(*f));
    f->opts = *opts;
    f->lock_fd = -1;
    pthread_mutex_init(&f->mail_lock, NULL);
    if (!f->opts.n_slots)
        f->opts.n_slots = 16;
    if (!f->opts.queue_depth)
        f->opts.queue_depth = 16;
    f->chunk = f->opts.chunk_bytes ? f->opts.chunk_bytes : 1u << 20;
    f->chunk = DSV4_MAX(DSV4_EXPERT_DIO_ALIGN, f->chunk / DSV4_EXPERT_DIO_ALIGN * DSV4_EXPERT_DIO_ALIGN);
    snprintf(f->run_dir, sizeof(f->run_dir), "%s", opts->run_dir);
    int rc;

    /* One fetcher per run directory. */
    char lock[4200];
    snprintf(lock, sizeof(lock), "%s/fetcher.lock", f->run_dir);
    f->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (f->lock_fd < 0 || flock(f->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        rc = dsv4_errf(err, -errno, "%s: %s (another fetcher for this run dir?)", lock,
                       strerror(errno));
        goto fail;
    }
    if ((rc = dsv4_config_load(opts->model_dir, &f->cfg, err)) < 0)
        goto fail;
    if ((rc = dsv4_checkpoint_open(opts->model_dir, &f->ckpt, err)) < 0)
        goto fail;
    f->n_keys = (uint32_t)f->cfg.n_layers * (uint32_t)f->cfg.n_routed_experts;
    f->plans = dsv4_xcalloc(f->n_keys, sizeof(*f->plans));
    uint64_t slot_size = 0;
    for (int l = 0; l < f->cfg.n_layers; l++)
        for (int x = 0; x < f->cfg.n_routed_experts; x++) {
            uint64_t sz;
            rc = plan_expert(f, l, x, &f->plans[(size_t)l * f->cfg.n_routed_experts + x], &sz,
                             err);
            if (rc < 0)
                goto fail;
            slot_size = DSV4_MAX(slot_size, sz);
        }
    if (f->opts.cache_bytes) {  /* the largest segment within the budget */
        struct dsv4_expert_shm tmpl;
        struct dsv4_eshm_geometry g = {
            .n_layers = (uint32_t)f->cfg.n_layers,
            .n_experts = (uint32_t)f->cfg.n_routed_experts,
            .dim = (uint32_t)f->cfg.dim,
            .inter = (uint32_t)f->cfg.moe_inter_dim,
            .slot_size = DSV4_ALIGN_UP(slot_size, DSV4_EXPERT_DIO_ALIGN),
        };
        g.n_slots = (uint32_t)DSV4_MIN(f->opts.cache_bytes / g.slot_size, (uint64_t)f->n_keys);
        while (g.n_slots > 0 && (memset(&tmpl, 0, sizeof(tmpl)),
                                 dsv4_eshm_layout(&tmpl, &g) > f->opts.cache_bytes))
            g.n_slots--;
        if (g.n_slots < 2) {
            rc = dsv4_errf(err, -ENOSPC,
                           "cache budget %llu bytes holds fewer than 2 expert slots of %llu bytes",
                           (unsigned long long)f->opts.cache_bytes,
                           (unsigned long long)g.slot_size);
            goto fail;
        }
        f->opts.n_slots = g.n_slots;
        dsv4_log_info(TOPIC, "cache budget %.1f MiB: %u slots of %.2f MiB",
                      f->opts.cache_bytes / 1048576.0, g.n_slots, g.slot_size / 1048576.0);
    }
    if (!f->opts.pin_slots_set)
        f->opts.pin_slots = dsv4_expert_pin_slots_default(f->opts.n_slots);
    if (f->opts.pin_slots >= f->opts.n_slots)
        f->opts.pin_slots = f->opts.n_slots - 1;
    if ((rc = load_tid2eid(f, err)) < 0)
        goto fail;
    f->n_shards = dsv4_checkpoint_n_shards(f->ckpt);
    f->direct_fd = dsv4_xcalloc(f->n_shards, sizeof(int));
    bool direct = open_direct(f);

    if (opts->numa) {
        if (dsv4_fetcher_numa_topology(&f->topo) == 0) {
            char dev[64], why[256];
            f->cpus = hwloc_bitmap_alloc();
            f->nodes = hwloc_bitmap_alloc();
            bool have_dev = dsv4_fetcher_numa_blockdev(opts->model_dir, dev, sizeof(dev)) == 0;
            dsv4_fetcher_numa_plan(f->topo, have_dev ? dev : NULL, f->cpus, f->nodes, why,
                                   sizeof(why));
            dsv4_log_info(TOPIC, "numa: %s", why);
        } else {
            dsv4_log_warn(TOPIC, "numa: hwloc topology unavailable; no placement");
        }
    }

    struct dsv4_eshm_geometry g = {
        .n_layers = (uint32_t)f->cfg.n_layers,
        .n_experts = (uint32_t)f->cfg.n_routed_experts,
        .n_slots = f->opts.n_slots,
        .dim = (uint32_t)f->cfg.dim,
        .inter = (uint32_t)f->cfg.moe_inter_dim,
        .slot_size = DSV4_ALIGN_UP(slot_size, DSV4_EXPERT_DIO_ALIGN),
    };
    if ((rc = dsv4_eshm_name(f->run_dir, f->shm_name, sizeof(f->shm_name), err)) < 0)
        goto fail;
    bool fresh = true;
    struct dsv4_err aerr = { "" };
    int arc = dsv4_eshm_attach(f->shm_name, &f->shm, &f->shm_size, &aerr);
    if (arc == 0) {
        if (same_geometry(f->shm, &g) &&
            atomic_load_explicit(&f->shm->state, memory_order_relaxed) != DSV4_FETCHER_STOPPED) {
            fresh = false;
            atomic_fetch_add_explicit(&f->shm->stats.restarts, 1, memory_order_relaxed);
            dsv4_log_info(TOPIC, "re-attached to %s left by pid %u", f->shm_name,
                          atomic_load_explicit(&f->shm->pid, memory_order_relaxed));
        } else {
            dsv4_log_warn(TOPIC, "%s has another geometry or was stopped: recreating",
                          f->shm_name);
            dsv4_eshm_unmap(f->shm, f->shm_size);
            f->shm = NULL;
            shm_unlink(f->shm_name);
        }
    } else if (arc == -EPROTO) {
        shm_unlink(f->shm_name); /* ours (owner and mode checked) but of another build */
    } else if (arc != -ENOENT) {
        dsv4_log_warn(TOPIC, "%s", aerr.msg);  /* not ours alone: left alone, create refuses */
    }
    if (fresh && (rc = create_segment(f, &g, err)) < 0)
        goto fail;

    f->loads = dsv4_xcalloc(g.n_slots, sizeof(*f->loads));
    f->loading = dsv4_xmalloc(f->n_keys * sizeof(*f->loading));
    for (uint32_t k = 0; k < f->n_keys; k++)
        f->loading[k] = -1;
    f->free_slots = dsv4_xcalloc(g.n_slots, sizeof(*f->free_slots));
    f->layer_count = dsv4_xcalloc(g.n_layers, sizeof(*f->layer_count));
    f->issue = dsv4_xcalloc(g.n_slots, sizeof(*f->issue));
    f->manual_pin = dsv4_xcalloc(g.n_slots, 1);
    f->sorted = dsv4_xcalloc(f->n_keys, sizeof(*f->sorted));
    if (!f->opts.repin_every)
        f->opts.repin_every = 4096;
    f->last_repin = atomic_load_explicit(&f->shm->stats.requests, memory_order_relaxed) +
                    atomic_load_explicit(&f->shm->stats.client_hits, memory_order_relaxed);
    init_tables(f, fresh);

    const char *env = getenv("DSV4_IO");
    enum dsv4_fio_backend be = f->opts.io == DSV4_FETCHER_IO_PREAD || (env && !strcmp(env, "pread"))
                                   ? DSV4_FIO_PREAD
                                   : DSV4_FIO_URING;
    struct iovec *iov = dsv4_xcalloc(g.n_slots, sizeof(*iov));
    for (uint32_t i = 0; i < g.n_slots; i++)
        iov[i] = (struct iovec){ dsv4_expert_shm_slot_data(f->shm, i), g.slot_size };
    /* Room for every chunk of queue_depth loads of the largest expert (io_uring caps a ring
     * at 32768 entries; the ring is twice this). */
    uint64_t reads = (uint64_t)f->opts.queue_depth * ((g.slot_size + f->chunk - 1) / f->chunk);
    struct dsv4_err ioerr = { { 0 } };
    dsv4_fio_open(be, (uint32_t)DSV4_MIN(reads, READS_MAX), iov, g.n_slots, &f->io, &ioerr);
    free(iov);
    if (ioerr.msg[0])
        dsv4_log_warn(TOPIC, "%s", ioerr.msg);
    atomic_store_explicit(&f->shm->io_direct, direct, memory_order_relaxed);
    atomic_store_explicit(&f->shm->io_uring, dsv4_fio_backend(f->io) == DSV4_FIO_URING,
                          memory_order_relaxed);
    snprintf(f->describe, sizeof(f->describe),
             "%s, %s, %s registered buffers, %u slots of %llu bytes, queue depth %u loads "
             "(up to %u reads in flight), chunk %u",
             dsv4_fio_backend(f->io) == DSV4_FIO_URING ? "io_uring" : "pread",
             direct ? "O_DIRECT" : "buffered (O_DIRECT refused or disabled)",
             dsv4_fio_registered(f->io) ? "with" : "without", g.n_slots,
             (unsigned long long)g.slot_size, f->opts.queue_depth, dsv4_fio_queue_depth(f->io),
             f->chunk);

    /* Requests a killed fetcher had taken but not completed. */
    if (!fresh) {
        struct dsv4_expert_pending_shm *pend = dsv4_expert_shm_pending(f->shm);
        uint32_t resumed = 0;
        for (uint32_t i = 0; i < f->shm->ring_size; i++)
            if (atomic_load_explicit(&pend[i].state, memory_order_acquire) ==
                DSV4_PENDING_ACTIVE) {
                demand(f, pend[i].req.key, i, false);
                resumed++;
            }
        if (resumed)
            dsv4_log_info(TOPIC, "resuming %u pending request(s)", resumed);
    }
    atomic_fetch_add_explicit(&f->shm->hdr.epoch, 1, memory_order_relaxed);
    atomic_store_explicit(&f->shm->pid, (uint32_t)getpid(), memory_order_relaxed);
    load_hot(f);
    *ret = f;
    return 0;
fail:
    dsv4_fetcher_free(f, false);
    return rc;
}

int dsv4_fetcher_pin(dsv4_fetcher *f, int layer, int expert, bool pin, struct dsv4_err *err)
{
    if (layer < 0 || expert < 0 || layer >= (int)f->shm->n_layers ||
        expert >= (int)f->shm->n_experts)
        return dsv4_errf(err, -EINVAL, "pin: layer %d expert %d outside the model", layer, expert);
    pthread_mutex_lock(&f->mail_lock);
    int rc = 0;
    if (pin && atomic_load_explicit(&f->shm->stats.pinned, memory_order_relaxed) + f->pin_pending >=
                   f->opts.pin_slots) {
        rc = dsv4_errf(err, -ENOSPC, "pin: %u slot(s) already pinned (limit)", f->opts.pin_slots);
    } else {
        DSV4_GROW(f->mail, f->cap_mail, (size_t)f->n_mail + 1);
        f->mail[f->n_mail++] = (struct mail){ (uint32_t)layer * f->shm->n_experts + (uint32_t)expert,
                                              pin };
        if (pin)
            f->pin_pending++;
    }
    pthread_mutex_unlock(&f->mail_lock);
    dsv4_eshm_req_kick(f->shm);
    return rc;
}

int dsv4_fetcher_run(dsv4_fetcher *f)
{
    struct dsv4_expert_shm *s = f->shm;
    if (f->topo && hwloc_topology_is_thissystem(f->topo) &&
        hwloc_set_cpubind(f->topo, f->cpus, HWLOC_CPUBIND_THREAD) < 0)
        dsv4_log_warn(TOPIC, "numa: binding the I/O thread failed: %s", strerror(errno));
    atomic_store_explicit(&s->state, DSV4_FETCHER_READY, memory_order_release);
    dsv4_log_info(TOPIC, "ready: %s; segment %s", f->describe, f->shm_name);
    struct dsv4_fio_done done[64];
    while (!atomic_load_explicit(&f->stop, memory_order_acquire)) {
        atomic_fetch_add_explicit(&s->stats.progress, 1, memory_order_relaxed);
        drain_mail(f);
        drain_requests(f);
        repin(f);
        bool blocked;
        start_loads(f, &blocked);
        atomic_store_explicit(&s->blocked, blocked, memory_order_relaxed);
        pump(f);
        uint32_t busy = dsv4_fio_in_flight(f->io);
        int n = dsv4_fio_reap(f->io, done, (int)DSV4_ARRAY_SIZE(done), busy ? BUSY_POLL_NS : 0);
        for (int i = 0; i < n; i++)
            on_read(f, &done[i]);
        if (n || busy || f->n_retries)
            continue;
        if (f->n_issue)
            continue;
        /* Idle: sleep on the request futex (a demand waiting for a release polls at 1 ms). */
        dsv4_eshm_req_wait(s, blocked ? 1000000 : 1000000000);
    }
    /* Finish reads in flight so no slot is left LOADING by a clean stop. */
    while (dsv4_fio_in_flight(f->io)) {
        int n = dsv4_fio_reap(f->io, done, (int)DSV4_ARRAY_SIZE(done), 100000000);
        for (int i = 0; i < n; i++)
            on_read(f, &done[i]);
    }
    return 0;
}

void dsv4_fetcher_stop(dsv4_fetcher *f)
{
    atomic_store_explicit(&f->stop, true, memory_order_release);
    if (f->shm)
        dsv4_eshm_req_kick(f->shm);
}

struct dsv4_expert_shm *dsv4_fetcher_shm(dsv4_fetcher *f)
{
    return f->shm;
}

const char *dsv4_fetcher_shm_name(const dsv4_fetcher *f)
{
    return f->shm_name;
}

const char *dsv4_fetcher_describe(const dsv4_fetcher *f)
{
    return f->describe;
}

uint32_t dsv4_fetcher_reads_in_flight_max(const dsv4_fetcher *f)
{
    return atomic_load_explicit(&f->reads_max, memory_order_relaxed);
}

dsv4_fetcher *dsv4_fetcher_free(dsv4_fetcher *f, bool unlink_shm)
{
    if (!f)
        return NULL;
    if (f->shm) {
        struct dsv4_err err;
        if (dsv4_fetcher_save_hot(f, &err) < 0)
            dsv4_log_warn(TOPIC, "hot set not saved: %s", err.msg);
        if (unlink_shm) {
            atomic_store_explicit(&f->shm->state, DSV4_FETCHER_STOPPED, memory_order_release);
            dsv4_eshm_futex_wake(&f->shm->comp_futex);
            shm_unlink(f->shm_name);
        }
        dsv4_eshm_unmap(f->shm, f->shm_size);
    }
    dsv4_fio_free(f->io);
    for (uint32_t i = 0; f->direct_fd && i < f->n_shards; i++)
        if (f->direct_fd[i] >= 0)
            close(f->direct_fd[i]);
    if (f->loads)
        for (uint32_t i = 0; i < f->opts.n_slots; i++)
            free(f->loads[i].waiters);
    free(f->loads);
    free(f->loading);
    free(f->free_slots);
    free(f->layer_count);
    free(f->issue);
    free(f->manual_pin);
    free(f->sorted);
    free(f->retries);
    free(f->demand.v);
    free(f->prefetch.v);
    free(f->mail);
    free(f->plans);
    free(f->direct_fd);
    free(f->tid2eid);
    if (f->cpus)
        hwloc_bitmap_free(f->cpus);
    if (f->nodes)
        hwloc_bitmap_free(f->nodes);
    if (f->topo)
        hwloc_topology_destroy(f->topo);
    dsv4_checkpoint_free(f->ckpt);
    if (f->lock_fd >= 0)
        close(f->lock_fd);
    pthread_mutex_destroy(&f->mail_lock);
    free(f);
    return NULL;
}
