# SPDX-License-Identifier: MIT
"""The run directory and `dsv4ctl stop` (suite e2e).

usage: test_rundir.py DSV4CTL MODEL_DIR SCRATCH_DIR

1. An existing directory with any group or other permission bit is refused as a run dir,
   never chmod'ed.
2. A private directory holding a file that is not dsv4's is refused, the file untouched
   (stop and cleanup delete the set's own names: they must not meet a user's files).
3. `stop` on a lock held by a process that wrote no pid ends within its timeout with exit 69
   and a message naming the lock (it used to wait for ever).
4. `stop` of a set whose supervisor does not answer SIGTERM (SIGSTOPped) escalates to SIGKILL,
   leaves no process, segment or socket behind, and says so with exit 1 (it used to leave
   both and exit 0).
5. `stop` waits for the processes it signalled, not for their mappings: a leftover daemon that
   unmaps its segments on SIGTERM and then takes a second to exit is gone when `stop` returns
   (it used to return in between, and a random kill in e2e-supervisor-faults caught it).
6. A leftover daemon that has already unmapped the set's segments (on its way out; under a
   sanitizer the exit's leak check takes a while) is still found, by the run dir it was started
   with (given relative to its working directory), and is gone when `stop` returns.
"""
import fcntl
import glob
import os
import shutil
import signal
import subprocess
import sys
import time

exe, model, scratch = sys.argv[1:4]
base = os.path.join(scratch, "e2e-rundir")
shutil.rmtree(base, ignore_errors=True)
os.makedirs(base)


def ctl(*args, check=True, timeout=60):
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def start(run_dir, check=True):
    return ctl("start", "--model", model, "--run-dir", run_dir, "--no-metrics", "--no-api",
               "--memory-gb", "1", check=check, timeout=120)


# 1. a shared directory: any group or other bit at all
for mode in (0o755, 0o750, 0o705, 0o701, 0o710):
    shared = os.path.join(base, f"shared-{mode:o}")
    os.mkdir(shared)
    os.chmod(shared, mode)
    p = start(shared, check=False)
    assert p.returncode != 0 and "lets others in" in p.stderr, (oct(mode), p.returncode, p.stderr)
    assert (os.stat(shared).st_mode & 0o777) == mode, oct(os.stat(shared).st_mode)

# 2. a private directory of the user's
mine = os.path.join(base, "mine")
os.mkdir(mine, 0o700)
with open(os.path.join(mine, "model"), "w") as f:
    f.write("my notes\n")
with open(os.path.join(mine, "notes.txt"), "w") as f:
    f.write("keep me\n")
p = start(mine, check=False)
assert p.returncode != 0 and "not a dsv4 file" in p.stderr, (p.returncode, p.stderr)
assert open(os.path.join(mine, "model")).read() == "my notes\n"
assert open(os.path.join(mine, "notes.txt")).read() == "keep me\n"

# 3. a lock held without a pid
nopid = os.path.join(base, "nopid")
os.mkdir(nopid, 0o700)
lock = open(os.path.join(nopid, "supervisor.lock"), "w")
fcntl.flock(lock, fcntl.LOCK_EX)
t0 = time.monotonic()
p = ctl("stop", "--run-dir", nopid, "--timeout", "1", check=False, timeout=30)
assert p.returncode == 69 and "supervisor.lock" in p.stderr, (p.returncode, p.stderr)
assert time.monotonic() - t0 < 20
lock.close()

# 4. a supervisor that does not answer
run = os.path.join(base, "run")
start(run)
st = ctl("status", "--run-dir", run, "--json").stdout
import json  # noqa: E402
st = json.loads(st)
pids = [d["pid"] for d in st["daemons"] if d.get("pid")] + [st["supervisor_pid"]]
with open(os.path.join(run, "shm-id")) as f:
    sid = f.read().strip()
segs = glob.glob(f"/dev/shm/dsv4-{os.geteuid()}-{sid}-*")
assert len(segs) >= 4, segs
os.kill(st["supervisor_pid"], signal.SIGSTOP)
p = ctl("stop", "--run-dir", run, "--timeout", "1", check=False, timeout=60)
assert p.returncode == 1 and "killed" in p.stderr and "SIGKILL" in p.stderr, \
    (p.returncode, p.stderr)
