# SPDX-License-Identifier: MIT
"""`dsv4ctl run --dspark` prints exactly the ids of `dsv4ctl run --no-dspark` (and the goldens'
greedy continuation) for every golden prompt of the DSpark fixture: with the drafter (policy,
and a fixed verify length of every value), and with the test-only replay proposer at 0 %, a
pseudo-random 50 % and 100 % agreement; sampling with a seed gives the same ids too; --stats
reports the speculation counters; malformed --dspark-proposer values are usage errors (64) and
--dspark on a model without a drafter is refused.

usage: test_dspark_run.py DSV4CTL FIXTURE_DIR PLAIN_MODEL_DIR SCRATCH_DIR"""
import json
import os
import re
import subprocess
import sys

exe, fixture, plain_model, scratch = sys.argv[1:5]
os.makedirs(scratch, exist_ok=True)


def run(model, ids, n, *extra, check=True):
    p = subprocess.run([exe, "run", "--model", model, "--prompt-ids", ids, "--max-tokens",
                        str(n), "--format", "ids", *extra], capture_output=True, text=True,
                       timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"run {extra} exited {p.returncode}: {p.stderr}")
    return p


with open(os.path.join(fixture, "goldens.json")) as fh:
    gold = json.load(fh)
n = gold["n_greedy"]
with open(os.path.join(fixture, "config.json")) as fh:
    EOS = json.load(fh)["eos_token_id"]
checked = 0
for pr in gold["prompts"]:
    plen = pr["prompt_len"]
    prompt = ",".join(map(str, pr["tokens"][:plen]))
    cont_ids = pr["tokens"][plen:plen + n]
    if EOS in cont_ids:    # run stops after printing EOS; the goldens go on
        cont_ids = cont_ids[:cont_ids.index(EOS) + 1]
    want = " ".join(map(str, cont_ids)) + "\n"
    off = run(fixture, prompt, n, "--no-dspark").stdout
    assert off == want, (plen, off, want)
    cont = os.path.join(scratch, f"cont-{plen}.txt")
    with open(cont, "w") as fh:
        fh.write(off)
    variants = [["--dspark"], ["--dspark", "--dspark-verify", "5", "--dspark-no-quench"],
                ["--dspark-proposer", f"replay:{cont}:err=all"],
                ["--dspark-proposer", f"replay:{cont}:agree=50", "--dspark-verify", "3"],
                ["--dspark-proposer", f"replay:{cont}"]]
    if plen <= 70:
        variants += [["--dspark", "--dspark-verify", str(v)] for v in (1, 2, 3, 4)]
    for v in variants:
        got = run(fixture, prompt, n, *v).stdout
        assert got == want, (plen, v, got, want)
        checked += 1
    # seeded sampling: the verifier draws what plain sampling draws
    samp = ["--temperature", "0.8", "--seed", "5"]
    ref = run(fixture, prompt, n, *samp).stdout
    got = run(fixture, prompt, n, *samp, "--dspark-proposer", f"replay:{cont}:agree=70").stdout
    assert got == ref, (plen, got, ref)

# counters on --stats
p = run(fixture, "0,140,9,103,6,127", 24, "--dspark-proposer",
        f"replay:{os.path.join(scratch, 'cont-1.txt')}", "--stats")
m = re.search(r"dspark: (\d+) verify steps, (\d+) plain steps, (\d+) proposed, (\d+) accepted",
              p.stderr)
assert m, p.stderr

# usage errors
for bad in ("replay", "replay:", "nope:x", f"replay:{scratch}/missing.txt",
            "replay:/dev/null:agree=101", "replay:/dev/null:err=1,,2", "replay:/dev/null:zzz"):
    p = run(fixture, "0,5", 4, "--dspark-proposer", bad, check=False)
    assert p.returncode in (64, 66), (bad, p.returncode, p.stderr)
    assert "dspark-proposer" in p.stderr, p.stderr
p = run(fixture, "0,5", 4, "--dspark-verify", "65", check=False)
assert p.returncode == 64, p.stderr
p = run(plain_model, "0,5", 4, "--dspark", check=False)
assert p.returncode == 64 and "dspark" in p.stderr, (p.returncode, p.stderr)
print(f"ok: {checked} speculative runs identical over {len(gold['prompts'])} golden prompts")
