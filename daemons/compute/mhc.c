/* SPDX-License-Identifier: MIT */
/*
 * Manifold-constrained hyper-connections (spec §6): hc_pre collapses the
 * hc_mult residual streams into one sub-layer input and derives the post
 * weights and the Sinkhorn-normalised comb matrix; hc_post expands the
 * sub-layer output back (comb consumed transposed); hc_head is the final
 * collapse. Mixes and Sinkhorn are fp32; outputs are rounded to bf16.
 */
#include <math.h>
#include <string.h>

#include "internal.h"

/* mix[m] = (xf · fn[m]) / rms(xf) over the hc*dim flattened streams. */
static void hc_mix(const float *xf, int w, const float *fn, int nmix, float eps, float *mix)
{
    double ss = 0.0;
    for (int i = 0; i < w; i++)
        ss += (double)(xf[i] * xf[i]);
    float r = (float)(1.0 / sqrt((double)((float)(ss / w) + eps)));
    for (int m = 0; m < nmix; m++) {
        const float *f = fn + (size_t)m * w;
        /* in double: an fp32 running sum over hc*dim terms flipped bf16 roundings of the
         * collapsed input downstream (docs/numerics.md "Per-layer agreement") */
        mix[m] = (float)dot_f64(xf, f, w) * r;
    }
}

static void sinkhorn(float *c, int h, int iters, float eps)
{
    for (int j = 0; j < h; j++) {
        float *row = c + j * h, mx = row[0], sum = 0.0f;
        for (int k = 1; k < h; k++)
            mx = fmaxf(mx, row[k]);
        for (int k = 0; k < h; k++) {
            row[k] = (float)exp((double)(row[k] - mx));
            sum += row[k];
        }
        for (int k = 0; k < h; k++)
            row[k] = row[k] / sum + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0)
            for (int j = 0; j < h; j++) {
                float sum = 0.0f;
                for (int k = 0; k < h; k++)
                    sum += c[j * h + k];
                for (int k = 0; k < h; k++)
                    c[j * h + k] /= sum + eps;
            }
        for (int k = 0; k < h; k++) {
            float sum = 0.0f;
            for (int j = 0; j < h; j++)
                sum += c[j * h + k];
            for (int j = 0; j < h; j++)
                c[j * h + k] /= sum + eps;
        }
    }
}

struct mhc_pre_job {
    const dsv4_engine *e;
    const float *x, *fn, *base, *scale;
    float *y, *post, *comb;
};

static void mhc_pre_range(void *ctx, unsigned long b, unsigned long end)
{
    const struct mhc_pre_job *j = ctx;
    const struct dsv4_config *c = &j->e->cfg;
    const float *base = j->base, *scale = j->scale;
    int hc = c->hc_mult, d = c->dim;
    float mix[(2 + DSV4_CONFIG_MAX_HC_MULT) * DSV4_CONFIG_MAX_HC_MULT]; /* config.c bounds hc_mult */
    float hce = (float)c->hc_eps;
    for (unsigned long r = b; r < end; r++) {
        const float *xr = j->x + (size_t)r * hc * d;
        hc_mix(xr, hc * d, j->fn, c->hc_mix, (float)c->norm_eps, mix);
        float pre[16];
        for (int h = 0; h < hc; h++) {
            pre[h] = sigmoidf_(mix[h] * scale[0] + base[h]) + hce;
            j->post[r * hc + h] = 2.0f * sigmoidf_(mix[hc + h] * scale[1] + base[hc + h]);
        }
        float *cm = j->comb + (size_t)r * hc * hc;
        for (int i = 0; i < hc * hc; i++)
            cm[i] = mix[2 * hc + i] * scale[2] + base[2 * hc + i];
        sinkhorn(cm, hc, c->hc_sinkhorn_iters, hce);
        float *yr = j->y + (size_t)r * d;
        for (int i = 0; i < d; i++) {
            float acc = pre[0] * xr[i];
            for (int h = 1; h < hc; h++)
                acc += pre[h] * xr[h * d + i];
            yr[i] = dsv4_bf16_round(acc);
        }
    }
}

/* row by row, the rows split across the pool */
void mhc_pre(const dsv4_engine *e, const float *x, const float *fn, const float *base,
             const float *scale, int n, float *y, float *post, float *comb)
{
    struct mhc_pre_job j = {e, x, fn, base, scale, y, post, comb};
    engine_rows(e, n, (size_t)e->cfg.hc_mult * e->cfg.dim * e->cfg.hc_mix, mhc_pre_range, &j);
}

struct mhc_post_job {
    const dsv4_engine *e;
    const float *out, *post, *comb;
    float *x;
};

static void mhc_post_range(void *ctx, unsigned long b, unsigned long end)
{
    const struct mhc_post_job *j = ctx;
    const struct dsv4_config *c = &j->e->cfg;
    int hc = c->hc_mult, d = c->dim;
    float old[16];
    for (unsigned long r = b; r < end; r++) {
        float *xr = j->x + (size_t)r * hc * d;
        const float *o = j->out + (size_t)r * d;
        const float *cm = j->comb + (size_t)r * hc * hc;
        const float *p = j->post + (size_t)r * hc;
        for (int i = 0; i < d; i++) {
            for (int h = 0; h < hc; h++)
                old[h] = xr[h * d + i];
            for (int k = 0; k < hc; k++) {
                float acc = cm[k] * old[0];
                for (int h = 1; h < hc; h++)
                    acc += cm[h * hc + k] * old[h];
                xr[k * d + i] = dsv4_bf16_round(p[k] * o[i] + acc);
            }
        }
    }
}

void mhc_post(const dsv4_engine *e, const float *out, float *x, const float *post,
              const float *comb, int n)
{
    struct mhc_post_job j = {e, out, post, comb, x};
    engine_rows(e, n, (size_t)e->cfg.hc_mult * e->cfg.hc_mult * e->cfg.dim, mhc_post_range, &j);
}

void mhc_head(const dsv4_engine *e, const float *x, int n, float *y)
{
    mhc_head_w(e, e->hc_head_fn, e->hc_head_base, e->hc_head_scale, x, n, y);
}

void mhc_head_w(const dsv4_engine *e, const float *fn, const float *base, const float *scale,
                const float *x, int n, float *y)
{
    const struct dsv4_config *c = &e->cfg;
    int hc = c->hc_mult, d = c->dim;
    float mix[16], w[16];
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * hc * d;
        hc_mix(xr, hc * d, fn, hc, (float)c->norm_eps, mix);
        for (int h = 0; h < hc; h++)
            w[h] = sigmoidf_(mix[h] * scale[0] + base[h]) +
                   (float)c->hc_eps;
        float *yr = y + (size_t)r * d;
        for (int j = 0; j < d; j++) {
            float acc = w[0] * xr[j];
            for (int h = 1; h < hc; h++)
                acc += w[h] * xr[h * d + j];
            yr[j] = dsv4_bf16_round(acc);
        }
    }
}
