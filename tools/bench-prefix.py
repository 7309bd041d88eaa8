#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The prefix cache's worth: time to first token of a chat's later turns with the cache (from
RAM, and from disk after a restart) ÷ without it, in one run (docs/benchmarks.md, "Prefix
cache").

    tools/bench-prefix.py --model /work/synth/flash4 --memory-gb 17 [--history 2048]
                          [--turn 48] [--tokens 8] [--build build] [--json OUT]

A 3-turn chat as token ids: turn 1 is a --history-token prompt; each later turn is the
previous prompt + its answer (--tokens, greedy) + --turn new ids. Arms, each on a fresh set:
  off   --no-prefix-cache: turns 2 and 3 prefill everything;
  ram   the cache on (a fresh cache dir): turns 2 and 3 restore the earlier turns' blocks;
  disk  the same set stopped and started again (RAM empty): turn 3 restores from disk, its
        files first evicted from the page cache (--warm-disk keeps them).
Prints each turn's TTFT (the client's time from sending to the first token), the tokens
restored (DONE n_cached), the ratios turn_k(ram or disk) ÷ turn_k(off), and the restore rate
(MB/s, from compute's log line) beside the disk's O_DIRECT read rate measured in the same run
(bench-roof.py's disk_bandwidth). Goals (issue 17): ≤ 0.05 from RAM, ≤ 0.15 from disk.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

GIB = 1 << 30


def load_roof():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "bench_roof", os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench-roof.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def ctl(exe, *args, timeout=3600):
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"dsv4ctl {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p.stdout


def turn(exe, run_dir, ids, n):
    """(TTFT s, answer ids, n_cached) of one request."""
    t0 = time.perf_counter()
    p = subprocess.Popen([exe, "gen", "--run-dir", run_dir, "--prompt-ids",
                          ",".join(map(str, ids)), "--max-tokens", str(n), "--format", "jsonl"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    ttft, out, cached = None, [], 0
    for line in p.stdout:
        ev = json.loads(line)
        if "id" in ev:
            if ttft is None:
                ttft = time.perf_counter() - t0
            out.append(ev["id"])
        elif ev.get("done"):
            cached = ev.get("n_cached", 0)
    err = p.stderr.read()
    if p.wait() != 0:
        raise SystemExit(f"gen exited {p.returncode}: {err}")
    return ttft, out, cached


def evict(d):
    """Drop the page-cache pages of the files under d (clean pages: written and synced)."""
    total = 0
    for name in os.listdir(d):
        path = os.path.join(d, name)
        if not os.path.isfile(path):
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--memory-gb", type=float, required=True)
    ap.add_argument("--history", type=int, default=2048)
    ap.add_argument("--turn", type=int, default=48)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--build", default="build")
    ap.add_argument("--json")
    ap.add_argument("--warm-disk", action="store_true",
                    help="leave the cache files in the page cache for the restart turn "
                         "(default: evicted first, posix_fadvise DONTNEED, so it reads the disk)")
    a = ap.parse_args()
    exe = os.path.join(a.build, "tools", "dsv4ctl", "dsv4ctl")
    roof = load_roof()
    print(f"# hardware: {roof.hardware_line(a.model)}")
    print(f"# model {a.model}, budget {a.memory_gb} GiB, history {a.history}, "
          f"+{a.turn} per turn, {a.tokens} answer tokens")
    work = tempfile.mkdtemp(prefix="dsv4-prefix-")
    run_dir, cache = os.path.join(work, "run"), os.path.join(work, "cache")
    hist = [0] + [(i * 37 + 11) % 250 + 2 for i in range(a.history - 1)]
    new = [[(i * 53 + 7 * k) % 250 + 2 for i in range(a.turn)] for k in range(3)]

    def start(*extra):
        ctl(exe, "start", "--model", a.model, "--run-dir", run_dir, "--memory-gb",
            repr(a.memory_gb), "--no-api", "--no-metrics", "--prefix-cache-dir", cache, *extra)

    def stop():
        subprocess.run([exe, "stop", "--run-dir", run_dir], capture_output=True, timeout=300)

    res = {}
    try:
        disk_bw = roof.disk_bandwidth(a.model, total=GIB)
        print(f"disk O_DIRECT read: {disk_bw / 1e6:.0f} MB/s")
        for arm in ("off", "ram"):
            start(*(["--no-prefix-cache"] if arm == "off" else []))
            warm = turn(exe, run_dir, [0, 5, 6, 7], 4)    # the experts of a running server
            prompts, ttfts, cached = [], [], []
            ids = hist
            for k in range(3):
                t, ans, c = turn(exe, run_dir, ids, a.tokens)
                prompts.append(ids)
                ttfts.append(t)
                cached.append(c)
                print(f"{arm}: turn {k + 1}: {len(ids)} prompt tokens, {c} restored, "
                      f"TTFT {t:.2f} s", flush=True)
                ids = ids + ans + new[k]
            res[arm] = {"ttft": ttfts, "cached": cached}
            if arm == "ram":    # the same chat's turn 3 after a restart: from disk
                stop()
                start()
                turn(exe, run_dir, [0, 5, 6, 7], 4)
                if not a.warm_disk:
                    evicted = evict(cache)
                    print(f"disk: {evicted / 2**20:.1f} MiB of cache files evicted from the "
                          f"page cache", flush=True)
                t, _, c = turn(exe, run_dir, prompts[2], a.tokens)
                log = open(os.path.join(run_dir, "compute.log")).read()
                m = re.findall(r"restored (\d+) of \d+ tokens from the prefix cache "
                               r"\((\d+) blocks, ([\d.]+) MiB, ([\d.]+) ms\)", log)
                mib, ms = (float(m[-1][2]), float(m[-1][3])) if m else (0.0, 0.0)
                res["disk"] = {"ttft": [None, None, t], "cached": [0, 0, c],
                               "restore_mib": mib, "restore_ms": ms}
                print(f"disk: turn 3 after a restart: {c} restored ({mib:.1f} MiB in {ms:.0f} ms"
                      f" = {mib * 1.048576 / (ms / 1e3) if ms else 0:.0f} MB/s), TTFT {t:.2f} s")
            stop()
        off = res["off"]["ttft"]
        for k in (1, 2):
            print(f"turn {k + 1}: RAM ÷ off {res['ram']['ttft'][k] / off[k]:.3f}")
        print(f"turn 3: disk after restart ÷ off {res['disk']['ttft'][2] / off[2]:.3f}")
        if res["disk"]["restore_ms"]:
            rate = res["disk"]["restore_mib"] * 1.048576 / (res["disk"]["restore_ms"] / 1e3)
            print(f"restore from disk {rate:.0f} MB/s = {rate * 1e6 / disk_bw:.2f} of the disk's "
                  f"O_DIRECT read rate")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"hardware": roof.hardware_line(a.model), "disk_bw": disk_bw,
                           "results": res}, f, indent=1)
    finally:
        stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
