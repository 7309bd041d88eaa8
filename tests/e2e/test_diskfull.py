# SPDX-License-Identifier: MIT
"""A full disk under the run directory (suite e2e).

usage: test_diskfull.py DSV4CTL MODEL_DIR SCRATCH_DIR

The run dir lives on a 512 KiB tmpfs mounted here (root only: CI runs as root; as another user
this test fails rather than pass unchecked), filled up with a file beside it.
1. `start` on the full disk fails with a message naming the file and ENOSPC, and leaves no
   process and no shared memory (it used to write an empty `model` file and serve a set whose
   `gen --prompt` failed with a confusing tokenizer path).
2. With space, the set starts; the disk then fills while it runs: generation goes on with
   exact ids, `stop` is clean, and no temporary file is left (the fetcher's hot set used to
   leave fetcher-hot.json.tmp).
"""
import glob
import os
import shutil
import subprocess
import sys

exe, model, scratch = sys.argv[1:4]
if os.geteuid() != 0:
    sys.exit("test_diskfull.py must run as root (it mounts a small tmpfs)")
mnt = os.path.join(scratch, "e2e-diskfull")
run_dir = os.path.join(mnt, "run")
PROMPT = "0,5,6,7,8"


def ctl(*args, check=True, timeout=60):
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def fill():
    fd = os.open(os.path.join(mnt, "filler"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def segments():
    try:
        with open(os.path.join(run_dir, "shm-id")) as f:
            i = f.read().strip()
    except OSError:
        return []
    return glob.glob(f"/dev/shm/dsv4-{os.geteuid()}-{i}-*")


ref = ctl("run", "--model", model, "--prompt-ids", PROMPT, "--max-tokens", "24",
          "--format", "ids").stdout
if os.path.ismount(mnt):
    subprocess.run(["umount", mnt], check=False)
shutil.rmtree(mnt, ignore_errors=True)
os.makedirs(mnt)
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs", mnt], check=True)
try:
    os.mkdir(run_dir, 0o700)
    # 1. full before start
    fill()
    p = ctl("start", "--model", model, "--run-dir", run_dir, "--no-metrics", "--no-api",
            "--memory-gb", "1", check=False, timeout=120)
    assert p.returncode != 0 and "No space left on device" in p.stderr, (p.returncode, p.stderr)
    assert ctl("status", "--run-dir", run_dir, check=False).returncode != 0
    assert not segments(), segments()
    assert not os.path.exists(os.path.join(run_dir, "model"))
    # 2. full while running
    os.unlink(os.path.join(mnt, "filler"))
    ctl("start", "--model", model, "--run-dir", run_dir, "--no-metrics", "--no-api",
        "--memory-gb", "1", timeout=120)
    segs = segments()
    assert len(segs) >= 4, segs
    fill()
    out = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "24",
              "--format", "ids").stdout
    assert out == ref, (out, ref)
    p = ctl("stop", "--run-dir", run_dir, check=False)
    assert p.returncode == 0, p.stderr
    left = [s for s in segs if os.path.exists(s)]
    assert not left, left
    tmp = [f for f in os.listdir(run_dir) if ".tmp" in f]
    assert not tmp, tmp
finally:
    ctl("stop", "--run-dir", run_dir, check=False)
    subprocess.run(["umount", mnt], check=False)
print("ok: a full run dir refuses start cleanly (ENOSPC named), a disk filling under a running "
      "set changes no token and leaves no temp file")
