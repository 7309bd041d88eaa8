# SPDX-License-Identifier: MIT
"""`dsv4ctl run` / `dsv4ctl score` output contracts on a tiny checkpoint, and their agreement:
greedy ids from run (prefill + one-token decode) equal the argmaxes score reports for the
prompt followed by those ids (chunked prefill), whatever --chunk and --threads; logprob values
are log-probabilities (<= 0, and >= log(1/V) where the next token is the argmax); usage errors
exit 64.

usage: test_dsv4ctl_model.py DSV4CTL MODEL_DIR"""
import json
import math
import os
import subprocess
import sys

exe, model = sys.argv[1], sys.argv[2]
with open(os.path.join(model, "config.json")) as fh:
    VOCAB = json.load(fh)["vocab_size"]


def ctl(*args, check=True):
    p = subprocess.run([exe, *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


prompt = [0] + [(i * 37 + 11) % (VOCAB - 2) + 2 for i in range(80)]
ids = ",".join(map(str, prompt))

# run: one line of space-separated ids, at most --max-tokens, --stats on stderr only
r = ctl("run", "--model", model, "--prompt-ids", ids, "--max-tokens", "12", "--temperature", "0",
        "--format", "ids", "--stats")
lines = r.stdout.split("\n")
assert len(lines) == 2 and lines[1] == "", repr(r.stdout)
gen = [int(x) for x in lines[0].split(" ")]
assert 1 <= len(gen) <= 12
assert all(("tok/s" in r.stderr, "ttft" in r.stderr)), r.stderr
if len(gen) < 12:
    assert gen[-1] == 1, "stopped early without EOS"
assert 1 not in gen[:-1], "generated past EOS"

# same ids with other chunk sizes and two threads
for extra in (["--chunk", "1"], ["--chunk", "7", "--threads", "2"]):
    r2 = ctl("run", "--model", model, "--prompt-ids", ids, "--max-tokens", "12", *extra)
    assert r2.stdout == r.stdout, (extra, r2.stdout, r.stdout)

# score: one line per position, pos TAB argmax TAB logprob, '-' on the last line
seq = prompt + gen
s = ctl("score", "--model", model, "--prompt-ids", ",".join(map(str, seq)), "--format", "tsv")
rows = [line.split("\t") for line in s.stdout.rstrip("\n").split("\n")]
assert len(rows) == len(seq), (len(rows), len(seq))
for i, row in enumerate(rows):
    assert len(row) == 3 and int(row[0]) == i, row
    if i + 1 < len(seq):
        lp = float(row[2])
        assert lp <= 0.0 and math.isfinite(lp), row
        if int(row[1]) == seq[i + 1]:
            # the argmax token has the largest probability: its log-softmax is >= log(1/V)
            assert lp >= -math.log(VOCAB) - 1e-6, row
    else:
        assert row[2] == "-", row
# decode (run) = chunked prefill (score): the greedy ids are the argmaxes
for k, t in enumerate(gen):
    assert int(rows[len(prompt) - 1 + k][1]) == t, (k, t, rows[len(prompt) - 1 + k])
s2 = ctl("score", "--model", model, "--prompt-ids", ",".join(map(str, seq)), "--chunk", "5")
assert s2.stdout == s.stdout

# usage errors are specific and exit 64; a missing model is reported
for bad in (["run", "--model", model], ["score", "--prompt-ids", "1,2"],
            ["run", "--model", model, "--prompt-ids", "1,,2"],
            ["run", "--model", model, "--prompt-ids", "1", "--format", "json"],
            ["score", "--model", model, "--prompt-ids", "1", "--bogus"]):
    p = ctl(*bad, check=False)
    assert p.returncode == 64 and p.stderr, (bad, p.returncode, p.stderr)
p = ctl("run", "--model", "/nonexistent-model", "--prompt-ids", "1", check=False)
assert p.returncode != 0 and "nonexistent" in p.stderr, p.stderr
p = ctl("score", "--model", model, "--prompt-ids", "99999", check=False)
assert p.returncode == 65 and "vocabulary" in p.stderr, p.stderr
print("ok")
