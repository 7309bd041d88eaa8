#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Regenerate the committed fixtures (checkpoint + tokenizer + goldens.json) from their seeds.

Usage: make_fixtures.py [--out DIR] [NAME ...]   (default DIR: tests/fixtures, all fixtures;
for the trained ones (TRAINED) only the goldens of the committed checkpoint)
tests/py/test_fixtures_regen.py runs it into the build dir and compares bytes with the
committed files.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "reference"))
import pinned  # noqa: E402

pinned.pin()

sys.path.insert(0, HERE)
import make_goldens  # noqa: E402
import make_tiny_model  # noqa: E402
import make_tiny_tokenizer  # noqa: E402

# name -> (make_tiny_model preset, model seed, prompt seed, greedy tokens)
FIXTURES = {
    "tiny": ("tiny", 1, 1, 32),
    "tiny-confident": ("tiny-confident", 1, 1, 64),
    "tiny-dspark": ("tiny-dspark", 1, 1, 32),
}

# Trained fixtures (tools/train_demo.py): checkpoint and tokenizer are committed as trained;
# only their goldens regenerate here. name -> (prompt seed, greedy tokens).
TRAINED = {
    "demo": (1, 32),
}


def has_tokenizer(cfg):
    """A byte-level BPE needs the 256 byte tokens and the specials below the vocab size."""
    return cfg["vocab_size"] >= len(make_tiny_tokenizer.SPECIALS) + 256


def write_tokenizer(d, cfg):
    """The tiny byte-level BPE tokenizer with the model's vocab size, so text prompts work on
    the fixture; its BOS/EOS ids must be the ones config.json names."""
    specials = [c for c, _ in make_tiny_tokenizer.SPECIALS]
    if specials[cfg["bos_token_id"]] != "<｜begin▁of▁sentence｜>" or \
            specials[cfg["eos_token_id"]] != "<｜end▁of▁sentence｜>":
        raise ValueError("tokenizer BOS/EOS ids disagree with config.json")
    make_tiny_tokenizer.write(d, cfg["vocab_size"])


def make(out, name):
    if name in TRAINED:     # goldens of the committed checkpoint only
        prompt_seed, n_greedy = TRAINED[name]
        d = os.path.join(out, name)
        make_goldens.write_dspark(d, prompt_seed)
        return make_goldens.write(d, prompt_seed, n_greedy)
    preset, seed, prompt_seed, n_greedy = FIXTURES[name]
    d = os.path.join(out, name)
    cfg, init = make_tiny_model.PRESETS[preset]
    make_tiny_model.write_model(d, cfg, init, seed)
    if has_tokenizer(cfg):
        write_tokenizer(d, cfg)
    if "dspark_target_layer_ids" in cfg:
        make_goldens.write_dspark(d, prompt_seed)
    return make_goldens.write(d, prompt_seed, n_greedy)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "fixtures"))
    ap.add_argument("names", nargs="*", default=list(FIXTURES) + list(TRAINED))
    a = ap.parse_args()
    for n in a.names:
        print(f"== {n}")
        make_goldens.summary(make(a.out, n))


if __name__ == "__main__":
    main()
