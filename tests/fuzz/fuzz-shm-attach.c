/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the expert segment's attach path (proto/fetcher_shm.c): each input becomes
 * the bytes of a segment of ours (a fresh shm object, mode 0600), padded or not, and is handed
 * to dsv4_eshm_attach. An accepted segment must be exactly what its own geometry lays out:
 * every table inside the mapping (walked here, so a sanitizer sees any overrun), the ring
 * size the build's, the size the mapping's. The input's first byte picks a header prefix to
 * start from — a valid layout, so the fuzzer mutates real offsets rather than only magic.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fetcher_shm.h"
#include "shm.h"
#include "util.h"

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "invariant failed: %s\n", #x); abort(); } } while (0)

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char name[96];
    snprintf(name, sizeof(name), "/dsv4-fuzz-%d-attach", (int)getpid());
    shm_unlink(name);
    int fd = dsv4_shm_open_own(name, O_RDWR | O_CREAT | O_EXCL, NULL);
    if (fd < 0)
        return 0;
    /* a valid small layout, then the input written over it from byte data[0] % 64 * 8 */
    struct dsv4_expert_shm tmpl;
    memset(&tmpl, 0, sizeof(tmpl));
    struct dsv4_eshm_geometry g = { 2, 4, 3, 64, 32, 4096 };
    uint64_t lay = dsv4_eshm_layout(&tmpl, &g);
    size_t at = (size_t)(data[0] % 64) * 8;
    size_t total = DSV4_MAX((size_t)lay, at + size - 1);
    total = DSV4_MIN(total, (size_t)64 << 20);
    if (ftruncate(fd, (off_t)total) < 0 || pwrite(fd, &tmpl, sizeof(tmpl), 0) < 0 ||
        (size > 1 && at < total && pwrite(fd, data + 1, DSV4_MIN(size - 1, total - at), (off_t)at) < 0)) {
        close(fd);
        shm_unlink(name);
        return 0;
    }
    close(fd);
    struct dsv4_expert_shm *s;
    uint64_t got;
    if (dsv4_eshm_attach(name, &s, &got, NULL) == 0) {
        CHECK(got == s->hdr.size);
        CHECK(s->ring_size == DSV4_EXPERT_RING_SIZE);
        CHECK(s->data_offset + (uint64_t)s->n_slots * s->slot_size <= got);
        uint64_t n_keys = (uint64_t)s->n_layers * s->n_experts;
        _Atomic int32_t *dir = dsv4_expert_shm_dir(s);
        for (uint64_t k = 0; k < n_keys; k++)
            sink += (uint64_t)atomic_load(&dir[k]);
        struct dsv4_expert_slot_shm *sl = dsv4_expert_shm_slots(s);
        for (uint32_t i = 0; i < s->n_slots; i++)
            sink += atomic_load(&sl[i].key);
        const struct dsv4_expert_req *rq = dsv4_expert_shm_reqs(s);
        for (uint32_t i = 0; i < s->ring_size; i++)
            sink += rq[i].key;
        const uint8_t *end = (const uint8_t *)s + got - 1;
        sink += *end;
        dsv4_eshm_unmap(s, got);
    }
    shm_unlink(name);
    return 0;
}
