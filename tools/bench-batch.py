#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Continuous batching: aggregate tokens/s and inter-token latency with 1, 2, 4, 8 concurrent
streams through one daemon set, in one run (docs/benchmarks.md, "Batching").

    tools/bench-batch.py --model /work/synth/flash4 --memory-gb 9 [--streams 1,2,4,8]
                         [--prompt 32] [--tokens 32] [--build build] [--json OUT]

Starts `dsv4ctl start --sessions MAX(streams)` at the budget, warms it up (one request per
stream count, so every run finds the cache of a server that has been running), then for each
stream count runs that many `dsv4ctl gen --format jsonl` at once with different prompts
(seeded sampling: hash-routed layers see varied ids) and timestamps every token as it arrives.
Per stream count: aggregate decode tokens/s (tokens after each stream's first ÷ the wall time
from the first stream's first token to the last stream's last), p50/p99 of the gaps between a
stream's consecutive tokens, TTFT, the compute's sessions per step and rows per step over the
run (its stats), and the peak memory of the set (tools/memwatch.py) against the budget.
Goals (issue 16): 4 streams ≥ 2.5× the aggregate tokens/s of 1, p50 inter-token latency with 4
≤ 1.6× that of 1, peak memory within the budget.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memwatch import MemWatch  # noqa: E402

GIB = 1 << 30


def hardware_line(model):
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) * 1024
    return (f"{cpu}, {os.cpu_count()} cpus, {mem / GIB:.1f} GiB RAM, Linux {platform.release()},"
            f" load {os.getloadavg()[0]:.2f}")


def ctl(exe, *args, timeout=600):
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"dsv4ctl {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p.stdout


def prompt_ids(k, n):
    return "0," + ",".join(str((i * (37 + 2 * k) + 11 * k + 5) % 250 + 2) for i in range(n - 1))


def stream(exe, run_dir, slot, k, n_prompt, n_tok, out):
    """Client k (its prompt and seed): token arrival times (perf_counter) into out[slot]."""
    t0 = time.perf_counter()
    p = subprocess.Popen([exe, "gen", "--run-dir", run_dir, "--prompt-ids", prompt_ids(k, n_prompt),
                          "--max-tokens", str(n_tok), "--temperature", "0.8", "--seed", str(k + 1),
                          "--format", "jsonl"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, bufsize=1)
    times = []
    for line in p.stdout:
        ev = json.loads(line)
        if "id" in ev:
            times.append(time.perf_counter())
    err = p.stderr.read()
    if p.wait() != 0:
        raise SystemExit(f"stream {k}: gen exited {p.returncode}: {err}")
    out[slot] = (t0, times)


def run_streams(exe, run_dir, n, n_prompt, n_tok, base):
    out = [None] * n
    th = [threading.Thread(target=stream, args=(exe, run_dir, k, base + k, n_prompt, n_tok, out))
          for k in range(n)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    return out


def compute_stats(exe, run_dir):
    st = json.loads(ctl(exe, "status", "--run-dir", run_dir, "--json"))
    c = next(d for d in st["daemons"] if d["name"] == "compute")
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--memory-gb", type=float, required=True)
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    exe = os.path.join(a.build, "tools", "dsv4ctl", "dsv4ctl")
    counts = [int(x) for x in a.streams.split(",")]
    print(f"# hardware: {hardware_line(a.model)}")
    print(f"# model {a.model}, budget {a.memory_gb} GiB, prompt {a.prompt}, tokens {a.tokens}")
    run_dir = tempfile.mkdtemp(prefix="dsv4-batch-")
    extra = ["--threads", str(a.threads)] if a.threads else []
    ctl(exe, "start", "--model", a.model, "--run-dir", run_dir, "--memory-gb", repr(a.memory_gb),
        "--sessions", str(max(counts)), "--no-api", "--no-metrics", *extra)
    results = []
    try:
        for n in counts:    # warm-up: the experts a running server would hold
            run_streams(exe, run_dir, n, a.prompt, 4, 1000 + 10 * n)
        with MemWatch(exe, run_dir, period=0.1) as w:
            for n in counts:
                before = compute_stats(exe, run_dir)
                out = run_streams(exe, run_dir, n, a.prompt, a.tokens, 10 * n)
                after = compute_stats(exe, run_dir)
                firsts = [t[1][0] for t in out]
                lasts = [t[1][-1] for t in out]
                gaps = [b - x for _, ts in out for x, b in zip(ts, ts[1:])]
                ttft = [ts[0] - t0 for t0, ts in out]
                decode = sum(len(ts) - 1 for _, ts in out)
                wall = max(lasts) - min(firsts)
                steps = after["steps"] - before["steps"]
                r = {
                    "streams": n,
                    "tok_s": decode / wall if wall > 0 else 0.0,
                    "itl_p50_ms": 1e3 * statistics.median(gaps),
                    "itl_p99_ms": 1e3 * sorted(gaps)[min(len(gaps) - 1, int(0.99 * len(gaps)))],
                    "ttft_ms": 1e3 * statistics.median(ttft),
                    "sessions_per_step": (after["step_sessions"] - before["step_sessions"]) /
                    max(steps, 1),
                    "rows_per_step": (after["forward_rows"] - before["forward_rows"]) /
                    max(steps, 1),
                    "union_saved": after["experts_union_saved"] - before["experts_union_saved"],
                }
                results.append(r)
                print(f"streams {n}: {r['tok_s']:.2f} tok/s aggregate, inter-token p50 "
                      f"{r['itl_p50_ms']:.1f} ms p99 {r['itl_p99_ms']:.1f} ms, TTFT "
                      f"{r['ttft_ms']:.0f} ms, {r['sessions_per_step']:.2f} sessions and "
                      f"{r['rows_per_step']:.2f} rows per step, {r['union_saved']} expert "
                      f"leases saved by the union", flush=True)
        one = results[0]
        for r in results[1:]:
            print(f"streams {r['streams']} ÷ 1: aggregate {r['tok_s'] / one['tok_s']:.2f}×, "
                  f"p50 inter-token {r['itl_p50_ms'] / one['itl_p50_ms']:.2f}×")
        budget = a.memory_gb * GIB
        print(f"peak memory {w.peak / GIB:.2f} GiB of the {a.memory_gb} GiB budget "
              f"({w.peak / budget:.2f})")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"hardware": hardware_line(a.model), "results": results,
                           "peak_bytes": w.peak, "budget_bytes": budget}, f, indent=1)
    finally:
        subprocess.run([exe, "stop", "--run-dir", run_dir], capture_output=True, timeout=120)
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
