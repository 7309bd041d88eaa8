/* SPDX-License-Identifier: MIT */
/*
 * A deterministic corpus of varied strings for the tokenizer tests and the
 * benchmark: code in several languages, CJK, emoji and ZWJ sequences,
 * combining marks, digit runs, white space runs and mixed newlines, added
 * tokens inside text, invalid UTF-8 and very long words. Only characters
 * assigned since Unicode 14 at the latest are used, so PCRE2 10.42's
 * Unicode tables and the JS engine's agree on every character class.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct corpus {
    char **s;
    size_t *len;
    size_t n, cap;
};

/* At least `n_min` strings (all categories are always present). */
void corpus_generate(struct corpus *c, uint64_t seed, size_t n_min);
void corpus_free(struct corpus *c);
