# SPDX-License-Identifier: MIT
"""The memory plan is enforced (suite e2e on the tiny fixture; suite slow on a synthetic
full-width checkpoint named by $DSV4_SYNTH_MODEL, skipped when unset).

usage: test_memory_budget.py DSV4CTL MODEL_DIR SCRATCH_DIR [SLOTS_OVER_MINIMUM] [dspark]

With `dspark` the plan and the set run the DSpark drafter (`plan --dspark`, `start --dspark`):
the drafter's own expert LRU in compute is planned and passed as compute's --cache-bytes, and
the speculative generation must still print what plain `run` prints.

1. `dsv4ctl plan` below the minimum exits 1; `start` with that budget exits 69 and its message
   names the minimum (the same figure `plan` prints).
2. `start` with a deliberately small budget (the minimum plus SLOTS_OVER_MINIMUM expert slots,
   default 4, so the expert cache evicts all the time): a 48-token generation prints exactly
   what `dsv4ctl run` prints, and the peak of (RSS of the supervisor and every daemon + the
   set's /dev/shm pages), sampled every 10 ms from start to stop, stays within the budget.
3. A request whose context needs more session memory than the plan allows is refused (busy)
   with a message naming the session budget; the set keeps serving (skipped for a model whose
   session state does not grow with the context: only window layers).
0. (first) The prefill step: the plan's is a power of two in [64, 512] (64 with DSpark), an
   out-of-range or malformed --chunk is a usage error (64) naming the option on plan, start
   and dsv4-compute, and a refused start leaves nothing behind.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from memwatch import MemWatch, shm_paths  # noqa: E402

exe, model, scratch = sys.argv[1:4]
over = int(sys.argv[4]) if len(sys.argv) > 4 else 4
DSPARK = ["--dspark"] if len(sys.argv) > 5 and sys.argv[5] == "dspark" else []
if model == "synth":
    model = os.environ.get("DSV4_SYNTH_MODEL", "")
    if not model:
        print("skip: DSV4_SYNTH_MODEL is not set (tools/make_synthetic_checkpoint.py)")
        sys.exit(77)
run_dir = os.path.join(scratch, "e2e-memory-budget" + ("-dspark" if DSPARK else ""))
GIB = 1 << 30
PROMPT = "0,5,6,7,8,9,10,11"


def ctl(*args, check=True, timeout=600):
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def plan(gb):
    p = ctl("plan", "--model", model, "--memory-gb", repr(gb), "--json", *DSPARK, check=False)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


_, p0 = plan(1024.0)
minimum = p0["minimum"]
slot = p0["slot_bytes"]

# 0. the prefill step: the plan's, and hostile --chunk values refused before anything starts
ch = p0["chunk"]
assert ch in (64, 128, 256, 512) and (ch == 64 or not DSPARK), p0
for bad in ("5000", "-1", "x", "64k", ""):
    r = ctl("plan", "--model", model, "--chunk", bad, check=False)
    assert r.returncode == 64 and "--chunk" in r.stderr, (bad, r.returncode, r.stderr)
    shutil.rmtree(run_dir, ignore_errors=True)
    r = ctl("start", "--model", model, "--run-dir", run_dir, "--chunk", bad, check=False)
    assert r.returncode == 64 and "--chunk" in r.stderr, (bad, r.returncode, r.stderr)
    assert not shm_paths(run_dir), "a refused start left shared memory"
compute = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(exe))), "..", "daemons",
                       "compute", "dsv4-compute")
assert os.path.exists(compute), compute
for bad in ("0", "4097", "x"):
    r = subprocess.run([compute, "--model", model, "--chunk", bad], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "--chunk" in r.stderr, (bad, r.returncode, r.stderr)

# 1. below the minimum: plan says so, start refuses and names the minimum
low = (minimum - slot) / GIB
rc, p = plan(low)
assert rc == 1 and p["n_slots"] == 0, (rc, p)
shutil.rmtree(run_dir, ignore_errors=True)
r = ctl("start", "--model", model, "--run-dir", run_dir, "--memory-gb", repr(low), *DSPARK,
        check=False)
assert r.returncode == 69, (r.returncode, r.stderr)
want = f"minimum {minimum / GIB:.2f} GiB"
assert want in r.stderr, (want, r.stderr)
assert not shm_paths(run_dir), "a refused start left shared memory"

# 2. a small budget is respected while generating
budget = minimum + over * slot
gb = budget / GIB
rc, p = plan(gb)
assert rc == 0 and p["n_slots"] >= p["min_slots"], p
assert (p["drafter_cache"] > 0) == bool(DSPARK and p["drafter"] > 0), p
huge_ctx = 64 * p["max_ctx"] * p["sessions"]
huge = json.loads(ctl("plan", "--model", model, "--memory-gb", repr(gb), "--json", *DSPARK,
                      "--sessions",
                      "1", "--max-ctx", str(huge_ctx), check=False).stdout)
ref = ctl("run", "--model", model, "--prompt-ids", PROMPT, "--max-tokens", "48",
          "--format", "ids").stdout
ctl("start", "--model", model, "--run-dir", run_dir, "--memory-gb", repr(gb), *DSPARK)
try:
    with MemWatch(exe, run_dir) as w:
        out = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "48",
                  "--format", "ids").stdout
        # 3. a session the plan cannot hold is refused as too large (never "busy": it could
        # never fit), and the set keeps serving (only where session state grows with the
        # context: a window-only model's does not)
        big = None
        if huge["sessions_total"] > p["sessions_total"]:
            big = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens",
                      str(huge_ctx), check=False)
        again = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "48",
                    "--format", "ids").stdout
    st = json.loads(ctl("status", "--run-dir", run_dir, "--json").stdout)
    if DSPARK:  # compute got the planned drafter cache, and speculation ran
        comp = next(d for d in st["daemons"] if d["name"] == "compute")
        with open(f"/proc/{comp['pid']}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        assert argv[argv.index(b"--cache-bytes") + 1] == str(p["drafter_cache"]).encode(), argv
        sched = next(d for d in st["daemons"] if d["name"] == "scheduler")
        assert sched.get("spec_verify_steps", 0) > 0, sched
        # the scheduler gets the planned session count and --dspark, neither overwriting the
        # other (an old supervisor wrote --dspark over --max-active)
        with open(f"/proc/{sched['pid']}/cmdline", "rb") as f:
            sargv = f.read().split(b"\0")
        assert b"--dspark" in sargv, sargv
        assert sargv[sargv.index(b"--max-active") + 1] == str(p["sessions"]).encode(), sargv
finally:
    ctl("stop", "--run-dir", run_dir, check=False)
assert out == ref, f"gen under a small budget:\n{out}\nrun:\n{ref}"
assert again == ref
assert big is None or (big.returncode == 65 and "too large" in big.stderr), \
    (big.returncode, big.stderr)
cache = st["expert_cache"]
# the small budget makes demands wait for reads (unless every expert the run touched fits in
# the fetcher's slots, as on tiny-dspark: its slots hold the actual, smaller experts)
assert cache["misses"] > 0 or cache["reads"] <= cache["slots"], cache
seg = [v for k, v in w.at_peak.items() if k.endswith("-experts")]
assert seg and seg[0] <= p["cache_bytes"], (seg, p["cache_bytes"])
detail = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sorted(w.at_peak.items()))
print(f"budget {budget / 2**20:.1f} MiB, peak {w.peak / 2**20:.1f} MiB over {w.samples} "
      f"samples ({detail}); expert cache {p['n_slots']} slots, hit rate {cache['hit_rate']:.3f}")
assert w.samples > 10
assert w.peak <= budget, f"peak {w.peak} bytes > budget {budget} bytes: {detail}"
print("ok")
