# SPDX-License-Identifier: MIT
"""`dsv4ctl run` / `score` with a text prompt on a shipped tiny fixture that has a tokenizer:
the text path must equal the id path through `dsv4ctl tokenize` (BOS + text; the chat template
with --chat), `--format text` must print exactly `dsv4ctl detokenize` of the generated ids, and
a model directory without tokenizer.json must fail with a clear message.

usage: test_run_text.py DSV4CTL FIXTURE_DIR"""
import subprocess
import sys
import tempfile

exe, model = sys.argv[1], sys.argv[2]


def ctl(*args, check=True):
    p = subprocess.run([exe, *args], capture_output=True)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}: {p.stderr!r}")
    return p


text = "Hello world, how are you?"
for extra, tok_extra in (([], ["--bos"]), (["--chat"], ["--chat"]),
                         (["--chat", "--think"], ["--chat", "--think"])):
    ids = ctl("tokenize", "--model", model, *tok_extra, text).stdout.decode().split()
    assert ids and all(i.isdigit() for i in ids), ids
    by_ids = ctl("run", "--model", model, "--prompt-ids", ",".join(ids), "--max-tokens", "10",
                 "--format", "ids").stdout
    by_text = ctl("run", "--model", model, *extra, text, "--max-tokens", "10",
                  "--format", "ids").stdout
    assert by_ids == by_text, (extra, by_ids, by_text)
    gen = by_ids.decode().split()
    shown = ctl("run", "--model", model, *extra, "--prompt", text, "--max-tokens", "10").stdout
    want = ctl("detokenize", "--model", model, *gen).stdout
    assert shown.rstrip(b"\n") == want.rstrip(b"\n"), (shown, want)
    s_ids = ctl("score", "--model", model, "--prompt-ids", ",".join(ids)).stdout
    s_text = ctl("score", "--model", model, *extra, text).stdout
    assert s_ids == s_text, extra

with tempfile.TemporaryDirectory() as d:
    p = ctl("run", "--model", d, "Hello", check=False)
    assert p.returncode == 65 and b"tokenizer.json" in p.stderr, (p.returncode, p.stderr)
    p = ctl("run", "--model", model, "--prompt-ids", "1", "Hello", check=False)
    assert p.returncode == 64, p.returncode
    p = ctl("score", "--model", model, "Hello", "--format", "text", check=False)
    assert p.returncode == 64, p.returncode
print("run/score text prompts: ok")
