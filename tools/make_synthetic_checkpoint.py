#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write a synthetic checkpoint with the real V4-Flash (or Pro) shapes and a few layers, for speed
measurements only (its outputs mean nothing).

Tensor inventory from tools/reference/layout.py (official names, dtypes, shapes); the config is
the released one with num_hidden_layers cut to --layers (compress_ratios and num_hash_layers cut
to match, no MTP block). Payloads are random but sane, generated in bounded chunks and streamed to one shard per
layer, so the tool writes gigabytes quickly with little memory:
  F8_E4M3 weights: random sign/mantissa, exponent field 4..7 (|w| in [1/8, 1.875], never NaN),
                   E8M0 scales 2^-round(log2 sqrt(in)) so rows have unit-ish gain;
  FP4 experts:     random nibbles, E8M0 scales 2^-round(log2(3 sqrt(in)));
  BF16 matrices:   random sign/mantissa, exponent near 1/sqrt(in); norm weights 1;
  F32:             small normal values (HC mixes), zeros (bases, sink, ape, bias), ones (scales);
  tid2eid:         distinct expert ids per row.
Random chunks (16 MiB) come from a small pool reused cyclically: generating gigabytes of fresh
randomness on a shared 2-core machine is the slow part, and speed does not depend on it.

With --dspark (a config with dspark_* keys, e.g. tests/fixtures/configs/flash-dspark) the
DSpark drafter stages mtp.0..S-1 are written too (one shard each), compress_ratios keeps one 0
per stage and dspark_target_layer_ids become the last n_taps kept layers (--layers ≥ n_taps).

Usage: make_synthetic_checkpoint.py --config tools/reference/configs/flash.json --layers 4
                                     --out /tmp/flash4 [--seed 1] [--routed-experts N]
                                     [--dspark]
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
import layout  # noqa: E402
import safetensors_io  # noqa: E402

CHUNK = 16 << 20
POOL = 5            # distinct random chunks per kind, reused cyclically (generation is the cost)
_pool = {}


def pooled(kind, k, make):
    """The k-th chunk of a kind from a small pool of pre-generated random chunks."""
    key = (kind, k % POOL)
    if key not in _pool:
        _pool[key] = make()
    return _pool[key]


def fp8_bytes(rng, n):
    r = np.frombuffer(rng.bytes(n), np.uint8)
    return (r & 0x87) | (((r >> 3) & 3) + 4) << 3          # exponent field 4..7


def bf16_bytes(rng, n, exp):
    r = np.frombuffer(rng.bytes(2 * n), np.uint16)
    e = (exp + ((r >> 7) & 1)).astype(np.uint16)           # two binades around 2^(exp-127)
    return ((r & 0x807F) | (e << 7)).astype(np.uint16)


def payload(rng, name, dtype, shape, fan_in, n_routed):
    """Yield the tensor's bytes in chunks of at most CHUNK."""
    n = int(np.prod(shape))
    if dtype == "F8_E8M0":
        base = name[:-len(".scale")]
        if ".experts." in base:
            v = 127 - round(math.log2(3 * math.sqrt(fan_in[base])))
        else:
            v = 127 - round(math.log2(math.sqrt(fan_in[base])))
        yield np.full(n, v, np.uint8).tobytes()
        return
    if dtype == "I64":
        rows, k = shape
        r = np.arange(rows, dtype=np.int64)[:, None]
        j = np.arange(k, dtype=np.int64)[None, :]
        yield ((r * 7 + j * 37) % n_routed).astype("<i8").tobytes()  # distinct per row (k small)
        return
    if dtype == "F32":
        if name.endswith("_fn"):
            a = rng.standard_normal(n).astype(np.float32) / np.float32(math.sqrt(shape[-1]))
        elif name.endswith("_scale"):
            a = np.ones(n, np.float32)
        else:
            a = np.zeros(n, np.float32)
        yield a.astype("<f4").tobytes()
        return
    step = CHUNK // 2 if dtype == "BF16" else CHUNK
    for k, off in enumerate(range(0, n, step)):
        m = min(step, n - off)
        payload.calls += 1
        j = payload.calls
        if dtype == "F8_E4M3":
            yield pooled("fp8", j, lambda: fp8_bytes(rng, CHUNK).tobytes())[:m]
        elif dtype == "I8":
            yield pooled("i8", j, lambda: rng.bytes(CHUNK))[:m]
        elif dtype == "BF16":
            if len(shape) == 1:
                yield np.full(m, 0x3F80, "<u2").tobytes()
            else:
                exp = 127 if name == "embed.weight" else 127 - round(math.log2(math.sqrt(shape[1])))
                yield pooled(f"bf16-{exp}", j,
                             lambda: bf16_bytes(rng, step, exp).astype("<u2").tobytes())[:2 * m]
        else:
            raise ValueError(f"{name}: dtype {dtype} not generated")


