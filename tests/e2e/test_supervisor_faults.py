# SPDX-License-Identifier: MIT
"""The supervisor itself killed or stopped during a generation (suite e2e).

usage: test_supervisor_faults.py DSV4CTL MODEL_DIR SCRATCH_DIR

kill   For several seeds, SIGKILL of dsv4-supervisor at a random moment of a 64-token generation
       (before it, in prefill, in decode): the client ends within seconds, with exactly the
       uninterrupted ids if it had finished, else with exit 69 saying the daemons stopped
       (never a hang, never a wrong token); the daemons follow their supervisor (parent-death
       signal); `dsv4ctl stop` then says what it found and removed, exits 1 if the set had
       died leaving anything and leaves no process of the set, no segment, no socket; a second
       `stop` finds nothing (exit 0); a new `start` serves the same greedy ids.
stop   SIGSTOP of the supervisor for longer than the watchdog timeout, mid-generation, then
       SIGCONT, three times: each generation is exact and no daemon was killed or restarted (the queued
       heartbeats are read before the watchdog judges).
records  A process on its way out has let go of its memory (no maps, an empty command line)
       before it has finished, so only the set's records still name it: a stand-in process
       (dsv4-*, neither mapping a segment nor started with the run dir) recorded after the
       supervisor's SIGKILL as a daemon (its stats page: pid, spawn time) or as the supervisor
       (the lock file) is stopped and waited for by `stop`; the same record dated a minute
       (page) or 20 minutes (lock) before the process started names an older process: left alone.
"""
import glob
import json
import os
import random
import shutil
import signal
import mmap
import struct
import subprocess
import sys
import time

exe, model, scratch = sys.argv[1:4]
only = sys.argv[4] if len(sys.argv) > 4 else None
run_dir = os.path.join(scratch, "e2e-supervisor-faults")
PROMPT = "0,5,6,7,8"
N = 64


def ctl(*args, check=True, timeout=60):
    env = dict(os.environ, DSV4_TEST_FORWARD_DELAY_MS="15")   # a generation lasts ~1 s
    env.pop("DSV4_RUN_DIR", None)
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def start(*args):
    ctl("start", "--model", model, "--run-dir", run_dir, "--no-metrics", "--no-api", *args,
        timeout=120)
    st = json.loads(ctl("status", "--run-dir", run_dir, "--json").stdout)
    with open(os.path.join(run_dir, "shm-id")) as f:
        sid = f.read().strip()
    return st, sid


