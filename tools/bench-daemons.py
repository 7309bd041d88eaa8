#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Decode tokens/s through the daemon set divided by `dsv4ctl run` in-process, same checkpoint,
prompt and run: starts a set, alternates ROUNDS in-process runs and daemon generations (greedy,
--stats on both), prints the median of each and the ratio, stops the set. Also the CPU time
each path spends (summed over rounds, per generated token): in-process (it includes loading the
model) and, per process, the daemons and the `gen` client: less sensitive to a loaded machine
than the rates.

usage: bench-daemons.py DSV4CTL MODEL_DIR [--tokens N] [--rounds R] [--threads T]
                        [--memory-gb G --expert-cache-mib M]
Give a large model the same expert cache on both paths (--memory-gb for the set's plan,
--expert-cache-mib for `run`), and a warm-up round is run first on both."""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("dsv4ctl")
ap.add_argument("model")
ap.add_argument("--tokens", type=int, default=128)
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--memory-gb", type=float, default=0)
ap.add_argument("--expert-cache-mib", type=int, default=0)
a = ap.parse_args()
run_extra = ["--expert-cache-mib", str(a.expert_cache_mib)] if a.expert_cache_mib else []
start_extra = ["--memory-gb", str(a.memory_gb)] if a.memory_gb else []
prompt = "0," + ",".join(str((i * 37 + 11) % 250 + 2) for i in range(32))
run_dir = tempfile.mkdtemp(prefix="dsv4b-")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def proc_cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def decode_rate(args):
    p = subprocess.run([a.dsv4ctl, *args, "--prompt-ids", prompt, "--max-tokens", str(a.tokens),
                        "--format", "ids", "--stats"], capture_output=True, text=True, check=True)
    m = re.search(r"decode: (\d+) tokens in ([0-9.]+) s", p.stderr)
    return int(m.group(1)) / float(m.group(2)), p.stdout


subprocess.run([a.dsv4ctl, "start", "--model", a.model, "--run-dir", run_dir, "--threads",
                str(a.threads), "--no-metrics", *start_extra], check=True)
try:
    st = json.loads(subprocess.run([a.dsv4ctl, "status", "--run-dir", run_dir, "--json"],
                                   capture_output=True, text=True, check=True).stdout)
    pids = {d["name"]: d["pid"] for d in st["daemons"]}
    cpu = dict.fromkeys(["in-process", "client", *pids], 0.0)
    inproc, daemon = [], []
    decode_rate(["gen", "--run-dir", run_dir])   # warm-up: the set's expert cache fills once
    for _ in range(a.rounds):
        t = children_cpu()
        r1, out1 = decode_rate(["run", "--model", a.model, "--threads", str(a.threads),
                                *run_extra])
        t2, d0 = children_cpu(), {k: proc_cpu(p) for k, p in pids.items()}
        r2, out2 = decode_rate(["gen", "--run-dir", run_dir])
        cpu["in-process"] += t2 - t
        cpu["client"] += children_cpu() - t2
        for k, p in pids.items():
            cpu[k] += proc_cpu(p) - d0[k]
        assert out1 == out2, "daemon ids differ from in-process ids"
        inproc.append(r1)
        daemon.append(r2)
    mi, md = statistics.median(inproc), statistics.median(daemon)
    print(f"model {os.path.basename(os.path.normpath(a.model))}, {a.tokens} tokens, "
          f"{a.rounds} rounds, threads {a.threads}")
    print(f"in-process decode: {mi:.1f} tok/s (median; all {[round(x, 1) for x in inproc]})")
    print(f"daemon decode:     {md:.1f} tok/s (median; all {[round(x, 1) for x in daemon]})")
    print(f"ratio daemon / in-process: {md / mi:.3f}")
    us = {k: v / (a.rounds * a.tokens) * 1e6 for k, v in cpu.items()}
    print(f"cpu per token: in-process {us.pop('in-process'):.0f} us; daemon path "
          f"{sum(us.values()):.0f} us (" + ", ".join(f"{k} {v:.0f}" for k, v in us.items()) + ")")
finally:
    subprocess.run([a.dsv4ctl, "stop", "--run-dir", run_dir], check=True)
    os.rmdir(run_dir) if not os.listdir(run_dir) else None
