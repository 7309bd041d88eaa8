# SPDX-License-Identifier: MIT
"""Injected read faults under a running set (suite e2e).

usage: test_faults.py DSV4CTL MODEL_DIR SCRATCH_DIR

The fetcher's test-only fault injection (DSV4_FETCHER_FAULT, fetcher_io.c) makes its n-th
read of the checkpoint fail with EIO or come back short. For several n (so the fault lands in
the first expert loads of a generation, or later), a generation either prints exactly the ids
of `dsv4ctl run` or ends with an error that names the cause — it never hangs, never prints a
wrong token — the set then serves the next request exactly, and `stop` leaves nothing behind.
"""
import glob
import os
import shutil
import subprocess
import sys

exe, model, scratch = sys.argv[1:4]
run_dir = os.path.join(scratch, "e2e-faults")
PROMPT = "0,5,6,7,8"


def ctl(*args, check=True, timeout=60, env=None):
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


import json  # noqa: E402
plan = json.loads(ctl("plan", "--model", model, "--memory-gb", "1", "--json", check=False).stdout)
# a fetcher cache of a few slots more than the minimum: loads keep happening while generating
BUDGET = repr((plan["minimum"] + 2 * plan["slot_bytes"]) / 2**30)
ref = ctl("run", "--model", model, "--prompt-ids", PROMPT, "--max-tokens", "32",
          "--format", "ids").stdout
outcomes = {"exact": 0, "error": 0}
for fault in ("eio:1", "eio:4", "short:2", "short:7", "eio:12"):
    shutil.rmtree(run_dir, ignore_errors=True)
    env = dict(os.environ, DSV4_FETCHER_FAULT=fault)
    ctl("start", "--model", model, "--run-dir", run_dir, "--no-metrics", "--no-api",
        "--memory-gb", BUDGET, timeout=120, env=env)
    try:
        p = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "32",
                "--format", "ids", check=False, timeout=120)
        if p.returncode == 0:
            assert p.stdout == ref, (fault, p.stdout, ref)
            outcomes["exact"] += 1
        else:
            assert ("Input/output error" in p.stderr or "short read" in p.stderr or
                    "expert" in p.stderr), (fault, p.returncode, p.stderr)
            outcomes["error"] += 1
        again = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "32",
                    "--format", "ids", timeout=120).stdout
        assert again == ref, (fault, again, ref)
        with open(os.path.join(run_dir, "shm-id")) as f:
            sid = f.read().strip()
    finally:
        ctl("stop", "--run-dir", run_dir, check=False)
    left = glob.glob(f"/dev/shm/dsv4-{os.geteuid()}-{sid}-*")
    assert not left, (fault, left)
    assert not glob.glob(os.path.join(run_dir, "*.sock")), fault
print(f"ok: 5 injected faults: {outcomes['exact']} generations exact, {outcomes['error']} ended "
      "with the cause named; the next request exact every time; stop clean")
