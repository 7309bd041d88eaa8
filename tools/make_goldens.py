#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write tests/fixtures/<name>/goldens.json from the numpy reference.

Runs the ensemble of legitimate numerical variants (tools/reference/goldens.py) over the
fixture's prompts and writes per-position argmax, margin, stability and log-probabilities, the
greedy continuation and the ensemble-derived tolerances. Format: docs/numerics.md "Goldens".
Numerics are pinned (tools/reference/pinned.py) so the output is byte-identical on any x86-64.

Usage: make_goldens.py --fixture DIR --seed N [--greedy 32] [--out FILE]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
import pinned  # noqa: E402

pinned.pin()

import dsv4ref  # noqa: E402
import goldens  # noqa: E402


def dumps(gold):
    """Plain JSON: one prompt field per line keeps diffs readable and the file small."""
    return json.dumps(gold, separators=(",", ":"), sort_keys=True) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--seed", type=int, required=True, help="prompt seed")
    ap.add_argument("--greedy", type=int, default=32)
    ap.add_argument("--out", help="default: FIXTURE/goldens.json")
    a = ap.parse_args()
    with open(os.path.join(a.fixture, "config.json")) as f:
        cfg = json.load(f)
    ck = dsv4ref.safetensors_io.load_checkpoint(a.fixture)
    models = [(n, dsv4ref.Model(a.fixture, v, checkpoint=ck), role)
              for n, v, role in goldens.ensemble()]
    gold = goldens.make(models, goldens.prompts(cfg["vocab_size"], a.seed), a.greedy,
                        {"fixture": os.path.basename(os.path.normpath(a.fixture)),
                         "prompt_seed": a.seed, "vocab_size": cfg["vocab_size"]})
    with open(a.out or os.path.join(a.fixture, "goldens.json"), "w") as f:
        f.write(dumps(gold))
    print(f"margin clear above {gold['margin_clear']:.3g}")
    for e in gold["prompts"]:
        t = e["tolerances"]
        print(f"prompt {e['prompt_len']:4d}: tolerances " +
              " ".join(f"{k} {v:.3g}" for k, v in sorted(t.items())) +
              f"; stable {e['n_stable_prompt']}/{e['prompt_len'] - 1} "
              f"teacher-forced, greedy {e['n_stable_greedy']}/{gold['n_greedy']} "
              f"(stable prefix {e['greedy_stable_prefix']})")


if __name__ == "__main__":
    main()
