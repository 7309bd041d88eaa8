# SPDX-License-Identifier: MIT
"""Regenerating the goldens and the tokenizer of every committed fixture gives files
byte-identical to the committed goldens.json, tokenizer.json and tokenizer_config.json (numerics
pinned, see tools/reference/pinned.py), and the goldens carry what the engine tests need.
Usage: test_goldens_regen.py BUILD_DIR"""
import filecmp
import json
import os
import shutil
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import make_fixtures  # noqa: E402  (pins numerics: re-executes this test once)
import make_goldens  # noqa: E402

fails = 0


def check(what, ok):
    global fails
    print(f"{'ok' if ok else 'FAIL'}: {what}")
    fails += not ok


def main(scratch):
    for name, (_, _, prompt_seed, n_greedy) in make_fixtures.FIXTURES.items():
        fx = os.path.join(ROOT, "tests", "fixtures", name)
        tok = os.path.join(scratch, name + ".tokenizer")
        cfg = json.load(open(os.path.join(fx, "config.json")))
        for f in ("tokenizer.json", "tokenizer_config.json"):
            if not make_fixtures.has_tokenizer(cfg):
                check(f"{name}: no {f} (vocab too small)", not os.path.exists(os.path.join(fx, f)))
                continue
            make_fixtures.write_tokenizer(tok, cfg)
            check(f"{name}: regenerated {f} == committed",
                  filecmp.cmp(os.path.join(tok, f), os.path.join(fx, f), shallow=False))
        out = os.path.join(scratch, name + ".goldens.json")
        gold = make_goldens.write(fx, prompt_seed, n_greedy, out)
        same = filecmp.cmp(out, os.path.join(fx, "goldens.json"), shallow=False)
        check(f"{name}: regenerated goldens.json == committed", same)
        if not same:
            make_goldens.summary(gold)
        lens = [e["prompt_len"] for e in gold["prompts"]]
        check(f"{name}: prompts of lengths {lens}", lens == [1, 7, 70, 200, 520])
        check(f"{name}: every sequence = prompt + {n_greedy} greedy tokens",
              all(len(e["tokens"]) == e["prompt_len"] + n_greedy and
                  len(e["argmax"]) == len(e["tokens"]) - 1 for e in gold["prompts"]))
        check(f"{name}: plain JSON", json.loads(open(out).read()) == gold)
    conf = json.load(open(os.path.join(ROOT, "tests", "fixtures", "tiny-confident",
                                       "goldens.json")))
    full = [e["prompt_len"] for e in conf["prompts"] if e["greedy_stable_prefix"] >= 64]
    check(f"tiny-confident: greedy continuations stable for >= 64 steps after prompts of "
          f"lengths {full} (at least two)", len(full) >= 2)
    return 1 if fails else 0


if __name__ == "__main__":
    d = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "/tmp", "goldens_regen")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    sys.exit(main(d))
