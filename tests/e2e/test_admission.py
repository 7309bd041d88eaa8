# SPDX-License-Identifier: MIT
"""Admission: requests that can never fit end at once with a clear error (suite e2e).

usage: test_admission.py DSV4CTL MODEL_DIR SCRATCH_DIR

A set started with --max-ctx 64: a generation whose prompt + max_tokens exceed it (and a score
of too many tokens) is refused as "too large" naming both numbers (exit 65, never 75 "busy"),
the scheduler keeps no request for it (active and queue 0), and the next request is served at
once with exact ids (it used to stay in flight until the stall watchdog killed compute).
Command-line numbers out of range are usage errors (exit 64), never wrapped.
"""
import json
import os
import shutil
import subprocess
import sys

exe, model, scratch = sys.argv[1:4]
run_dir = os.path.join(scratch, "e2e-admission")
PROMPT = "0,5,6,7,8"


def ctl(*args, check=True, timeout=60):
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


ref = ctl("run", "--model", model, "--prompt-ids", PROMPT, "--max-tokens", "16",
          "--format", "ids").stdout
shutil.rmtree(run_dir, ignore_errors=True)
ctl("start", "--model", model, "--run-dir", run_dir, "--no-metrics", "--no-api",
    "--max-ctx", "64", "--memory-gb", "1")
try:
    p = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "60",
            "--format", "ids", check=False, timeout=30)
    assert p.returncode == 65, (p.returncode, p.stderr)
    assert "too large" in p.stderr and "5 + max_tokens 60" in p.stderr and "64" in p.stderr, \
        p.stderr
    long_prompt = ",".join(str(5 + i % 50) for i in range(80))
    p = ctl("score", "--run-dir", run_dir, "--prompt-ids", long_prompt, check=False, timeout=30)
    assert p.returncode == 65 and "too large" in p.stderr, (p.returncode, p.stderr)
    st = json.loads(ctl("status", "--run-dir", run_dir, "--json").stdout)
    sched = next(d for d in st["daemons"] if d["name"] == "scheduler")
    assert sched["active"] == 0 and sched["queue_depth"] == 0, sched
    out = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "16",
              "--format", "ids", timeout=30).stdout
    assert out == ref, (out, ref)
    # exactly at the limit is served
    out = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "59",
              "--format", "ids", timeout=60).stdout
    assert len(out.split()) >= 1, out
    for bad in ("4294967297", "-1", "0", "1e3", "16x"):
        p = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", bad,
                check=False)
        assert p.returncode == 64 and "max-tokens" in p.stderr, (bad, p.returncode, p.stderr)
finally:
    ctl("stop", "--run-dir", run_dir, check=False)
print("ok: too-large requests refused with both numbers (exit 65), the set serves on; bad "
      "numbers are usage errors")
