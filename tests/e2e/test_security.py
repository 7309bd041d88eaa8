# SPDX-License-Identifier: MIT
"""Another local user against a running set (suite e2e).

usage: test_security.py DSV4CTL MODEL_DIR SCRATCH_DIR

The attacker is a second uid (nobody, 65534): this test must run as root to become it (CI
does); as any other user it fails rather than pass without checking.
1. Squatting: before the set starts, the attacker pre-creates /dev/shm objects under the names
   an older dsv4 used (predictable from the run dir's path), mode 0666, with junk. The set
   starts anyway and serves exact ids: its names come from a random id in the run dir.
2. Everything the set made is ours alone: run dir 0700, RUN_DIR/shm-id 0600, every segment
   owned by us with mode 0600; two starts on one run dir use different names.
3. As the attacker: the run dir cannot be listed, the id cannot be read, no segment can be
   opened for reading or writing, no socket can be connected to.
"""
import errno
import glob
import os
import shutil
import socket
import subprocess
import sys

exe, model, scratch = sys.argv[1:4]
run_dir = os.path.join(scratch, "e2e-security")
PROMPT = "0,5,6,7,8"
NOBODY = 65534

if os.geteuid() != 0:
    sys.exit("test_security.py must run as root (it becomes uid 65534 to attack the set)")


def ctl(*args, check=True):
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def as_attacker(fn):
    """Run fn() in a child as uid/gid 65534; return what it returned (or its exception)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = repr(fn())
        except Exception as e:  # noqa: BLE001 - reported to the parent
            out = "EXC " + repr(e)
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return data.decode()


def old_names():
    """The names an older dsv4 derived from the run dir's path (FNV-1a)."""
    h = 0xcbf29ce484222325
    for b in os.path.realpath(run_dir).encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    roles = ["fetcher", "compute", "scheduler", "api"]
    return ([f"/dev/shm/dsv4-{os.geteuid()}-{h:016x}-{r}" for r in roles] +
            [f"/dev/shm/dsv4-{h:016x}-experts"])


def set_segments():
    with open(os.path.join(run_dir, "shm-id")) as f:
        i = f.read().strip()
    return i, sorted(glob.glob(f"/dev/shm/dsv4-{os.geteuid()}-{i}-*"))


shutil.rmtree(run_dir, ignore_errors=True)
os.makedirs(scratch, exist_ok=True)
ref = ctl("run", "--model", model, "--prompt-ids", PROMPT, "--max-tokens", "24",
          "--format", "ids").stdout

# 1. squatting
squats = old_names()


def squat():
    made = []
    for p in squats:
        try:
            fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            os.fchmod(fd, 0o666)
            os.write(fd, b"\xff" * 64)
            os.close(fd)
            made.append(p)
        except FileExistsError:
            pass
    return made


made = as_attacker(squat)
assert "EXC" not in made, made
try:
    ctl("start", "--model", model, "--run-dir", run_dir, "--no-metrics", "--memory-gb", "1")
    out = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "24",
              "--format", "ids").stdout
    assert out == ref, (out, ref)

    # 2. ours alone
    st = os.stat(run_dir)
    assert st.st_uid == os.geteuid() and (st.st_mode & 0o777) == 0o700, oct(st.st_mode)
    st = os.stat(os.path.join(run_dir, "shm-id"))
    assert (st.st_mode & 0o777) == 0o600, oct(st.st_mode)
    sid, segs = set_segments()
    assert len(segs) >= 4, segs     # fetcher, compute, scheduler pages and the experts
    for p in segs:
        st = os.stat(p)
        assert st.st_uid == os.geteuid() and (st.st_mode & 0o7777) == 0o600, (p, oct(st.st_mode))
        assert p not in squats, p
    for p in squats:
        assert os.stat(p).st_uid == NOBODY, p   # untouched, unused

    # 3. the attacker
    def attack():
        res = {}
        try:
            os.listdir(run_dir)
            res["listdir"] = "ok"
        except PermissionError:
            res["listdir"] = "denied"
        try:
            open(os.path.join(run_dir, "shm-id")).read()
            res["id"] = "read"
        except PermissionError:
            res["id"] = "denied"
        for p in segs:
            for mode in (os.O_RDONLY, os.O_RDWR):
                try:
                    os.close(os.open(p, mode))
                    res[p + str(mode)] = "opened"
                except PermissionError:
                    pass
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(os.path.join(run_dir, "sched.sock"))
            res["connect"] = "connected"
        except OSError as e:
            res["connect"] = errno.errorcode.get(e.errno, str(e.errno))
        finally:
            s.close()
        return res

    got = as_attacker(attack)
    assert "EXC" not in got, got
    res = eval(got)  # noqa: S307 - our own repr of a dict of strings
    assert res.pop("listdir") == "denied", res
    assert res.pop("id") == "denied", res
    assert res.pop("connect") == "EACCES", res
    assert not res, f"the attacker opened: {res}"
    ctl("stop", "--run-dir", run_dir)

    # two starts, two names
    ctl("start", "--model", model, "--run-dir", run_dir, "--no-metrics", "--memory-gb", "1")
    sid2, segs2 = set_segments()
    assert sid2 != sid and not set(segs) & set(segs2), (sid, sid2)
    for p in segs:
        assert not os.path.exists(p), p
finally:
    ctl("stop", "--run-dir", run_dir, check=False)
    for p in squats:
        try:
            os.unlink(p)
        except OSError:
            pass
print(f"ok: squatted names ignored, {len(segs)} segments ours alone (0600), attacker refused "
      "everywhere, a new id per start")
