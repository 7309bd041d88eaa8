#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Rewrite the tiny tokenizer to use the tokenizer.json features DeepSeek's
does not: merges as ["a", "b"] pairs, ignore_merges, lstrip/rstrip added
tokens, a literal String split, an inverted split, \\d / \\w / . escapes, and
ByteLevel with its own regex and a prefix space. The result is compared with
the JS reference like the others (tokenizer-ref-features).
Usage: make_feature_tokenizer.py --tiny DIR --out DIR
"""
import argparse
import json
import os

ap = argparse.ArgumentParser()
ap.add_argument("--tiny", required=True)
ap.add_argument("--out", required=True)
a = ap.parse_args()
with open(os.path.join(a.tiny, "tokenizer.json"), encoding="utf-8") as f:
    tok = json.load(f)
with open(os.path.join(a.tiny, "tokenizer_config.json"), encoding="utf-8") as f:
    cfg = json.load(f)

tok["model"]["merges"] = [m.split(" ") for m in tok["model"]["merges"]]
tok["model"]["ignore_merges"] = True
for t in tok["added_tokens"]:
    if t["content"] == "<think>":
        t["lstrip"] = True
    if t["content"] == "</think>":
        t["rstrip"] = True
    if t["content"] == "<｜User｜>":
        t["lstrip"] = t["rstrip"] = True
tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"String": ", "}, "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex": "\\d{2}|x.y"}, "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex": "\\w+|\\W"}, "behavior": "Isolated", "invert": True},
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
]}
os.makedirs(a.out, exist_ok=True)
for name, obj in (("tokenizer.json", tok), ("tokenizer_config.json", cfg)):
    with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)
