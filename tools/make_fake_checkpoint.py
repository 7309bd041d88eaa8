#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write a header-only fake DeepSeek-V4 checkpoint for a config: real tensor names, dtypes,
shapes, shard names and offsets, payloads left as holes (sparse files), so a 160 GB (Flash) or
865 GB (Pro) checkpoint costs a few MB of disk and a second of time.

The tensor list comes from the Python layout module (tools/reference/layout.py, written from
the spec tables), never from the C inventory, so the C check it feeds is not circular. DSpark
drafter stages (dspark spec §10) are added here from that spec's table. Options damage the
checkpoint for negative tests: --drop NAME, --retype NAME=DTYPE, --reshape NAME=A,B,
--extra NAME=DTYPE:A,B.

    make_fake_checkpoint.py --config tests/fixtures/configs/flash --out DIR --shards 46
"""
import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
import layout  # noqa: E402
import safetensors_io  # noqa: E402


def _ceil(a, b):
    return -(-a // b)


def dspark_stages(cfg, inf, dm):
    """DSpark drafter stages mtp.0..S-1 (dspark spec §10): each a window-only, non-hash block;
    the first owns main_proj/main_norm, the last norm, hc_head, Markov and confidence heads."""
    n = inf.get("n_mtp_layers", len(dm.ratios) - dm.n_layers)
    d, V = dm.d, dm.vocab
    rank = cfg["dspark_markov_rank"]
    taps = len(cfg["dspark_target_layer_ids"])
    bo, bi = dm.block
    t = []
    for s in range(n):
        p = f"mtp.{s}."
        t += layout.block_tensors(p, 0, False, dm)
        if s == 0:
            t += [(p + "main_proj.weight", "F8_E4M3", (d, taps * d)),
                  (p + "main_proj.scale", "F8_E8M0", (_ceil(d, bo), _ceil(taps * d, bi))),
                  (p + "main_norm.weight", "BF16", (d,))]
        if s == n - 1:
            t += [(p + "norm.weight", "BF16", (d,)),
                  (p + "hc_head_fn", "F32", (dm.hc, dm.hc * d)),
                  (p + "hc_head_base", "F32", (dm.hc,)),
                  (p + "hc_head_scale", "F32", (1,)),
                  (p + "markov_head.markov_w1.weight", "BF16", (V, rank)),
                  (p + "markov_head.markov_w2.weight", "BF16", (V, rank)),
                  (p + "confidence_head.proj.weight", "BF16", (1, d + rank))]
    return t


def tensors(cfg, inf):
    if "dspark_block_size" not in cfg:
        return layout.tensors(cfg)
    base = dict(cfg, num_nextn_predict_layers=0)
    n_layers = cfg["num_hidden_layers"]
    base["compress_ratios"] = cfg["compress_ratios"][:n_layers]
    return layout.tensors(base) + dspark_stages(cfg, inf, layout.Dims(cfg))


def damage(t, a):
    by_name = {n: i for i, (n, _, _) in enumerate(t)}

    def at(name):
        if name not in by_name:
            sys.exit(f"make_fake_checkpoint: no tensor {name}")
        return by_name[name]

    def shape(s):
        return tuple(int(x) for x in s.split(","))
    for name in a.drop:
        t[at(name)] = None
    for spec in a.retype:
        name, dtype = spec.split("=")
        i = at(name)
        t[i] = (name, dtype, t[i][2])
    for spec in a.reshape:
        name, s = spec.split("=")
        i = at(name)
        t[i] = (name, t[i][1], shape(s))
    for spec in a.extra:
        name, rest = spec.split("=")
        dtype, s = rest.split(":")
        t.append((name, dtype, shape(s)))
    return [x for x in t if x is not None]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="model dir holding config.json "
                    "(and optionally inference/config.json)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shards", type=int, required=True)
    ap.add_argument("--drop", action="append", default=[])
    ap.add_argument("--retype", action="append", default=[])
    ap.add_argument("--reshape", action="append", default=[])
    ap.add_argument("--extra", action="append", default=[])
    a = ap.parse_args()

    with open(os.path.join(a.config, "config.json")) as f:
        cfg = json.load(f)
    inf_path = os.path.join(a.config, "inference", "config.json")
    inf = {}
    if os.path.exists(inf_path):
        with open(inf_path) as f:
            inf = json.load(f)
    t = damage(tensors(cfg, inf), a)
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    index = safetensors_io.write_checkpoint(a.out, t, a.shards, header_only=True)
    shutil.copy(os.path.join(a.config, "config.json"), os.path.join(a.out, "config.json"))
    if inf:
        os.makedirs(os.path.join(a.out, "inference"))
        shutil.copy(inf_path, os.path.join(a.out, "inference", "config.json"))
    print(f"{len(t)} tensors, {index['metadata']['total_size']} bytes, {a.shards} shards")


if __name__ == "__main__":
    main()
