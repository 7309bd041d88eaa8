#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tests/fixtures/tiny-dspark: the checkpoint, inference/config.json and dspark_goldens.json
regenerate byte-identically from the recorded seeds (numerics pinned), and the C inventory
(`dsv4ctl inspect`) accepts the drafter checkpoint.

Usage: test_dspark_fixture.py DSV4CTL SCRATCH_DIR
"""
import filecmp
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
import make_tiny_model  # noqa: E402

NAME = "tiny-dspark"
FILES = ["config.json", "inference/config.json", "model.safetensors.index.json",
         "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
         "dspark_goldens.json"]


def main():
    dsv4ctl, scratch = sys.argv[1], sys.argv[2]
    committed = os.path.join(ROOT, "tests", "fixtures", NAME)
    top = os.path.join(scratch, f"dspark-fixture-{os.getpid()}")
    out = os.path.join(top, NAME)   # goldens record the fixture's directory name
    shutil.rmtree(top, ignore_errors=True)
    preset, seed, prompt_seed, _ = make_fixtures.FIXTURES[NAME]
    cfg, init = make_tiny_model.PRESETS[preset]
    make_tiny_model.write_model(out, cfg, init, seed)
    make_goldens.write_dspark(out, prompt_seed)
    fails = 0
    for f in FILES:
        ok = filecmp.cmp(os.path.join(out, f), os.path.join(committed, f), shallow=False)
        print(f"{'ok  ' if ok else 'FAIL'} {NAME}/{f} regenerates byte-identically")
        fails += not ok
    size = sum(os.path.getsize(os.path.join(d, f))
               for d, _, fs in os.walk(committed) for f in fs)
    ok = size <= 4 * 1024 * 1024
    print(f"{'ok  ' if ok else 'FAIL'} {NAME} is {size} bytes (<= 4 MiB)")
    fails += not ok
    r = subprocess.run([dsv4ctl, "inspect", "--model", committed], capture_output=True, text=True)
    ok = r.returncode == 0 and "3 DSpark stages" in r.stdout and "markov rank" in r.stdout
    print(f"{'ok  ' if ok else 'FAIL'} dsv4ctl inspect accepts {NAME} (rc {r.returncode})")
    if not ok:
        print(r.stdout + r.stderr)
    fails += not ok
    shutil.rmtree(top, ignore_errors=True)
    print(f"{fails} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
