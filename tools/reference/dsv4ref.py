# SPDX-License-Identifier: MIT
"""Independent numpy reference of the DeepSeek-V4 target forward pass (Flash / Pro / tiny).

(One long file on purpose: the reference is read side by side with the spec, top to bottom.)

Written from docs/dsv4-target-spec.md and checked against the official inference code
(model.py + the tilelang kernel.py); docs/numerics.md "Reference numerics" lists every choice
with its source. Config-driven (HF config.json field names), it reads the checkpoint in its
original on-disk form through safetensors_io and dequantises the FP8/FP4 weights exactly.

API (used by the fixture/golden tools and the C engine's tests; keep it stable):

    m = Model(model_dir, variant=Variant())
    st = m.new_state()
    logits = m.forward(st, tokens, start_pos)   # float32 [len(tokens), vocab], every position

forward() accepts a full prefill from 0, a one-token decode, or a chunk at start_pos > 0; all
give the same math, because every per-row quantity is computed with row-independent arithmetic
(see _Acc). Values that the official code keeps in bf16 are held as float32 arrays whose values
are exactly bf16 (rounded with formats.bf16 at the official rounding points).

Variants are legitimate numerical alternatives (an ensemble of them measures how far two
correct implementations can drift apart); mutations (MUTATIONS) are deliberate bugs used to
prove that the fixture detects each of them.
"""
import copy
import json
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import formats as F  # noqa: E402
import safetensors_io  # noqa: E402

f32 = np.float32
f64 = np.float64
NEG_INF = f32(-np.inf)

# Deliberate bugs an engine could plausibly make (item 6 of issue 3). Each is one
# Variant(mutation=name); the fixture must move beyond the ensemble tolerance for every one.
MUTATIONS = (
    'rope_half_split',     # RoPE pairs (i, i+R/2) instead of interleaved (2i, 2i+1)
    'rope_first_dims',     # RoPE on the first R dims of each head instead of the last R
    'no_sinkhorn',         # comb = row softmax + eps only, no Sinkhorn normalisation
    'comb_untransposed',   # hc_post uses comb[k][j] instead of comb[j][k]
    'no_sink',             # attention sink left out of the denominator
    'hf_numerics',         # HF transformers: no act fake-quant, no KV QDQ, no indexer QDQ
    'no_act_quant',        # no FP8 activation fake-quant before quantised linears
    'no_idx_fp4',          # indexer without its FP4 fake-quant (Hadamard kept)
    'no_hadamard',         # indexer without the Hadamard rotation (FP4 kept)
    'no_ape',              # compressor scores without the positional bias ape
    'csa_no_overlap',      # CSA rows pool only their own 4 tokens (no A-half of the previous)
    'row_rope_at_end',     # compressed row w roped at (w+1)*r-1 instead of w*r
    'visible_late',        # compressed row w visible from t = (w+1)*r instead of (w+1)*r-1
    'window_minus_one',    # raw window of win-1 rows (t-win+2..t)
    'no_yarn',             # compressed layers without YaRN
    'yarn_everywhere',     # YaRN also in pure-window layers
    'no_output_derotate',  # attention output not de-rotated before wo_a
    'no_q_headnorm',       # no per-head unweighted RMSNorm of q
    'indexer_from_a',      # indexer query from the attention input a instead of qr
    'no_select_bias',      # expert selection without gate.bias
    'no_hash_routing',     # hash layers route by top-k of the scores instead of tid2eid
    'weight_after_w2',     # routing weight applied after the down projection
    'no_swiglu_clamp',     # SwiGLU clamps dropped
)


class Variant:
    """Numerical variant of the reference.

    sum_seed   None: every fp32 dot product / accumulation is computed in float64 and rounded
               once to fp32 (an order-free "exact" fp32 accumulation). An int: the contraction
               axis of every dot product is cut into seeded chunks whose fp32 partial sums are
               added in a seeded order (a legitimate fp32 summation-order variant).
    kv_fp8     E4M3 round trip of the KV nope dims (window KV and main compressor rows).
               Official (errata 1); False = the old kernel snapshot's no-op (spec §19.1).
    p_bf16     round the unnormalised attention probabilities to bf16 before P.V (tilelang
               kernel). False = fp32 P (pure-torch kernel copy, DS4; spec §19.6).
    p_layout   'official': the index list of the official decode path (window slots padded to
               `sliding_window` entries with empty slots, oldest first, then compressed rows:
               HCA ascending, CSA by descending indexer score, lower index first on ties).
               'compact': only visible rows, window oldest first, then compressed rows in
               ascending index order. The layout matters only through the per-block bf16 P.
    attn_block online-softmax block length over that index list (64 in the official kernel;
               the GB10 copy uses 16).
    mutation   None or one name of MUTATIONS.
    """

    def __init__(self, sum_seed=None, kv_fp8=True, p_bf16=True, p_layout='official',
                 attn_block=64, mutation=None):
        if mutation is not None and mutation not in MUTATIONS:
            raise ValueError(f"unknown mutation {mutation!r}")
        if p_layout not in ('official', 'compact'):
            raise ValueError(f"unknown p_layout {p_layout!r}")
        self.sum_seed = sum_seed
        self.kv_fp8 = kv_fp8
        self.p_bf16 = p_bf16
        self.p_layout = p_layout
        self.attn_block = int(attn_block)
        self.mutation = mutation

    def __repr__(self):
        return (f"Variant(sum_seed={self.sum_seed}, kv_fp8={self.kv_fp8}, p_bf16={self.p_bf16}, "
                f"p_layout={self.p_layout!r}, attn_block={self.attn_block}, "
                f"mutation={self.mutation!r})")

    def mut(self, name):
        return self.mutation == name


