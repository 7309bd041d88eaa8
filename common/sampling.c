/* SPDX-License-Identifier: MIT */
/* Sampling (sampling.h). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "sampling.h"
#include "util.h"

double dsv4_sample_uniform(uint64_t seed, uint64_t index)
{
    uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

static const float *sort_logits;

static int by_logit_desc(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (sort_logits[x] != sort_logits[y])
        return sort_logits[x] > sort_logits[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int by_id(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

int32_t dsv4_sample(const float *logits, int n, const struct dsv4_sampling *p, uint64_t index)
{
    if (p->temperature == 0.0)
        return dsv4_argmax(logits, n);
    double t = p->temperature, mx = logits[dsv4_argmax(logits, n)];
    double u = dsv4_sample_uniform(p->seed, index);
    bool filtered = (p->top_k > 0 && p->top_k < n) || p->top_p < 1.0;
    if (!filtered) {
        /* the same summation order as `dsv4ctl run`: ids ascending */
        double sum = 0.0, acc = 0.0;
        for (int i = 0; i < n; i++)
            sum += exp(((double)logits[i] - mx) / t);
        u *= sum;
        for (int i = 0; i < n; i++) {
            acc += exp(((double)logits[i] - mx) / t);
            if (acc >= u)
                return i;
        }
        return n - 1;
    }
    /* candidates by logit (ties: lower id), cut by top-k then top-p, then drawn in id order */
    int32_t *ids = dsv4_xmalloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++)
        ids[i] = i;
    sort_logits = logits;
    qsort(ids, (size_t)n, sizeof(int32_t), by_logit_desc);
    int keep = (p->top_k > 0 && p->top_k < n) ? p->top_k : n;
    if (p->top_p < 1.0) {
        double total = 0.0, acc = 0.0;
        for (int i = 0; i < keep; i++)
            total += exp(((double)logits[ids[i]] - mx) / t);
        int j = 0;
        while (j < keep) {
            acc += exp(((double)logits[ids[j]] - mx) / t);
            j++;
            if (acc >= p->top_p * total)
                break;
        }
        keep = j;
    }
    qsort(ids, (size_t)keep, sizeof(int32_t), by_id);
    double sum = 0.0, acc = 0.0;
    for (int i = 0; i < keep; i++)
        sum += exp(((double)logits[ids[i]] - mx) / t);
    u *= sum;
    int32_t pick = ids[keep - 1];
    for (int i = 0; i < keep; i++) {
        acc += exp(((double)logits[ids[i]] - mx) / t);
        if (acc >= u) {
            pick = ids[i];
            break;
        }
    }
    free(ids);
    return pick;
}

int32_t dsv4_argmax(const float *logits, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

void dsv4_log_softmax_terms(const float *logits, int n, double *max, double *log_sum)
{
    double mx = logits[0];
    for (int i = 1; i < n; i++)
        mx = fmax(mx, logits[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += exp((double)logits[i] - mx);
    *max = mx;
    *log_sum = log(sum);
}

double dsv4_log_softmax_at(const float *logits, int n, int32_t token)
{
    double mx, ls;
    dsv4_log_softmax_terms(logits, n, &mx, &ls);
    return (double)logits[token] - mx - ls;
}

/* Does (va, a) rank before (vb, b)? Larger logit first, then the lower id. */
static bool ranks_before(float va, int32_t a, float vb, int32_t b)
{
    return va > vb || (va == vb && a < b);
}

void dsv4_top_k(const float *logits, int n, int k, int32_t *ids)
{
    int have = 0;   /* ids[0..have) sorted by rank */
    for (int v = 0; v < n; v++) {
        if (have == k && !ranks_before(logits[v], v, logits[ids[k - 1]], ids[k - 1]))
            continue;   /* the common case: one compare */
        int j = have < k ? have++ : k - 1;
        while (j > 0 && ranks_before(logits[v], v, logits[ids[j - 1]], ids[j - 1])) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = v;
    }
}
