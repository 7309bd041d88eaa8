# SPDX-License-Identifier: MIT
"""Independent numpy reference of the DSpark drafter of DeepSeek-V4 and of greedy verification.

Written from docs/dsv4-dspark-spec.md and checked against restatements of the official V4
inference code (docs/numerics.md "DSpark numerics" lists each choice and its source). It is
built from dsv4ref's blocks (mHC, RMSNorm, RoPE, sink attention, MoE, quantised linears) with
the target's Variant, so the drafter shares the target's numerics.

    m = dsv4ref.Model(dir); dr = Drafter(m, dir)
    st, ds = m.new_state(), dr.new_state()
    logits, hidden = dr.target_forward(st, tokens, 0)   # target logits + main_hidden rows
    dr.commit(ds, hidden, 0)                            # drafter ring: committed rows only
    out = dr.draft(ds, anchor)                          # block at positions P .. P+gamma-1
    out['drafts'], out['confidence'], out['base_logits'], out['logits']

Positions: the anchor is the newest token, at position P = ds.n (its target forward has not
run); the ring holds context rows of positions < P; slot i of the block predicts position
P+1+i. The official code calls this start_pos = P-1 (dspark spec erratum 5).
"""
import copy
import json
import os
import sys
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsv4ref  # noqa: E402
import formats as F  # noqa: E402

f32, f64 = np.float32, np.float64

# Deliberate drafter bugs (each must move the drafter goldens; tools/reference/test_dspark_ref.py).
MUTATIONS = (
    'tap_before_layer',    # tap the streams entering the tap layers (the V4.1 rule) not leaving
    'pos_plus_one',        # block at positions P+1.. (start_pos = P instead of P-1, erratum 5)
    'causal_block',        # causal attention inside the block instead of bidirectional
    'markov_parallel',     # Markov bias from the previous slot's base-logit argmax (pitfall P8)
    'conf_normed',         # confidence from the normed hidden instead of the pre-norm one
    'no_ctx_fp8',          # context rows without the E4M3 round trip of the non-RoPE dims
)


class DsparkConfig:
    """The drafter's config: dspark_* keys of config.json, n_mtp_layers of
    inference/config.json (stage count; HF's num_nextn_predict_layers is ignored, spec §10).
    Without the inference file the stages are the compress_ratios entries after the target's."""

    def __init__(self, model_dir):
        with open(os.path.join(model_dir, 'config.json')) as fh:
            cfg = json.load(fh)
        inf = {}
        p = os.path.join(model_dir, 'inference', 'config.json')
        if os.path.exists(p):
            with open(p) as fh:
                inf = json.load(fh)
        if 'dspark_target_layer_ids' not in cfg:
            raise ValueError(f"{model_dir}: config.json has no dspark_* keys")
        self.block = int(cfg['dspark_block_size'])
        self.rank = int(cfg['dspark_markov_rank'])
        self.noise = int(cfg['dspark_noise_token_id'])
        self.taps = [int(x) for x in cfg['dspark_target_layer_ids']]
        n_layers = cfg['num_hidden_layers']
        ratios = cfg['compress_ratios']
        self.stages = int(inf.get('n_mtp_layers', len(ratios) - n_layers))
        if len(ratios) != n_layers + self.stages or any(ratios[n_layers:]):
            raise ValueError("compress_ratios must end with one 0 per DSpark stage")
        if sorted(set(self.taps)) != self.taps or not 0 <= self.taps[0] <= self.taps[-1] < n_layers:
            raise ValueError("dspark_target_layer_ids must ascend within the target layers")
        if self.block < 1 or not 0 <= self.noise < cfg['vocab_size']:
            raise ValueError("bad dspark_block_size or dspark_noise_token_id")


class DraftState:
    """Per-sequence drafter state: per stage a ring of `sliding_window` context K/V rows (slot
    t mod W holds position t) and the number of committed positions n."""

    def __init__(self, stages, win, dim):
        self.n = 0
        self.ring = [np.zeros((win, dim), dtype=f32) for _ in range(stages)]


