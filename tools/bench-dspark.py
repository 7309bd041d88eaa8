#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""DSpark speculative decoding benchmark over `dsv4ctl run` (figures for docs/benchmarks.md).

On a checkpoint with a drafter (tools/make_synthetic_checkpoint.py --dspark):
  1. plain decode (--no-dspark): time per step, expert leases per step;
  2. the cost of a verify step of 1 + k rows (k = 1..gamma) relative to a plain step: time and
     routed-expert bytes leased per step (what a verify pulls from the expert cache/disk), with
     the test-only replay proposer at 100 % agreement and a fixed verify length (no quench),
     and the break-even acceptance a* where sum_{j<=k} a^j equals that cost;
  3. tokens/s with DSpark on / off at 0, 50 and 90 % agreement (replay proposer, policy and
     quench on, the drafter run and discarded at every proposal so its cost is counted).
Prints a markdown table. Outputs are meaningless (random weights); only speeds matter.

usage: bench-dspark.py DSV4CTL MODEL_DIR [--tokens N] [--threads T] [--prompt-len P]
                       [--ks 1,3,5] [--warmup]
"""
import argparse
import json
import os
import re
import subprocess
import tempfile


def run(a, *extra):
    cmd = [a.dsv4ctl, "run", "--model", a.model, "--prompt-ids", a.ids, "--max-tokens",
           str(a.tokens), "--format", "ids", "--threads", str(a.threads), "--stats", *extra]
    if a.cache_mib:
        cmd += ["--expert-cache-mib", str(a.cache_mib)]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    dec = re.search(r"decode: (\d+) tokens in ([\d.]+) s", p.stderr)
    ex = re.search(r"experts: (\d+) hits, (\d+) misses", p.stderr)
    sp = re.search(r"dspark: (\d+) verify steps, (\d+) plain steps, (\d+) proposed, "
                   r"(\d+) accepted .*?(\d+) quench events", p.stderr)
    r = {"ids": p.stdout, "tokens": int(dec.group(1)), "secs": float(dec.group(2)),
         "leases": int(ex.group(1)) + int(ex.group(2)) if ex else 0}
    if sp:
        r.update(verify=int(sp.group(1)), plain=int(sp.group(2)), proposed=int(sp.group(3)),
                 accepted=int(sp.group(4)), quench=int(sp.group(5)))
    return r


def break_even(k, cost):
    """Acceptance a in [0, 1] with 1 + a + ... + a^k = cost (None if even a = 1 loses)."""
    if cost > k + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid ** j for j in range(k + 1)) < cost:
            lo = mid
        else:
            hi = mid
    return lo


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dsv4ctl")
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--ks", default="", help="verify lengths to measure (default 1..gamma)")
    ap.add_argument("--warmup", action="store_true", help="one unmeasured run first")
    ap.add_argument("--cache-mib", type=int, default=0, help="--expert-cache-mib for every run")
    a = ap.parse_args()
    with open(os.path.join(a.model, "config.json")) as fh:
        cfg = json.load(fh)
    gamma, vocab = cfg["dspark_block_size"], cfg["vocab_size"]
    a.ids = ",".join(str((i * 7919 + 11) % (vocab - 2) + 2) for i in range(a.prompt_len))
    # prefill + load are excluded (decode only)
    if a.warmup:
        run(a, "--no-dspark")
    off = run(a, "--no-dspark")
    steps_off = off["tokens"]
    t_plain = off["secs"] / steps_off
    cont = tempfile.NamedTemporaryFile("w", suffix=".ids", delete=False)
    cont.write(off["ids"])
    cont.close()
    print(f"plain: {off['tokens'] / off['secs']:.2f} tok/s, {1e3 * t_plain:.0f} ms/step\n",
          flush=True)
    print("| verify rows (1 + k) | time / plain step | expert leases / plain step "
          "| break-even acceptance |")
    print("|---|---|---|---|")
    lease_plain = off["leases"] / steps_off
    ks = [int(x) for x in a.ks.split(",")] if a.ks else range(1, gamma + 1)
    for k in ks:
        r = run(a, "--dspark-proposer", f"replay:{cont.name}", "--dspark-verify", str(k),
                "--dspark-no-quench")
        assert r["ids"] == off["ids"], "speculation changed the output"
        steps = r["verify"] + r["plain"]
        cost = (r["secs"] / steps) / t_plain
        leases = (r["leases"] / steps) / lease_plain if lease_plain else float("nan")
        be = break_even(k, cost)
        print(f"| 1 + {k} | {cost:.2f} | {leases:.2f} | "
              f"{'—' if be is None else f'{100 * be:.0f} %'} |", flush=True)
    print("\n| agreement | drafter run | tok/s off | tok/s on | on / off | verify steps "
          "| accepted / proposed | quench events |")
    print("|---|---|---|---|---|---|---|---|")
    for draft in ("", ":draft"):
        for agree in (0, 50, 90):
            r = run(a, "--dspark-proposer", f"replay:{cont.name}:agree={agree}{draft}")
            assert r["ids"] == off["ids"], "speculation changed the output"
            on_tps, off_tps = r["tokens"] / r["secs"], off["tokens"] / off["secs"]
            print(f"| {agree} % | {'yes' if draft else 'no'} | {off_tps:.2f} | {on_tps:.2f} | "
                  f"{on_tps / off_tps:.2f}× | {r['verify']} | {r['accepted']} / {r['proposed']} "
                  f"| {r['quench']} |", flush=True)
    os.unlink(cont.name)


if __name__ == "__main__":
    main()
