#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Decode tokens/s through the daemon set divided by `dsv4ctl run` in-process, same checkpoint,
prompt and run: starts a set, alternates ROUNDS in-process runs and daemon generations (greedy,
--stats on both), prints the median of each and the ratio, stops the set. Also the CPU time
each path spends (summed over rounds, per generated token): in-process (it includes loading the
model) and, per process, the daemons and the `gen` client: less sensitive to a loaded machine
than the rates.

usage: bench-daemons.py DSV4CTL MODEL_DIR [--tokens N] [--rounds R] [--threads T]
                        [--memory-gb G --expert-cache-mib M] [--warm-prompt N] [--sequential]
Give a large model the same expert cache on both paths (--memory-gb for the set's plan,
--expert-cache-mib for `run`), and a warm-up round is run first on both.
--warm-prompt N: the prompt is N pseudo-random token ids, so its prefill fills the expert cache
before the decode is timed on both paths (each run is a fresh process whose cache starts
empty: without it an in-process decode would be timed cold); the prefix cache is off on both
so every round prefills. --sequential: the set is started for each daemon round and stopped
before the in-process round, for models whose two expert caches do not fit in RAM together
(each set then warms its own cache with the same prompt)."""
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
ap.add_argument("--warm-prompt", type=int, default=0)
ap.add_argument("--sequential", action="store_true")
a = ap.parse_args()
run_extra = ["--expert-cache-mib", str(a.expert_cache_mib)] if a.expert_cache_mib else []
start_extra = ["--memory-gb", str(a.memory_gb)] if a.memory_gb else []
if a.warm_prompt:
    run_extra.append("--no-prefix-cache")
    start_extra.append("--no-prefix-cache")
    vocab = json.load(open(os.path.join(a.model, "config.json")))["vocab_size"]
    prompt = ",".join(str((i * 7919 + 13) % (vocab - 2) + 2) for i in range(a.warm_prompt))
else:
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


def start_set():
    subprocess.run([a.dsv4ctl, "start", "--model", a.model, "--run-dir", run_dir, "--threads",
                    str(a.threads), "--no-metrics", *start_extra], check=True)
    st = json.loads(subprocess.run([a.dsv4ctl, "status", "--run-dir", run_dir, "--json"],
                                   capture_output=True, text=True, check=True).stdout)
    return {d["name"]: d["pid"] for d in st["daemons"]}


def stop_set():
    subprocess.run([a.dsv4ctl, "stop", "--run-dir", run_dir], check=True)


pids = None
try:
    cpu = {"in-process": 0.0, "client": 0.0}
    inproc, daemon = [], []
    if not a.sequential:
        pids = start_set()
        decode_rate(["gen", "--run-dir", run_dir])   # warm-up: the set's expert cache fills once
    for _ in range(a.rounds):
        if a.sequential:
            pids = start_set()
        t, d0 = children_cpu(), {k: proc_cpu(p) for k, p in pids.items()}
        r2, out2 = decode_rate(["gen", "--run-dir", run_dir])
        cpu["client"] += children_cpu() - t
        for k, p in pids.items():
            cpu[k] = cpu.get(k, 0.0) + proc_cpu(p) - d0[k]
        if a.sequential:
            stop_set()
            pids = None
        t = children_cpu()
        r1, out1 = decode_rate(["run", "--model", a.model, "--threads", str(a.threads),
                                *run_extra])
        cpu["in-process"] += children_cpu() - t
        assert out1 == out2, "daemon ids differ from in-process ids"
        inproc.append(r1)
        daemon.append(r2)
    mi, md = statistics.median(inproc), statistics.median(daemon)
    print(f"model {os.path.basename(os.path.normpath(a.model))}, {a.tokens} tokens, "
          f"{a.rounds} rounds, threads {a.threads}, prompt {len(prompt.split(','))} tokens"
          f"{', sequential' if a.sequential else ''}; load {os.getloadavg()[0]:.2f}")
    print(f"in-process decode: {mi:.2f} tok/s (median; all {[round(x, 2) for x in inproc]})")
    print(f"daemon decode:     {md:.2f} tok/s (median; all {[round(x, 2) for x in daemon]})")
    print(f"ratio daemon / in-process: {md / mi:.3f} (per round: "
          f"{[round(d / i, 3) for d, i in zip(daemon, inproc)]})")
    us = {k: v / (a.rounds * a.tokens) * 1e6 for k, v in cpu.items()}
    print(f"cpu per token: in-process {us.pop('in-process'):.0f} us; daemon path "
          f"{sum(us.values()):.0f} us (" + ", ".join(f"{k} {v:.0f}" for k, v in us.items()) + ")")
finally:
    if pids is not None:
        stop_set()
    os.rmdir(run_dir) if not os.listdir(run_dir) else None
