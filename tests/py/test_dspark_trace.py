#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Drafts are checked, not only outputs: `dsv4ctl run --dspark --dspark-trace FILE` writes one
JSON line per step, and every block the C drafter proposed equals the reference drafter's
(tools/reference/dspark_ref.py) for the same committed tokens and anchor, slot by slot up to the
first difference; a difference where the reference's top-2 margin is below the fixture's noise
(NOISE_FACTOR x the largest logits tolerance of its dspark_goldens.json) is reported as a
near-tie, any other fails; and the confidence of every compared slot is the reference's within
CONF_TOL (argmax flips of a perturbed drafter fall on near-ties, its confidences move: each
dspark_ref mutation fails here on both fixtures, 2026-12-03). Also: the trace's tokens are the
printed ids, accepted <= verified, and each step's out list is its accepted drafts + one.
Fixed verify length 5 without quench, so every step drafts; prompts of lengths 7 and 70 from
the fixture's goldens, 32 tokens.

usage: test_dspark_trace.py DSV4CTL SCRATCH_DIR FIXTURE_DIR..."""
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import pinned  # noqa: E402

pinned.pin()

import dspark_ref  # noqa: E402
import dsv4ref  # noqa: E402

N_TOKENS = 32
NOISE_FACTOR = 1.0
CONF_TOL = 0.01        # probability; the goldens' confidence-logit tolerance is 0.01


def check_fixture(exe, scratch, fx):
    with open(os.path.join(fx, "goldens.json")) as fh:
        gold = json.load(fh)
    with open(os.path.join(fx, "dspark_goldens.json")) as fh:
        dgold = json.load(fh)
    noise = NOISE_FACTOR * max(b["tolerances"]["logits"] for c in dgold["contexts"]
                               for b in c["blocks"])
    m = dsv4ref.Model(fx)
    dr = dspark_ref.Drafter(m, fx)
    fails, near, slots, worst_conf = 0, 0, 0, 0.0
    name = os.path.basename(os.path.normpath(fx))
    for pr in gold["prompts"]:
        plen = pr["prompt_len"]
        if plen not in (7, 70):
            continue
        prompt = pr["tokens"][:plen]
        trace = os.path.join(scratch, f"trace-{name}-{plen}.jsonl")
        p = subprocess.run([exe, "run", "--model", fx, "--prompt-ids", ",".join(map(str, prompt)),
                            "--max-tokens", str(N_TOKENS), "--format", "ids", "--dspark",
                            "--dspark-verify", "5", "--dspark-no-quench", "--dspark-trace", trace],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            print(f"FAIL {name}/{plen}: run exited {p.returncode}: {p.stderr.strip()}")
            return 1, 0, 0
        gen = [int(t) for t in p.stdout.split()]
        seq = prompt + gen
        with open(trace) as fh:
            steps = [json.loads(line) for line in fh]
        traced = [gen[0]] + [t for s in steps for t in s["out"]]
        if traced[:len(gen)] != gen:
            print(f"FAIL {name}/{plen}: the trace's tokens are not the printed ids")
            fails += 1
        st, ds = m.new_state(), dr.new_state()
        for s in steps:
            P, anchor = s["pos"], s["anchor"]
            ok = (P == plen + s["index"] and seq[P] == anchor and
                  0 <= s["accepted"] <= s["verified"] and len(s["drafts"]) in (0, 5) and
                  len(s["out"]) == s["accepted"] + 1)
            if not ok:
                print(f"FAIL {name}/{plen}: inconsistent step {s}")
                fails += 1
                continue
            if st.pos < P:
                _, hid = dr.target_forward(st, seq[st.pos:P], st.pos)
                dr.commit(ds, hid, ds.n)
            if not s["drafts"]:
                continue
            d = dr.draft(ds, anchor)
            for i, (c, r) in enumerate(zip(s["drafts"], d["drafts"])):
                slots += 1
                # the confidence of slot i depends on the chain before it only
                dconf = abs(s["conf"][i] - float(d["confidence"][i]))
                worst_conf = max(worst_conf, dconf)
                if dconf > CONF_TOL:
                    fails += 1
                    print(f"FAIL {name}/{plen} P {P} slot {i + 1}: confidence {s['conf'][i]:.5f}, "
                          f"reference {float(d['confidence'][i]):.5f}")
                if c == r:
                    continue
                row = np.sort(d["logits"][i].astype(np.float64))
                margin = row[-1] - row[-2]
                what = (f"{name}/{plen} P {P} slot {i + 1}: C drafted {c}, reference {r} "
                        f"(reference margin {margin:.4f}, noise {noise:.4f})")
                if margin < noise:
                    near += 1
                    print(f"near-tie {what}")
                else:
                    fails += 1
                    print(f"FAIL {what}")
                break           # later slots follow a different Markov chain
        print(f"{name}/{plen}: {len(steps)} steps, drafts compared")
    print(f"{name}: largest |confidence - reference| {worst_conf:.2e} (limit {CONF_TOL})")
    return fails, near, slots


def main():
    exe, scratch, fixtures = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(scratch, exist_ok=True)
    total_fail = 0
    for fx in fixtures:
        fails, near, slots = check_fixture(exe, scratch, fx)
        print(f"{fx}: {slots} draft slots equal to the reference's up to {near} near-ties, "
              f"{fails} failures")
        total_fail += fails
        if slots == 0:
            print(f"FAIL {fx}: no draft compared")
            total_fail += 1
    return 1 if total_fail else 0


if __name__ == "__main__":
    sys.exit(main())
