/* SPDX-License-Identifier: MIT */
/*
 * (Long: one program so the TSan build runs every fetcher case under one binary.)
 * dsv4-fetcher: ring and slot state machine under threads (the TSan target),
 * every expert of a tiny checkpoint served byte-identical to direct reads,
 * budget and lease rules under random access, prefetch and pinning, injected
 * EIO / short read / refused O_DIRECT and a truncated shard (clear error, no
 * bad slot), the daemon's control channel (this test plays the supervisor: READY,
 * HEARTBEAT, FETCHER_PIN, STOP), kill -9 mid-load then restart, and
 * NUMA placement on synthetic 2-node topologies.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fetcher.h"
#include "fetcher_client.h"
#include "fetcher_numa.h"
#include "fetcher_shm.h"
#include "rundir.h"
#include "safetensors.h"
#include "shm.h"
#include "zmsg.h"
#include <zmq.h>

static char model_dir[512];

/* The committed tiny fixture when present, else one generated into the build dir. */
static void make_model(void)
{
    char cfg[600];
    snprintf(model_dir, sizeof(model_dir), "%s/tiny", FIXTURES_DIR);
    snprintf(cfg, sizeof(cfg), "%s/model.safetensors.index.json", model_dir);
    if (access(cfg, F_OK) == 0)
        return;
    snprintf(model_dir, sizeof(model_dir), "%s/fetcher-tiny", BUILD_DIR);
    snprintf(cfg, sizeof(cfg), "%s/config.json", model_dir);
    if (access(cfg, F_OK) == 0)
        return;
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "'%s' '%s' --config tiny --seed 7 --out '%s.tmp' >/dev/null && "
             "rm -rf '%s' && mv '%s.tmp' '%s'", PYTHON, MAKE_TINY, model_dir, model_dir,
             model_dir, model_dir);
    assert_int_equal(system(cmd), 0);
}

static void make_run_dir(char *buf, size_t n)
{
    snprintf(buf, n, "/tmp/dsv4-ft-XXXXXX");
    assert_non_null(mkdtemp(buf));
    char id[DSV4_SHM_ID_LEN + 1];
    assert_int_equal(dsv4_shm_id_new(buf, id, NULL, NULL), 0);  /* what the supervisor does */
}

