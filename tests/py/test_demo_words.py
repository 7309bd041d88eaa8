# SPDX-License-Identifier: MIT
"""The trained demo fixture writes English: from five fixed prompts (four plain, one through the
chat template), greedy `dsv4ctl run` output is at least 80 % dictionary words (wamerican's
/usr/share/dict/words, case-insensitive; a possessive 's is dropped first) and at least 150 words
in all. Prints each continuation and its share.

usage: test_demo_words.py DSV4CTL FIXTURE_DIR [WORDS_FILE]"""
import re
import subprocess
import sys

PROMPTS = [["Once upon a time"], ["It was a fine morning, and"], ["She said that"],
           ["The family of"], ["--chat", "Tell me a story"]]
MAX_TOKENS = 60
MIN_SHARE = 0.80
MIN_WORDS = 150


def words_of(text):
    return [w[:-2] if w.lower().endswith("'s") else w
            for w in re.findall(r"[A-Za-z]+(?:'[A-Za-z]+)?", text)]


def main():
    exe, fixture = sys.argv[1], sys.argv[2]
    dict_path = sys.argv[3] if len(sys.argv) > 3 else "/usr/share/dict/words"
    try:
        with open(dict_path, encoding="utf-8") as fh:
            known = {w.strip().lower() for w in fh}
    except OSError as e:
        print(f"test_demo_words: {dict_path}: {e.strerror} (install wamerican: "
              f"tools/setup-deps.sh)")
        return 1
    total, good = 0, 0
    for pr in PROMPTS:
        p = subprocess.run([exe, "run", "--model", fixture, "--max-tokens", str(MAX_TOKENS),
                            "--no-progress", *pr], capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            print(f"FAIL: run {pr} exited {p.returncode}: {p.stderr.strip()}")
            return 1
        ws = words_of(p.stdout)
        ok = [w for w in ws if w.lower() in known]
        bad = sorted({w for w in ws if w.lower() not in known})
        total += len(ws)
        good += len(ok)
        print(f"{pr[-1]!r} -> {p.stdout.strip()!r}\n  {len(ok)}/{len(ws)} dictionary words; "
              f"not: {' '.join(bad)}")
    share = good / total if total else 0.0
    print(f"{good}/{total} = {share:.3f} dictionary words (need >= {MIN_SHARE} and "
          f">= {MIN_WORDS} words)")
    return 0 if share >= MIN_SHARE and total >= MIN_WORDS else 1


if __name__ == "__main__":
    sys.exit(main())