# ------------------------------------------------------------------------------ arithmetic

def _f(x):
    return np.asarray(x, dtype=f32)


def fexp(x):
    """fp32 exp, computed in float64 and rounded (row-independent, unlike SIMD float32 exp).
    Arguments are clipped at 100 (far above fp32 overflow) to keep float64 exp finite."""
    return np.exp(np.minimum(np.asarray(x, dtype=f64), 100.0)).astype(f32)


def fsigmoid(x):
    return (1.0 / (1.0 + np.exp(np.minimum(-np.asarray(x, dtype=f64), 700.0)))).astype(f32)


def frsqrt(x):
    return (1.0 / np.sqrt(np.asarray(x, dtype=f64))).astype(f32)


def fsum(x, axis=-1, keepdims=False):
    """fp32 sum computed in float64, rounded once."""
    return np.sum(np.asarray(x, dtype=f64), axis=axis, keepdims=keepdims).astype(f32)


def fmean(x, axis=-1, keepdims=False):
    return np.mean(np.asarray(x, dtype=f64), axis=axis, keepdims=keepdims).astype(f32)


bf16 = F.bf16


class _Acc:
    """Every dot product of the reference goes through here.

    Default: float64 matmul of fp32 (or bf16-valued) operands, rounded once to fp32. Products of
    two fp32 numbers are exact in float64, so the result is the fp32 rounding of a sum carried
    with 29 extra bits: independent of batch size and summation order for all practical
    purposes (prefill, decode and chunked prefill agree exactly). With a seed, the contraction
    axis K is cut into 2..8 seeded chunks per call site and K; chunk partial sums are rounded to
    fp32 and added in a seeded order (fp32 summation-order jitter that is still row-independent).
    """

    def __init__(self, seed):
        self.seed = seed
        self.plans = {}

    def _plan(self, site, k):
        key = (site, k)
        if key not in self.plans:
            rng = np.random.default_rng([self.seed, k, zlib.crc32(site.encode())])
            nc = int(min(k, rng.integers(2, 9)))
            cuts = np.sort(rng.choice(np.arange(1, k), size=nc - 1, replace=False)) if nc > 1 \
                else np.array([], dtype=int)
            bounds = np.concatenate([[0], cuts, [k]])
            order = rng.permutation(nc)
            self.plans[key] = [(int(bounds[i]), int(bounds[i + 1])) for i in order]
        return self.plans[key]

    def mm(self, a, b, site):
        """a [..., M, K] @ b [..., K, N] -> fp32 (np.matmul broadcasting)."""
        a = np.asarray(a, dtype=f64)
        b = np.asarray(b, dtype=f64)
        if self.seed is None:
            return np.matmul(a, b).astype(f32)
        k = a.shape[-1]
        acc = None
        for lo, hi in self._plan(site, k):
            part = np.matmul(a[..., lo:hi], b[..., lo:hi, :]).astype(f32)
            acc = part if acc is None else (acc + part).astype(f32)
        return acc


# --------------------------------------------------------------------------------- config

class Config:
    """The config.json fields the forward pass needs (HF names, spec §2.1)."""

    def __init__(self, cfg):
        g = cfg.get
        self.vocab = cfg['vocab_size']
        self.d = cfg['hidden_size']
        self.n_layers = cfg['num_hidden_layers']
        self.H = cfg['num_attention_heads']
        self.D = cfg['head_dim']
        self.R = cfg['qk_rope_head_dim']
        self.q_lora = cfg['q_lora_rank']
        self.G = cfg['o_groups']
        self.o_lora = cfg['o_lora_rank']
        self.win = cfg['sliding_window']
        self.ratios = [int(r) for r in cfg['compress_ratios'][:self.n_layers]]
        self.rope_theta = float(g('rope_theta', 10000.0))
        self.compress_theta = float(g('compress_rope_theta', 160000.0))
        rs = g('rope_scaling') or {}
        self.yarn_factor = float(rs.get('factor', 1.0))
        self.yarn_orig = int(rs.get('original_max_position_embeddings', 0))
        self.beta_fast = float(rs.get('beta_fast', 32))
        self.beta_slow = float(rs.get('beta_slow', 1))
        self.idx_heads = g('index_n_heads', 0)
        self.idx_dim = g('index_head_dim', 0)
        self.idx_topk = g('index_topk', 0)
        self.hc = g('hc_mult', 4)
        self.sinkhorn_iters = g('hc_sinkhorn_iters', 20)
        self.hc_eps = float(g('hc_eps', 1e-6))
        self.eps = float(g('rms_norm_eps', 1e-6))
        self.n_routed = cfg['n_routed_experts']
        self.topk = cfg['num_experts_per_tok']
        self.inter = cfg['moe_intermediate_size']
        self.score_func = g('scoring_func', 'sqrtsoftplus')
        self.route_scale = float(g('routed_scaling_factor', 1.0))
        self.n_hash = g('num_hash_layers', 0)
        self.swiglu_limit = float(g('swiglu_limit', 0.0) or 0.0)
        q = g('quantization_config') or {}
        self.wblock = tuple(q.get('weight_block_size', (128, 128)))
        if g('n_shared_experts', 1) != 1:
            raise ValueError("n_shared_experts must be 1 (as in the official code)")
        if self.H % self.G:
            raise ValueError("num_attention_heads must be divisible by o_groups")
        if self.R % 2 or self.R > self.D:
            raise ValueError("qk_rope_head_dim must be even and <= head_dim")
        for r in self.ratios:
            if r == 1 or r < 0:
                raise ValueError(f"compress ratio {r} unsupported")
        if 4 in self.ratios and (self.idx_dim & (self.idx_dim - 1) or self.idx_dim < self.R):
            raise ValueError("index_head_dim must be a power of two >= qk_rope_head_dim")