for pid in pids:
    for _ in range(200):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break
        time.sleep(0.01)
    else:
        raise AssertionError(f"process {pid} survived stop")
left = [s for s in segs if os.path.exists(s)]
assert not left, left
socks = glob.glob(os.path.join(run, "*.sock"))
assert not socks, socks
# and the run dir serves a new set
start(run)
ctl("stop", "--run-dir", run)

# 5. a leftover daemon (its supervisor gone) that unmaps before it exits
FAKE = r"""
import ctypes, mmap, os, signal, sys, time
ctypes.CDLL(None).prctl(15, b"dsv4-fake", 0, 0, 0)      # PR_SET_NAME: a daemon's comm
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.ftruncate(fd, 4096)
m = mmap.mmap(fd, 4096)
os.close(fd)
def term(sig, frame):
    m.close()                 # the segment goes first ...
    time.sleep(1.5)           # ... the process a while later
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print("ready", flush=True)
while True:
    time.sleep(1)
"""
slow = os.path.join(base, "slow")
os.mkdir(slow, 0o700)
sid = os.urandom(16).hex()
for name, text in (("shm-id", sid + "\n"), ("supervisor.lock", "")):
    fd = os.open(os.path.join(slow, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, text.encode())
    os.close(fd)
seg = f"/dev/shm/dsv4-{os.geteuid()}-{sid}-compute"
fake = subprocess.Popen([sys.executable, "-c", FAKE, seg], stdout=subprocess.PIPE, text=True)
try:
    assert fake.stdout.readline().strip() == "ready"
    p = ctl("stop", "--run-dir", slow, "--timeout", "10", check=False, timeout=60)
    with open(f"/proc/{fake.pid}/stat") as fh:
        state = fh.read().rsplit(")", 1)[1].split()[0]
finally:
    if fake.poll() is None and os.path.exists(f"/proc/{fake.pid}"):
        with open(f"/proc/{fake.pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                fake.kill()
assert state == "Z", f"stop returned while the process it stopped still ran ({state}): {p.stderr}"
assert fake.wait(timeout=10) == 0
assert p.returncode == 1 and "still ran" in p.stderr, (p.returncode, p.stderr)
assert not os.path.exists(seg), seg

# 6. a leftover daemon that maps nothing any more, found by its --run-dir
UNMAPPED = r"""
import ctypes, signal, sys, time
ctypes.CDLL(None).prctl(15, b"dsv4-fake", 0, 0, 0)
def term(sig, frame):
    time.sleep(1.5)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print("ready", flush=True)
while True:
    time.sleep(1)
"""
gone = os.path.join(base, "gone")
os.mkdir(gone, 0o700)
for name, text in (("shm-id", os.urandom(16).hex() + "\n"), ("supervisor.lock", "")):
    fd = os.open(os.path.join(gone, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, text.encode())
    os.close(fd)
fake = subprocess.Popen([sys.executable, "-c", UNMAPPED, "--run-dir", "gone"], cwd=base,
                        stdout=subprocess.PIPE, text=True)
try:
    assert fake.stdout.readline().strip() == "ready"
    p = ctl("stop", "--run-dir", gone, "--timeout", "10", check=False, timeout=60)
    with open(f"/proc/{fake.pid}/stat") as fh:
        state = fh.read().rsplit(")", 1)[1].split()[0]
finally:
    if fake.poll() is None and os.path.exists(f"/proc/{fake.pid}"):
        with open(f"/proc/{fake.pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                fake.kill()
assert state == "Z", f"stop left a daemon of the set that mapped nothing ({state}): {p.stderr}"
assert fake.wait(timeout=10) == 0
assert p.returncode == 1 and "still ran" in p.stderr, (p.returncode, p.stderr)
print("ok: shared and foreign run dirs refused untouched, a pid-less lock ends stop with 69, a "
      "killed set leaves nothing (exit 1), stop waits for the processes it stopped and finds "
      "those that mapped nothing by their run dir")
