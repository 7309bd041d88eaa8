#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write a small DeepSeek-V4 checkpoint in the official on-disk layout.

Owns the tiny test models: every tensor of tools/reference/layout.py under its official name,
quantised into the real formats (FP8-E4M3 + 128x128 E8M0 block scales for dense weights, packed
FP4-E2M1 + per-32 E8M0 for routed experts, BF16/F32/I64 elsewhere), HF sharding with an index,
and an HF-style config.json. Output bytes depend only on (config, init recipe, seed): each tensor
draws from its own generator seeded by (seed, crc32(name)).

Weights are random with scales chosen so every path matters (see docs/numerics.md, "Tiny
fixtures"); the `confident` recipe adds a constructed token-to-token bypass that makes greedy
continuations sharply peaked while the layers still steer them.

Usage: make_tiny_model.py --config {tiny,tiny-confident,<config.json>} --seed N --out DIR
"""
import argparse
import json
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
import formats  # noqa: E402
import layout  # noqa: E402
import safetensors_io  # noqa: E402

BASE_CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
    "attention_bias": False, "bos_token_id": 0, "eos_token_id": 1, "expert_dtype": "fp4",
    "hc_eps": 1e-06, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hidden_act": "silu",
    "max_position_embeddings": 4096, "n_shared_experts": 1, "norm_topk_prob": True,
    "num_key_value_heads": 1, "num_nextn_predict_layers": 1,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06, "rope_theta": 10000, "compress_rope_theta": 160000,
    "scoring_func": "sqrtsoftplus", "tie_word_embeddings": False, "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
}

# The fixture configs; why each value is what it is: docs/numerics.md "Tiny fixtures".
TINY = dict(BASE_CONFIG, **{
    "vocab_size": 384, "hidden_size": 128, "num_hidden_layers": 5,
    # window, CSA, HCA/8, CSA, HCA/16; last entry = MTP block (window).
    "compress_ratios": [0, 4, 8, 4, 16, 0],
    "num_hash_layers": 2,
    "num_attention_heads": 4, "head_dim": 128, "qk_rope_head_dim": 64,
    "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 64,
    "sliding_window": 32,
    "index_n_heads": 4, "index_head_dim": 128, "index_topk": 24,
    "n_routed_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
    "routed_scaling_factor": 1.5, "swiglu_limit": 1.0,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 512,
                     "beta_fast": 32, "beta_slow": 1},
})

# Init recipe: standard deviations relative to 1/sqrt(fan_in) and a few absolute spreads.
DEFAULT_INIT = {
    "embed": 1.0,          # embedding entries ~ N(0, embed)
    "head": 4.0,           # head rows ~ N(0, head/sqrt(d)): logits std ~ head
    "linear": 1.0,         # FP8 dense weights ~ N(0, linear/sqrt(in))
    "expert": 1.0,         # FP4 routed expert weights
    "norm_spread": 0.2,    # norm weights 1 + N(0, spread)
    "hc_fn": 1.0,          # hc_*_fn ~ N(0, hc_fn/sqrt(4d))
    "hc_base": 1.0,        # hc_*_base ~ N(0, hc_base)
    "sink": 1.0,           # attn_sink ~ N(0, sink)
    "ape": 1.0,            # compressor ape ~ N(0, ape)
    "gate_bias": 1.0,      # gate.bias ~ U(-gate_bias, gate_bias)
    "compressor": 1.0,     # compressor wkv/wgate ~ N(0, compressor/sqrt(d))
    "comp_norm": 2.0,      # main compressor norm weight mean (scores of compressed rows)
    "wo_b": 3.0,           # attention output projection gain (attention ~ MoE in the stream)
    "bypass": 0.0,         # confident recipe: successor vote carried by the embedding
}

# The confident fixture: same shapes; the embedding (std 3.5) carries a successor vote into the
# head (bypass 3), the indexer keeps every row (index_topk above any prompt's row count) and
# gate.bias dominates non-hash selection, which removes the two discrete chaos sources (top-k
# flips), so margins stay clear while attention and MoE still steer the continuation.
TINY_CONFIDENT = dict(TINY, index_topk=1024)
CONFIDENT_INIT = dict(DEFAULT_INIT, embed=3.5, bypass=3.0, gate_bias=4.0)

# The DSpark fixture (dspark spec §10/§16): the confident tiny target (stable greedy
# continuations and drafter goldens with tight tolerances) with a three-stage drafter under
# mtp.0..2. Two heads, two indexer heads and four experts (top-2) keep it under 4 MB; taps after layers 2..4 (the
# last one checks the pre-hc_head tap); HF num_nextn_predict_layers stays 1 as in the real
# config, the stage count comes from inference/config.json n_mtp_layers (INFERENCE_KEYS).
# vocab 256 keeps the drafter fixture under 4 MiB (its Markov tables are [vocab, rank]); it
# ships no tokenizer (a byte-level BPE needs 256 byte tokens + specials).
TINY_DSPARK = dict(TINY_CONFIDENT, **{
    "vocab_size": 256, "num_attention_heads": 2, "n_routed_experts": 4, "index_n_heads": 2,
    "compress_ratios": [0, 4, 8, 4, 16, 0, 0, 0],
    "dspark_block_size": 5, "dspark_markov_rank": 32, "dspark_noise_token_id": 255,
    "dspark_target_layer_ids": [2, 3, 4],
})
DSPARK_INIT = dict(CONFIDENT_INIT, markov=2.0, markov_succ=150.0)

PRESETS = {
    "tiny": (TINY, DEFAULT_INIT),
    "tiny-confident": (TINY_CONFIDENT, CONFIDENT_INIT),
    "tiny-dspark": (TINY_DSPARK, DSPARK_INIT),
}

# inference/config.json fields written next to a DSpark config (official names).
INFERENCE_KEYS = ("dspark_block_size", "dspark_markov_rank", "dspark_noise_token_id",
                  "dspark_target_layer_ids", "compress_ratios")


def rng_for(seed, name):
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def logical_weight(name, shape, cfg, init, seed):
    """fp32 value of one logical tensor (before storage quantisation)."""
    g = rng_for(seed, name)
    d = cfg["hidden_size"]
    leaf = name.split(".")[-1] if not name.endswith(".weight") else name.split(".")[-2]
    if name == "embed.weight":
        return g.normal(0.0, init["embed"], shape)
    if name == "head.weight":
        return g.normal(0.0, init["head"] / np.sqrt(d), shape)
    if name.endswith("markov_w1.weight"):   # an embedding: rows ~ N(0, 1)
        return g.normal(0.0, 1.0, shape)
    if name.endswith("markov_w2.weight"):   # bias B(y) = W2 e(y) has std ~ markov
        return g.normal(0.0, init.get("markov", 1.0) / np.sqrt(shape[1]), shape)
    if name.endswith("attn.compressor.norm.weight"):
        return init["comp_norm"] * (1.0 + g.normal(0.0, init["norm_spread"], shape))
    if name.endswith("norm.weight"):
        return 1.0 + g.normal(0.0, init["norm_spread"], shape)
    if leaf in ("hc_attn_fn", "hc_ffn_fn", "hc_head_fn"):
        return g.normal(0.0, init["hc_fn"] / np.sqrt(shape[1]), shape)
    if leaf in ("hc_attn_base", "hc_ffn_base", "hc_head_base"):
        return g.normal(0.0, init["hc_base"], shape)
    if leaf in ("hc_attn_scale", "hc_ffn_scale", "hc_head_scale"):
        return g.uniform(0.5, 1.5, shape)
    if leaf == "attn_sink":
        return g.normal(0.0, init["sink"], shape)
    if leaf == "ape":
        return g.normal(0.0, init["ape"], shape)
    if leaf == "bias":
        return g.uniform(-init["gate_bias"], init["gate_bias"], shape)
    if leaf == "tid2eid":
        n = cfg["n_routed_experts"]
        return np.stack([g.permutation(n)[:shape[1]] for _ in range(shape[0])]).astype(np.int64)
    if ".compressor." in name:
        return g.normal(0.0, init["compressor"] / np.sqrt(shape[1]), shape)
    if name.endswith("attn.wo_b.weight"):
        return g.normal(0.0, init["wo_b"] / np.sqrt(shape[1]), shape)
    if ".experts." in name:
        return g.normal(0.0, init["expert"] / np.sqrt(shape[1]), shape)
    return g.normal(0.0, init["linear"] / np.sqrt(shape[1]), shape)


def quant_fp8(w, block):
    """fp32 [out, in] -> (E4M3 codes, E8M0 scale bytes) with per-block power-of-two scales
    chosen so the block's amax lands at or below 448."""
    bo, bi = block
    out, inn = w.shape
    nbo, nbi = -(-out // bo), -(-inn // bi)
    pad = np.zeros((nbo * bo, nbi * bi), np.float32)
    pad[:out, :inn] = w
    blocks = pad.reshape(nbo, bo, nbi, bi)
    amax = np.maximum(np.abs(blocks).max(axis=(1, 3)), np.float32(1e-30))
    s = formats.pow2_scale(amax, np.float32(1.0) / np.float32(448.0))
    codes = formats.e4m3_encode(blocks / s[:, None, :, None]).reshape(nbo * bo, nbi * bi)
    return codes[:out, :inn], formats.e8m0_from_pow2(s)


def quant_fp4(w):
    """fp32 [out, in] -> (packed I8 [out, in/2], E8M0 [out, in/32]); groups of 32 along in."""
    out, inn = w.shape
    wb = w.reshape(out, inn // 32, 32)
    amax = np.maximum(np.abs(wb).max(axis=2), np.float32(1e-30))
    s = formats.pow2_scale(amax, np.float32(1.0) / np.float32(6.0))
    codes = formats.e2m1_encode(wb / s[:, :, None]).reshape(out, inn)
    return formats.pack_fp4(codes), formats.e8m0_from_pow2(s)


def apply_bypass(values, cfg, init, seed):
    """Confident recipe: a constructed successor map succ (a random permutation of the vocab)
    written into the head, head[succ(x)] += bypass * head_gain * embed[x] / |embed[x]|, so the
    embedding of token x, carried by the residual streams, votes for succ(x)."""
    if not init["bypass"]:
        return
    succ = rng_for(seed, "bypass.successor").permutation(cfg["vocab_size"])
    e = values["embed.weight"]
    values["head.weight"][succ] += init["bypass"] * init["head"] * e / np.linalg.norm(
        e, axis=1, keepdims=True)


def apply_markov_successor(values, cfg, init, seed):
    """DSpark fixture: the Markov bias B(y) = W2 W1[y] votes (weight markov_succ) for the same
    successor succ(y) that the confident target's bypass votes for, so the random drafter
    proposes chains the target often accepts (exercises real partial acceptance)."""
    gain = init.get("markov_succ", 0.0)
    if not gain or "dspark_target_layer_ids" not in cfg:
        return
    p = "mtp.%d.markov_head." % (len(cfg["compress_ratios"]) - cfg["num_hidden_layers"] - 1)
    succ = rng_for(seed, "bypass.successor").permutation(cfg["vocab_size"])
    w1 = values[p + "markov_w1.weight"]
    values[p + "markov_w2.weight"][succ] += gain * w1 / np.sum(w1 * w1, axis=1, keepdims=True)


def build(cfg, init, seed):
    """Ordered [(name, dtype, storage array)] of the whole checkpoint."""
    entries = layout.tensors(cfg)
    block = tuple(cfg["quantization_config"]["weight_block_size"])
    values = {}
    for name, dtype, shape in entries:
        if name.endswith(".scale") and dtype == "F8_E8M0":
            continue
        if dtype == "I8":  # packed FP4: the logical weight is [out, in]
            shape = (shape[0], shape[1] * 2)
        values[name] = logical_weight(name, shape, cfg, init, seed)
    apply_bypass(values, cfg, init, seed)
    apply_markov_successor(values, cfg, init, seed)
    return encode(cfg, values)


def encode(cfg, values):
    """Logical fp32 values {name: array} (FP4 weights as [out, in]; no .scale entries) ->
    ordered [(name, dtype, storage array)] in the official formats."""
    entries = layout.tensors(cfg)
    block = tuple(cfg["quantization_config"]["weight_block_size"])
    out = {}
    for name, dtype, shape in entries:
        if dtype == "F8_E8M0":
            continue  # produced with its weight
        v = values[name]
        if dtype == "F8_E4M3":
            codes, sc = quant_fp8(v.astype(np.float32), block)
            out[name] = codes
            out[name[:-len("weight")] + "scale"] = sc
        elif dtype == "I8":
            packed, sc = quant_fp4(v.astype(np.float32))
            out[name] = packed
            out[name[:-len("weight")] + "scale"] = sc
        elif dtype == "BF16":
            out[name] = formats.bf16_bits(v.astype(np.float32))
        elif dtype == "F32":
            out[name] = v.astype(np.float32)
        elif dtype == "I64":
            out[name] = v.astype(np.int64)
        else:
            raise ValueError(f"{name}: no generator for {dtype}")
    result = []
    for name, dtype, shape in entries:
        a = out[name]
        if tuple(a.shape) != tuple(shape):
            raise AssertionError(f"{name}: built {a.shape}, layout says {shape}")
        result.append((name, dtype, a))
    return result


def write_model(out_dir, cfg, init, seed, n_shards=2):
    write_tensors(out_dir, cfg, build(cfg, init, seed), n_shards)


def export(out_dir, cfg, values, n_shards=2):
    """Write trained logical values (see encode) as a checkpoint (tools/train_demo.py)."""
    write_tensors(out_dir, cfg, encode(cfg, values), n_shards)


def write_tensors(out_dir, cfg, tensors, n_shards):
    os.makedirs(out_dir, exist_ok=True)
    safetensors_io.write_checkpoint(out_dir, tensors, n_shards)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    if "dspark_target_layer_ids" in cfg:
        stages = len(cfg["compress_ratios"]) - cfg["num_hidden_layers"]
        inf = dict({k: cfg[k] for k in INFERENCE_KEYS}, n_mtp_layers=stages)
        os.makedirs(os.path.join(out_dir, "inference"), exist_ok=True)
        with open(os.path.join(out_dir, "inference", "config.json"), "w") as f:
            json.dump(inf, f, indent=2, sort_keys=True)
            f.write("\n")


def resolve(config):
    if config in PRESETS:
        return PRESETS[config]
    with open(config) as f:
        cfg = json.load(f)
    init = dict(DEFAULT_INIT, **cfg.pop("dsv4_init", {}))  # optional recipe overrides
    return dict(BASE_CONFIG, **cfg), init


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="preset (%s) or config.json" % ", ".join(PRESETS))
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shards", type=int, default=2)
    a = ap.parse_args()
    cfg, init = resolve(a.config)
    write_model(a.out, cfg, init, a.seed, a.shards)


if __name__ == "__main__":
    main()