class Drafter:
    def __init__(self, model, model_dir, checkpoint=None):
        self.m = model
        self.dc = DsparkConfig(model_dir)
        ck = checkpoint if checkpoint is not None else \
            dsv4ref.safetensors_io.load_checkpoint(model_dir)
        m, S = model, self.dc.stages
        self.stages = [m.load_block(ck, f'mtp.{s}.', 0, False) for s in range(S)]
        self.main_proj = m.read(ck, 'fp8', 'mtp.0.main_proj')
        self.main_norm = m.read(ck, 'bf', 'mtp.0.main_norm.weight')
        last = f'mtp.{S - 1}.'
        self.norm = m.read(ck, 'bf', last + 'norm.weight')
        self.hc_head = m.read_hc_head(ck, last)
        self.markov_w1 = m.read(ck, 'bf', last + 'markov_head.markov_w1.weight')     # [V, r]
        self.markov_w2_T = m.read(ck, 'lin', last + 'markov_head.markov_w2.weight')  # [r, V]
        self.conf_T = m.read(ck, 'lin', last + 'confidence_head.proj.weight')        # [d+r, 1]
        self.trace = None
        self.mutation = None

    def with_mutation(self, name):
        if name not in MUTATIONS:
            raise ValueError(f"unknown drafter mutation {name!r}")
        d = copy.copy(self)
        d.mutation = name
        return d

    def mut(self, name):
        return self.mutation == name

    def with_model(self, model):
        """The same drafter weights on another Variant of the target model."""
        d = copy.copy(self)
        d.m = model
        return d

    def new_state(self):
        c = self.m.cfg
        return DraftState(self.dc.stages, c.win, c.D)

    def _record(self, key, value):
        if self.trace is not None:
            self.trace.setdefault(key, []).append(np.array(value, copy=True))

    # -- target side ---------------------------------------------------------------------
    def target_forward(self, st, tokens, start_pos):
        """Target logits of the chunk and its main_hidden rows [n, taps*d]: per tap layer the
        mHC streams after the layer, averaged over the hc copies (bf16, like the official
        h.mean(dim=2) on a bf16 tensor), concatenated in ascending layer order (spec §4)."""
        m = self.m
        saved = m.trace
        m.trace = {}
        try:
            logits = m.forward(st, tokens, start_pos)
            if self.mut('tap_before_layer'):
                emb = np.repeat(m.embed[np.asarray(tokens)][:, None, :], m.cfg.hc, axis=1)
                src = [m.trace[f'L{L - 1}.streams'][-1] if L else emb for L in self.dc.taps]
            else:
                src = [m.trace[f'L{L}.streams'][-1] for L in self.dc.taps]
            hidden = np.concatenate([dsv4ref.bf16(dsv4ref.fmean(x, axis=1)) for x in src],
                                    axis=1)
        finally:
            m.trace = saved
        return logits, hidden

    def main_x(self, hidden):
        """main_norm(main_proj(main_hidden)): FP8 linear, then RMSNorm (spec §4)."""
        m = self.m
        return m.rmsnorm(m.qlinear(hidden, self.main_proj, 'mtp.main_proj'), self.main_norm)

    def context_rows(self, s, x, pos):
        """Stage s context K/V rows of main_x rows x at their own positions: kv_norm(wkv x),
        RoPE, E4M3 round trip of the non-RoPE dims in 64-blocks (the window-KV path)."""
        m, c, w = self.m, self.m.cfg, self.stages[s]
        kv = m.rmsnorm(m.qlinear(x, w['wkv'], f'mtp{s}.wkv'), w['kv_norm'])
        kv = m.rope(kv, pos, m.freq_win)
        if m.v.kv_fp8 and not m.v.mut('hf_numerics') and not self.mut('no_ctx_fp8'):
            kv[:, :c.D - c.R] = F.fp8_qdq(kv[:, :c.D - c.R], dsv4ref.KV_BLOCK)
        return kv

    def commit(self, ds, hidden, start_pos):
        """Write the context rows of committed positions start_pos.. (main_hidden rows of
        accepted tokens only; spec §9.3) into every stage's ring."""
        if start_pos != ds.n:
            raise ValueError(f"commit at {start_pos}, drafter holds {ds.n} positions")
        n = hidden.shape[0]
        pos = np.arange(start_pos, start_pos + n, dtype=np.int64)
        x = self.main_x(hidden)
        self._record('main_x', x)
        win = self.m.cfg.win
        for s in range(self.dc.stages):
            rows = self.context_rows(s, x, pos)
            ds.ring[s][pos % win] = rows
        ds.n += n

    # -- drafter forward -----------------------------------------------------------------
    def attention(self, s, w, a, pos, ds):
        """DSparkAttention: MLA over [ring slots 0..min(W, P)-1 | the block's own gamma rows],
        the same list for every block query (bidirectional in the block; official
        get_dspark_topk_idxs, ring in slot order), sink, de-rotation, grouped output."""
        m, c = self.m, self.m.cfg
        n = len(pos)
        qr = m.rmsnorm(m.qlinear(a, w['wq_a'], f'mtp{s}.wq_a'), w['q_norm'])
        q = m.qlinear(qr, w['wq_b'], f'mtp{s}.wq_b').reshape(n, c.H, c.D)
        if not m.v.mut('no_q_headnorm'):
            q = m.head_norm(q)
        q = m.rope(q, pos, m.freq_win)
        kv = m.rmsnorm(m.qlinear(a, w['wkv'], f'mtp{s}.wkv'), w['kv_norm'])
        kv = m.rope(kv, pos, m.freq_win)
        if m.v.kv_fp8 and not m.v.mut('hf_numerics'):
            kv[:, :c.D - c.R] = F.fp8_qdq(kv[:, :c.D - c.R], dsv4ref.KV_BLOCK)
        bank = types.SimpleNamespace(kv=np.concatenate([ds.ring[s], kv], axis=0), comp=None)
        ctx = min(c.win, ds.n)
        row = np.concatenate([np.arange(ctx), c.win + np.arange(n)])
        idx = np.repeat(row[None, :], n, axis=0)
        if self.mut('causal_block'):
            idx = np.where(idx - c.win > np.arange(n)[:, None], -1, idx)
        o = m.sink_attention(q, bank, idx, w['sink'], f'mtp{s}')
        if not m.v.mut('no_output_derotate'):
            o = m.rope(o, pos, m.freq_win, inverse=True)
        og = o.reshape(n, c.G, 1, -1)
        low = m.acc.mm(og, np.swapaxes(w['wo_a'], -1, -2)[None], f'mtp{s}.wo_a')
        low = dsv4ref.bf16(low.reshape(n, c.G * c.o_lora))
        return m.qlinear(low, w['wo_b'], f'mtp{s}.wo_b')

    def backbone(self, ds, anchor):
        """Block [anchor, noise x (gamma-1)] at positions P..P+gamma-1 through the stages ->
        (h: pre-norm hc_head rows [gamma, d], base logits U [gamma, V])."""
        m, c, g = self.m, self.m.cfg, self.dc.block
        if ds.n < 1:
            raise ValueError("drafting needs at least one committed context row")
        ids = np.array([anchor] + [self.dc.noise] * (g - 1), dtype=np.int64)
        pos = np.arange(ds.n, ds.n + g, dtype=np.int64) + self.mut('pos_plus_one')
        X = np.repeat(m.embed[ids][:, None, :], c.hc, axis=1)
        for s, w in enumerate(self.stages):
            y, post, comb = m.hc_pre(X, w['hc_attn'], f'mtp{s}.hc_attn')
            a = m.rmsnorm(y, w['attn_norm'])
            X = m.hc_post(self.attention(s, w, a, pos, ds), X, post, comb)
            y, post, comb = m.hc_pre(X, w['hc_ffn'], f'mtp{s}.hc_ffn')
            fin = m.rmsnorm(y, w['ffn_norm'])
            X = m.hc_post(m.moe(w, fin, ids, f'mtp{s}'), X, post, comb)
            self._record(f'mtp{s}.streams', X)
        h = m.hc_head_collapse(X, self.hc_head)
        U = m.mm(m.rmsnorm(h, self.norm), m.head_T, 'head')
        return h, U

    def markov(self, prev):
        """Markov head: embedding e = W1[prev] (bf16 values) and bias B = W2 e (fp32, [V])."""
        e = self.markov_w1[prev]
        return e, self.m.mm(e[None, :], self.markov_w2_T, 'mtp.markov')[0]

    def draft(self, ds, anchor, chain=None):
        """Greedy proposals for one block: per slot i, z_i = U_i + B(prev_i), d_i = argmax z_i
        (first index on ties), prev_1 = anchor, prev_{i+1} = d_i; confidence c_i =
        sigmoid(w . [h_i ; e(prev_i)]) (no bias), fp32. chain: force prev_{i+1} = chain[i]
        (to compare variants along one Markov chain)."""
        h, U = self.backbone(ds, anchor)
        prev, drafts, conf_logit, Z = int(anchor), [], [], []
        for i in range(self.dc.block):
            if i and chain is not None:
                prev = int(chain[i - 1])
            if self.mut('markov_parallel') and i:
                prev = int(np.argmax(U[i - 1]))
            e, bias = self.markov(prev)
            z = (U[i] + bias).astype(f32)
            hc = self.m.rmsnorm(h[i:i + 1], self.norm)[0] if self.mut('conf_normed') else h[i]
            cin = np.concatenate([hc, e]).astype(f32)
            conf_logit.append(self.m.mm(cin[None, :], self.conf_T, 'mtp.confidence')[0, 0])
            drafts.append(int(np.argmax(z)))
            prev = drafts[-1]
            Z.append(z)
        cl = np.asarray(conf_logit, dtype=f32)
        return {'drafts': drafts, 'base_logits': U, 'logits': np.stack(Z),
                'confidence_logit': cl, 'confidence': dsv4ref.fsigmoid(cl), 'hidden': h}


