#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Margin figures and ablations of a fixture (docs/numerics.md "Tiny fixtures").

Prints the median / 10th percentile top-1/top-2 margin and the median top-1 probability over
the greedy steps of goldens.json, then reruns the reference with every layer's attention output
(resp. MoE output) replaced by zeros: where each greedy continuation first differs from the
goldens' tokens, and how many stable teacher-forced argmaxes change. Shows which continuations
depend on attention and on the MoE.

Usage: fixture_ablation.py FIXTURE_DIR [--no-ablation]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
import dsv4ref  # noqa: E402
import goldens  # noqa: E402


def zeroed(method):
    def run(self, *args):
        return np.zeros_like(method(self, *args))  # keep the state updates, drop the output
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fixture")
    ap.add_argument("--no-ablation", action="store_true")
    a = ap.parse_args()
    with open(os.path.join(a.fixture, "goldens.json")) as f:
        gold = json.load(f)
    margins, logp = [], []
    for e in gold["prompts"]:
        margins += e["margin"][e["prompt_len"] - 1:]
        logp += e["logp"][e["prompt_len"] - 1:]
    print(f"greedy steps: margin median {np.median(margins):.3g}, p10 "
          f"{np.percentile(margins, 10):.3g}; top-1 probability median {np.exp(np.median(logp)):.6f}")
    if a.no_ablation:
        return
    for what in ("attention", "moe"):
        orig = getattr(dsv4ref.Model, what)
        setattr(dsv4ref.Model, what, zeroed(orig))
        m = dsv4ref.Model(a.fixture)
        cells, flips = [], 0
        for e in gold["prompts"]:
            P, toks = e["prompt_len"], e["tokens"]
            cont = goldens.greedy(m, toks[:P], gold["n_greedy"])
            diff = next((i for i, (x, y) in enumerate(zip(cont, toks[P:])) if x != y), None)
            am = np.argmax(goldens.run_prefill(m, toks)[:-1], axis=-1)
            flips += int(np.sum((am != np.array(e["argmax"])) & np.array(e["stable"], bool)))
            cells.append(f"len{P}: " + ("same" if diff is None else f"differs from step {diff}")
                         + f" (stable prefix {e['greedy_stable_prefix']})")
        print(f"no {what}: " + "; ".join(cells) + f"; stable argmaxes changed {flips}")
        setattr(dsv4ref.Model, what, orig)


if __name__ == "__main__":
    main()
