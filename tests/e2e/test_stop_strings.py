# SPDX-License-Identifier: MIT
"""Stop strings through the daemon set (suite e2e).

usage: test_stop_strings.py DSV4CTL MODEL_DIR SCRATCH_DIR

On a model with a tokenizer: a greedy generation's text is taken as the reference; for stop
strings chosen from it (a piece inside one token, one spanning a token boundary, one that
never occurs, several at once) the stopped generation must be a prefix of the reference ids,
end with reason "stop" exactly at the first token whose streamed text (the pieces a client
receives: complete characters only) contains a stop string, or run to its length when none
occurs.
"""
import json
import os
import shutil
import subprocess
import sys

exe, model, scratch = sys.argv[1:4]
run_dir = os.path.join(scratch, "e2e-stop-strings")
PROMPT = "0,5,9,12"
N = 48


def ctl(*args, check=True):
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def gen(*stops):
    args = ["gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", str(N),
            "--format", "jsonl"]
    for s in stops:
        args += ["--stop", s]
    lines = [json.loads(x) for x in ctl(*args).stdout.splitlines() if x.strip()]
    toks = [x for x in lines if "id" in x]
    done = lines[-1]
    assert done.get("done"), lines
    return [t["id"] for t in toks], [t["text"] for t in toks], done["reason"]


def text_of(ids):
    if not ids:
        return ""
    return ctl("detokenize", "--model", model, *map(str, ids)).stdout.rstrip("\n")


shutil.rmtree(run_dir, ignore_errors=True)
ctl("start", "--model", model, "--run-dir", run_dir, "--no-metrics", "--memory-gb", "1")
try:
    ref_ids, pieces, reason = gen()
    assert reason == "length" and len(ref_ids) == N, (reason, len(ref_ids))
    full = "".join(pieces)
    assert full == text_of(ref_ids), "streamed pieces differ from the decoded text"
    cases = []
    # stop strings are made of text a client sees (never U+FFFD, which marks invalid bytes)
    full = full.replace("\ufffd", "\x00")
    # a stop string ending inside the text around 2/3 of the way, two characters long, and
    # one spanning the boundary between two tokens' pieces
    k = len(full) * 2 // 3
    if len(full) >= 8:
        cases.append([full[k:k + 2]])
        b = sum(len(p) for p in pieces[: len(pieces) // 2])
        if 0 < b < len(full) - 1:
            cases.append([full[b - 1:b + 1]])
    cases.append(["\u2603never-in-this-text\u2603"])
    cases.append(["\u2603never\u2603", full[k:k + 3] if len(full) >= 8 else "x"])
    checked = 0
    for stops in cases:
        stops = [s for s in stops if s and "\x00" not in s]
        if not stops:
            continue
        ids, _, reason = gen(*stops)
        assert ids == ref_ids[: len(ids)], (stops, ids, ref_ids)
        first = next((i for i in range(1, N + 1)
                      if any(s in "".join(pieces[:i]) for s in stops)), None)
        if first is None:
            assert reason == "length" and len(ids) == N, (stops, reason, len(ids))
        else:
            assert reason == "stop" and len(ids) == first, (stops, reason, len(ids), first)
            checked += 1
    assert checked >= 1, "no case stopped: the reference text is too short to test"
    print(f"ok: {len(cases)} stop-string cases ({checked} stopped) on {N}-token generations")
finally:
    ctl("stop", "--run-dir", run_dir, check=False)
