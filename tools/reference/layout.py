# SPDX-License-Identifier: MIT
"""The complete, ordered tensor inventory of an official DeepSeek-V4 checkpoint.

From an HF config dict, tensors() lists every (name, safetensors dtype, shape) the released
Flash/Pro checkpoints carry (spec §3.2/§3.3, legacy MTP block §15), so the tiny-fixture
generator, the reference loader and the C inventory tests share one source of truth. The
counts and byte totals are checked against the real checkpoints' inventories (spec §3.4) by
tests/py/test_layout.py.

Quantised dense weights: F8_E4M3 [out, in] + F8_E8M0 `.scale` [ceil(out/Bo), ceil(in/Bi)],
(Bo, Bi) = quantization_config.weight_block_size. Routed experts (expert_dtype fp4): I8 [out,
in/2] (two E2M1 codes per byte) + F8_E8M0 `.scale` [out, in/32].
"""


def _ceil(a, b):
    return -(-a // b)


class Dims:
    """Config values the layout depends on, under short names."""

    def __init__(self, cfg):
        self.d = cfg["hidden_size"]
        self.vocab = cfg["vocab_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_mtp = cfg.get("num_nextn_predict_layers", 0)
        self.ratios = list(cfg["compress_ratios"])
        # DSpark drafter (dspark spec §10): the dspark_* keys name it; HF's
        # num_nextn_predict_layers (1) is then ignored and the stages are the compress_ratios
        # entries after the target layers (inference/config.json n_mtp_layers, 3).
        self.dspark = "dspark_target_layer_ids" in cfg
        self.n_stages = len(self.ratios) - self.n_layers if self.dspark else 0
        if self.dspark:
            self.n_mtp = 0
            self.n_taps = len(cfg["dspark_target_layer_ids"])
            self.markov_rank = cfg["dspark_markov_rank"]
        self.n_hash = cfg.get("num_hash_layers", 0)
        self.H = cfg["num_attention_heads"]
        self.D = cfg["head_dim"]
        self.q_lora = cfg["q_lora_rank"]
        self.G = cfg["o_groups"]
        self.o_lora = cfg["o_lora_rank"]
        self.idx_heads = cfg["index_n_heads"]
        self.idx_dim = cfg["index_head_dim"]
        self.n_routed = cfg["n_routed_experts"]
        self.n_shared = cfg.get("n_shared_experts", 1)
        self.topk = cfg["num_experts_per_tok"]
        self.inter = cfg["moe_intermediate_size"]
        self.hc = cfg["hc_mult"]
        self.expert_dtype = cfg.get("expert_dtype", "fp4")
        q = cfg.get("quantization_config") or {}
        self.block = tuple(q.get("weight_block_size", (128, 128)))
        if len(self.ratios) < self.n_layers + self.n_mtp:
            raise ValueError(f"compress_ratios has {len(self.ratios)} entries, need "
                             f"{self.n_layers + self.n_mtp} (layers + MTP)")
        if self.expert_dtype != "fp4":
            raise ValueError(f"expert_dtype {self.expert_dtype!r}: only fp4 is laid out")
        if self.H % self.G:
            raise ValueError(f"num_attention_heads {self.H} not divisible by o_groups {self.G}")


def _fp8(name, out, inp, dm):
    bo, bi = dm.block
    return [(name + ".weight", "F8_E4M3", (out, inp)),
            (name + ".scale", "F8_E8M0", (_ceil(out, bo), _ceil(inp, bi)))]


def _fp4(name, out, inp):
    if inp % 32:
        raise ValueError(f"{name}: input dim {inp} is not a multiple of 32 (FP4 scale groups)")
    return [(name + ".weight", "I8", (out, inp // 2)),
            (name + ".scale", "F8_E8M0", (out, inp // 32))]


def _compressor(prefix, head_dim, ratio, d):
    coff = 2 if ratio == 4 else 1  # ratio-4 compressors pool overlapping windows
    return [(prefix + "wkv.weight", "BF16", (coff * head_dim, d)),
            (prefix + "wgate.weight", "BF16", (coff * head_dim, d)),
            (prefix + "ape", "F32", (ratio, coff * head_dim)),
            (prefix + "norm.weight", "BF16", (head_dim,))]


def _hc_head(p, dm):
    return [(p + "hc_head_fn", "F32", (dm.hc, dm.hc * dm.d)),
            (p + "hc_head_base", "F32", (dm.hc,)),
            (p + "hc_head_scale", "F32", (1,))]


def block_tensors(p, ratio, is_hash, dm):
    """One transformer block (main layer or MTP) under prefix p, e.g. 'layers.3.'."""
    d, mix = dm.d, (2 + dm.hc) * dm.hc
    t = []
    for which in ("attn", "ffn"):
        t += [(f"{p}hc_{which}_fn", "F32", (mix, dm.hc * d)),
              (f"{p}hc_{which}_base", "F32", (mix,)),
              (f"{p}hc_{which}_scale", "F32", (3,))]
    t += [(p + "attn_norm.weight", "BF16", (d,)), (p + "ffn_norm.weight", "BF16", (d,))]
    a = p + "attn."
    t += [(a + "attn_sink", "F32", (dm.H,))]
    t += _fp8(a + "wq_a", dm.q_lora, d, dm)
    t += [(a + "q_norm.weight", "BF16", (dm.q_lora,))]
    t += _fp8(a + "wq_b", dm.H * dm.D, dm.q_lora, dm)
    t += _fp8(a + "wkv", dm.D, d, dm)
    t += [(a + "kv_norm.weight", "BF16", (dm.D,))]
    t += _fp8(a + "wo_a", dm.G * dm.o_lora, dm.H * dm.D // dm.G, dm)
    t += _fp8(a + "wo_b", d, dm.G * dm.o_lora, dm)
    if ratio:
        t += _compressor(a + "compressor.", dm.D, ratio, d)
    if ratio == 4:
        i = a + "indexer."
        t += _fp8(i + "wq_b", dm.idx_heads * dm.idx_dim, dm.q_lora, dm)
        t += [(i + "weights_proj.weight", "BF16", (dm.idx_heads, d))]
        t += _compressor(i + "compressor.", dm.idx_dim, ratio, d)
    f = p + "ffn."
    t += [(f + "gate.weight", "BF16", (dm.n_routed, d))]
    if is_hash:
        t += [(f + "gate.tid2eid", "I64", (dm.vocab, dm.topk))]
    else:
        t += [(f + "gate.bias", "F32", (dm.n_routed,))]
    for e in range(dm.n_routed):
        t += _fp4(f"{f}experts.{e}.w1", dm.inter, d)
        t += _fp4(f"{f}experts.{e}.w2", d, dm.inter)
        t += _fp4(f"{f}experts.{e}.w3", dm.inter, d)
    s = dm.n_shared * dm.inter
    t += _fp8(f + "shared_experts.w1", s, d, dm)
    t += _fp8(f + "shared_experts.w2", d, s, dm)
    t += _fp8(f + "shared_experts.w3", s, d, dm)
    return t


def tensors(cfg):
    """Ordered [(name, dtype, shape)] of the whole checkpoint: embedding, main layers,
    final collapse/norm/head, then the MTP block(s) (the real Flash keeps MTP in its last shard)."""
    dm = Dims(cfg)
    t = [("embed.weight", "BF16", (dm.vocab, dm.d))]
    for L in range(dm.n_layers):
        t += block_tensors(f"layers.{L}.", dm.ratios[L], L < dm.n_hash, dm)
    t += _hc_head("", dm)
    t += [("norm.weight", "BF16", (dm.d,)), ("head.weight", "BF16", (dm.vocab, dm.d))]
    for m in range(dm.n_mtp):
        p = f"mtp.{m}."
        t += block_tensors(p, dm.ratios[dm.n_layers + m], False, dm)
        t += _fp8(p + "e_proj", dm.d, dm.d, dm) + _fp8(p + "h_proj", dm.d, dm.d, dm)
        t += [(p + "enorm.weight", "BF16", (dm.d,)), (p + "hnorm.weight", "BF16", (dm.d,)),
              (p + "norm.weight", "BF16", (dm.d,))]
        t += _hc_head(p, dm)
    for s in range(dm.n_stages):
        t += dspark_stage_tensors(s, dm)
    return t


def dspark_stage_tensors(s, dm):
    """DSpark stage s (dspark spec §10): a window-only block; the first stage also owns the tap
    fusion (main_proj, main_norm), the last the head side (norm, hc_head, Markov, confidence)."""
    p = f"mtp.{s}."
    t = block_tensors(p, 0, False, dm)
    if s == 0:
        t += _fp8(p + "main_proj", dm.d, dm.n_taps * dm.d, dm)
        t += [(p + "main_norm.weight", "BF16", (dm.d,))]
    if s == dm.n_stages - 1:
        r = dm.markov_rank
        t += [(p + "norm.weight", "BF16", (dm.d,))]
        t += _hc_head(p, dm)
        t += [(p + "markov_head.markov_w1.weight", "BF16", (dm.vocab, r)),
              (p + "markov_head.markov_w2.weight", "BF16", (dm.vocab, r)),
              (p + "confidence_head.proj.weight", "BF16", (1, dm.d + r))]
    return t
