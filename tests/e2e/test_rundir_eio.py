# SPDX-License-Identifier: MIT
"""I/O errors (EIO) on the run directory (suite e2e).

usage: test_rundir_eio.py DSV4CTL MODEL_DIR SCRATCH_DIR EIO_PRELOAD

The set (dsv4ctl start, the supervisor, the daemons) runs with EIO_PRELOAD
(tests/e2e/eio-preload.c): while a switch file exists, opening, reading, writing or syncing a
file under the run dir (all of them, or those named by DSV4_EIO_ONLY) fails with EIO, as a
failing disk answers: the lock and pid, shm-id, model, the logs, fetcher-hot.json. (ENOSPC
there is e2e-diskfull.)
1. EIO from the start, on every file and then on one file at a time: `start` fails with a
   message naming the file and the I/O error (it used to say "daemons already running (pid 0)"
   for the lock, and to hang a caller reading its output when supervisor.log failed), or the
   set starts and serves exact ids (a log or the hot set that cannot be written); either way
   `stop` then leaves no process, segment, socket or temporary file.
2. EIO while the set runs: a client whose own reads work gets the exact ids of `dsv4ctl run`;
   one that meets the error names the file; `stop` meeting it says so and stops nothing (it
   used to answer "no daemons running", exit 0, leaving the set up); `stop` from a working
   client while the daemons still fail is clean (the supervisor removed its segments by the id
   it made: RUN_DIR/shm-id no longer reads back).
"""
import glob
import os
import shutil
import subprocess
import sys
import time

exe, model, scratch, preload = sys.argv[1:5]
base = os.path.join(scratch, "e2e-rundir-eio")
run_dir = os.path.join(base, "run")
switch = os.path.join(base, "eio-on")
PROMPT = "0,5,6,7,8"
ENV = dict(os.environ, LD_PRELOAD=os.path.abspath(preload), DSV4_EIO_DIR=run_dir,
           DSV4_EIO_SWITCH=switch)
# under ASan (tools/run-tests.sh) the sanitizer runtime must not insist on coming first
ENV["ASAN_OPTIONS"] = (ENV.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
PLAIN = dict(os.environ)    # a client whose disk works (the daemons started with ENV keep it)


def ctl(*args, check=True, timeout=60, env=ENV):
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def eio(v):
    if v:
        open(switch, "w").close()
    elif os.path.exists(switch):
        os.unlink(switch)


def shm_id():
    try:
        with open(os.path.join(run_dir, "shm-id")) as f:
            return f.read().strip()
    except OSError:
        return None


def daemons_of(rd):
    """Processes whose command line names this run dir (the supervisor and its daemons)."""
    out, names = [], {rd.encode(), os.path.realpath(rd).encode()}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if names & set(argv) and os.path.basename(argv[0]).startswith(b"dsv4-"):
            out.append(int(pid))
    return out


def assert_clean(sid, what):
    for _ in range(50):     # the daemons exit right after stop returns
        if not daemons_of(run_dir):
            break
        time.sleep(0.1)
    assert not daemons_of(run_dir), (what, daemons_of(run_dir))
    if sid:
        left = glob.glob(f"/dev/shm/dsv4-{os.geteuid()}-{sid}-*")
        assert not left, (what, left)
    assert not glob.glob(os.path.join(run_dir, "*.sock")), (what, os.listdir(run_dir))
    assert not [f for f in os.listdir(run_dir) if ".tmp" in f], (what, os.listdir(run_dir))


def start():
    return ctl("start", "--model", model, "--run-dir", run_dir, "--no-metrics", "--no-api",
               "--memory-gb", "1", check=False, timeout=120)


def gen_plain():
    return ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "24",
               "--format", "ids", check=False, timeout=120, env=PLAIN)


def gen():
    return ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "24",
               "--format", "ids", check=False, timeout=120)


ref = ctl("run", "--model", model, "--prompt-ids", PROMPT, "--max-tokens", "24",
          "--format", "ids", env=os.environ).stdout
shutil.rmtree(base, ignore_errors=True)
os.makedirs(run_dir, 0o700)
try:
    # 1. EIO from the start
    eio(True)
    p = start()
    assert p.returncode != 0, p.stdout
    assert "Input/output error" in p.stderr and run_dir in p.stderr, p.stderr
    print("start under EIO:", p.stderr.strip())
    eio(False)
    assert_clean(shm_id(), "failed start")
    p = ctl("stop", "--run-dir", run_dir, check=False)
    assert p.returncode == 0, (p.returncode, p.stderr)
    # one file at a time (those written or read at start): a named error, or a set that serves
    started = {}
    for name in ("shm-id", "model", "supervisor.log", "fetcher.log", "scheduler.log",
                 "fetcher-hot.json"):
        env = dict(ENV, DSV4_EIO_ONLY=name)
        eio(True)
        p = ctl("start", "--model", model, "--run-dir", run_dir, "--no-metrics", "--no-api",
                "--memory-gb", "1", check=False, timeout=120, env=env)
        sid = shm_id()
        if p.returncode == 0:
            g = gen_plain()
            assert g.returncode == 0 and g.stdout == ref, (name, g.returncode, g.stderr)
            started[name] = "served exactly"
        else:
            assert "Input/output error" in p.stderr and name in p.stderr, (name, p.stderr)
            started[name] = "refused: " + p.stderr.strip().splitlines()[-1]
        p = ctl("stop", "--run-dir", run_dir, check=False, timeout=120, env=PLAIN)
        assert p.returncode == 0, (name, p.returncode, p.stderr)
        eio(False)
        assert_clean(sid, name)
    for k, v in started.items():
        print(f"start with EIO on {k}: {v}")
    p = start()
    assert p.returncode == 0, p.stderr
    assert gen().stdout == ref
    # 2. EIO while running: the daemons' run-dir files fail (logs, the hot set)
    sid = shm_id()
    eio(True)
    outcomes = []
    for _ in range(2):  # a client whose own disk works: the set serves on, exactly
        p = gen_plain()
        assert p.returncode == 0 and p.stdout == ref, (p.returncode, p.stdout, p.stderr)
        outcomes.append("exact")
    p = gen()           # a client that meets the I/O error itself: named
    if p.returncode == 0:
        assert p.stdout == ref, (p.stdout, ref)
        outcomes.append("exact")
    else:
        assert "Input/output error" in p.stderr and run_dir in p.stderr, (p.returncode, p.stderr)
        print("gen under EIO:", p.stderr.strip())
        outcomes.append("error")
    p = ctl("stop", "--run-dir", run_dir, check=False, timeout=120)
    stop_under_eio = p.returncode
    if p.returncode != 0:   # it cannot read the lock: says so, stops nothing, never "none"
        assert "Input/output error" in p.stderr and run_dir in p.stderr, (p.returncode, p.stderr)
        assert daemons_of(run_dir), "stop failed but the set is gone"
        print("stop under EIO:", p.stderr.strip())
    # stop from a client whose disk works, the daemons still failing (the fetcher saves its
    # hot set, everyone logs): clean
    p = ctl("stop", "--run-dir", run_dir, check=False, timeout=120, env=PLAIN)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert_clean(sid, "stop under EIO")
    eio(False)
    p = ctl("stop", "--run-dir", run_dir, check=False, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert_clean(sid, "stop after EIO")
finally:
    eio(False)
    ctl("stop", "--run-dir", run_dir, check=False, env=os.environ)
print(f"ok: EIO at start refused cleanly naming the file; under EIO the gens were {outcomes}, "
      f"stop meeting EIO exited {stop_under_eio}, a stop with the daemons under EIO was clean")