ACT_BLOCK = 128     # activation fake-quant block along K (model.py block_size, a constant)
KV_BLOCK = 64       # KV nope-dim fake-quant block
FP4_BLOCK = 32      # indexer FP4 fake-quant block


def rope_freqs(R, base, yarn, cfg):
    """Spec §8.2 / model.py precompute_freqs_cis: fp32 inverse frequencies of the R/2 pairs."""
    j = np.arange(0, R, 2, dtype=f32) / f32(R)
    freqs = (f32(1.0) / np.power(f64(base), j.astype(f64)).astype(f32)).astype(f32)
    if yarn and cfg.yarn_orig > 0:
        def corr(rot):
            return R * np.log(cfg.yarn_orig / (rot * 2 * np.pi)) / (2 * np.log(base))
        lo = max(int(np.floor(corr(cfg.beta_fast))), 0)
        hi = min(int(np.ceil(corr(cfg.beta_slow))), R - 1)
        hi_f = hi + 0.001 if lo == hi else float(hi)
        ramp = np.clip((np.arange(R // 2, dtype=f32) - f32(lo)) / f32(hi_f - lo), 0, 1).astype(f32)
        smooth = (f32(1) - ramp).astype(f32)
        freqs = ((freqs / f32(cfg.yarn_factor)) * (f32(1) - smooth) + freqs * smooth).astype(f32)
    return freqs


def hadamard_matrix(n):
    h = np.ones((1, 1), dtype=f64)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


# ----------------------------------------------------------------------------------- state

class LayerState:
    def __init__(self):
        self.kv = None           # [T, D] raw KV rows of every position so far (post QDQ)
        self.comp = None         # [n_rows, D] main compressor rows
        self.idx = None          # [n_rows, idx_dim] indexer compressor rows
        self.ctail = None        # main compressor streaming state (see _compress)
        self.itail = None        # indexer compressor streaming state


class State:
    """All per-sequence state: raw KV rows, compressed rows, both compressors' pending tokens
    (kvp, score+ape) and the position. Raw rows are all kept (only the last window is read)."""

    def __init__(self, n_layers):
        self.pos = 0
        self.layers = [LayerState() for _ in range(n_layers)]


def _cat(a, b):
    return b if a is None else np.concatenate([a, b], axis=0)


# ----------------------------------------------------------------------------------- model

class Model:
    def __init__(self, model_dir, variant=None, checkpoint=None):
        self.v = variant or Variant()
        with open(os.path.join(model_dir, 'config.json')) as fh:
            self.cfg = Config(json.load(fh))
        ck = checkpoint if checkpoint is not None else safetensors_io.load_checkpoint(model_dir)
        self._load(ck)
        self._setup()

    def _setup(self):
        self.trace = None      # set to a dict to record intermediates (see _record)
        c = self.cfg
        if self.v.mut('indexer_from_a') and 4 in c.ratios and c.q_lora != c.d:
            raise ValueError("indexer_from_a needs q_lora_rank == hidden_size")
        self.acc = _Acc(self.v.sum_seed)
        self.freq_win = rope_freqs(c.R, c.rope_theta, self.v.mut('yarn_everywhere'), c)
        self.freq_comp = rope_freqs(c.R, c.compress_theta, not self.v.mut('no_yarn'), c)
        self.hadamard = hadamard_matrix(c.idx_dim) if 4 in c.ratios else None

    def with_variant(self, variant):
        """The same loaded weights under another Variant (weights are shared, read-only)."""
        m = copy.copy(self)
        m.v = variant
        m._setup()
        return m

    # -- loading ------------------------------------------------------------------------
    def read(self, ck, kind, name):
        """One weight as the forward pass holds it: 'bf' BF16 -> fp32 values; 'f32'; 'lin' BF16
        weight -> float64 W^T [in, out]; 'fp8' / 'fp4' quantised weight (name without
        '.weight') -> exact float64 W^T."""
        if kind == 'bf':
            return F.bf16_to_f32(ck[name])
        if kind == 'f32':
            return np.asarray(ck[name], dtype=f32)
        if kind == 'lin':
            w = F.bf16_to_f32(ck[name])
        elif kind == 'fp8':
            w = F.dequant_fp8_weight(ck[name + '.weight'], ck[name + '.scale'], self.cfg.wblock)
        else:
            w = F.dequant_fp4_weight(ck[name + '.weight'], ck[name + '.scale'])
        return np.ascontiguousarray(w.T.astype(f64))

    def read_hc_head(self, ck, p):
        """hc_head_{fn,base,scale} under prefix p ('' for the target, 'mtp.2.' for DSpark)."""
        return (self.read(ck, 'f32', p + 'hc_head_fn').T.astype(f64),
                self.read(ck, 'f32', p + 'hc_head_base'), self.read(ck, 'f32', p + 'hc_head_scale'))

    def _load(self, ck):
        c = self.cfg
        self.embed = self.read(ck, 'bf', 'embed.weight')
        self.head_T = self.read(ck, 'lin', 'head.weight')
        self.norm_w = self.read(ck, 'bf', 'norm.weight')
        self.hc_head = self.read_hc_head(ck, '')
        self.layers = [self.load_block(ck, f'layers.{L}.', c.ratios[L], L < c.n_hash)
                       for L in range(c.n_layers)]

    def load_block(self, ck, p, r, is_hash):
        """The weights of one block under prefix p ('layers.3.', or 'mtp.0.' for a DSpark
        stage), compress ratio r, hash-routed or not."""
        c = self.cfg

        def bf(name):
            return self.read(ck, 'bf', name)

        def fp32(name):
            return self.read(ck, 'f32', name)

        def fp8(name):
            return self.read(ck, 'fp8', name)

        def fp4(name):
            return self.read(ck, 'fp4', name)

        def lin(name):
            return self.read(ck, 'lin', name)

        w = {'ratio': r, 'hash': is_hash}
        for which in ('attn', 'ffn'):
            w['hc_' + which] = (fp32(f'{p}hc_{which}_fn').T.astype(f64),
                                fp32(f'{p}hc_{which}_base'), fp32(f'{p}hc_{which}_scale'))
        w['attn_norm'] = bf(p + 'attn_norm.weight')
        w['ffn_norm'] = bf(p + 'ffn_norm.weight')
        a = p + 'attn.'
        w['sink'] = fp32(a + 'attn_sink')
        w['wq_a'] = fp8(a + 'wq_a')
        w['q_norm'] = bf(a + 'q_norm.weight')
        w['wq_b'] = fp8(a + 'wq_b')
        w['wkv'] = fp8(a + 'wkv')
        w['kv_norm'] = bf(a + 'kv_norm.weight')
        # wo_a: the official runtime holds it in bf16, dequantised at conversion time
        # (convert.py); E4M3 x 2^k is exact in bf16, so this is the exact dequantisation.
        woa = F.dequant_fp8_weight(ck[a + 'wo_a.weight'], ck[a + 'wo_a.scale'], c.wblock)
        w['wo_a'] = woa.reshape(c.G, c.o_lora, -1).astype(f64)        # [G, r, (H/G)D]
        w['wo_b'] = fp8(a + 'wo_b')
        if r:
            w['comp'] = self._load_comp(ck, a + 'compressor.', bf, fp32)
        if r == 4:
            i = a + 'indexer.'
            w['idx_wq_b'] = fp8(i + 'wq_b')
            w['idx_wproj'] = lin(i + 'weights_proj.weight')
            w['idx_comp'] = self._load_comp(ck, i + 'compressor.', bf, fp32)
        f = p + 'ffn.'
        w['gate_T'] = lin(f + 'gate.weight')
        if w['hash']:
            w['tid2eid'] = np.asarray(ck[f + 'gate.tid2eid'], dtype=np.int64)
            w['gate_bias'] = None
        else:
            w['gate_bias'] = fp32(f + 'gate.bias')
        w['experts'] = [(fp4(f'{f}experts.{e}.w1'), fp4(f'{f}experts.{e}.w2'),
                         fp4(f'{f}experts.{e}.w3')) for e in range(c.n_routed)]
        w['shared'] = (fp8(f + 'shared_experts.w1'), fp8(f + 'shared_experts.w2'),
                       fp8(f + 'shared_experts.w3'))
        return w

    @staticmethod
    def _load_comp(ck, p, bf, fp32):
        return {'wkv': np.ascontiguousarray(bf(p + 'wkv.weight').T.astype(f64)),
                'wgate': np.ascontiguousarray(bf(p + 'wgate.weight').T.astype(f64)),
                'ape': fp32(p + 'ape'), 'norm': bf(p + 'norm.weight')}

    def new_state(self):
        return State(self.cfg.n_layers)

    # -- primitives ----------------------------------------------------------------------
    def mm(self, x, wT, site):
        return self.acc.mm(x, wT, site)

    def qlinear(self, x, wT, site):
        """Quantised linear (FP8 or FP4 weight): FP8 activation fake-quant in 128-blocks along
        K, fp32 accumulation, bf16 output (kernel.py act_quant + fp8_gemm / fp4_gemm)."""
        if not (self.v.mut('hf_numerics') or self.v.mut('no_act_quant')):
            x = F.fp8_qdq(x, ACT_BLOCK)
        return bf16(self.mm(x, wT, site))

    def rmsnorm(self, x, w):
        """model.py RMSNorm: fp32 math, weight fp32 (bf16 up-cast), bf16 output."""
        r = frsqrt(fmean(x * x, keepdims=True) + f32(self.cfg.eps))
        return bf16(w * (x * r))

    def head_norm(self, q):
        """Unweighted per-head RMSNorm of q, in bf16 arithmetic (model.py Attention.forward)."""
        sq = bf16(q * q)
        ms = bf16(fmean(sq, keepdims=True))
        r = bf16(frsqrt(bf16(ms + f32(self.cfg.eps))))
        return bf16(q * r)

    def rope(self, x, pos, freqs, inverse=False):
        """Rotate the last R dims of x [..., n, ?, D] or [n, D] at positions pos [n]; bf16 out.
        Interleaved pairs (2i, 2i+1) <-> frequency i (model.py apply_rotary_emb)."""
        R = self.cfg.R
        ang = (np.asarray(pos, dtype=f32)[:, None] * freqs[None, :]).astype(f32)   # [n, R/2]
        cos = np.cos(ang.astype(f64)).astype(f32)
        sin = np.sin(ang.astype(f64)).astype(f32)
        if inverse:
            sin = -sin
        shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (R // 2,)
        cos, sin = cos.reshape(shape), sin.reshape(shape)
        y = x.copy()
        D = x.shape[-1]
        lo = 0 if self.v.mut('rope_first_dims') else D - R
        t = x[..., lo:lo + R]
        if self.v.mut('rope_half_split'):
            x0, x1 = t[..., :R // 2], t[..., R // 2:]
        else:
            x0, x1 = t[..., 0::2], t[..., 1::2]
        r0 = (x0 * cos - x1 * sin).astype(f32)
        r1 = (x0 * sin + x1 * cos).astype(f32)
        o = np.empty_like(t)
        if self.v.mut('rope_half_split'):
            o[..., :R // 2], o[..., R // 2:] = r0, r1
        else:
            o[..., 0::2], o[..., 1::2] = r0, r1
        y[..., lo:lo + R] = bf16(o)
        return y

    # -- mHC -------------------------------------------------------------------------------
    def _hc_mix(self, X, fnT, site):
        """X [n, hc, d] -> mixes [n, m] = (xf . fn^T) * rsqrt(mean(xf^2) + eps) (fp32)."""
        n = X.shape[0]
        xf = X.reshape(n, -1)
        rs = frsqrt(fmean(xf * xf, keepdims=True) + f32(self.cfg.eps))
        return (self.mm(xf, fnT, site) * rs).astype(f32)

    @staticmethod
    def _weighted_streams(w, X):
        """y = sum_h w[:, h] * X[:, h] in fp32, streams added in order, then bf16."""
        y = (w[:, 0, None] * X[:, 0]).astype(f32)
        for h in range(1, X.shape[1]):
            y = (y + (w[:, h, None] * X[:, h]).astype(f32)).astype(f32)
        return bf16(y)

    def sinkhorn(self, C):
        """kernel.py hc_split_sinkhorn: row softmax + eps, column normalise, then
        (iters - 1) x (row, column) normalisations; eps added to every divisor. fp32."""
        eps = f32(self.cfg.hc_eps)
        C = (C - np.max(C, axis=-1, keepdims=True)).astype(f32)
        C = fexp(C)
        C = (C / self._rowsum(C) + eps).astype(f32)
        if self.v.mut('no_sinkhorn'):
            return C
        C = (C / (self._colsum(C) + eps)).astype(f32)
        for _ in range(self.cfg.sinkhorn_iters - 1):
            C = (C / (self._rowsum(C) + eps)).astype(f32)
            C = (C / (self._colsum(C) + eps)).astype(f32)
        return C

    # fp32 sums over the hc axis: numpy adds the few terms sequentially, in index order, for
    # every row alike (row-independent).
    @staticmethod
    def _rowsum(C):
        return np.add.reduce(C, axis=-1, dtype=f32, keepdims=True)

    @staticmethod
    def _colsum(C):
        return np.add.reduce(C, axis=-2, dtype=f32, keepdims=True)

    def hc_pre(self, X, params, site):
        fnT, base, scale = params
        hc = self.cfg.hc
        mix = self._hc_mix(X, fnT, site)
        pre = (fsigmoid((mix[:, :hc] * scale[0] + base[:hc]).astype(f32)) +
               f32(self.cfg.hc_eps)).astype(f32)
        post = (f32(2) * fsigmoid((mix[:, hc:2 * hc] * scale[1] + base[hc:2 * hc]).astype(f32)))
        C = (mix[:, 2 * hc:] * scale[2] + base[2 * hc:]).astype(f32).reshape(-1, hc, hc)
        comb = self.sinkhorn(C)
        return self._weighted_streams(pre, X), post.astype(f32), comb

    def hc_post(self, o, X, post, comb):
        """Xnew[k] = bf16(post[k] * o + sum_j comb[j][k] * X[j]) (model.py Block.hc_post)."""
        if self.v.mut('comb_untransposed'):
            comb = np.swapaxes(comb, -1, -2)
        hc = self.cfg.hc
        out = np.empty_like(X)
        for k in range(hc):
            s = (comb[:, 0, k, None] * X[:, 0]).astype(f32)
            for j in range(1, hc):
                s = (s + (comb[:, j, k, None] * X[:, j]).astype(f32)).astype(f32)
            out[:, k] = bf16((post[:, k, None] * o).astype(f32) + s)
        return out

    def hc_head_collapse(self, X, params=None):
        fnT, base, scale = params or self.hc_head
        mix = self._hc_mix(X, fnT, 'hc_head')
        w = (fsigmoid((mix * scale[0] + base).astype(f32)) + f32(self.cfg.hc_eps)).astype(f32)
        return self._weighted_streams(w, X)

    # -- compressor ----------------------------------------------------------------------
    def _compress(self, ls, which, cw, a, pos, ratio, site):
        """Streaming compressor (model.py Compressor; spec §10). Returns the post-processed
        rows of every window this chunk completes ([nw, c], or None); the caller appends them.

        State (ls.ctail / ls.itail) = (start position, kvp [m, coff*c], score+ape [m, coff*c],
        rows emitted): the projections of the tokens that later windows still need."""
        c = self.cfg
        overlap = ratio == 4
        width = cw['wkv'].shape[1]
        cdim = width // 2 if overlap else width
        kvp = self.mm(a, cw['wkv'], site + '.wkv')
        sc = self.mm(a, cw['wgate'], site + '.wgate')
        if not self.v.mut('no_ape'):
            sc = (sc + cw['ape'][pos % ratio]).astype(f32)
        tail = getattr(ls, which)
        if tail is None:
            tail = (int(pos[0]), kvp, sc, 0)
        else:
            tail = (tail[0], _cat(tail[1], kvp), _cat(tail[2], sc), tail[3])
        t0, K, S, done = tail
        end = int(pos[-1]) + 1
        nwin = end // ratio
        rows = None
        if nwin > done:
            ws = np.arange(done, nwin)
            idx_b = ws[:, None] * ratio + np.arange(ratio)[None, :] - t0          # [nw, r]
            if overlap:
                vb, sb = K[idx_b][..., cdim:], S[idx_b][..., cdim:]
                if self.v.mut('csa_no_overlap'):
                    vals, scores = vb, sb
                else:
                    idx_a = idx_b - ratio
                    ok = (ws >= 1)[:, None, None]
                    ia = np.maximum(idx_a, 0)
                    va = np.where(ok, K[ia][..., :cdim], f32(0))
                    sa = np.where(ok, S[ia][..., :cdim], NEG_INF)
                    vals = np.concatenate([va, vb], axis=1)
                    scores = np.concatenate([sa, sb], axis=1)
            else:
                vals, scores = K[idx_b], S[idx_b]
            # softmax over the slot axis, independently per channel, fp32
            m = np.max(scores, axis=1, keepdims=True)
            e = fexp((scores - m).astype(f32))
            p = (e / fsum(e, axis=1, keepdims=True)).astype(f32)
            pooled = fsum((vals * p).astype(f32), axis=1)                           # [nw, c]
            row = self.rmsnorm(bf16(pooled), cw['norm'])
            rpos = ws * ratio + (ratio - 1 if self.v.mut('row_rope_at_end') else 0)
            row = self.rope(row, rpos, self.freq_comp)
            if which == 'itail':
                row = self.idx_rotate_quant(row)
            elif self.v.kv_fp8 and not self.v.mut('hf_numerics'):
                row[:, :c.D - c.R] = F.fp8_qdq(row[:, :c.D - c.R], KV_BLOCK)
            rows = row
        # keep what later windows need: the previous window (overlap) and the partial one
        keep_from = max(0, (nwin - 1) * ratio) if overlap else nwin * ratio
        cut = max(0, keep_from - t0)
        setattr(ls, which, (t0 + cut, K[cut:], S[cut:], max(done, nwin)))
        return rows

    def idx_rotate_quant(self, x):
        """Indexer vectors: Hadamard (bf16 in/out, fp32 math, scale 1/sqrt(n)), FP4 QDQ."""
        if not self.v.mut('no_hadamard'):
            n = x.shape[-1]
            y = self.mm(x, self.hadamard, 'hadamard')
            x = bf16((y * f32(n ** -0.5)).astype(f32))
        if not (self.v.mut('hf_numerics') or self.v.mut('no_idx_fp4')):
            x = F.fp4_qdq(x, FP4_BLOCK)
        return x

    # -- attention -------------------------------------------------------------------------
    def n_visible(self, t, r):
        """Compressed rows visible to query t: rows w with t >= (w+1)*r - 1."""
        if self.v.mut('visible_late'):
            return t // r
        return (t + 1) // r

    def indexer_select(self, w, ls, a, qr, pos, L):
        """Lightning indexer (spec §11): per query the min(topk, visible) best rows, returned
        in official order (descending score, lower index first on ties), -1 padded."""
        c = self.cfg
        n = len(pos)
        qin = a if self.v.mut('indexer_from_a') else qr
        qi = self.qlinear(qin, w['idx_wq_b'], f'L{L}.idx_wq_b').reshape(n, c.idx_heads, c.idx_dim)
        qi = self.rope(qi, pos, self.freq_comp)
        qi = self.idx_rotate_quant(qi)
        wt = bf16(self.mm(a, w['idx_wproj'], f'L{L}.idx_wproj'))
        wt = bf16((wt * f32(c.idx_dim ** -0.5 * c.idx_heads ** -0.5)).astype(f32))
        rows = ls.idx
        nrows = rows.shape[0] if rows is not None else 0
        nvis = self.n_visible(pos, 4)
        k = np.minimum(c.idx_topk, nvis)
        kmax = int(k.max()) if n else 0
        sel = np.full((n, max(kmax, 0)), -1, dtype=np.int64)
        if kmax == 0:
            return sel
        dots = bf16(self.acc.mm(qi, rows.T[None], f'L{L}.idx_score'))        # [n, ih, nrows]
        dots = np.maximum(dots, f32(0))
        score = bf16(fsum(bf16(dots * wt[:, :, None]), axis=1))              # [n, nrows]
        score = np.where(np.arange(nrows)[None, :] < nvis[:, None], score, NEG_INF)
        order = np.argsort(-score, axis=1, kind='stable')                    # ties: lower index
        top = order[:, :kmax]
        sel[:] = np.where(np.arange(kmax)[None, :] < k[:, None], top, -1)
        return sel

    def attention(self, w, ls, a, pos, L):
        c = self.cfg
        n = len(pos)
        ratio = w['ratio']
        freqs = self.freq_comp if ratio else self.freq_win
        qa = self.qlinear(a, w['wq_a'], f'L{L}.wq_a')
        qr = self.rmsnorm(qa, w['q_norm'])
        q = self.qlinear(qr, w['wq_b'], f'L{L}.wq_b').reshape(n, c.H, c.D)
        if not self.v.mut('no_q_headnorm'):
            q = self.head_norm(q)
        q = self.rope(q, pos, freqs)
        kv = self.qlinear(a, w['wkv'], f'L{L}.wkv')
        kv = self.rmsnorm(kv, w['kv_norm'])
        kv = self.rope(kv, pos, freqs)
        if self.v.kv_fp8 and not self.v.mut('hf_numerics'):
            kv[:, :c.D - c.R] = F.fp8_qdq(kv[:, :c.D - c.R], KV_BLOCK)
        ls.kv = _cat(ls.kv, kv)
        sel = None
        if ratio == 4:
            r = self._compress(ls, 'itail', w['idx_comp'], a, pos, 4, f'L{L}.idxc')
            if r is not None:
                ls.idx = _cat(ls.idx, r)
            sel = self.indexer_select(w, ls, a, qr, pos, L)
            self._record(f'L{L}.index_sel', sel)
        if ratio:
            r = self._compress(ls, 'ctail', w['comp'], a, pos, ratio, f'L{L}.comp')
            if r is not None:
                ls.comp = _cat(ls.comp, r)
        idx = self._row_list(ls, pos, ratio, sel)
        o = self.sink_attention(q, ls, idx, w['sink'], L)
        if not self.v.mut('no_output_derotate'):
            o = self.rope(o, pos, freqs, inverse=True)
        og = o.reshape(n, c.G, 1, -1)                                         # [n, G, 1, HD/G]
        low = self.acc.mm(og, np.swapaxes(w['wo_a'], -1, -2)[None], f'L{L}.wo_a')
        low = bf16(low.reshape(n, c.G * c.o_lora))
        return self.qlinear(low, w['wo_b'], f'L{L}.wo_b')

    def _row_list(self, ls, pos, ratio, sel):
        """Index list per query into the bank [raw rows of every position | compressed rows];
        -1 = empty slot. Layout per Variant.p_layout."""
        c = self.cfg
        T = ls.kv.shape[0]
        win = c.win - 1 if self.v.mut('window_minus_one') else c.win
        base = np.maximum(pos - win + 1, 0)
        wslots = base[:, None] + np.arange(win)[None, :]
        wslots = np.where(wslots <= pos[:, None], wslots, -1)
        parts = [wslots]
        if ratio == 4:
            cs = sel
            if self.v.p_layout == 'compact':
                cs = np.where(cs < 0, np.iinfo(np.int64).max, cs)
                cs = np.sort(cs, axis=1)
                cs = np.where(cs == np.iinfo(np.int64).max, -1, cs)
            parts.append(np.where(cs >= 0, cs + T, -1))
        elif ratio:
            nvis = self.n_visible(pos, ratio)
            nmax = int(nvis.max())
            ar = np.arange(nmax)[None, :]
            parts.append(np.where(ar < nvis[:, None], ar + T, -1))
        idx = np.concatenate(parts, axis=1)
        if self.v.p_layout == 'compact':
            order = np.argsort(idx < 0, axis=1, kind='stable')
            idx = np.take_along_axis(idx, order, axis=1)
        return idx

    def sink_attention(self, q, ls, idx, sink, L):
        """kernel.py sparse_attn: online softmax over blocks of attn_block index slots; the
        unnormalised P of each block is exp(s - running max) rounded to bf16 for P.V while the
        denominator sums the fp32 values; the sink joins the denominator only, at the end."""
        c = self.cfg
        B = self.v.attn_block
        # Pad the list with empty slots to whole blocks: how many trailing empty slots a query
        # gets depends on the other queries of its chunk (HCA pads to the chunk's most visible
        # rows), and a sum_seed plan is keyed on the block length, so an unpadded last block
        # would make the seeded variants depend on chunking. Empty slots add exact zeros.
        idx = np.pad(idx, ((0, 0), (0, -idx.shape[1] % B)), constant_values=-1)
        n, Lr = idx.shape
        bank = ls.kv if ls.comp is None else np.concatenate([ls.kv, ls.comp], axis=0)
        valid = idx >= 0
        rows = bank[np.where(valid, idx, 0)]                                  # [n, Lr, D]
        rows = np.where(valid[:, :, None], rows, f32(0))
        s = self.acc.mm(q, np.swapaxes(rows, 1, 2), f'L{L}.qk')             # [n, H, Lr]
        s = (s * f32(c.D ** -0.5)).astype(f32)
        s = np.where(valid[:, None, :], s, NEG_INF)
        m = np.full((n, c.H, 1), NEG_INF, dtype=f32)
        den = np.zeros((n, c.H, 1), dtype=f32)
        acc = np.zeros((n, c.H, c.D), dtype=f32)
        for b0 in range(0, Lr, B):
            sb = s[:, :, b0:b0 + B]
            m_new = np.maximum(m, np.max(sb, axis=-1, keepdims=True))
            alive = np.isfinite(m_new)
            scale = np.where(alive, fexp(np.where(alive, m - m_new, 0)), f32(1))
            p = np.where(alive, fexp(np.where(alive, sb - m_new, NEG_INF)), f32(0))
            den = (den * scale + fsum(p, axis=-1, keepdims=True)).astype(f32)
            pv = bf16(p) if self.v.p_bf16 else p
            acc = (acc * scale + self.acc.mm(pv, rows[:, b0:b0 + B], f'L{L}.pv')).astype(f32)
            m = m_new
        if not self.v.mut('no_sink'):
            den = (den + fexp((sink[None, :, None] - m).astype(f32))).astype(f32)
        return bf16((acc / den).astype(f32))

    # -- MoE -------------------------------------------------------------------------------
    def route(self, w, f, toks, L):
        c = self.cfg
        logits = self.mm(f, w['gate_T'], f'L{L}.gate')
        if c.score_func == 'softmax':
            e = fexp((logits - np.max(logits, axis=-1, keepdims=True)).astype(f32))
            scores = (e / fsum(e, keepdims=True)).astype(f32)
        elif c.score_func == 'sigmoid':
            scores = fsigmoid(logits)
        else:
            x = logits.astype(f64)
            with np.errstate(over='ignore'):
                sp = np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))
            scores = np.sqrt(sp.astype(f32).astype(f64)).astype(f32)
        if w['hash'] and not self.v.mut('no_hash_routing'):
            sel = w['tid2eid'][toks]
        else:
            choose = scores
            if w['gate_bias'] is not None and not self.v.mut('no_select_bias'):
                choose = (scores + w['gate_bias']).astype(f32)
            sel = np.argsort(-choose, axis=-1, kind='stable')[:, :c.topk]
        wts = np.take_along_axis(scores, sel, axis=-1)
        if c.score_func != 'softmax':
            wts = (wts / fsum(wts, keepdims=True)).astype(f32)
        wts = (wts * f32(c.route_scale)).astype(f32)
        return sel, wts

    def expert(self, ew, x, wt, site):
        w1, w2, w3 = ew
        g = self.qlinear(x, w1, site + '.w1')
        u = self.qlinear(x, w3, site + '.w3')
        lim = f32(self.cfg.swiglu_limit)
        if lim > 0 and not self.v.mut('no_swiglu_clamp'):
            u = np.clip(u, -lim, lim)
            g = np.minimum(g, lim)
        h = ((g.astype(f64) / (1.0 + np.exp(-g.astype(f64)))).astype(f32) * u).astype(f32)
        if wt is not None and not self.v.mut('weight_after_w2'):
            h = (wt[:, None] * h).astype(f32)
        out = self.qlinear(bf16(h), w2, site + '.w2')
        if wt is not None and self.v.mut('weight_after_w2'):
            out = bf16((wt[:, None] * out).astype(f32))
        return out

    def moe(self, w, f, toks, L):
        sel, wts = self.route(w, f, toks, L)
        self._record(f'L{L}.experts', sel)
        y = np.zeros_like(f)
        for e in range(self.cfg.n_routed):
            hit = sel == e
            rows = np.nonzero(hit.any(axis=1))[0]
            if rows.size == 0:
                continue
            slot = np.argmax(hit[rows], axis=1)      # a repeated id counts once (model.py)
            out = self.expert(w['experts'][e], f[rows], wts[rows, slot], f'L{L}.e{e}')
            y[rows] = (y[rows] + out).astype(f32)
        y = (y + self.expert(w['shared'], f, None, f'L{L}.shared')).astype(f32)
        return bf16(y)

    # -- forward ---------------------------------------------------------------------------
    def _record(self, key, value):
        """With m.trace = {} the forward pass appends copies of its intermediates per chunk:
        'L{L}.attn_in' (a), 'L{L}.attn_out', 'L{L}.ffn_in', 'L{L}.moe_out', 'L{L}.streams'
        (after the layer), 'L{L}.experts' (selected ids), 'L{L}.index_sel' (CSA top-k in official
        order), 'final' (normed hidden before the head). To localise a divergence layer by layer."""
        if self.trace is not None:
            self.trace.setdefault(key, []).append(np.array(value, copy=True))

    def forward(self, st, tokens, start_pos):
        """Logits (float32 [len(tokens), vocab]) of every position of the chunk."""
        c = self.cfg
        toks = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if start_pos != st.pos:
            raise ValueError(f"start_pos {start_pos} != state position {st.pos}")
        if toks.size == 0:
            return np.zeros((0, c.vocab), dtype=f32)
        if toks.min() < 0 or toks.max() >= c.vocab:
            raise ValueError("token id out of range")
        n = toks.size
        pos = np.arange(start_pos, start_pos + n, dtype=np.int64)
        X = np.repeat(self.embed[toks][:, None, :], c.hc, axis=1)            # [n, hc, d]
        for L, w in enumerate(self.layers):
            ls = st.layers[L]
            y, post, comb = self.hc_pre(X, w['hc_attn'], f'L{L}.hc_attn')
            a = self.rmsnorm(y, w['attn_norm'])
            self._record(f'L{L}.attn_in', a)
            o = self.attention(w, ls, a, pos, L)
            self._record(f'L{L}.attn_out', o)
            X = self.hc_post(o, X, post, comb)
            y, post, comb = self.hc_pre(X, w['hc_ffn'], f'L{L}.hc_ffn')
            fin = self.rmsnorm(y, w['ffn_norm'])
            self._record(f'L{L}.ffn_in', fin)
            mo = self.moe(w, fin, toks, L)
            self._record(f'L{L}.moe_out', mo)
            X = self.hc_post(mo, X, post, comb)
            self._record(f'L{L}.streams', X)
        st.pos += n
        y = self.rmsnorm(self.hc_head_collapse(X), self.norm_w)
        self._record('final', y)
        return self.mm(y, self.head_T, 'head')


def _parse_variant(text):
    """'sum_seed=3,kv_fp8=0,p_layout=compact,mutation=no_sink' -> Variant."""
    kw = {}
    for item in filter(None, (text or '').split(',')):
        k, v = item.split('=', 1)
        if k in ('sum_seed', 'attn_block'):
            kw[k] = int(v)
        elif k in ('kv_fp8', 'p_bf16'):
            kw[k] = v not in ('0', 'false', 'False')
        else:
            kw[k] = v
    return Variant(**kw)


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description="Run the numpy DeepSeek-V4 reference on token ids.")
    ap.add_argument('model_dir')
    ap.add_argument('--tokens', required=True, help="comma-separated token ids")
    ap.add_argument('--variant', default='', help="e.g. sum_seed=3,mutation=no_sink")
    ap.add_argument('--chunk', type=int, default=0, help="forward in chunks of N (1 = decode)")
    ap.add_argument('--out', help="write all logits (float32 [n, vocab]) as .npy")
    a = ap.parse_args(argv)
    toks = [int(t) for t in a.tokens.split(',') if t.strip()]
    m = Model(a.model_dir, _parse_variant(a.variant))
    st = m.new_state()
    step = a.chunk or len(toks)
    logits = np.concatenate([m.forward(st, toks[i:i + step], i)
                             for i in range(0, len(toks), step)])
    if a.out:
        np.save(a.out, logits)
    for t, row in enumerate(logits):
        top = np.argsort(-row, kind='stable')[:2]
        print(f"{t} argmax {top[0]} margin {row[top[0]] - row[top[1]]:.4f}")


if __name__ == '__main__':
    main()