def gen():
    return subprocess.Popen([exe, "gen", "--run-dir", run_dir, "--prompt-ids", PROMPT,
                             "--max-tokens", str(N), "--format", "ids"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def alive(pid):
    """A process that exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def leftovers(sid, pids):
    return ([p for p in pids if alive(p)],
            glob.glob(f"/dev/shm/dsv4-{os.geteuid()}-{sid}-*"),
            glob.glob(os.path.join(run_dir, "*.sock")))


ref = ctl("run", "--model", model, "--prompt-ids", PROMPT, "--max-tokens", str(N),
          "--format", "ids").stdout
assert len(ref.split()) == N, ref


def kill_scenario():
    outcomes = {"finished": 0, "error": 0}
    for seed in (1, 2, 3, 4, 5):
        rng = random.Random(seed)
        shutil.rmtree(run_dir, ignore_errors=True)
        st, sid = start()
        sv = st["supervisor_pid"]
        pids = [d["pid"] for d in st["daemons"] if d["pid"]] + [sv]
        c = gen()
        time.sleep(rng.uniform(0.0, 1.5))
        os.kill(sv, signal.SIGKILL)
        try:
            out, err = c.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            c.kill()
            raise AssertionError(f"seed {seed}: the client hung after the supervisor's SIGKILL")
        if c.returncode == 0:
            assert out == ref, (seed, out, ref)
            outcomes["finished"] += 1
        else:
            # "the daemons stopped" (the client saw the lock go) or "scheduler stopping" (the
            # scheduler, on its parent-death SIGTERM, ended the request)
            assert c.returncode == 69 and ("stopped" in err or "stopping" in err), \
                (seed, c.returncode, err)
            assert set(out.split()) <= set(ref.split()) and ref.startswith(out.strip()), \
                (seed, out, ref)
            outcomes["error"] += 1
        # the daemons go with their supervisor; what they leave is stop's to find
        p = ctl("stop", "--run-dir", run_dir, "--timeout", "10", check=False)
        procs, segs, socks = leftovers(sid, pids)
        assert not procs and not segs and not socks, (seed, p.stderr, procs, segs, socks)
        assert p.returncode in (0, 1), (seed, p.returncode, p.stderr)
        assert p.returncode == 0 or "removed" in p.stderr, (seed, p.stderr)
        again = ctl("stop", "--run-dir", run_dir, check=False)
        assert again.returncode == 0 and "no daemons running" in again.stderr, again.stderr
        # a new set on the same run dir serves the same ids
        st2, sid2 = start()
        assert sid2 != sid
        p = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", str(N),
                "--format", "ids", timeout=60)
        assert p.stdout == ref, (seed, p.stdout, ref)
        pids2 = [d["pid"] for d in st2["daemons"] if d["pid"]] + [st2["supervisor_pid"]]
        p = ctl("stop", "--run-dir", run_dir)
        assert leftovers(sid2, pids2) == ([], [], []), (seed, p.stderr)
    assert outcomes["error"] >= 1, outcomes
    print(f"ok: kill: 5 SIGKILLs of the supervisor: {outcomes['finished']} generations had "
          f"finished exactly, {outcomes['error']} ended saying the daemons stopped; stop left "
          "nothing each time; the next set served the same ids")


def stop_scenario():
    shutil.rmtree(run_dir, ignore_errors=True)
    st, sid = start("--watchdog-s", "3")
    sv = st["supervisor_pid"]
    before = {d["name"]: d["pid"] for d in st["daemons"]}
    for cycle in range(3):  # a missed heartbeat showed in ~1 of 3 resumes before the fix
        c = gen()
        time.sleep(0.3)
        os.kill(sv, signal.SIGSTOP)
        time.sleep(4.0)
        os.kill(sv, signal.SIGCONT)
        out, err = c.communicate(timeout=60)
        assert c.returncode == 0 and out == ref, (cycle, c.returncode, out, err)
        time.sleep(0.5)     # the watchdog's first look after the resume
    st2 = json.loads(ctl("status", "--run-dir", run_dir, "--json").stdout)
    after = {d["name"]: d["pid"] for d in st2["daemons"]}
    assert after == before, (before, after)
    for d in st2["daemons"]:
        assert d.get("restarts", 0) == 0 and d.get("watchdog_kills", 0) == 0, d
    pids = list(before.values()) + [sv]
    p = ctl("stop", "--run-dir", run_dir)
    assert leftovers(sid, pids) == ([], [], []), p.stderr
    print("ok: stop: the supervisor stopped 3 × 4 s (watchdog 3 s) mid-generation: exact ids, "
          "no daemon killed or restarted, stop clean")


def records_scenario():
    os.makedirs(scratch, exist_ok=True)
    fake_exe = os.path.join(scratch, "dsv4-standin")     # comm "dsv4-standin"
    shutil.copy("/bin/sleep", fake_exe)
    for where in ("page", "lock"):
        for recent in (True, False):
            shutil.rmtree(run_dir, ignore_errors=True)
            st, sid = start()
            pids = [d["pid"] for d in st["daemons"] if d["pid"]] + [st["supervisor_pid"]]
            os.kill(st["supervisor_pid"], signal.SIGKILL)
            t0 = time.time()
            while any(alive(p) for p in pids) and time.time() - t0 < 20:
                time.sleep(0.05)
            assert not any(alive(p) for p in pids), (where, pids)
            fake = subprocess.Popen([fake_exe, "60"])
            now = time.time()
            if where == "page":
                with open(f"/dev/shm/dsv4-{os.geteuid()}-{sid}-compute", "r+b") as f:
                    m = mmap.mmap(f.fileno(), 0)
                    struct.pack_into("<QQ", m, 64, fake.pid, int((now - (0 if recent else 60)) * 1000))
                    m.close()
            else:
                lock = os.path.join(run_dir, "supervisor.lock")
                with open(lock, "w") as f:
                    f.write(f"{fake.pid}\n")
                if not recent:
                    os.utime(lock, (now - 1200, now - 1200))
            p = ctl("stop", "--run-dir", run_dir, "--timeout", "10", check=False)
            try:
                if recent:
                    assert fake.wait(timeout=10) == -signal.SIGTERM, (where, p.stderr)
                    assert p.returncode == 1 and "1 process of the set still ran" in p.stderr, \
                        (where, p.returncode, p.stderr)
                else:
                    assert fake.poll() is None, (where, "stop signalled an older record's pid")
                    assert "still ran" not in p.stderr, (where, p.stderr)
            finally:
                fake.kill()
                fake.wait()
            assert leftovers(sid, pids)[1:] == ([], []), where
    print("ok: records: a stand-in recorded in a stats page or the lock file after the "
          "supervisor's SIGKILL was stopped by `stop`; dated before its start, left alone")


if only in (None, "records"):
    records_scenario()
if only in (None, "kill"):
    kill_scenario()
if only in (None, "stop"):
    stop_scenario()
