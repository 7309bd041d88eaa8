# SPDX-License-Identifier: MIT
"""layout.tensors() against the real checkpoints' inventories (spec §3.4): tensor count per
dtype, total count (= index entries) and index metadata.total_size, for Flash and Pro."""
import collections
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import layout  # noqa: E402
import safetensors_io  # noqa: E402

EXPECT = {
    # [CKPT] dtype histogram / counts and index total_size of the released checkpoints.
    "flash": ({"BF16": 433, "F32": 417, "F8_E4M3": 375, "F8_E8M0": 34167, "I64": 3,
               "I8": 33792}, 69187, 159609485896),
    "pro": ({"BF16": 619, "F32": 590, "F8_E4M3": 528, "F8_E8M0": 71952, "I64": 3,
             "I8": 71424}, 145116, 864704792696),
}
SAMPLES = {  # shard-header samples quoted in spec §3.3
    "flash": {"layers.0.ffn.gate.tid2eid": ("I64", (129280, 6)),
              "layers.0.ffn.gate.weight": ("BF16", (256, 4096)),
              "layers.0.attn.wo_a.weight": ("F8_E4M3", (8192, 4096)),
              "layers.0.attn.wo_a.scale": ("F8_E8M0", (64, 32)),
              "layers.0.attn.wq_a.scale": ("F8_E8M0", (8, 32)),
              "layers.5.ffn.experts.0.w1.weight": ("I8", (2048, 2048)),
              "layers.5.ffn.experts.0.w1.scale": ("F8_E8M0", (2048, 128)),
              "layers.3.attn.compressor.ape": ("F32", (128, 512)),
              "layers.2.attn.indexer.compressor.ape": ("F32", (4, 256)),
              "mtp.0.e_proj.scale": ("F8_E8M0", (32, 32))},
    "pro": {"layers.0.attn.compressor.wkv.weight": ("BF16", (512, 7168)),
            "layers.7.ffn.experts.383.w2.weight": ("I8", (7168, 1536)),
            "layers.7.ffn.experts.383.w2.scale": ("F8_E8M0", (7168, 96)),
            "layers.10.attn.indexer.wq_b.scale": ("F8_E8M0", (64, 12))},
}


def main():
    fails = 0
    for name, (hist, count, total) in EXPECT.items():
        with open(os.path.join(ROOT, "tools", "reference", "configs", name + ".json")) as f:
            t = layout.tensors(json.load(f))
        got_hist = dict(collections.Counter(d for _, d, _ in t))
        got_total = sum(safetensors_io.nbytes(d, s) for _, d, s in t)
        names = [n for n, _, _ in t]
        table = {n: (d, tuple(s)) for n, d, s in t}
        checks = [("dtype histogram", got_hist == hist),
                  ("tensor count", len(t) == count),
                  ("unique names", len(set(names)) == len(names)),
                  ("total bytes", got_total == total)]
        checks += [(f"sample {k}", table.get(k) == v) for k, v in SAMPLES[name].items()]
        for what, ok in checks:
            print(f"{'ok' if ok else 'FAIL'}: {name} {what}")
            fails += not ok
        if got_hist != hist or got_total != total:
            print(f"  got {got_hist} total {got_total}")
    fails += check_dspark()
    return 1 if fails else 0


# DSpark drafter (dspark spec §10): 4705 mtp.* tensors, no legacy MTP block, sample shapes.
DSPARK_SAMPLES = {"mtp.0.main_proj.scale": ("F8_E8M0", (32, 96)),
                  "mtp.0.main_norm.weight": ("BF16", (4096,)),
                  "mtp.1.ffn.experts.255.w2.weight": ("I8", (4096, 1024)),
                  "mtp.2.hc_head_fn": ("F32", (4, 16384)),
                  "mtp.2.markov_head.markov_w2.weight": ("BF16", (129280, 256)),
                  "mtp.2.confidence_head.proj.weight": ("BF16", (1, 4352))}


def check_dspark():
    with open(os.path.join(ROOT, "tests", "fixtures", "configs", "flash-dspark", "config.json")) as f:
        t = layout.tensors(json.load(f))
    table = {n: (d, tuple(s)) for n, d, s in t}
    mtp = [n for n in table if n.startswith("mtp.")]
    checks = [("4705 mtp tensors", len(mtp) == 4705),
              ("no legacy MTP tensors", "mtp.0.e_proj.weight" not in table),
              ("no bias on the confidence head", "mtp.2.confidence_head.proj.bias" not in table),
              ("main_proj only on mtp.0", "mtp.1.main_proj.weight" not in table)]
    checks += [(f"sample {k}", table.get(k) == v) for k, v in DSPARK_SAMPLES.items()]
    fails = 0
    for what, ok in checks:
        print(f"{'ok' if ok else 'FAIL'}: flash-dspark {what}")
        fails += not ok
    return fails


if __name__ == "__main__":
    sys.exit(main())