# ---------------------------------------------------------------------------- verification

def greedy_reference(m, prompt, n):
    """Plain greedy decoding: n tokens after the prompt (prefill, then one token at a time)."""
    st = m.new_state()
    last = m.forward(st, prompt, 0)[-1]
    out = []
    for _ in range(n):
        out.append(int(np.argmax(last)))
        last = m.forward(st, [out[-1]], st.pos)[-1]
    return out


def speculate_greedy(dr, prompt, n, propose=None, verify_len=None):
    """Speculative greedy decoding of n tokens after the prompt (spec §8.2, §9.1).

    Each cycle: propose a block (the drafter, or propose(P, anchor, drafts) -> tokens to replace
    them, e.g. a test oracle), verify [anchor, d_1..d_L] in one target forward, accept the
    longest prefix with d_{j+1} == g_j, emit it plus the target's own token g_k; the target
    state returns to the last accepted position (a snapshot taken before the verify forward,
    then the accepted rows again: the reference's rows are computed row-independently) and
    the drafter ring receives the accepted rows only. Returns (tokens, per-cycle log)."""
    m = dr.m
    st, ds = m.new_state(), dr.new_state()
    logits, hidden = dr.target_forward(st, prompt, 0)
    dr.commit(ds, hidden, 0)
    anchor = int(np.argmax(logits[-1]))
    out, log = [anchor], []
    while len(out) < n:
        P = st.pos
        d = dr.draft(ds, anchor)
        drafts = list(propose(P, anchor, d['drafts'])) if propose else d['drafts']
        L = dr.dc.block if verify_len is None else verify_len(d)
        rows = [anchor] + drafts[:L]
        snap = copy.deepcopy(st)
        lg, hid = dr.target_forward(st, rows, P)
        g = [int(x) for x in np.argmax(lg, axis=-1)]
        k = 0
        while k < L and drafts[k] == g[k]:
            k += 1
        if k < L:       # roll back: state after the anchor and the k accepted drafts only
            st = snap
            lg2, hid = dr.target_forward(st, rows[:k + 1], P)
            if not np.array_equal(lg2, lg[:k + 1]):
                raise AssertionError("reference rows are not row-independent")
        dr.commit(ds, hid, P)
        out += drafts[:k] + [g[k]]
        anchor = g[k]
        log.append({'P': P, 'L': L, 'accepted': k})
    return out[:n], log
