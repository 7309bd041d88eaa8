#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run every dsv4ref mutation against committed goldens and say which bounds each breaks.

A mutation is detected on a fixture when goldens.verdict() is non-empty (a stable argmax
changes, |delta log p| median/p90 or last-position logits beyond FACTOR x the ensemble's);
it is detected overall when any fixture detects it. Prints a markdown table (docs/numerics.md
"Mutation report"); exits 1 if a mutation goes undetected.

Usage: mutation_report.py FIXTURE_DIR [FIXTURE_DIR ...] [--only NAME ...]
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
import pinned  # noqa: E402

pinned.pin()

import dsv4ref  # noqa: E402
import goldens  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fixtures", nargs="+")
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    fx = []
    for d in a.fixtures:
        with open(os.path.join(d, "goldens.json")) as f:
            fx.append((os.path.basename(os.path.normpath(d)), d, json.load(f),
                       dsv4ref.safetensors_io.load_checkpoint(d)))
    names = a.only or list(dsv4ref.MUTATIONS)
    print("| mutation | " + " | ".join(f"{n}" for n, _, _, _ in fx) + " | verdict |")
    print("|" + "---|" * (len(fx) + 2))
    missed = []
    t0 = time.time()
    for mname in names:
        cells, hit = [], False
        for n, d, gold, ck in fx:
            m = dsv4ref.Model(d, dsv4ref.Variant(mutation=mname), checkpoint=ck)
            stats = goldens.evaluate(m, gold)
            why = goldens.verdict(stats, gold)
            hit |= bool(why)
            flips = sum(s["stable_flips"] for s in stats)
            worst = max(s[k] / (gold["factor"] * e["tolerances"][k])
                        for s, e in zip(stats, gold["prompts"]) for k in e["tolerances"])
            cells.append(f"{flips} flips, x{worst:.1f} bound" + (f" ({', '.join(why[:3])})"
                                                             if why else ""))
        print(f"| `{mname}` | " + " | ".join(cells) + " | "
              + ("detected" if hit else "**not detected**") + " |", flush=True)
        if not hit:
            missed.append(mname)
    print(f"\n{len(names) - len(missed)}/{len(names)} detected ({time.time() - t0:.0f} s)"
          + (f"; missed: {', '.join(missed)}" if missed else ""))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
