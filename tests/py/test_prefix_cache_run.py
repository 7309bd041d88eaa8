# SPDX-License-Identifier: MIT
"""`dsv4ctl run` with the prefix cache (daemons/compute/prefix.c, common/prefix_cache.c): a
second run whose prompt extends the first run's sequence (prompt + generated ids + a few more)
restores the cached blocks from disk (a new process: the disk tier) and prints the ids of a run
without the cache; --stats says how many prompt tokens were restored. A damaged block file is
refused with one log line and deleted, the run restores less and prints the same ids. With
--dspark the drafter's state restores too (same ids). The default directory is
$XDG_CACHE_HOME/dsv4/<model id>, private; `dsv4ctl cache status|clear` count and remove it.

usage: test_prefix_cache_run.py DSV4CTL MODEL_DIR DSPARK_MODEL_DIR SCRATCH_DIR"""
import os
import re
import shutil
import stat
import subprocess
import sys

exe, model, dspark_model, scratch = sys.argv[1:5]
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
env = dict(os.environ, XDG_CACHE_HOME=os.path.join(scratch, "xdg"))


def run(mdl, ids, n, *extra):
    p = subprocess.run([exe, "run", "--model", mdl, "--prompt-ids", ",".join(map(str, ids)),
                        "--max-tokens", str(n), "--format", "ids", "--no-progress", *extra],
                       capture_output=True, text=True, timeout=300, env=env)
    if p.returncode != 0:
        raise AssertionError(f"run {extra} exited {p.returncode}: {p.stderr}")
    return p.stdout.split(), p.stderr


def restored(err):
    m = re.search(r"^prefix-cache: restored (\d+) of (\d+) prompt tokens", err, re.M)
    assert m, err
    return int(m.group(1)), int(m.group(2))


def cache(*args):
    p = subprocess.run([exe, "cache", *args], capture_output=True, text=True, timeout=60,
                       env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout


def blocks(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".blk"))


def check(mdl, vocab, extra, cache_dir):
    d = ["--prefix-cache-dir", cache_dir] if cache_dir else []
    prompt = [(i * 7919) % (vocab - 10) + 3 for i in range(300)]
    out1, err1 = run(mdl, prompt, 40, "--stats", *d, *extra)
    assert restored(err1) == (0, 300), err1
    turn2 = prompt + [int(t) for t in out1] + [5, 6, 7]
    want, _ = run(mdl, turn2, 24, "--no-prefix-cache", *extra)
    got, err2 = run(mdl, turn2, 24, "--stats", *d, *extra)
    assert got == want, (got, want)
    # the whole first run is restored: its two blocks and the partial block its end stored
    # (prompt + answer but the last answer token, which was never fed)
    end = len(prompt) + len(out1) - 1
    assert restored(err2) == (end, len(turn2)), err2
    assert re.search(r"info prefix-cache: restored %d of \d+ prompt tokens" % end, err2), err2
    # a partial hit: the same history diverging inside the second block
    turn2b = list(turn2)
    turn2b[200] = (turn2b[200] + 1) % vocab
    want_b, _ = run(mdl, turn2b, 12, "--no-prefix-cache", *extra)
    got_b, err_b = run(mdl, turn2b, 12, "--stats", *d, *extra)
    assert got_b == want_b and restored(err_b)[0] == 128, err_b
    return turn2, want


# the tiny model: an explicit directory, then damage
cdir = os.path.join(scratch, "cache")
turn2, want = check(model, 384, [], cdir)
assert stat.S_IMODE(os.stat(cdir).st_mode) == 0o700
files = blocks(cdir)
assert len(files) >= 3, files
for f in files:
    assert stat.S_IMODE(os.stat(os.path.join(cdir, f)).st_mode) == 0o600
# flip a byte in the rows of every file of a block [128, 256) (a restore that goes on to a
# later block reads this one's rows, not its tail)
damaged = 0
for f in files:
    p = os.path.join(cdir, f)
    with open(p, "r+b") as fh:
        data = fh.read()
        # header (192 bytes): p0 at 112, p1 at 120, rows_len at 128; then tokens, rows, tail
        p0 = int.from_bytes(data[112:120], "little", signed=True)
        p1 = int.from_bytes(data[120:128], "little", signed=True)
        rows_len = int.from_bytes(data[128:136], "little")
        if p0 == 128 and p1 == 256:
            at = 192 + (p1 - p0) * 4 + rows_len // 2
            fh.seek(at)
            fh.write(bytes([data[at] ^ 0x40]))
            damaged += 1
assert damaged >= 1
got, err = run(model, turn2, 24, "--stats", "--prefix-cache-dir", cdir)
assert got == want
assert restored(err)[0] == 128, err
assert len(re.findall(r"prefix-cache: .*\.blk: corrupt: deleted", err)) == 1, err

# the DSpark fixture through the default (XDG) directory, with the drafter
check(dspark_model, 256, ["--dspark"], None)
xdg = os.path.join(scratch, "xdg", "dsv4")
ids = os.listdir(xdg)
assert len(ids) == 1 and re.fullmatch(r"[0-9a-f]{32}", ids[0]), ids
assert stat.S_IMODE(os.stat(os.path.join(xdg, ids[0])).st_mode) == 0o700
st = cache("status", "--model", dspark_model)
m = re.search(r"disk_entries: (\d+)", st)
assert m and int(m.group(1)) == len(blocks(os.path.join(xdg, ids[0]))) > 0, st
assert "removed" in cache("clear", "--model", dspark_model)
assert not os.path.exists(os.path.join(xdg, ids[0]))
assert "no prefix cache" in cache("status", "--model", dspark_model)
# another model's id: the tiny model has its own directory, untouched by that clear
assert "no prefix cache" in cache("status", "--model", model)
assert "disk_entries" in cache("status", "--prefix-cache-dir", cdir)
print("ok")
