#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tests/fixtures/demo (trained by tools/train_demo.py, committed as trained): goldens.json and
dspark_goldens.json regenerate byte-identically from the committed checkpoint (numerics
pinned), the fixture stays within 16 MiB, its config has every layer kind the engine supports,
and the C inventory (`dsv4ctl inspect`) accepts it with its DSpark stages.

Usage: test_demo_fixture.py DSV4CTL SCRATCH_DIR
"""
import filecmp
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import pinned  # noqa: E402

pinned.pin()

import make_fixtures  # noqa: E402
import make_goldens  # noqa: E402

NAME = "demo"
CHECKPOINT = ["config.json", "inference/config.json", "model.safetensors.index.json",
              "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
              "tokenizer.json", "tokenizer_config.json"]


def main():
    dsv4ctl, scratch = sys.argv[1], sys.argv[2]
    committed = os.path.join(ROOT, "tests", "fixtures", NAME)
    top = os.path.join(scratch, f"demo-fixture-{os.getpid()}")
    out = os.path.join(top, NAME)   # goldens record the fixture's directory name
    shutil.rmtree(top, ignore_errors=True)
    os.makedirs(os.path.join(out, "inference"))
    for f in CHECKPOINT:
        shutil.copyfile(os.path.join(committed, f), os.path.join(out, f))
    prompt_seed, n_greedy = make_fixtures.TRAINED[NAME]
    make_goldens.write_dspark(out, prompt_seed)
    make_goldens.write(out, prompt_seed, n_greedy)
    fails = 0

    def check(what, ok):
        nonlocal fails
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        fails += not ok
    for f in ("goldens.json", "dspark_goldens.json"):
        check(f"{NAME}/{f} regenerates byte-identically from the checkpoint",
              filecmp.cmp(os.path.join(out, f), os.path.join(committed, f), shallow=False))
    size = sum(os.path.getsize(os.path.join(d, f))
               for d, _, fs in os.walk(committed) for f in fs)
    check(f"{NAME} is {size} bytes (<= 16 MiB)", size <= 16 * 1024 * 1024)
    with open(os.path.join(committed, "config.json")) as fh:
        cfg = json.load(fh)
    ratios = cfg["compress_ratios"][:cfg["num_hidden_layers"]]
    check(f"layer kinds: window, CSA (4), HCA (> 4) in {ratios}",
          0 in ratios and 4 in ratios and any(r > 4 for r in ratios))
    check(f"{cfg['num_hash_layers']} hash-routed layers of {cfg['num_hidden_layers']}",
          0 < cfg["num_hash_layers"] < cfg["num_hidden_layers"])
    check("shared + routed experts, top-k < routed, mHC",
          cfg["n_shared_experts"] == 1 and cfg["num_experts_per_tok"] < cfg["n_routed_experts"]
          and cfg["hc_mult"] > 1)
    r = subprocess.run([dsv4ctl, "inspect", "--model", committed], capture_output=True, text=True)
    stages = len(cfg["compress_ratios"]) - cfg["num_hidden_layers"]
    ok = r.returncode == 0 and f"{stages} DSpark stages" in r.stdout
    check(f"dsv4ctl inspect accepts {NAME} with {stages} DSpark stages (rc {r.returncode})", ok)
    if not ok:
        print(r.stdout + r.stderr)
    shutil.rmtree(top, ignore_errors=True)
    print(f"{fails} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
