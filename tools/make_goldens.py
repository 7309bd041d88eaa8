#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write tests/fixtures/<name>/goldens.json from the numpy reference.

Runs the ensemble of legitimate numerical variants (tools/reference/goldens.py) over the
fixture's prompts and writes per-position argmax, margin, stability and log-probabilities, the
greedy continuation and the ensemble-derived tolerances. Format: docs/numerics.md "Goldens".
Numerics are pinned (tools/reference/pinned.py) so the output is byte-identical on any x86-64.

Usage: make_goldens.py --fixture DIR --seed N [--greedy 32] [--out FILE] [--dspark]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
import pinned  # noqa: E402

pinned.pin()

import dspark_goldens  # noqa: E402
import dspark_ref  # noqa: E402
import dsv4ref  # noqa: E402
import goldens  # noqa: E402


def dumps(gold):
    """Plain JSON: one prompt field per line keeps diffs readable and the file small."""
    return json.dumps(gold, separators=(",", ":"), sort_keys=True) + "\n"


def write(fixture, prompt_seed, n_greedy, out=None):
    """Run the ensemble on the checkpoint in `fixture` and write its goldens.json."""
    with open(os.path.join(fixture, "config.json")) as f:
        cfg = json.load(f)
    ck = dsv4ref.safetensors_io.load_checkpoint(fixture)
    models = [(n, dsv4ref.Model(fixture, v, checkpoint=ck), role)
              for n, v, role in goldens.ensemble()]
    gold = goldens.make(models, goldens.prompts(cfg["vocab_size"], prompt_seed), n_greedy,
                        {"fixture": os.path.basename(os.path.normpath(fixture)),
                         "prompt_seed": prompt_seed, "vocab_size": cfg["vocab_size"]})
    with open(out or os.path.join(fixture, "goldens.json"), "w") as f:
        f.write(dumps(gold))
    return gold


def write_dspark(fixture, prompt_seed, out=None):
    """The drafter goldens of a DSpark fixture (dspark_goldens.json, same ensemble)."""
    with open(os.path.join(fixture, "config.json")) as f:
        cfg = json.load(f)
    ck = dsv4ref.safetensors_io.load_checkpoint(fixture)
    base = dsv4ref.Model(fixture, checkpoint=ck)
    dr = dspark_ref.Drafter(base, fixture, checkpoint=ck)
    drafters = [(n, dr.with_model(base.with_variant(v)), role)
                for n, v, role in goldens.ensemble()]
    gold = dspark_goldens.make(drafters, goldens.prompts(cfg["vocab_size"], prompt_seed),
                               {"fixture": os.path.basename(os.path.normpath(fixture)),
                                "prompt_seed": prompt_seed, "vocab_size": cfg["vocab_size"]})
    with open(out or os.path.join(fixture, "dspark_goldens.json"), "w") as f:
        f.write(dumps(gold))
    return gold


def summary(gold):
    for e in gold["prompts"]:
        t = e["tolerances"]
        print(f"prompt {e['prompt_len']:4d}: tolerances " +
              " ".join(f"{k} {v:.3g}" for k, v in sorted(t.items())) +
              f"; margin clear {e['margin_clear']:.3g}; stable {e['n_stable_prompt']}/"
              f"{e['prompt_len'] - 1} teacher-forced, greedy {e['n_stable_greedy']}/"
              f"{gold['n_greedy']} (stable prefix {e['greedy_stable_prefix']})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--seed", type=int, required=True, help="prompt seed")
    ap.add_argument("--greedy", type=int, default=32)
    ap.add_argument("--out", help="default: FIXTURE/goldens.json")
    ap.add_argument("--dspark", action="store_true",
                    help="also the drafter goldens (FIXTURE/dspark_goldens.json)")
    a = ap.parse_args()
    if a.dspark:
        write_dspark(a.fixture, a.seed)
    summary(write(a.fixture, a.seed, a.greedy, a.out))


if __name__ == "__main__":
    main()
