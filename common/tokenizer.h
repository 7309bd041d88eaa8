/* SPDX-License-Identifier: MIT */
/*
 * Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json`: the
 * vocabulary, merges by rank, the pre-tokenizer (a Sequence of Split
 * regexes, then ByteLevel), added/special tokens matched as literal strings
 * before anything else, and the ByteLevel decoder. Ids are exactly those of
 * the JS reference (@lenml/tokenizers, a transformers.js fork) on the same
 * text; invalid UTF-8 input is first repaired the way that reference sees it
 * (common/utf8.h). See docs/tokenizer.md.
 *
 * A tokenizer is immutable after loading except for its word cache:
 * encode from one thread at a time (decode and lookups are thread-safe).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct dsv4_tokenizer dsv4_tokenizer;

/* A growable id array (append-only); free with dsv4_ids_free. */
struct dsv4_ids {
    uint32_t *v;
    size_t n, cap;
};

void dsv4_ids_push(struct dsv4_ids *ids, uint32_t id);
void dsv4_ids_free(struct dsv4_ids *ids);

/* Load `dir`/tokenizer.json and, if present, `dir`/tokenizer_config.json
 * (bos_token / eos_token names). */
int dsv4_tokenizer_open_dir(const char *dir, dsv4_tokenizer **out, struct dsv4_err *err);
/* Load from memory; `name` is used in error messages. `config` (the
 * tokenizer_config.json text) may be NULL. */
int dsv4_tokenizer_parse(const char *json, size_t len, const char *config, size_t config_len,
                         const char *name, dsv4_tokenizer **out, struct dsv4_err *err);
void dsv4_tokenizer_free(dsv4_tokenizer *t);

/* One past the largest id (vocabulary and added tokens). */
uint32_t dsv4_tokenizer_n_ids(const dsv4_tokenizer *t);
/* Id of an exact token string (an added token's content, or a vocabulary
 * entry in its byte-level spelling); false if absent. */
bool dsv4_tokenizer_find(const dsv4_tokenizer *t, const char *token, uint32_t *id);
/* BOS / EOS ids (from tokenizer_config.json, else DeepSeek's names);
 * false if the tokenizer has none. */
bool dsv4_tokenizer_bos(const dsv4_tokenizer *t, uint32_t *id);
bool dsv4_tokenizer_eos(const dsv4_tokenizer *t, uint32_t *id);
/* Is `id` an added token flagged "special"? */
bool dsv4_tokenizer_is_special(const dsv4_tokenizer *t, uint32_t id);

/* Append the ids of text[0..len) to *out (BOS first when add_bos). Any
 * bytes are accepted: invalid UTF-8 is encoded as U+FFFD. */
void dsv4_tokenizer_encode(dsv4_tokenizer *t, const char *text, size_t len, bool add_bos,
                           struct dsv4_ids *out);

/* Decode ids to a malloc'ed NUL-terminated string (*len without the NUL).
 * Special tokens are rendered only when `special`; byte sequences that are
 * not valid UTF-8 become U+FFFD. -EINVAL (naming the id) for an unknown id. */
int dsv4_tokenizer_decode(const dsv4_tokenizer *t, const uint32_t *ids, size_t n, bool special,
                          char **text, size_t *len, struct dsv4_err *err);

/*
 * Streaming detokenizer: feed ids one at a time; each call returns the text
 * that became complete (never a partial UTF-8 character). The concatenation
 * of all pieces and the final flush equals dsv4_tokenizer_decode() of the
 * same ids. The returned pointer is valid until the next call.
 */
struct dsv4_detok {
    const dsv4_tokenizer *t;
    bool special;
    uint8_t pend[4]; /* an incomplete character carried to the next token */
    size_t npend;
    uint8_t *buf, *stage;
    size_t cap, stage_cap;
};

void dsv4_detok_init(struct dsv4_detok *d, const dsv4_tokenizer *t, bool special);
int dsv4_detok_feed(struct dsv4_detok *d, uint32_t id, const char **text, size_t *len,
                    struct dsv4_err *err);
void dsv4_detok_flush(struct dsv4_detok *d, const char **text, size_t *len);
void dsv4_detok_free(struct dsv4_detok *d);
