#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Decode tokens/s through the daemon set divided by `dsv4ctl run` in-process, same checkpoint,
prompt and run: starts a set, alternates ROUNDS in-process runs and daemon generations (greedy,
--stats on both), prints the median of each and the ratio, stops the set.

usage: bench-daemons.py DSV4CTL MODEL_DIR [--tokens N] [--rounds R] [--threads T]"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("dsv4ctl")
ap.add_argument("model")
ap.add_argument("--tokens", type=int, default=128)
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--threads", type=int, default=1)
a = ap.parse_args()
prompt = "0," + ",".join(str((i * 37 + 11) % 250 + 2) for i in range(32))
run_dir = tempfile.mkdtemp(prefix="dsv4b-")


def decode_rate(args):
    p = subprocess.run([a.dsv4ctl, *args, "--prompt-ids", prompt, "--max-tokens", str(a.tokens),
                        "--format", "ids", "--stats"], capture_output=True, text=True, check=True)
    m = re.search(r"decode: (\d+) tokens in ([0-9.]+) s", p.stderr)
    return int(m.group(1)) / float(m.group(2)), p.stdout


subprocess.run([a.dsv4ctl, "start", "--model", a.model, "--run-dir", run_dir, "--threads",
                str(a.threads)], check=True)
try:
    inproc, daemon = [], []
    for _ in range(a.rounds):
        r1, out1 = decode_rate(["run", "--model", a.model, "--threads", str(a.threads)])
        r2, out2 = decode_rate(["gen", "--run-dir", run_dir])
        assert out1 == out2, "daemon ids differ from in-process ids"
        inproc.append(r1)
        daemon.append(r2)
    mi, md = statistics.median(inproc), statistics.median(daemon)
    print(f"model {os.path.basename(os.path.normpath(a.model))}, {a.tokens} tokens, "
          f"{a.rounds} rounds, threads {a.threads}")
    print(f"in-process decode: {mi:.1f} tok/s (median; all {[round(x, 1) for x in inproc]})")
    print(f"daemon decode:     {md:.1f} tok/s (median; all {[round(x, 1) for x in daemon]})")
    print(f"ratio daemon / in-process: {md / mi:.3f}")
finally:
    subprocess.run([a.dsv4ctl, "stop", "--run-dir", run_dir], check=True)
    os.rmdir(run_dir) if not os.listdir(run_dir) else None