payload.calls = 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--routed-experts", type=int, default=0,
                    help="override n_routed_experts (same per-expert shapes; fits in RAM)")
    ap.add_argument("--dspark", action="store_true",
                    help="keep the config's DSpark drafter (dspark_* keys) and write its stages")
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = json.load(f)
    stages = len(cfg["compress_ratios"]) - cfg["num_hidden_layers"]
    cfg["num_hidden_layers"] = a.layers
    cfg["num_nextn_predict_layers"] = 0
    cfg["compress_ratios"] = cfg["compress_ratios"][:a.layers]
    # fewer layers than hash-routed ones (Flash: 3): every layer is hash-routed
    cfg["num_hash_layers"] = min(cfg.get("num_hash_layers", 0), a.layers)
    if a.dspark:
        if "dspark_target_layer_ids" not in cfg:
            sys.exit(f"{a.config}: --dspark needs a config with dspark_* keys")
        n_taps = len(cfg["dspark_target_layer_ids"])
        if a.layers < n_taps:
            sys.exit(f"--dspark needs --layers >= {n_taps} (one per tap)")
        cfg["dspark_target_layer_ids"] = list(range(a.layers - n_taps, a.layers))
        cfg["compress_ratios"] += [0] * stages
    else:
        for k in [k for k in cfg if k.startswith("dspark_")]:
            del cfg[k]
    if a.routed_experts:
        cfg["n_routed_experts"] = a.routed_experts
    inv = layout.tensors(cfg)
    # input width of every quantised weight (for its scale)
    fan_in = {n[:-len(".weight")]: s[1] * (2 if d == "I8" else 1)
              for n, d, s in inv if n.endswith(".weight") and d in ("F8_E4M3", "I8")}
    groups = [[t for t in inv if not t[0].startswith(("layers.", "mtp."))]]
    for L in range(a.layers):
        groups.append([t for t in inv if t[0].startswith(f"layers.{L}.")])
    for s in range(stages if a.dspark else 0):
        groups.append([t for t in inv if t[0].startswith(f"mtp.{s}.")])
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    weight_map, total = {}, 0
    for k, items in enumerate(groups, 1):
        fn = safetensors_io.shard_name(k, len(groups))
        hdr, pos = {"__metadata__": {"format": "pt"}}, 0
        for name, dtype, shape in items:
            end = pos + safetensors_io.nbytes(dtype, shape)
            hdr[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, end]}
            pos = end
            weight_map[name] = fn
        text = json.dumps(hdr, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(a.out, fn), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            for name, dtype, shape in items:
                for b in payload(rng, name, dtype, shape, fan_in, cfg["n_routed_experts"]):
                    f.write(b)
        total += pos
        print(f"{fn}: {pos / 2**30:.2f} GiB", flush=True)
    with open(os.path.join(a.out, safetensors_io.INDEX_NAME), "w") as f:
        json.dump({"metadata": {"total_size": total},
                   "weight_map": dict(sorted(weight_map.items()))}, f, indent=1)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print(f"total {total / 2**30:.2f} GiB in {len(groups)} shards")


if __name__ == "__main__":
    main()
