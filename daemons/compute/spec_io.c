/* SPDX-License-Identifier: MIT */
/* The drafter's state for the prefix cache: the taps of the last window (speculate.h). */
#include <errno.h>
#include <string.h>

#include "speculate.h"
#include "util.h"

static int64_t tap_start(const dsv4_spec *sp, int64_t P)
{
    dsv4_drafter *d = dsv4_spec_drafter(sp);
    int64_t W = d ? dsv4_drafter_window(d) : 0;
    return P - DSV4_MIN(W, P);
}

uint64_t dsv4_spec_tail_bytes(const dsv4_spec *sp, int64_t P)
{
    int cap;
    size_t width;
    dsv4_spec_tap_ring(sp, &cap, &width);
    return P < 0 ? 0 : (uint64_t)(P - tap_start(sp, P)) * width * sizeof(float);
}

int dsv4_spec_export_tail(const dsv4_spec *sp, int64_t P, void *buf, size_t len,
                          struct dsv4_err *err)
{
    int cap;
    size_t width;
    const float *ring = dsv4_spec_tap_ring(sp, &cap, &width);
    int64_t pos = dsv4_session_pos(dsv4_spec_session(sp)), a = tap_start(sp, P);
    if (P < 0 || P > pos || (ring && pos - a > cap))
        return dsv4_errf(err, -ERANGE, "spec export: taps at %lld from position %lld",
                         (long long)P, (long long)pos);
    if (len != dsv4_spec_tail_bytes(sp, P))
        return dsv4_errf(err, -EINVAL, "spec export: taps at %lld take %llu bytes, not %zu",
                         (long long)P, (unsigned long long)dsv4_spec_tail_bytes(sp, P), len);
    for (int64_t p = a; p < P; p++)
        memcpy((float *)buf + (size_t)(p - a) * width, ring + (size_t)(p % cap) * width,
               width * sizeof(float));
    return 0;
}

int dsv4_spec_import_tail(dsv4_spec *sp, const void *buf, size_t len, struct dsv4_err *err)
{
    int cap;
    size_t width;
    float *ring = dsv4_spec_tap_ring(sp, &cap, &width);
    dsv4_drafter *d = dsv4_spec_drafter(sp);
    int64_t P = dsv4_session_pos(dsv4_spec_session(sp)), a = tap_start(sp, P);
    if (len != dsv4_spec_tail_bytes(sp, P))
        return dsv4_errf(err, -EINVAL, "spec import: taps at %lld take %llu bytes, not %zu",
                         (long long)P, (unsigned long long)dsv4_spec_tail_bytes(sp, P), len);
    if (!d)
        return 0;
    for (int64_t p = a; p < P; p++)
        memcpy(ring + (size_t)(p % cap) * width, (const float *)buf + (size_t)(p - a) * width,
               width * sizeof(float));
    dsv4_drafter_reset(d);
    return dsv4_drafter_skip_to(d, a, err);
}