static void rm_rf(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- ring and slot state machine (no fetcher, no files) ---- */

#define SM_SLOTS 4
#define SM_KEYS 8
#define SM_ROUNDS 20000

struct sm {
    struct dsv4_expert_shm *s;
    _Atomic int stop;
    _Atomic uint64_t leases, checked;
};

static struct dsv4_expert_shm *anon_segment(uint32_t n_slots, uint32_t n_keys, uint64_t *size)
{
    struct dsv4_expert_shm tmpl;
    memset(&tmpl, 0, sizeof(tmpl));
    struct dsv4_eshm_geometry g = { 1, n_keys, n_slots, 64, 64, 4096 };
    *size = dsv4_eshm_layout(&tmpl, &g);
    struct dsv4_expert_shm *s = mmap(NULL, *size, PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(s != MAP_FAILED);
    memcpy(s, &tmpl, sizeof(tmpl));
    for (uint32_t k = 0; k < n_keys; k++)
        atomic_store(&dsv4_expert_shm_dir(s)[k], -1);
    for (uint32_t i = 0; i < n_slots; i++) {
        atomic_store(&dsv4_expert_shm_slots(s)[i].word, DSV4_SLOT_WORD(0, DSV4_SLOT_FREE, 0));
        atomic_store(&dsv4_expert_shm_slots(s)[i].key, UINT32_MAX);
    }
    return s;
}

/* The fetcher's side of the contract: evict an unleased READY slot by CAS, rewrite it
 * (payload stamped with key and generation), publish READY, then the directory. */
static void *sm_writer(void *arg)
{
    struct sm *m = arg;
    struct dsv4_expert_shm *s = m->s;
    unsigned seed = 1;
    uint64_t t_end = dsv4_now_ns() + 20000000000ull;
    /* Until readers have checked enough leases too (a loaded machine may not run them soon). */
    for (int r = 0; (r < SM_ROUNDS || atomic_load(&m->checked) < 2000) && dsv4_now_ns() < t_end;
         r++) {
        uint32_t slot = (uint32_t)rand_r(&seed) % SM_SLOTS, key = (uint32_t)rand_r(&seed) % SM_KEYS;
        if (atomic_load(&dsv4_expert_shm_dir(s)[key]) >= 0)
            continue; /* one slot per key */
        struct dsv4_expert_slot_shm *sl = &dsv4_expert_shm_slots(s)[slot];
        uint64_t w = atomic_load_explicit(&sl->word, memory_order_acquire);
        uint32_t st = DSV4_SLOT_STATE(w);
        if ((st != DSV4_SLOT_READY && st != DSV4_SLOT_FREE) || DSV4_SLOT_LEASES(w))
            continue;
        uint32_t gen = DSV4_SLOT_GEN(w) + 1;
        if (!atomic_compare_exchange_strong_explicit(&sl->word, &w,
                                                     DSV4_SLOT_WORD(gen, DSV4_SLOT_LOADING, 0),
                                                     memory_order_acq_rel, memory_order_acquire))
            continue; /* a reader leased it meanwhile */
        uint32_t old = atomic_load_explicit(&sl->key, memory_order_relaxed);
        if (old < SM_KEYS)
            atomic_store_explicit(&dsv4_expert_shm_dir(s)[old], -1, memory_order_release);
        atomic_store_explicit(&sl->key, key, memory_order_relaxed);
        uint32_t *p = (uint32_t *)(void *)dsv4_expert_shm_slot_data(s, slot);
        for (int i = 0; i < 1024; i += 2)
            p[i] = key, p[i + 1] = gen;
        atomic_store_explicit(&sl->word, DSV4_SLOT_WORD(gen, DSV4_SLOT_READY, 0),
                              memory_order_release);
        atomic_store_explicit(&dsv4_expert_shm_dir(s)[key], (int32_t)slot, memory_order_release);
    }
    atomic_store(&m->stop, 1);
    return NULL;
}

static void *sm_reader(void *arg)
{
    struct sm *m = arg;
    struct dsv4_expert_shm *s = m->s;
    unsigned seed = (unsigned)(uintptr_t)&seed;
    while (!atomic_load(&m->stop)) {
        uint32_t key = (uint32_t)rand_r(&seed) % SM_KEYS;
        int slot = dsv4_eshm_try_lease(s, key);
        if (slot < 0)
            continue;
        uint32_t gen = DSV4_SLOT_GEN(atomic_load(&dsv4_expert_shm_slots(s)[slot].word));
        const uint32_t *p = (const uint32_t *)(void *)dsv4_expert_shm_slot_data(s, (uint32_t)slot);
        for (int i = 0; i < 1024; i += 2)
            if (p[i] != key || p[i + 1] != gen)
                fail_msg("slot %d leased for key %u gen %u holds key %u gen %u", slot, key, gen,
                         p[i], p[i + 1]);
        atomic_fetch_add(&m->checked, 1);
        dsv4_eshm_release(s, (uint32_t)slot);
        atomic_fetch_add(&m->leases, 1);
    }
    return NULL;
}

static void test_slot_state_machine_threads(void **state)
{
    uint64_t size;
    struct sm m = { .s = anon_segment(SM_SLOTS, SM_KEYS, &size) };
    pthread_t w, r[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&r[i], NULL, sm_reader, &m);
    pthread_create(&w, NULL, sm_writer, &m);
    pthread_join(w, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(r[i], NULL);
    for (uint32_t i = 0; i < SM_SLOTS; i++) /* every lease was given back */
        assert_int_equal(DSV4_SLOT_LEASES(atomic_load(&dsv4_expert_shm_slots(m.s)[i].word)), 0);
    assert_true(atomic_load(&m.checked) >= 2000);
    munmap(m.s, size);
}

struct ring_arg {
    struct dsv4_expert_shm *s;
    uint64_t n;
};

static void *ring_consumer(void *arg)
{
    struct ring_arg *a = arg;
    for (uint64_t want = 0; want < a->n;) {
        struct dsv4_expert_req r;
        if (!dsv4_eshm_req_peek(a->s, &r)) {
            dsv4_eshm_req_wait(a->s, 1000000000); /* sleeps, woken by the producer */
            continue;
        }
        if (r.id != want || r.key != (uint32_t)(want * 7))
            fail_msg("request %llu arrived as %llu", (unsigned long long)want,
                     (unsigned long long)r.id);
        dsv4_eshm_req_advance(a->s);
        struct dsv4_expert_comp c = { .id = want, .key = r.key };
        while (!dsv4_eshm_comp_push(a->s, &c))
            ;
        want++;
    }
    return NULL;
}

static void test_rings_threads(void **state)
{
    uint64_t size;
    struct ring_arg a = { anon_segment(2, 4, &size), 50000 };
    pthread_t th;
    pthread_create(&th, NULL, ring_consumer, &a);
    uint64_t sent = 0, got = 0;
    while (got < a.n) {
        struct dsv4_expert_req r = { .id = sent, .op = DSV4_EXPERT_OP_LOAD,
                                     .key = (uint32_t)(sent * 7) };
        if (sent < a.n && dsv4_eshm_req_push(a.s, &r))
            sent++;
        struct dsv4_expert_comp c;
        while (dsv4_eshm_comp_pop(a.s, &c)) {
            assert_int_equal(c.id, got);
            got++;
        }
        if (sent == a.n && got < a.n)
            dsv4_eshm_comp_wait(a.s, 1000000000);
    }
    pthread_join(th, NULL);
    munmap(a.s, size);
}

static void test_layout(void **state)
{
    struct dsv4_expert_shm s;
    memset(&s, 0, sizeof(s));
    /* Flash: 43 layers × 256 experts, 13,369,344-byte experts + alignment slack. */
    struct dsv4_eshm_geometry g = { 43, 256, 100, 4096, 2048, 13377536 };
    uint64_t size = dsv4_eshm_layout(&s, &g);
    assert_int_equal(s.data_offset % DSV4_EXPERT_DATA_ALIGN, 0);
    assert_int_equal(s.slot_size % DSV4_EXPERT_DIO_ALIGN, 0);
    assert_int_equal(size, s.data_offset + 100ull * 13377536);
    assert_true(s.slots_offset >= s.usage_offset + 43 * 256 * 4);
    assert_int_equal(s.slots_offset % 64, 0);
    /* names come from each run dir's random id, never from its path */
    char d1[64], d2[64], a[96], b[96], id[DSV4_SHM_ID_LEN + 1];
    snprintf(d1, sizeof(d1), "/tmp/dsv4-ftn-XXXXXX");
    snprintf(d2, sizeof(d2), "/tmp/dsv4-ftn-XXXXXX");
    assert_non_null(mkdtemp(d1));
    assert_non_null(mkdtemp(d2));
    assert_int_equal(dsv4_eshm_name(d1, a, sizeof(a), NULL), -ENOENT);    /* no id yet */
    assert_int_equal(dsv4_shm_id_new(d1, id, NULL, NULL), 0);
    assert_int_equal(dsv4_shm_id_new(d2, id, NULL, NULL), 0);
    assert_int_equal(dsv4_eshm_name(d1, a, sizeof(a), NULL), 0);
    assert_int_equal(dsv4_eshm_name(d2, b, sizeof(b), NULL), 0);
    assert_string_not_equal(a, b);
    assert_int_equal(strncmp(a, "/dsv4-", 6), 0);
    /* a new start on the same dir gets another name; the old id is handed back */
    char old[DSV4_SHM_ID_LEN + 1];
    assert_int_equal(dsv4_shm_id_new(d1, id, old, NULL), 0);
    assert_non_null(strstr(a, old));
    assert_int_equal(dsv4_eshm_name(d1, b, sizeof(b), NULL), 0);
    assert_string_not_equal(a, b);
    /* an id file others could have written is refused */
    char path[128];
    snprintf(path, sizeof(path), "%s/shm-id", d2);
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(dsv4_eshm_name(d2, b, sizeof(b), NULL), -EPERM);
    rm_rf(d1);
    rm_rf(d2);
}

/* A directory entry naming a slot past the table (a corrupt or hostile segment) leases
 * nothing, even when the bytes just past the table look like a ready slot of that key. */
static void test_try_lease_bounds(void **state)
{
    (void)state;
    struct dsv4_expert_shm tmpl;
    memset(&tmpl, 0, sizeof(tmpl));
    struct dsv4_eshm_geometry g = { 2, 4, 3, 64, 32, 4096 };
    uint64_t size = dsv4_eshm_layout(&tmpl, &g);
    assert_true(size >= tmpl.slots_offset + 4 * sizeof(struct dsv4_expert_slot_shm));
    struct dsv4_expert_shm *s = aligned_alloc(DSV4_EXPERT_DATA_ALIGN,
                                              DSV4_ALIGN_UP(size, DSV4_EXPERT_DATA_ALIGN));
    memset(s, 0, size);
    memcpy(s, &tmpl, sizeof(tmpl));
    struct dsv4_expert_slot_shm *sl = dsv4_expert_shm_slots(s);
    for (uint32_t i = 0; i <= s->n_slots; i++) {    /* [n_slots]: the ring past the table */
        atomic_store(&sl[i].word, DSV4_SLOT_WORD(1, DSV4_SLOT_READY, 0));
        atomic_store(&sl[i].key, 5);
    }
    _Atomic int32_t *dir = dsv4_expert_shm_dir(s);
    atomic_store(&dir[5], (int32_t)s->n_slots);
    assert_int_equal(dsv4_eshm_try_lease(s, 5), -1);
    atomic_store(&dir[5], -1);
    assert_int_equal(dsv4_eshm_try_lease(s, 5), -1);
    atomic_store(&dir[5], (int32_t)s->n_slots - 1);
    assert_int_equal(dsv4_eshm_try_lease(s, 5), (int)s->n_slots - 1);
    assert_int_equal(DSV4_SLOT_LEASES(atomic_load(&sl[s->n_slots - 1].word)), 1);
    free(s);
}

/* A segment under our name that is not ours alone (mode 0644 here; another owner alike) is
 * refused on attach, and so is a header whose offsets do not match its own geometry. */
static void test_attach_refuses(void **state)
{
    (void)state;
    char d[64], name[96], id[DSV4_SHM_ID_LEN + 1];
    snprintf(d, sizeof(d), "/tmp/dsv4-fta-XXXXXX");
    assert_non_null(mkdtemp(d));
    assert_int_equal(dsv4_shm_id_new(d, id, NULL, NULL), 0);
    assert_int_equal(dsv4_eshm_name(d, name, sizeof(name), NULL), 0);
    struct dsv4_expert_shm tmpl;
    memset(&tmpl, 0, sizeof(tmpl));
    struct dsv4_eshm_geometry g = { 2, 4, 3, 64, 32, 4096 };
    uint64_t size = dsv4_eshm_layout(&tmpl, &g);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0644);
    assert_true(fd >= 0);
    assert_int_equal(fchmod(fd, 0644), 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    assert_int_equal(pwrite(fd, &tmpl, sizeof(tmpl), 0), (ssize_t)sizeof(tmpl));
    struct dsv4_expert_shm *s;
    uint64_t got;
    struct dsv4_err err;
    assert_int_equal(dsv4_eshm_attach(name, &s, &got, &err), -EPERM);
    assert_non_null(strstr(err.msg, "not ours alone"));
    assert_int_equal(fchmod(fd, 0600), 0);
    assert_int_equal(dsv4_eshm_attach(name, &s, &got, &err), 0);     /* now it is */
    dsv4_eshm_unmap(s, got);
    struct dsv4_expert_shm bad = tmpl;
    bad.slots_offset = 1ull << 40;     /* an offset far outside the mapping */
    assert_int_equal(pwrite(fd, &bad, sizeof(bad), 0), (ssize_t)sizeof(bad));
    assert_int_equal(dsv4_eshm_attach(name, &s, &got, &err), -EPROTO);
    bad = tmpl;
    bad.n_slots = 1u << 30;            /* a geometry bigger than the mapping */
    assert_int_equal(pwrite(fd, &bad, sizeof(bad), 0), (ssize_t)sizeof(bad));
    assert_int_equal(dsv4_eshm_attach(name, &s, &got, &err), -EPROTO);
    close(fd);
    shm_unlink(name);
    rm_rf(d);
}

/* ---- in-process fetcher ---- */

struct fx {
    char run_dir[64];
    dsv4_fetcher *f;
    pthread_t th;
    dsv4_fetcher_client *c;
    dsv4_checkpoint *ck;
};

static void *run_thread(void *arg)
{
    dsv4_fetcher_run(arg);
    return NULL;
}

static uint32_t fx_pin_slots, fx_repin_every; /* 0: defaults */

static void fx_start(struct fx *x, const char *model, uint32_t slots, const char *fault)
{
    memset(x, 0, sizeof(*x));
    make_run_dir(x->run_dir, sizeof(x->run_dir));
    struct dsv4_fetcher_opts o = { .model_dir = model, .run_dir = x->run_dir, .n_slots = slots,
                                   .queue_depth = 4, .chunk_bytes = 8192,
                                   .pin_slots = fx_pin_slots, .pin_slots_set = fx_pin_slots > 0,
                                   .repin_every = fx_repin_every };
    if (fault)
        setenv("DSV4_FETCHER_FAULT", fault, 1);
    struct dsv4_err err;
    int rc = dsv4_fetcher_open(&o, &x->f, &err);
    unsetenv("DSV4_FETCHER_FAULT");
    if (rc < 0)
        fail_msg("%s", err.msg);
    pthread_create(&x->th, NULL, run_thread, x->f);
    rc = dsv4_fetcher_client_open(x->run_dir, 10000, &x->c, &err);
    if (rc < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(dsv4_checkpoint_open(model, &x->ck, &err), 0);
}

static void fx_stop(struct fx *x)
{
    dsv4_fetcher_stop(x->f);
    pthread_join(x->th, NULL);
    char name[96];
    assert_int_equal(dsv4_eshm_name(x->run_dir, name, sizeof(name), NULL), 0);
    dsv4_fetcher_free(x->f, true);
    /* The segment is gone after a stop. */
    assert_int_equal(shm_open(name, O_RDONLY, 0), -1);
    assert_int_equal(errno, ENOENT);
    dsv4_fetcher_client_free(x->c);
    dsv4_checkpoint_free(x->ck);
    rm_rf(x->run_dir);
}

static const char *const tname[6] = { "w1.weight", "w1.scale", "w3.weight",
                                      "w3.scale",  "w2.weight", "w2.scale" };

/* The view's six tensors equal what the checkpoint reader returns for them. */
static void check_expert(struct fx *x, int layer, int ex, const struct dsv4_fetcher_expert *v)
{
    for (int t = 0; t < 6; t++) {
        char name[128];
        snprintf(name, sizeof(name), "layers.%d.ffn.experts.%d.%s", layer, ex, tname[t]);
        const struct dsv4_tensor *tt = dsv4_checkpoint_find(x->ck, name);
        assert_non_null(tt);
        assert_int_equal(v->len[t], tt->nbytes);
        uint8_t *want = malloc(tt->nbytes);
        assert_int_equal(dsv4_checkpoint_read(x->ck, tt, 0, want, tt->nbytes, NULL), 0);
        if (memcmp(want, v->tensor[t], tt->nbytes))
            fail_msg("%s differs from the checkpoint", name);
        free(want);
    }
    const struct dsv4_expert_shm *s = dsv4_fetcher_client_shm(x->c);
    assert_ptr_equal(v->w1.w, v->tensor[DSV4_EXPERT_W1]);
    assert_ptr_equal(v->w2.scale, v->tensor[DSV4_EXPERT_W2_SCALE]);
    assert_int_equal(v->w1.rows, s->inter);
    assert_int_equal(v->w1.cols, s->dim);
    assert_int_equal(v->w2.rows, s->dim);
}

static void test_every_expert_bytes(void **state)
{
    struct fx x;
    fx_start(&x, model_dir, 5, NULL);
    struct dsv4_expert_shm *s = dsv4_fetcher_client_shm(x.c);
    struct dsv4_err err;
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t l = 0; l < s->n_layers; l++)
            for (int e = 0; e < (int)s->n_experts; e++) {
                const struct dsv4_fetcher_expert *v;
                if (dsv4_fetcher_client_acquire(x.c, (int)l, &e, 1, &v, &err) < 0)
                    fail_msg("%s", err.msg);
                check_expert(&x, (int)l, e, v);
                dsv4_fetcher_client_release(x.c, (int)l, &e, 1);
            }
    /* Two of a layer at once (the batch union). */
    int ids[2] = { 1, 4 };
    const struct dsv4_fetcher_expert *v[2];
    assert_int_equal(dsv4_fetcher_client_acquire(x.c, 2, ids, 2, v, &err), 0);
    check_expert(&x, 2, 1, v[0]);
    check_expert(&x, 2, 4, v[1]);
    dsv4_fetcher_client_release(x.c, 2, ids, 2);
    uint64_t n = (uint64_t)s->n_layers * s->n_experts;
    assert_true(atomic_load(&s->stats.evictions) >= 2 * n - 5 - 1);
    assert_int_equal(atomic_load(&s->stats.failures), 0);
    fx_stop(&x);
}

/* Queue depth counts loads: two requests taken together have every chunk of both experts in
 * flight at once (the whole batch queued at the disk), not two reads. */
static void test_batch_reads_all_in_flight(void **state)
{
    char run_dir[256];
    make_run_dir(run_dir, sizeof(run_dir));
    struct dsv4_fetcher_opts o = { .model_dir = model_dir, .run_dir = run_dir, .n_slots = 5,
                                   .queue_depth = 2, .chunk_bytes = 4096 };
    dsv4_fetcher *f;
    struct dsv4_err err;
    if (dsv4_fetcher_open(&o, &f, &err) < 0)
        fail_msg("%s", err.msg);
    struct dsv4_expert_shm *s = dsv4_fetcher_shm(f);
    /* Both requests wait in the ring before the fetcher's first pass takes them. */
    for (uint32_t k = 0; k < 2; k++) {
        struct dsv4_expert_req r = { .id = 100 + k, .op = DSV4_EXPERT_OP_LOAD, .key = k };
        assert_true(dsv4_eshm_req_push(s, &r));
    }
    pthread_t th;
    pthread_create(&th, NULL, run_thread, f);
    uint64_t chunks = 0;
    for (int got = 0; got < 2;) {
        struct dsv4_expert_comp c;
        if (!dsv4_eshm_comp_pop(s, &c)) {
            dsv4_eshm_comp_wait(s, 100000000);
            continue;
        }
        assert_int_equal(c.status, 0);
        const struct dsv4_expert_slot_shm *sl = &dsv4_expert_shm_slots(s)[c.slot];
        for (int t = 0; t < DSV4_EXPERT_TENSORS; t++)
            chunks += sl->len[t] / 4096; /* at least this many 4 KiB reads per tensor */
        dsv4_eshm_release(s, c.slot);
        got++;
    }
    assert_true(chunks > 2 * o.queue_depth);
    assert_true(dsv4_fetcher_reads_in_flight_max(f) >= chunks);
    dsv4_fetcher_stop(f);
    pthread_join(th, NULL);
    dsv4_fetcher_free(f, true);
    rm_rf(run_dir);
}

static void test_random_budget_leases(void **state)
{
    struct fx x;
    fx_start(&x, model_dir, 6, NULL);
    struct dsv4_expert_shm *s = dsv4_fetcher_client_shm(x.c);
    struct dsv4_err err;
    unsigned seed = 3;
    struct held {
        int layer, id;
        const struct dsv4_fetcher_expert *v;
        uint8_t *copy;
    } held[2] = { { -1, 0, NULL, NULL }, { -1, 0, NULL, NULL } };
    for (int r = 0; r < 300; r++) {
        struct held *h = &held[r % 2];
        if (h->layer >= 0) {
            /* A leased slot was never rewritten while others were loaded. */
            if (memcmp(h->copy, h->v->tensor[0], h->v->len[0]))
                fail_msg("leased expert %d/%d changed under its lease", h->layer, h->id);
            dsv4_fetcher_client_release(x.c, h->layer, &h->id, 1);
            free(h->copy);
            h->layer = -1;
        }
        int layer = rand_r(&seed) % (int)s->n_layers, id = rand_r(&seed) % (int)s->n_experts;
        struct held *o = &held[(r + 1) % 2];
        if (o->layer == layer && o->id == id)
            continue;
        if (dsv4_fetcher_client_acquire(x.c, layer, &id, 1, &h->v, &err) < 0)
            fail_msg("%s", err.msg);
        if (r % 37 == 0)
            check_expert(&x, layer, id, h->v);
        h->layer = layer;
        h->id = id;
        h->copy = malloc(h->v->len[0]);
        memcpy(h->copy, h->v->tensor[0], h->v->len[0]);
        uint32_t used = 0;
        for (uint32_t i = 0; i < s->n_slots; i++)
            used += DSV4_SLOT_STATE(atomic_load(&dsv4_expert_shm_slots(s)[i].word)) !=
                    DSV4_SLOT_FREE;
        assert_true(used <= s->n_slots);
    }
    for (int i = 0; i < 2; i++)
        if (held[i].layer >= 0) {
            dsv4_fetcher_client_release(x.c, held[i].layer, &held[i].id, 1);
            free(held[i].copy);
        }
    assert_true(atomic_load(&s->stats.evictions) > 0);
    assert_true(atomic_load(&s->stats.client_hits) > 0);
    /* More experts than slots: refused up front instead of deadlocking. */
    int many[6] = { 0, 1, 2, 3, 4, 5 };
    const struct dsv4_fetcher_expert *v[6];
    assert_int_equal(dsv4_fetcher_client_acquire(x.c, 0, many, 6, v, &err), -ENOSPC);
    fx_stop(&x);
}

static bool wait_cached(struct dsv4_expert_shm *s, uint32_t key)
{
    for (int i = 0; i < 2000; i++) {
        if (atomic_load(&dsv4_expert_shm_dir(s)[key]) >= 0)
            return true;
        usleep(1000);
    }
    return false;
}

static void test_prefetch_and_pin(void **state)
{
    struct fx x;
    fx_start(&x, model_dir, 8, NULL);
    struct dsv4_expert_shm *s = dsv4_fetcher_client_shm(x.c);
    struct dsv4_err err;
    /* Hash-routed layers: the token's experts arrive without being asked for. */
    assert_int_equal(dsv4_fetcher_client_prefetch_token(x.c, 17), 1);
    int ids[1] = { 5 };
    assert_int_equal(dsv4_fetcher_client_prefetch(x.c, 3, ids, 1), 1);
    assert_true(wait_cached(s, 3 * s->n_experts + 5));
    assert_true(atomic_load(&s->stats.prefetch_issued) >= 2);
    const struct dsv4_fetcher_expert *v;
    assert_int_equal(dsv4_fetcher_client_acquire(x.c, 3, ids, 1, &v, &err), 0);
    check_expert(&x, 3, 5, v);
    dsv4_fetcher_client_release(x.c, 3, ids, 1);
    assert_true(atomic_load(&s->stats.prefetch_used) >= 1);
    /* Pin layer 4 expert 0, then stream every other expert through: it stays. */
    assert_int_equal(dsv4_fetcher_pin(x.f, 4, 0, true, &err), 0);
    assert_true(wait_cached(s, 4 * s->n_experts + 0));
    int32_t pslot = atomic_load(&dsv4_expert_shm_dir(s)[4 * s->n_experts]);
    for (int i = 0; i < 200 && DSV4_SLOT_STATE(atomic_load(
                                   &dsv4_expert_shm_slots(s)[pslot].word)) != DSV4_SLOT_PINNED;
         i++)
        usleep(1000);
    uint64_t w0 = atomic_load(&dsv4_expert_shm_slots(s)[pslot].word);
    assert_int_equal(DSV4_SLOT_STATE(w0), DSV4_SLOT_PINNED);
    for (uint32_t l = 0; l < s->n_layers; l++)
        for (int e = 1; e < (int)s->n_experts; e++) {
            assert_int_equal(dsv4_fetcher_client_acquire(x.c, (int)l, &e, 1, &v, &err), 0);
            dsv4_fetcher_client_release(x.c, (int)l, &e, 1);
        }
    assert_int_equal(atomic_load(&dsv4_expert_shm_slots(s)[pslot].word), w0);
    assert_int_equal(atomic_load(&s->stats.pinned), 1);
    /* The hot set is written where the next start finds it. */
    assert_int_equal(dsv4_fetcher_save_hot(x.f, &err), 0);
    char path[128];
    snprintf(path, sizeof(path), "%s/fetcher-hot.json", x.run_dir);
    assert_int_equal(access(path, F_OK), 0);
    fx_stop(&x);
}

static uint32_t slot_state_of(struct dsv4_expert_shm *s, uint32_t key)
{
    int32_t slot = atomic_load(&dsv4_expert_shm_dir(s)[key]);
    return slot < 0 ? DSV4_SLOT_FREE
                    : DSV4_SLOT_STATE(atomic_load(&dsv4_expert_shm_slots(s)[slot].word));
}

/* The hot set is learned while running: the two most used experts end up PINNED and survive
 * a sweep of every other expert through the remaining slots. */
static void test_hot_set_learned(void **state)
{
    fx_pin_slots = 2;
    fx_repin_every = 8;
    struct fx x;
    fx_start(&x, model_dir, 5, NULL);
    fx_pin_slots = fx_repin_every = 0;
    struct dsv4_expert_shm *s = dsv4_fetcher_client_shm(x.c);
    const struct dsv4_fetcher_expert *v;
    uint32_t hot[2] = { 1 * s->n_experts + 1, 3 * s->n_experts + 4 };
    for (int r = 0; r < 40; r++) {
        for (int h = 0; h < 2; h++) {
            int layer = (int)(hot[h] / s->n_experts), id = (int)(hot[h] % s->n_experts);
            assert_int_equal(dsv4_fetcher_client_acquire(x.c, layer, &id, 1, &v, NULL), 0);
            dsv4_fetcher_client_release(x.c, layer, &id, 1);
        }
        int cold = r % (int)s->n_experts; /* misses (layer 4 rotates) keep the fetcher turning */
        assert_int_equal(dsv4_fetcher_client_acquire(x.c, 4, &cold, 1, &v, NULL), 0);
        dsv4_fetcher_client_release(x.c, 4, &cold, 1);
        if (slot_state_of(s, hot[0]) == DSV4_SLOT_PINNED &&
            slot_state_of(s, hot[1]) == DSV4_SLOT_PINNED)
            break;
    }
    assert_int_equal(slot_state_of(s, hot[0]), DSV4_SLOT_PINNED);
    assert_int_equal(slot_state_of(s, hot[1]), DSV4_SLOT_PINNED);
    for (uint32_t l = 0; l < s->n_layers; l++)
        for (int e = 0; e < (int)s->n_experts; e++) {
            if (l * s->n_experts + (uint32_t)e == hot[0] || l * s->n_experts + (uint32_t)e == hot[1])
                continue;
            assert_int_equal(dsv4_fetcher_client_acquire(x.c, (int)l, &e, 1, &v, NULL), 0);
            dsv4_fetcher_client_release(x.c, (int)l, &e, 1);
        }
    assert_int_equal(slot_state_of(s, hot[0]), DSV4_SLOT_PINNED);
    assert_int_equal(slot_state_of(s, hot[1]), DSV4_SLOT_PINNED);
    assert_true(atomic_load(&s->stats.pinned) <= 2);
    fx_stop(&x);
}

/* ---- faults ---- */

static void expect_failure(struct fx *x, int layer, int e, int code, const char *needle)
{
    struct dsv4_expert_shm *s = dsv4_fetcher_client_shm(x->c);
    const struct dsv4_fetcher_expert *v;
    struct dsv4_err err;
    int rc = dsv4_fetcher_client_acquire(x->c, layer, &e, 1, &v, &err);
    assert_int_equal(rc, code);
    if (!strstr(err.msg, needle))
        fail_msg("error \"%s\" lacks \"%s\"", err.msg, needle);
    /* No slot holds the expert; nothing is left leased. */
    assert_int_equal(atomic_load(&dsv4_expert_shm_dir(s)[(uint32_t)layer * s->n_experts + e]), -1);
    for (uint32_t i = 0; i < s->n_slots; i++)
        assert_int_equal(DSV4_SLOT_LEASES(atomic_load(&dsv4_expert_shm_slots(s)[i].word)), 0);
}

static void test_injected_eio_and_short(void **state)
{
    struct fx x;
    fx_start(&x, model_dir, 4, "eio:2,short:9");
    expect_failure(&x, 1, 2, -EIO, "Input/output error");
    /* The next request for it reads again and gets the right bytes. */
    const struct dsv4_fetcher_expert *v;
    int e = 2;
    assert_int_equal(dsv4_fetcher_client_acquire(x.c, 1, &e, 1, &v, NULL), 0);
    check_expert(&x, 1, 2, v);
    dsv4_fetcher_client_release(x.c, 1, &e, 1);
    for (int i = 0; i < 3; i++) { /* reach the 9th read */
        int rc = dsv4_fetcher_client_acquire(x.c, 2, &i, 1, &v, NULL);
        if (rc == 0)
            dsv4_fetcher_client_release(x.c, 2, &i, 1);
        else
            assert_int_equal(rc, -EIO);
    }
    assert_int_equal(atomic_load(&dsv4_fetcher_client_shm(x.c)->stats.failures), 2);
    fx_stop(&x);
}

static void test_odirect_refused_falls_back(void **state)
{
    struct fx x;
    fx_start(&x, model_dir, 4, "einval:1");
    struct dsv4_expert_shm *s = dsv4_fetcher_client_shm(x.c);
    const struct dsv4_fetcher_expert *v;
    int e = 3;
    assert_int_equal(dsv4_fetcher_client_acquire(x.c, 0, &e, 1, &v, NULL), 0);
    check_expert(&x, 0, 3, v);
    dsv4_fetcher_client_release(x.c, 0, &e, 1);
    assert_true(atomic_load(&s->stats.buffered_reads) > 0);
    assert_int_equal(atomic_load(&s->stats.failures), 0);
    fx_stop(&x);
}

static void test_truncated_shard(void **state)
{
    /* both backends: io_uring reports a short completion, pread sees end of file */
    for (int pread_io = 0; pread_io < 2; pread_io++) {
        char copy[600], cmd[2048];
        snprintf(copy, sizeof(copy), "%s/fetcher-tiny-trunc", BUILD_DIR);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s' && cp -r '%s' '%s'", copy, model_dir, copy);
        assert_int_equal(system(cmd), 0);
        if (pread_io)
            setenv("DSV4_IO", "pread", 1);
        struct fx x;
        fx_start(&x, copy, 4, NULL);
        unsetenv("DSV4_IO");
        /* Cut the last shard in half after the fetcher validated it: its experts now read
         * short. */
        const char *shard = dsv4_checkpoint_shard_path(x.ck, dsv4_checkpoint_n_shards(x.ck) - 1);
        struct stat st;
        assert_int_equal(stat(shard, &st), 0);
        assert_int_equal(truncate(shard, st.st_size / 2), 0);
        struct dsv4_expert_shm *s = dsv4_fetcher_client_shm(x.c);
        int layer = (int)s->n_layers - 1, e = (int)s->n_experts - 1;
        char name[128];
        snprintf(name, sizeof(name), "layers.%d.ffn.experts.%d.w2.scale", layer, e);
        const struct dsv4_tensor *t = dsv4_checkpoint_find(x.ck, name);
        assert_true(t->shard == dsv4_checkpoint_n_shards(x.ck) - 1 &&
                    t->offset > (uint64_t)st.st_size / 2);
        expect_failure(&x, layer, e, -EIO, "short read");
        fx_stop(&x);
        rm_rf(copy);
    }
}

/* ---- the daemon: control plane, kill -9 mid-load, restart ---- */

static pid_t spawn_fetcher(const char *run_dir, const char *fault)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (fault)
            setenv("DSV4_FETCHER_FAULT", fault, 1);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0 && !getenv("DSV4_TEST_VERBOSE"))
            dup2(null, 2);
        execl(FETCHER_EXE, FETCHER_EXE, "--model", model_dir, "--run-dir", run_dir, "--slots",
              "4", "--queue-depth", "2", "--chunk-kib", "4", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* The supervisor's side of the control channel: a ROUTER on RUN_DIR/ctl.sock. */
struct sup {
    void *zctx, *router;
    struct dsv4_stats_shm *page;
    struct dsv4_zin in;
};

static void sup_open(struct sup *u, const char *run_dir)
{
    memset(u, 0, sizeof(*u));
    struct dsv4_err err;
    if (dsv4_stats_create(run_dir, DSV4_ROLE_FETCHER, &u->page, &err) < 0)
        fail_msg("%s", err.msg);
    char ep[DSV4_PATH_MAX];
    assert_int_equal(dsv4_rundir_endpoint(run_dir, "ctl", ep, &err), 0);
    u->zctx = dsv4_zctx_new();
    u->router = dsv4_zsock(u->zctx, ZMQ_ROUTER, NULL);
    assert_int_equal(zmq_bind(u->router, ep), 0);
}

static void sup_close(struct sup *u, const char *run_dir)
{
    zmq_close(u->router);
    zmq_ctx_term(u->zctx);
    dsv4_zin_free(&u->in);
    dsv4_stats_unmap(u->page);
    dsv4_stats_unlink(run_dir, DSV4_ROLE_FETCHER);
}

/* Next message from the fetcher of type `type` (others, e.g. HEARTBEAT, are skipped). */
static struct dsv4_msg sup_expect(struct sup *u, int type, int timeout_ms)
{
    uint64_t t0 = dsv4_now_ns();
    while ((dsv4_now_ns() - t0) / 1000000 < (uint64_t)timeout_ms) {
        zmq_pollitem_t it = { u->router, 0, ZMQ_POLLIN, 0 };
        if (zmq_poll(&it, 1, 100) <= 0)
            continue;
        if (dsv4_zrecv(u->router, &u->in, 1, 1) < 0)
            continue;
        struct dsv4_msg m;
        struct dsv4_err err;
        int errc;
        assert_int_equal(dsv4_wire_decode(u->in.buf, u->in.len, &m, &errc, &err), 0);
        if (m.type == type)
            return m;
    }
    fail_msg("no %s from the fetcher in %d ms", dsv4_wire_type_name(type), timeout_ms);
    return (struct dsv4_msg){ 0 };
}

static void sup_send(struct sup *u, int type, const void *body, size_t n)
{
    struct dsv4_wire_buf b = { 0 };
    dsv4_wire_simple(&b, type, body, n);
    assert_int_equal(dsv4_zsend(u->router, "fetcher", 7, &b, 0), 0);
    dsv4_wire_buf_free(&b);
}

struct acq {
    dsv4_fetcher_client *c;
    int layer, id, rc;
    const struct dsv4_fetcher_expert *v;
    struct dsv4_err err;
};

static void *acquire_thread(void *arg)
{
    struct acq *a = arg;
    a->rc = dsv4_fetcher_client_acquire(a->c, a->layer, &a->id, 1, &a->v, &a->err);
    return NULL;
}

static void test_daemon_kill9_restart(void **state)
{
    struct fx x;
    memset(&x, 0, sizeof(x));
    make_run_dir(x.run_dir, sizeof(x.run_dir));
    assert_int_equal(dsv4_checkpoint_open(model_dir, &x.ck, NULL), 0);
    struct sup u;
    sup_open(&u, x.run_dir);
    /* Every completion arrives 150 ms late, so the load is surely in flight at the kill. */
    pid_t pid = spawn_fetcher(x.run_dir, "delay:150");
    struct dsv4_msg m = sup_expect(&u, DSV4_MSG_READY, 20000);
    const struct dsv4_msg_ready *rd = m.body;
    assert_int_equal(rd->pid, (uint32_t)pid);
    assert_int_equal(rd->role, DSV4_ROLE_FETCHER);
    assert_int_equal(atomic_load(&u.page->state), DSV4_STATE_READY);
    struct dsv4_err err;
    if (dsv4_fetcher_client_open(x.run_dir, 20000, &x.c, &err) < 0)
        fail_msg("%s", err.msg);
    struct dsv4_expert_shm *s = dsv4_fetcher_client_shm(x.c);
    struct acq a = { .c = x.c, .layer = 2, .id = 3 };
    pthread_t th;
    pthread_create(&th, NULL, acquire_thread, &a);
    int loading = -1;
    for (int i = 0; i < 5000 && loading < 0; i++) {
        for (uint32_t k = 0; k < s->n_slots; k++)
            if (DSV4_SLOT_STATE(atomic_load(&dsv4_expert_shm_slots(s)[k].word)) ==
                DSV4_SLOT_LOADING)
                loading = (int)k;
        usleep(1000);
    }
    assert_true(loading >= 0);
    uint32_t gen = DSV4_SLOT_GEN(atomic_load(&dsv4_expert_shm_slots(s)[loading].word));
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    /* The half-written slot is still LOADING in the segment; the client keeps waiting. */
    assert_int_equal(DSV4_SLOT_STATE(atomic_load(&dsv4_expert_shm_slots(s)[loading].word)),
                     DSV4_SLOT_LOADING);
    pid = spawn_fetcher(x.run_dir, NULL);
    m = sup_expect(&u, DSV4_MSG_READY, 20000);
    /* a heartbeat follows from the control thread, carrying the fetcher's pid and role */
    m = sup_expect(&u, DSV4_MSG_HEARTBEAT, 5000);
    const struct dsv4_msg_heartbeat *hb = m.body;
    assert_int_equal(hb->pid, (uint32_t)pid);
    assert_int_equal(hb->role, DSV4_ROLE_FETCHER);
    pthread_join(th, NULL);
    if (a.rc < 0)
        fail_msg("%s", a.err.msg);
    check_expert(&x, 2, 3, a.v);
    /* Never READY under the generation the killed fetcher was writing. */
    assert_true(a.v->gen != gen);
    dsv4_fetcher_client_release(x.c, 2, &a.id, 1);
    assert_int_equal(atomic_load(&s->stats.restarts), 1);
    assert_true(atomic_load(&s->stats.discarded_loading) >= 1);
    /* controls: a pin of a layer that does not exist is refused with its reason ... */
    struct dsv4_msg_fetcher_pin pin = { .seq = 41, .layer = 99, .expert = 0, .pin = 1 };
    sup_send(&u, DSV4_MSG_FETCHER_PIN, &pin, sizeof(pin));
    m = sup_expect(&u, DSV4_MSG_ERROR, 5000);
    const struct dsv4_msg_error *e = m.body;
    assert_int_equal(e->id, 41);
    assert_int_equal(e->code, DSV4_WE_INVALID);
    /* ... a real one is acknowledged and keeps the expert resident */
    pin = (struct dsv4_msg_fetcher_pin){ .seq = 42, .layer = 1, .expert = 2, .pin = 1 };
    sup_send(&u, DSV4_MSG_FETCHER_PIN, &pin, sizeof(pin));
    m = sup_expect(&u, DSV4_MSG_ACK, 5000);
    assert_int_equal(((const struct dsv4_msg_ack *)m.body)->seq, 42);
    for (int i = 0; i < 500 && atomic_load(&s->stats.pinned) != 1; i++)
        usleep(10000);     /* the pin completes once its load has */
    assert_int_equal(atomic_load(&s->stats.pinned), 1);
    struct dsv4_msg_fetcher_save_hot sh = { .seq = 43 };
    sup_send(&u, DSV4_MSG_FETCHER_SAVE_HOT, &sh, sizeof(sh));
    m = sup_expect(&u, DSV4_MSG_ACK, 5000);
    assert_int_equal(((const struct dsv4_msg_ack *)m.body)->seq, 43);
    struct dsv4_msg_stop stop = { 0, 0 };
    sup_send(&u, DSV4_MSG_STOP, &stop, sizeof(stop));
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char name[96];
    assert_int_equal(dsv4_eshm_name(x.run_dir, name, sizeof(name), NULL), 0);
    assert_int_equal(shm_open(name, O_RDONLY, 0), -1); /* removed on STOP */
    dsv4_fetcher_client_free(x.c);
    dsv4_checkpoint_free(x.ck);
    sup_close(&u, x.run_dir);
    rm_rf(x.run_dir);
}

/* ---- NUMA placement ----
 * two-node-nvme.xml: a synthetic 2-package, 2-NUMA-node machine with 4 PUs, nvme0n1 on package 1
 * (node 1). No XML comment in it: hwloc's minimalistic parser (used when the libxml2 plugin is
 * not installed) rejects comments.
 */

static void test_numa_two_nodes(void **state)
{
    hwloc_topology_t t;
    hwloc_topology_init(&t);
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
    assert_int_equal(hwloc_topology_set_xml(t, FIXTURES_DIR "/hwloc/two-node-nvme.xml"), 0);
    assert_int_equal(hwloc_topology_load(t), 0);
    assert_int_equal(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE), 2);
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
    char why[256];
    /* The disk on package 1: node 1 and its PUs 2-3 only. */
    assert_int_equal(dsv4_fetcher_numa_plan(t, "nvme0n1", cpus, nodes, why, sizeof(why)), 1);
    assert_int_equal(hwloc_bitmap_weight(nodes), 1);
    assert_true(hwloc_bitmap_isset(nodes, 1));
    assert_int_equal(hwloc_bitmap_first(cpus), 2);
    assert_int_equal(hwloc_bitmap_last(cpus), 3);
    /* An unknown device: every node. */
    assert_int_equal(dsv4_fetcher_numa_plan(t, "sdz", cpus, nodes, why, sizeof(why)), 0);
    assert_int_equal(hwloc_bitmap_weight(nodes), 2);
    assert_int_equal(hwloc_bitmap_weight(cpus), 4);
    hwloc_topology_destroy(t);
    /* A synthetic topology without I/O devices falls back to both nodes. */
    hwloc_topology_init(&t);
    assert_int_equal(hwloc_topology_set_synthetic(t, "pack:2 [numa] core:2 pu:1"), 0);
    assert_int_equal(hwloc_topology_load(t), 0);
    assert_int_equal(dsv4_fetcher_numa_plan(t, "nvme0n1", cpus, nodes, why, sizeof(why)), 0);
    assert_int_equal(hwloc_bitmap_weight(nodes), 2);
    hwloc_bitmap_free(cpus);
    hwloc_bitmap_free(nodes);
    hwloc_topology_destroy(t);
}

int main(void)
{
    make_model();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_attach_refuses),
        cmocka_unit_test(test_try_lease_bounds),
        cmocka_unit_test(test_slot_state_machine_threads),
        cmocka_unit_test(test_rings_threads),
        cmocka_unit_test(test_every_expert_bytes),
        cmocka_unit_test(test_batch_reads_all_in_flight),
        cmocka_unit_test(test_random_budget_leases),
        cmocka_unit_test(test_prefetch_and_pin),
        cmocka_unit_test(test_hot_set_learned),
        cmocka_unit_test(test_injected_eio_and_short),
        cmocka_unit_test(test_odirect_refused_falls_back),
        cmocka_unit_test(test_truncated_shard),
        cmocka_unit_test(test_daemon_kill9_restart),
        cmocka_unit_test(test_numa_two_nodes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
