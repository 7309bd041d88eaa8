/* SPDX-License-Identifier: MIT */
/*
 * Why one long file: the loader, pre-tokenizer, BPE and decoder share the private symbol
 * tables built at load; splitting them would publish those tables. The stages are banners.
 *
 * Byte-level BPE from tokenizer.json (see tokenizer.h). Encoding pipeline,
 * each stage matching the JS reference (@lenml/tokenizers):
 *
 *   bytes → UTF-8 repair → split on added tokens (leftmost, then longest)
 *   → per text section: pre-tokenizer steps (Split regexes, each applied to
 *   every piece of the previous step; ByteLevel last) → BPE per word.
 *
 * BPE works on raw bytes: every vocabulary entry spelled in the byte-level
 * alphabet is mapped back to its bytes and given a dense symbol number (its
 * index in `raw`); a merge is the key (left symbol, right symbol) → (rank,
 * merged symbol), collected in a strmap (later duplicates win, as in the
 * reference) and then laid out as a sorted adjacency list per left symbol,
 * which the hot loop binary-searches (three cache misses per hash lookup
 * were most of the encode time). A word starts as one symbol per byte and the lowest
 * (rank, position) pair is merged until none is left, with a binary heap
 * and lazy invalidation, so a 10k-byte word costs O(n log n). Short words
 * are remembered in a direct-mapped cache.
 *
 * Regexes come in the HF (Rust/Oniguruma) dialect and the reference runs
 * them as JS `u` regexes; they are compiled with PCRE2 (UTF + UCP, JIT when
 * available) after rewriting the escapes whose meaning differs: JS `\s` is
 * Zs + TAB..CR + U+FEFF + U+2028/9, JS `\d` and `\w` are ASCII, JS `.`
 * excludes CR, LF, U+2028/9.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "buf.h"
#include "file.h"
#include "json_limits.h"
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strmap.h"
#include "utf8.h"

#define MAX_IDS (1u << 24)    /* ids above this are a corrupt file, not a vocabulary */
#define CACHE_SLOTS 8192u     /* direct-mapped word cache */
#define CACHE_WORD 24u        /* longest word (bytes) the cache keeps */
#define NO_SYM UINT32_MAX

/* ---------------------------------------------------------------- byte-level alphabet */

/* GPT-2's byte ↔ code point table: printable Latin-1 bytes map to
 * themselves, the other 68 bytes to U+0100.. in byte order. */
static uint16_t byte_to_cp[256];
static int16_t cp_to_byte[324];

static void init_byte_level(void)
{
    if (byte_to_cp['!'] != 0)
        return;
    unsigned n = 0;
    for (unsigned b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        byte_to_cp[b] = (uint16_t)(printable ? b : 256 + n++);
    }
    for (unsigned c = 0; c < DSV4_ARRAY_SIZE(cp_to_byte); c++)
        cp_to_byte[c] = -1;
    for (unsigned b = 0; b < 256; b++)
        cp_to_byte[byte_to_cp[b]] = (int16_t)b;
}

/* Byte-level string → raw bytes in out (capacity ≥ n). Returns the length,
 * or SIZE_MAX if a character is outside the alphabet. */
static size_t byte_level_to_raw(const char *s, size_t n, uint8_t *out)
{
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = dsv4_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (cp >= DSV4_ARRAY_SIZE(cp_to_byte) || cp_to_byte[cp] < 0)
            return SIZE_MAX;
        out[o++] = (uint8_t)cp_to_byte[cp];
        i += l;
    }
    return o;
}

/* ---------------------------------------------------------------- structures */

struct added {
    char *content;
    size_t len;
    uint32_t id;
    bool special, lstrip, rstrip;
};

struct trie_node {
    int32_t child, sibling; /* -1 = none */
    int32_t added;          /* index into added[], -1 if no token ends here */
    uint8_t byte;
};

enum step_kind { STEP_SPLIT, STEP_BYTE_LEVEL };

struct step {
    enum step_kind kind;
    pcre2_code *re;   /* Split pattern, or ByteLevel's own regex when use_regex */
    bool invert;      /* Split: keep only the matches */
    bool prefix_space; /* ByteLevel add_prefix_space */
};

struct token_bytes {
    uint32_t off, len; /* into dsv4_tokenizer.text */
    bool known, added, special;
};

struct cache_slot {
    uint64_t hash;
    uint8_t klen, nids; /* klen 0 = empty */
    uint8_t key[CACHE_WORD];
    uint32_t ids[CACHE_WORD];
};

struct heap_entry {
    uint32_t rank, pos, left, right, merged;
};

struct merge {
    uint32_t right, rank, merged;
};

struct dsv4_tokenizer {
    dsv4_strmap *by_str;  /* token string (byte-level spelling or added content) → id */
    dsv4_strmap *raw;     /* raw bytes of a vocabulary entry → id; index = BPE symbol */
    dsv4_strmap *pairs;   /* while loading: (u32 left, u32 right symbol) → rank << 32 | merged */
    uint32_t *merge_start; /* per left symbol: its merges are merges[start[l] .. start[l + 1]) */
    struct merge *merges;  /* sorted by right symbol within a left symbol */
    uint32_t byte_sym[256];
    bool ignore_merges;
    bool has_unk;
    uint32_t unk_id;

    struct added *added;
    size_t n_added;
    struct trie_node *trie;
    size_t n_trie, cap_trie;
    bool first_byte[256];

    struct step *steps;
    size_t n_steps;
    pcre2_match_data *md;

    uint32_t n_ids;
    struct token_bytes *tok; /* per id */
    char *text;              /* decoded bytes of every id */
    size_t text_len;
    bool has_bos, has_eos;
    uint32_t bos_id, eos_id;

    /* scratch (encode is single-threaded) */
    struct cache_slot *cache;
    uint8_t *fix;
    size_t fix_cap;
    uint32_t *sym, *nxt, *prv;
    struct heap_entry *heap;
    size_t scratch_cap, heap_cap;
    uint8_t *word;
    size_t word_cap;
};

void dsv4_ids_push(struct dsv4_ids *ids, uint32_t id)
{
    DSV4_GROW(ids->v, ids->cap, ids->n + 1);
    ids->v[ids->n++] = id;
}

void dsv4_ids_free(struct dsv4_ids *ids)
{
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

/* ---------------------------------------------------------------- regex translation */

static void sb_str(struct dsv4_buf *b, const char *s)
{
    dsv4_buf_append(b, s, strlen(s));
}

#define JS_SPACE "\\t\\n\\x{0B}\\f\\r\\p{Zs}\\x{FEFF}\\x{2028}\\x{2029}"

/* Rewrite an HF regex so PCRE2 gives it the JS `u`-mode meaning. Returns
 * NULL (and *why) for constructs whose meaning cannot be carried over. */
static char *translate_regex(const char *re, const char **why)
{
    struct dsv4_buf b = { 0 };
    bool in_class = false;
    dsv4_buf_append(&b, "", 0);
    for (size_t i = 0; re[i]; i++) {
        char c = re[i];
        if (c == '\\' && re[i + 1]) {
            char e = re[++i];
            switch (e) {
            case 's': sb_str(&b, in_class ? JS_SPACE : "[" JS_SPACE "]"); break;
            case 'd': sb_str(&b, in_class ? "0-9" : "[0-9]"); break;
            case 'w': sb_str(&b, in_class ? "A-Za-z0-9_" : "[A-Za-z0-9_]"); break;
            case 'S': case 'D': case 'W':
                if (in_class) {
                    *why = "negated class escape inside [...]";
                    free(b.p);
                    return NULL;
                }
                sb_str(&b, e == 'S' ? "[^" JS_SPACE "]" : e == 'D' ? "[^0-9]" : "[^A-Za-z0-9_]");
                break;
            case 'b': case 'B':
                if (!in_class) {
                    *why = "\\b / \\B (ASCII in JS, Unicode in PCRE2)";
                    free(b.p);
                    return NULL;
                }
                dsv4_buf_append(&b, re + i - 1, 2);
                break;
            case 'u': {
                /* \uXXXX → \x{XXXX} */
                size_t k = 0;
                while (k < 4 && re[i + 1 + k] &&
                       strchr("0123456789abcdefABCDEF", re[i + 1 + k]))
                    k++;
                if (k != 4) {
                    *why = "malformed \\u escape";
                    free(b.p);
                    return NULL;
                }
                sb_str(&b, "\\x{");
                dsv4_buf_append(&b, re + i + 1, 4);
                sb_str(&b, "}");
                i += 4;
                break;
            }
            default:
                dsv4_buf_append(&b, re + i - 1, 2);
                break;
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            dsv4_buf_append(&b, &c, 1);
            if (re[i + 1] == '^')
                dsv4_buf_append(&b, re + ++i, 1);
            continue;
        }
        if (in_class && c == ']') {
            in_class = false;
            dsv4_buf_append(&b, &c, 1);
            continue;
        }
        if (!in_class && c == '.') {
            sb_str(&b, "[^\\n\\r\\x{2028}\\x{2029}]");
            continue;
        }
        dsv4_buf_append(&b, &c, 1);
    }
    return b.p;
}

static int compile_regex(const char *pattern, bool literal, pcre2_code **out, const char *name,
                         const char *field, struct dsv4_err *err)
{
    const char *why = NULL;
    char *pat = literal ? dsv4_xstrdup(pattern) : translate_regex(pattern, &why);
    if (!pat)
        return dsv4_errf(err, -EINVAL, "%s: %s: unsupported regex (%s)", name, field, why);
    int ec;
    PCRE2_SIZE eo;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &ec, &eo, NULL);
    free(pat);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof(msg));
        return dsv4_errf(err, -EINVAL, "%s: %s: bad regex at offset %zu: %s", name, field,
                         (size_t)eo, (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter is the fallback */
    *out = re;
    return 0;
}

/* ---------------------------------------------------------------- loading helpers */

static const cJSON *field(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

/* Optional boolean: absent or null → def; otherwise it must be a bool. */
static int opt_bool(const cJSON *obj, const char *key, bool def, bool *out, const char *name,
                    const char *where, struct dsv4_err *err)
{
    const cJSON *v = field(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return dsv4_errf(err, -EINVAL, "%s: %s.%s: expected true or false", name, where, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

static bool is_type(const cJSON *obj, const char *type)
{
    const cJSON *t = field(obj, "type");
    return cJSON_IsString(t) && strcmp(t->valuestring, type) == 0;
}

static const char *type_of(const cJSON *obj)
{
    const cJSON *t = field(obj, "type");
    return cJSON_IsString(t) ? t->valuestring : "(none)";
}

static bool valid_utf8(const char *s, size_t n)
{
    return dsv4_utf8_valid_prefix((const uint8_t *)s, n) == n;
}

/* A JSON number that is a non-negative integer id below MAX_IDS. */
static bool json_id(const cJSON *v, uint32_t *id)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d < MAX_IDS) || d != (double)(uint32_t)d)
        return false;
    *id = (uint32_t)d;
    return true;
}

static int load_vocab(dsv4_tokenizer *t, const cJSON *vocab, const char *name,
                      struct dsv4_err *err)
{
    if (!cJSON_IsObject(vocab))
        return dsv4_errf(err, -EINVAL, "%s: model.vocab: expected an object", name);
    size_t n = (size_t)cJSON_GetArraySize(vocab);
    t->by_str = dsv4_strmap_new(n + 1024);
    for (const cJSON *e = vocab->child; e; e = e->next) {
        uint32_t id;
        if (!json_id(e, &id))
            return dsv4_errf(err, -EINVAL, "%s: model.vocab['%.64s']: expected an id in [0, %u)",
                             name, e->string, MAX_IDS);
        size_t len = strlen(e->string);
        if (!valid_utf8(e->string, len))
            return dsv4_errf(err, -EINVAL, "%s: model.vocab: a token is not valid UTF-8", name);
        dsv4_strmap_set(t->by_str, e->string, len, id);
        t->n_ids = DSV4_MAX(t->n_ids, id + 1);
    }
    return 0;
}

static int load_added(dsv4_tokenizer *t, const cJSON *arr, const char *name, struct dsv4_err *err)
{
    if (!arr || cJSON_IsNull(arr))
        return 0;
    if (!cJSON_IsArray(arr))
        return dsv4_errf(err, -EINVAL, "%s: added_tokens: expected an array", name);
    size_t n = (size_t)cJSON_GetArraySize(arr), i = 0;
    t->added = dsv4_xcalloc(n ? n : 1, sizeof(*t->added));
    for (const cJSON *e = arr->child; e; e = e->next, i++) {
        struct added *a = &t->added[i];
        char where[64];
        snprintf(where, sizeof(where), "added_tokens[%zu]", i);
        if (!cJSON_IsObject(e))
            return dsv4_errf(err, -EINVAL, "%s: %s: expected an object", name, where);
        const cJSON *c = field(e, "content");
        if (!cJSON_IsString(c) || !c->valuestring[0])
            return dsv4_errf(err, -EINVAL, "%s: %s.content: expected a non-empty string", name,
                             where);
        if (!json_id(field(e, "id"), &a->id))
            return dsv4_errf(err, -EINVAL, "%s: %s.id: expected an id in [0, %u)", name, where,
                             MAX_IDS);
        a->len = strlen(c->valuestring);
        if (!valid_utf8(c->valuestring, a->len))
            return dsv4_errf(err, -EINVAL, "%s: %s.content: not valid UTF-8", name, where);
        a->content = dsv4_xstrdup(c->valuestring);
        t->n_added = i + 1;
        int rc;
        if ((rc = opt_bool(e, "special", false, &a->special, name, where, err)) ||
            (rc = opt_bool(e, "lstrip", false, &a->lstrip, name, where, err)) ||
            (rc = opt_bool(e, "rstrip", false, &a->rstrip, name, where, err)))
            return rc;
        dsv4_strmap_set(t->by_str, a->content, a->len, a->id);
        t->n_ids = DSV4_MAX(t->n_ids, a->id + 1);
    }
    return 0;
}

static int32_t trie_new(dsv4_tokenizer *t, uint8_t byte)
{
    if (t->n_trie == t->cap_trie) {
        t->cap_trie = t->cap_trie ? t->cap_trie * 2 : 256;
        t->trie = dsv4_xrealloc(t->trie, t->cap_trie * sizeof(*t->trie));
    }
    struct trie_node *nd = &t->trie[t->n_trie];
    nd->child = nd->sibling = nd->added = -1;
    nd->byte = byte;
    return (int32_t)t->n_trie++;
}

static void build_trie(dsv4_tokenizer *t)
{
    trie_new(t, 0); /* root */
    for (size_t i = 0; i < t->n_added; i++) {
        const struct added *a = &t->added[i];
        int32_t cur = 0;
        for (size_t k = 0; k < a->len; k++) {
            uint8_t b = (uint8_t)a->content[k];
            int32_t c = t->trie[cur].child;
            while (c >= 0 && t->trie[c].byte != b)
                c = t->trie[c].sibling;
            if (c < 0) {
                c = trie_new(t, b);
                t->trie[c].sibling = t->trie[cur].child;
                t->trie[cur].child = c;
            }
            cur = c;
        }
        t->trie[cur].added = (int32_t)i; /* a later duplicate wins, as in the reference */
        t->first_byte[(uint8_t)a->content[0]] = true;
    }
}

/* Split "a b" or ["a", "b"] into its two halves (pointers into the JSON). */
static int merge_halves(const cJSON *m, size_t i, const char **a, size_t *alen, const char **b,
                        size_t *blen, const char *name, struct dsv4_err *err)
{
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' '))
            return dsv4_errf(err, -EINVAL, "%s: model.merges[%zu]: expected \"left right\"", name,
                             i);
        *a = s;
        *alen = (size_t)(sp - s);
        *b = sp + 1;
        *blen = strlen(sp + 1);
        return 0;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
        cJSON_IsString(m->child->next) && m->child->valuestring[0] &&
        m->child->next->valuestring[0]) {
        *a = m->child->valuestring;
        *alen = strlen(*a);
        *b = m->child->next->valuestring;
        *blen = strlen(*b);
        return 0;
    }
    return dsv4_errf(err, -EINVAL,
                     "%s: model.merges[%zu]: expected \"left right\" or [\"left\", \"right\"]",
                     name, i);
}

static int load_model(dsv4_tokenizer *t, const cJSON *model, const char *name,
                      struct dsv4_err *err)
{
    if (!cJSON_IsObject(model))
        return dsv4_errf(err, -EINVAL, "%s: model: expected an object", name);
    if (field(model, "type") && !is_type(model, "BPE"))
        return dsv4_errf(err, -EINVAL, "%s: model.type: '%s' unsupported (only BPE)", name,
                         type_of(model));
    int rc;
    bool fallback = false;
    if ((rc = opt_bool(model, "byte_fallback", false, &fallback, name, "model", err)) ||
        (rc = opt_bool(model, "ignore_merges", false, &t->ignore_merges, name, "model", err)))
        return rc;
    if (fallback)
        return dsv4_errf(err, -EINVAL, "%s: model.byte_fallback: unsupported", name);
    static const char *const unsupported[] = { "continuing_subword_prefix", "end_of_word_suffix" };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(unsupported); i++) {
        const cJSON *v = field(model, unsupported[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
            return dsv4_errf(err, -EINVAL, "%s: model.%s: unsupported", name, unsupported[i]);
    }
    const cJSON *dropout = field(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return dsv4_errf(err, -EINVAL, "%s: model.dropout: unsupported", name);
    return load_vocab(t, field(model, "vocab"), name, err);
}

static int cmp_merge(const void *a, const void *b)
{
    const struct merge *x = a, *y = b;
    return x->right < y->right ? -1 : x->right > y->right;
}

static void build_merge_index(dsv4_tokenizer *t)
{
    size_t ns = dsv4_strmap_size(t->raw), np = dsv4_strmap_size(t->pairs);
    t->merge_start = dsv4_xcalloc(ns + 1, sizeof(*t->merge_start));
    t->merges = dsv4_xmalloc((np ? np : 1) * sizeof(*t->merges));
    for (size_t i = 0; i < np; i++) {
        uint32_t key[2];
        memcpy(key, dsv4_strmap_key(t->pairs, i, NULL), sizeof(key));
        t->merge_start[key[0] + 1]++;
    }
    for (size_t l = 0; l < ns; l++)
        t->merge_start[l + 1] += t->merge_start[l];
    uint32_t *fill = dsv4_xmalloc((ns ? ns : 1) * sizeof(*fill));
    memcpy(fill, t->merge_start, ns * sizeof(*fill));
    for (size_t i = 0; i < np; i++) {
        uint32_t key[2];
        memcpy(key, dsv4_strmap_key(t->pairs, i, NULL), sizeof(key));
        uint64_t v = dsv4_strmap_value(t->pairs, i);
        t->merges[fill[key[0]]++] = (struct merge){ key[1], (uint32_t)(v >> 32), (uint32_t)v };
    }
    free(fill);
    for (size_t l = 0; l < ns; l++)
        qsort(t->merges + t->merge_start[l], t->merge_start[l + 1] - t->merge_start[l],
              sizeof(*t->merges), cmp_merge);
    t->pairs = dsv4_strmap_free(t->pairs); /* the index replaces it */
}

/* The merge of (left, right), or NULL. */
static const struct merge *find_merge(const dsv4_tokenizer *t, uint32_t left, uint32_t right)
{
    size_t lo = t->merge_start[left], hi = t->merge_start[left + 1];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t r = t->merges[mid].right;
        if (r == right)
            return &t->merges[mid];
        if (r < right)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The BPE tables, built once vocabulary and added tokens are known (an
 * added token overrides a vocabulary entry of the same spelling, as in the
 * reference). */
static int load_bpe(dsv4_tokenizer *t, const cJSON *model, const char *name,
                    struct dsv4_err *err)
{
    size_t nv = dsv4_strmap_size(t->by_str);
    t->raw = dsv4_strmap_new(nv);
    uint8_t *tmp = NULL;
    size_t tmp_cap = 0;
    const cJSON *vocab = field(model, "vocab");
    for (const cJSON *e = vocab->child; e; e = e->next) {
        size_t len = strlen(e->string);
        if (len > tmp_cap) {
            tmp_cap = len * 2;
            tmp = dsv4_xrealloc(tmp, tmp_cap);
        }
        size_t rl = byte_level_to_raw(e->string, len, tmp);
        if (rl == SIZE_MAX || rl == 0)
            continue; /* not byte-level (e.g. "<｜begin▁of▁sentence｜>"): BPE never makes it */
        uint64_t id;
        dsv4_strmap_get(t->by_str, e->string, len, &id);
        dsv4_strmap_set(t->raw, tmp, rl, id);
    }
    for (unsigned b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        size_t ix = dsv4_strmap_index(t->raw, &byte, 1);
        t->byte_sym[b] = ix == SIZE_MAX ? NO_SYM : (uint32_t)ix;
        /* Bytes that repaired UTF-8 can contain must have a symbol. */
        bool possible = b < 0xC0 || (b >= 0xC2 && b <= 0xF4);
        if (ix == SIZE_MAX && possible) {
            free(tmp);
            return dsv4_errf(err, -EINVAL, "%s: model.vocab: no token for byte 0x%02X", name, b);
        }
    }

    const cJSON *merges = field(model, "merges");
    if (!merges || cJSON_IsNull(merges))
        merges = NULL;
    else if (!cJSON_IsArray(merges)) {
        free(tmp);
        return dsv4_errf(err, -EINVAL, "%s: model.merges: expected an array", name);
    }
    size_t nm = merges ? (size_t)cJSON_GetArraySize(merges) : 0, i = 0;
    t->pairs = dsv4_strmap_new(nm);
    for (const cJSON *m = merges ? merges->child : NULL; m; m = m->next, i++) {
        const char *a = NULL, *b = NULL;
        size_t al = 0, bl = 0;
        int rc = merge_halves(m, i, &a, &al, &b, &bl, name, err);
        if (rc) {
            free(tmp);
            return rc;
        }
        if (al + bl > tmp_cap) {
            tmp_cap = (al + bl) * 2;
            tmp = dsv4_xrealloc(tmp, tmp_cap);
        }
        size_t ra = byte_level_to_raw(a, al, tmp);
        size_t rb = ra == SIZE_MAX ? SIZE_MAX : byte_level_to_raw(b, bl, tmp + ra);
        if (ra == SIZE_MAX || rb == SIZE_MAX)
            continue; /* outside the byte-level alphabet: can never apply */
        size_t ia = dsv4_strmap_index(t->raw, tmp, ra);
        size_t ib = dsv4_strmap_index(t->raw, tmp + ra, rb);
        size_t im = dsv4_strmap_index(t->raw, tmp, ra + rb);
        if (ia == SIZE_MAX || ib == SIZE_MAX || im == SIZE_MAX) {
            const char *what = ia == SIZE_MAX ? "left token" : ib == SIZE_MAX ? "right token"
                                                                              : "merged token";
            free(tmp);
            return dsv4_errf(err, -EINVAL, "%s: model.merges[%zu]: %s not in model.vocab", name,
                             i, what);
        }
        uint32_t key[2] = { (uint32_t)ia, (uint32_t)ib };
        /* A repeated pair keeps its last rank, as the reference's Map does. */
        dsv4_strmap_set(t->pairs, key, sizeof(key), ((uint64_t)i << 32) | (uint32_t)im);
    }
    free(tmp);
    build_merge_index(t);
    return 0;
}

static int load_normalizer(const cJSON *n, const char *name, struct dsv4_err *err)
{
    if (!n || cJSON_IsNull(n))
        return 0;
    if (is_type(n, "Sequence")) {
        const cJSON *list = field(n, "normalizers");
        if (cJSON_IsArray(list) && cJSON_GetArraySize(list) == 0)
            return 0;
    }
    return dsv4_errf(err, -EINVAL, "%s: normalizer: type '%s' unsupported (only none)", name,
                     type_of(n));
}

/* The GPT-2 split that ByteLevel applies itself when use_regex is true
 * (the reference's own literal). */
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int load_step(dsv4_tokenizer *t, const cJSON *p, const char *where, const char *name,
                     struct dsv4_err *err)
{
    if (!cJSON_IsObject(p))
        return dsv4_errf(err, -EINVAL, "%s: %s: expected an object", name, where);
    struct step *s = &t->steps[t->n_steps];
    memset(s, 0, sizeof(*s));
    char f[96];
    int rc;
    if (is_type(p, "Split")) {
        if ((rc = opt_bool(p, "invert", false, &s->invert, name, where, err)))
            return rc;
        const cJSON *beh = field(p, "behavior");
        if (!s->invert && !(cJSON_IsString(beh) && strcmp(beh->valuestring, "Isolated") == 0))
            return dsv4_errf(err, -EINVAL, "%s: %s.behavior: '%s' unsupported (only Isolated)",
                             name, where, cJSON_IsString(beh) ? beh->valuestring : "(none)");
        const cJSON *pat = field(p, "pattern");
        const cJSON *rx = pat ? field(pat, "Regex") : NULL, *str = pat ? field(pat, "String") : NULL;
        snprintf(f, sizeof(f), "%s.pattern", where);
        if (cJSON_IsString(rx))
            rc = compile_regex(rx->valuestring, false, &s->re, name, f, err);
        else if (cJSON_IsString(str) && str->valuestring[0])
            rc = compile_regex(str->valuestring, true, &s->re, name, f, err);
        else
            return dsv4_errf(err, -EINVAL, "%s: %s: expected {\"Regex\": ...} or {\"String\": ...}",
                             name, f);
        if (rc)
            return rc;
        s->kind = STEP_SPLIT;
    } else if (is_type(p, "ByteLevel")) {
        bool use_regex = true;
        if ((rc = opt_bool(p, "add_prefix_space", false, &s->prefix_space, name, where, err)) ||
            (rc = opt_bool(p, "use_regex", true, &use_regex, name, where, err)))
            return rc;
        if (use_regex) {
            snprintf(f, sizeof(f), "%s (ByteLevel regex)", where);
            if ((rc = compile_regex(gpt2_regex, false, &s->re, name, f, err)))
                return rc;
        }
        s->kind = STEP_BYTE_LEVEL;
    } else {
        return dsv4_errf(err, -EINVAL, "%s: %s.type: '%s' unsupported (Split, ByteLevel)", name,
                         where, type_of(p));
    }
    t->n_steps++;
    return 0;
}

static int load_pre_tokenizer(dsv4_tokenizer *t, const cJSON *p, const char *name,
                              struct dsv4_err *err)
{
    if (!p || cJSON_IsNull(p))
        return dsv4_errf(err, -EINVAL, "%s: pre_tokenizer: missing (byte-level BPE needs ByteLevel)",
                         name);
    if (is_type(p, "Sequence")) {
        const cJSON *list = field(p, "pretokenizers");
        if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0)
            return dsv4_errf(err, -EINVAL, "%s: pre_tokenizer.pretokenizers: expected a non-empty array",
                             name);
        t->steps = dsv4_xcalloc((size_t)cJSON_GetArraySize(list), sizeof(*t->steps));
        size_t i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char where[64];
            snprintf(where, sizeof(where), "pre_tokenizer.pretokenizers[%zu]", i);
            int rc = load_step(t, e, where, name, err);
            if (rc)
                return rc;
        }
    } else {
        t->steps = dsv4_xcalloc(1, sizeof(*t->steps));
        int rc = load_step(t, p, "pre_tokenizer", name, err);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < t->n_steps; i++)
        if ((t->steps[i].kind == STEP_BYTE_LEVEL) != (i + 1 == t->n_steps))
            return dsv4_errf(err, -EINVAL,
                             "%s: pre_tokenizer: ByteLevel must be the last step, exactly once",
                             name);
    t->md = pcre2_match_data_create(1, NULL);
    return 0;
}

/* Decoded bytes of every id: added tokens verbatim, vocabulary entries
 * through the byte-level alphabet (characters outside it verbatim). */
static void build_id_text(dsv4_tokenizer *t)
{
    t->tok = dsv4_xcalloc(t->n_ids, sizeof(*t->tok));
    struct dsv4_buf b = { 0 };
    size_t n = dsv4_strmap_size(t->by_str);
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *s = dsv4_strmap_key(t->by_str, i, &len);
        uint32_t id = (uint32_t)dsv4_strmap_value(t->by_str, i);
        struct token_bytes *tb = &t->tok[id];
        if (tb->added)
            continue;
        tb->off = (uint32_t)b.len;
        for (size_t k = 0; k < len;) {
            uint32_t cp;
            size_t l = dsv4_utf8_decode((const uint8_t *)s + k, len - k, &cp);
            if (cp < DSV4_ARRAY_SIZE(cp_to_byte) && cp_to_byte[cp] >= 0) {
                char c = (char)cp_to_byte[cp];
                dsv4_buf_append(&b, &c, 1);
            } else {
                dsv4_buf_append(&b, s + k, l);
            }
            k += l;
        }
        tb->len = (uint32_t)(b.len - tb->off);
        tb->known = true;
    }
    for (size_t i = 0; i < t->n_added; i++) {
        const struct added *a = &t->added[i];
        struct token_bytes *tb = &t->tok[a->id];
        tb->off = (uint32_t)b.len;
        dsv4_buf_append(&b, a->content, a->len);
        tb->len = (uint32_t)a->len;
        tb->known = tb->added = true;
        tb->special = a->special;
    }
    t->text = b.p;
    t->text_len = b.len;
}

/* bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}. */
static const char *config_token(const cJSON *cfg, const char *key)
{
    const cJSON *v = cfg ? field(cfg, key) : NULL;
    if (cJSON_IsObject(v))
        v = field(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int load_config(dsv4_tokenizer *t, const char *config, size_t config_len, const char *name,
                       struct dsv4_err *err)
{
    cJSON *cfg = NULL;
    struct dsv4_json_limits lim = { .max_nodes = 1u << 20, .max_depth = 16,
                                    .max_array = 1u << 20, .max_members = 1u << 20,
                                    .max_string = 1u << 20 };
    if (config && dsv4_json_prescan(config, config_len, &lim, "tokenizer_config.json", err) < 0)
        return -EINVAL;
    if (config) {
        cfg = cJSON_ParseWithLength(config, config_len);
        if (!cJSON_IsObject(cfg)) {
            cJSON_Delete(cfg);
            return dsv4_errf(err, -EINVAL, "%s: tokenizer_config.json: not a JSON object", name);
        }
    }
    const char *bos = config_token(cfg, "bos_token"), *eos = config_token(cfg, "eos_token");
    uint64_t v;
    if (dsv4_strmap_get_str(t->by_str, bos ? bos : "<｜begin▁of▁sentence｜>", &v)) {
        t->has_bos = true;
        t->bos_id = (uint32_t)v;
    }
    if (dsv4_strmap_get_str(t->by_str, eos ? eos : "<｜end▁of▁sentence｜>", &v)) {
        t->has_eos = true;
        t->eos_id = (uint32_t)v;
    }
    cJSON_Delete(cfg);
    return 0;
}

int dsv4_tokenizer_parse(const char *json, size_t len, const char *config, size_t config_len,
                         const char *name, dsv4_tokenizer **out, struct dsv4_err *err)
{
    init_byte_level();
    *out = NULL;
    /* vocabularies of ~10^5–10^6 entries and as many merges; bounded per byte of text */
    struct dsv4_json_limits lim = { .max_nodes = len / 2 + 1024, .max_depth = 16,
                                    .max_array = 1u << 24, .max_members = 1u << 24,
                                    .max_string = 1u << 20 };
    int prc = dsv4_json_prescan(json, len, &lim, name, err);
    if (prc < 0)
        return -EINVAL;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root)
        return dsv4_errf(err, -EINVAL, "%s: not valid JSON", name);
    dsv4_tokenizer *t = dsv4_xcalloc(1, sizeof(*t));
    int rc = 0;
    if (!cJSON_IsObject(root)) {
        rc = dsv4_errf(err, -EINVAL, "%s: expected a JSON object at the top", name);
        goto out;
    }
    const cJSON *model = field(root, "model");
    if ((rc = load_model(t, model, name, err)) ||
        (rc = load_added(t, field(root, "added_tokens"), name, err)) ||
        (rc = load_bpe(t, model, name, err)) ||
        (rc = load_normalizer(field(root, "normalizer"), name, err)) ||
        (rc = load_pre_tokenizer(t, field(root, "pre_tokenizer"), name, err)))
        goto out;
    const cJSON *dec = field(root, "decoder");
    if (dec && !cJSON_IsNull(dec) && !is_type(dec, "ByteLevel")) {
        rc = dsv4_errf(err, -EINVAL, "%s: decoder.type: '%s' unsupported (only ByteLevel)", name,
                       type_of(dec));
        goto out;
    }
    if (t->n_ids == 0) {
        rc = dsv4_errf(err, -EINVAL, "%s: model.vocab: empty", name);
        goto out;
    }
    const cJSON *unk = field(model, "unk_token");
    uint64_t v;
    if (cJSON_IsString(unk) && dsv4_strmap_get_str(t->by_str, unk->valuestring, &v)) {
        t->has_unk = true;
        t->unk_id = (uint32_t)v;
    }
    build_trie(t);
    build_id_text(t);
    if ((rc = load_config(t, config, config_len, name, err)))
        goto out;
    t->cache = dsv4_xcalloc(CACHE_SLOTS, sizeof(*t->cache));
out:
    cJSON_Delete(root);
    if (rc)
        dsv4_tokenizer_free(t);
    else
        *out = t;
    return rc;
}

/* tokenizer.json of real models is 5–10 MB; 256 MiB bounds what a hostile file may cost. */
#define TOKENIZER_MAX_BYTES ((size_t)256 << 20)

static int read_file(const char *path, char **buf, size_t *len, struct dsv4_err *err)
{
    return dsv4_read_file(path, TOKENIZER_MAX_BYTES, buf, len, err);
}

int dsv4_tokenizer_open_dir(const char *dir, dsv4_tokenizer **out, struct dsv4_err *err)
{
    char path[4096], cpath[4096];
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    snprintf(cpath, sizeof(cpath), "%s/tokenizer_config.json", dir);
    char *json, *cfg = NULL;
    size_t len, cfg_len = 0;
    int rc = read_file(path, &json, &len, err);
    if (rc)
        return rc;
    if (access(cpath, F_OK) == 0 && (rc = read_file(cpath, &cfg, &cfg_len, err))) {
        free(json);
        return rc;
    }
    rc = dsv4_tokenizer_parse(json, len, cfg, cfg_len, path, out, err);
    free(json);
    free(cfg);
    return rc;
}

void dsv4_tokenizer_free(dsv4_tokenizer *t)
{
    if (!t)
        return;
    dsv4_strmap_free(t->by_str);
    dsv4_strmap_free(t->raw);
    dsv4_strmap_free(t->pairs);
    free(t->merge_start);
    free(t->merges);
    for (size_t i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    free(t->trie);
    for (size_t i = 0; i < t->n_steps; i++)
        pcre2_code_free(t->steps[i].re);
    free(t->steps);
    pcre2_match_data_free(t->md);
    free(t->tok);
    free(t->text);
    free(t->cache);
    free(t->fix);
    free(t->sym);
    free(t->nxt);
    free(t->prv);
    free(t->heap);
    free(t->word);
    free(t);
}

/* ---------------------------------------------------------------- lookups */

uint32_t dsv4_tokenizer_n_ids(const dsv4_tokenizer *t)
{
    return t->n_ids;
}

bool dsv4_tokenizer_find(const dsv4_tokenizer *t, const char *token, uint32_t *id)
{
    uint64_t v;
    if (!dsv4_strmap_get_str(t->by_str, token, &v))
        return false;
    *id = (uint32_t)v;
    return true;
}

bool dsv4_tokenizer_bos(const dsv4_tokenizer *t, uint32_t *id)
{
    *id = t->bos_id;
    return t->has_bos;
}

bool dsv4_tokenizer_eos(const dsv4_tokenizer *t, uint32_t *id)
{
    *id = t->eos_id;
    return t->has_eos;
}

bool dsv4_tokenizer_is_special(const dsv4_tokenizer *t, uint32_t id)
{
    return id < t->n_ids && t->tok[id].special;
}

/* ---------------------------------------------------------------- BPE */

static void heap_push(dsv4_tokenizer *t, size_t *n, struct heap_entry e)
{
    if (*n == t->heap_cap) {
        t->heap_cap = t->heap_cap ? t->heap_cap * 2 : 64;
        t->heap = dsv4_xrealloc(t->heap, t->heap_cap * sizeof(*t->heap));
    }
    struct heap_entry *h = t->heap;
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].rank < e.rank || (h[p].rank == e.rank && h[p].pos < e.pos))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static struct heap_entry heap_pop(dsv4_tokenizer *t, size_t *n)
{
    struct heap_entry *h = t->heap, top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m)
            break;
        if (c + 1 < m && (h[c + 1].rank < h[c].rank ||
                          (h[c + 1].rank == h[c].rank && h[c + 1].pos < h[c].pos)))
            c++;
        if (last.rank < h[c].rank || (last.rank == h[c].rank && last.pos < h[c].pos))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

static void push_pair(dsv4_tokenizer *t, size_t *nh, uint32_t pos)
{
    uint32_t nx = t->nxt[pos];
    if (nx == NO_SYM)
        return;
    const struct merge *m = find_merge(t, t->sym[pos], t->sym[nx]);
    if (m)
        heap_push(t, nh, (struct heap_entry){ m->rank, pos, t->sym[pos], m->right, m->merged });
}

static void scratch_reserve(dsv4_tokenizer *t, size_t n)
{
    if (n <= t->scratch_cap)
        return;
    t->scratch_cap = n * 2;
    t->sym = dsv4_xrealloc(t->sym, t->scratch_cap * sizeof(*t->sym));
    t->nxt = dsv4_xrealloc(t->nxt, t->scratch_cap * sizeof(*t->nxt));
    t->prv = dsv4_xrealloc(t->prv, t->scratch_cap * sizeof(*t->prv));
}

static uint32_t sym_id(const dsv4_tokenizer *t, uint32_t sym)
{
    return (uint32_t)dsv4_strmap_value(t->raw, sym);
}

static void bpe_word(dsv4_tokenizer *t, const uint8_t *w, size_t n, struct dsv4_ids *out)
{
    if (n == 0)
        return;
    uint64_t v;
    if (t->ignore_merges && dsv4_strmap_get(t->raw, w, n, &v)) {
        dsv4_ids_push(out, (uint32_t)v);
        return;
    }
    struct cache_slot *slot = NULL;
    uint64_t h = 0;
    if (n <= CACHE_WORD) {
        h = dsv4_strmap_hash(w, n);
        slot = &t->cache[h & (CACHE_SLOTS - 1)];
        if (slot->klen == n && slot->hash == h && memcmp(slot->key, w, n) == 0) {
            for (unsigned i = 0; i < slot->nids; i++)
                dsv4_ids_push(out, slot->ids[i]);
            return;
        }
    }
    scratch_reserve(t, n);
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        t->sym[i] = t->byte_sym[w[i]];
        t->nxt[i] = i + 1 < n ? (uint32_t)(i + 1) : NO_SYM;
        t->prv[i] = i > 0 ? (uint32_t)(i - 1) : NO_SYM;
    }
    for (size_t i = 0; i + 1 < n; i++)
        if (t->sym[i] != NO_SYM && t->sym[i + 1] != NO_SYM)
            push_pair(t, &nh, (uint32_t)i);
    while (nh > 0) {
        struct heap_entry e = heap_pop(t, &nh);
        uint32_t p = e.pos, nx = t->nxt[p];
        /* Stale entries: the slot was merged away or its pair changed. */
        if (t->sym[p] != e.left || nx == NO_SYM || t->sym[nx] != e.right)
            continue;
        t->sym[p] = e.merged;
        t->sym[nx] = NO_SYM;
        t->nxt[p] = t->nxt[nx];
        if (t->nxt[p] != NO_SYM)
            t->prv[t->nxt[p]] = p;
        if (t->prv[p] != NO_SYM)
            push_pair(t, &nh, t->prv[p]);
        push_pair(t, &nh, p);
    }
    size_t start = out->n;
    for (uint32_t i = 0; i != NO_SYM; i = t->nxt[i]) {
        if (t->sym[i] != NO_SYM)
            dsv4_ids_push(out, sym_id(t, t->sym[i]));
        else if (t->has_unk)
            dsv4_ids_push(out, t->unk_id); /* a byte without a token: cannot happen after repair */
    }
    if (slot && out->n - start <= CACHE_WORD) {
        slot->hash = h;
        slot->klen = (uint8_t)n;
        slot->nids = (uint8_t)(out->n - start);
        memcpy(slot->key, w, n);
        memcpy(slot->ids, out->v + start, slot->nids * sizeof(uint32_t));
    }
}

/* ---------------------------------------------------------------- pre-tokenization */

static void run_step(dsv4_tokenizer *t, size_t k, const uint8_t *s, size_t n,
                     struct dsv4_ids *out);

/* Next match at or after pos: true and the match in *ms, *me. A failure
 * other than "no match" (a JIT stack or backtracking limit, only possible
 * with a pathological pattern) retries without JIT, and if that fails too
 * the rest of the piece is one match: text is never dropped. */
static bool next_match(dsv4_tokenizer *t, const pcre2_code *re, const uint8_t *s, size_t n,
                       size_t pos, size_t *ms, size_t *me)
{
    int rc = pcre2_match(re, s, n, pos, PCRE2_NO_UTF_CHECK, t->md, NULL);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
        rc = pcre2_match(re, s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, t->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return false;
    if (rc < 0) {
        if (pos >= n)
            return false;
        *ms = pos;
        *me = n;
        return true;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
    *ms = ov[0];
    *me = ov[1];
    return true;
}

/* ByteLevel: optional prefix space, optional GPT-2 split, then BPE. */
static void byte_level(dsv4_tokenizer *t, const struct step *st, const uint8_t *s, size_t n,
                       struct dsv4_ids *out)
{
    if (st->prefix_space && (n == 0 || s[0] != ' ')) {
        if (n + 1 > t->word_cap) {
            t->word_cap = (n + 1) * 2;
            t->word = dsv4_xrealloc(t->word, t->word_cap);
        }
        t->word[0] = ' ';
        memcpy(t->word + 1, s, n);
        s = t->word;
        n++;
    }
    if (!st->re) {
        bpe_word(t, s, n, out);
        return;
    }
    size_t pos = 0, ms, me;
    while (pos <= n && next_match(t, st->re, s, n, pos, &ms, &me)) {
        if (me > ms) {
            bpe_word(t, s + ms, me - ms, out);
            pos = me;
        } else {
            uint32_t cp;
            pos = me + (me < n ? dsv4_utf8_decode(s + me, n - me, &cp) : 1);
        }
    }
}

/* Split (Isolated): matches and the text between them are pieces, as the
 * reference's regexSplit; an empty match advances by one character, as JS
 * matchAll does. With invert, only the matches are kept. */
static void split_step(dsv4_tokenizer *t, size_t k, const struct step *st, const uint8_t *s,
                       size_t n, struct dsv4_ids *out)
{
    size_t pos = 0, prev = 0, ms, me;
    while (pos <= n && next_match(t, st->re, s, n, pos, &ms, &me)) {
        if (!st->invert && ms > prev)
            run_step(t, k + 1, s + prev, ms - prev, out);
        if (me > ms)
            run_step(t, k + 1, s + ms, me - ms, out);
        prev = me;
        if (me > ms) {
            pos = me;
        } else {
            uint32_t cp;
            pos = me + (me < n ? dsv4_utf8_decode(s + me, n - me, &cp) : 1);
        }
    }
    if (!st->invert && prev < n)
        run_step(t, k + 1, s + prev, n - prev, out);
}

static void run_step(dsv4_tokenizer *t, size_t k, const uint8_t *s, size_t n,
                     struct dsv4_ids *out)
{
    const struct step *st = &t->steps[k];
    if (st->kind == STEP_BYTE_LEVEL)
        byte_level(t, st, s, n, out);
    else
        split_step(t, k, st, s, n, out);
}

/* ---------------------------------------------------------------- encode */

/* JS String.prototype.trim's white space (WhiteSpace + LineTerminator). */
static bool js_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

/* Bytes of trailing white space in s[0..n). */
static size_t trailing_space(const uint8_t *s, size_t n)
{
    size_t end = n;
    while (end > 0) {
        size_t b = end - 1;
        while (b > 0 && (s[b] & 0xC0) == 0x80)
            b--;
        uint32_t cp;
        dsv4_utf8_decode(s + b, end - b, &cp);
        if (!js_space(cp))
            break;
        end = b;
    }
    return n - end;
}

static size_t leading_space(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = dsv4_utf8_decode(s + i, n - i, &cp);
        if (!js_space(cp))
            break;
        i += l;
    }
    return i;
}

/* Longest added token starting at s[0..n): its index, or -1. */
static int32_t match_added(const dsv4_tokenizer *t, const uint8_t *s, size_t n)
{
    int32_t cur = 0, best = -1;
    for (size_t j = 0; j < n; j++) {
        int32_t c = t->trie[cur].child;
        while (c >= 0 && t->trie[c].byte != s[j])
            c = t->trie[c].sibling;
        if (c < 0)
            break;
        cur = c;
        if (t->trie[cur].added >= 0)
            best = t->trie[cur].added;
    }
    return best;
}

static void encode_text(dsv4_tokenizer *t, const uint8_t *s, size_t n, struct dsv4_ids *out)
{
    if (n > 0)
        run_step(t, 0, s, n, out);
}

void dsv4_tokenizer_encode(dsv4_tokenizer *t, const char *text, size_t len, bool add_bos,
                           struct dsv4_ids *out)
{
    if (add_bos && t->has_bos)
        dsv4_ids_push(out, t->bos_id);
    const uint8_t *s = (const uint8_t *)text;
    if (dsv4_utf8_valid_prefix(s, len) != len) {
        size_t need = 3 * len + 3;
        if (need > t->fix_cap) {
            t->fix_cap = need;
            t->fix = dsv4_xrealloc(t->fix, need);
        }
        dsv4_utf8_repair(s, len, true, t->fix, &len);
        s = t->fix;
    }
    /* Sections between added tokens; an lstrip/rstrip token eats the white
     * space next to it in the neighbouring text. */
    size_t start = 0, i = 0;
    bool strip_next = false;
    while (i < len) {
        int32_t a = t->first_byte[s[i]] ? match_added(t, s + i, len - i) : -1;
        if (a < 0) {
            i++;
            continue;
        }
        const struct added *ad = &t->added[a];
        size_t seg = i - start, lead = strip_next ? leading_space(s + start, seg) : 0;
        size_t trail = ad->lstrip ? trailing_space(s + start + lead, seg - lead) : 0;
        encode_text(t, s + start + lead, seg - lead - trail, out);
        dsv4_ids_push(out, ad->id);
        strip_next = ad->rstrip;
        i += ad->len;
        start = i;
    }
    size_t seg = len - start, lead = strip_next ? leading_space(s + start, seg) : 0;
    encode_text(t, s + start + lead, seg - lead, out);
}

/* ---------------------------------------------------------------- decode */

static void buf_reserve(uint8_t **buf, size_t *cap, size_t need)
{
    if (need > *cap) {
        *cap = need * 2;
        *buf = dsv4_xrealloc(*buf, *cap);
    }
}

void dsv4_detok_init(struct dsv4_detok *d, const dsv4_tokenizer *t, bool special)
{
    memset(d, 0, sizeof(*d));
    d->t = t;
    d->special = special;
}

void dsv4_detok_free(struct dsv4_detok *d)
{
    free(d->buf);
    free(d->stage);
    memset(d, 0, sizeof(*d));
}

/* Repair pend + bytes into d->buf (appending at *o); keep an incomplete
 * tail in pend unless final. */
static void detok_bytes(struct dsv4_detok *d, const uint8_t *p, size_t n, bool final, size_t *o)
{
    size_t total = d->npend + n;
    buf_reserve(&d->buf, &d->cap, *o + 3 * total + 8);
    buf_reserve(&d->stage, &d->stage_cap, total + 1);
    uint8_t *in = d->stage;
    memcpy(in, d->pend, d->npend);
    if (n)
        memcpy(in + d->npend, p, n);
    size_t wrote, used = dsv4_utf8_repair(in, total, final, d->buf + *o, &wrote);
    *o += wrote;
    d->npend = total - used;
    memcpy(d->pend, in + used, d->npend);
}

int dsv4_detok_feed(struct dsv4_detok *d, uint32_t id, const char **text, size_t *len,
                    struct dsv4_err *err)
{
    const dsv4_tokenizer *t = d->t;
    if (id >= t->n_ids || !t->tok[id].known)
        return dsv4_errf(err, -EINVAL, "token id %u is not in the vocabulary (%u ids)", id,
                         t->n_ids);
    const struct token_bytes *tb = &t->tok[id];
    size_t o = 0;
    buf_reserve(&d->buf, &d->cap, 64);
    if (tb->special && !d->special) {
        /* Skipped entirely: the byte runs on either side join, as in the reference. */
    } else if (tb->added) {
        /* An added token ends the byte run before it. */
        detok_bytes(d, NULL, 0, true, &o);
        buf_reserve(&d->buf, &d->cap, o + tb->len + 1);
        memcpy(d->buf + o, t->text + tb->off, tb->len);
        o += tb->len;
    } else {
        detok_bytes(d, (const uint8_t *)t->text + tb->off, tb->len, false, &o);
    }
    d->buf[o] = 0;
    *text = (const char *)d->buf;
    *len = o;
    return 0;
}

void dsv4_detok_flush(struct dsv4_detok *d, const char **text, size_t *len)
{
    size_t o = 0;
    buf_reserve(&d->buf, &d->cap, 64);
    detok_bytes(d, NULL, 0, true, &o);
    d->buf[o] = 0;
    *text = (const char *)d->buf;
    *len = o;
}

/* One-shot decode, the reference's way (independent of the streaming
 * path, which the tests compare with it): skip filtered specials, gather
 * each run of vocabulary tokens' bytes and repair it as a whole, copy added
 * tokens verbatim. */
int dsv4_tokenizer_decode(const dsv4_tokenizer *t, const uint32_t *ids, size_t n, bool special,
                          char **text, size_t *len, struct dsv4_err *err)
{
    struct dsv4_buf out = { 0 }, run = { 0 };
    dsv4_buf_append(&out, "", 0);
    for (size_t i = 0; i <= n; i++) {
        const struct token_bytes *tb = NULL;
        if (i < n) {
            if (ids[i] >= t->n_ids || !t->tok[ids[i]].known) {
                free(out.p);
                free(run.p);
                return dsv4_errf(err, -EINVAL, "token id %u is not in the vocabulary (%u ids)",
                                 ids[i], t->n_ids);
            }
            tb = &t->tok[ids[i]];
            if (tb->special && !special)
                continue;
            if (!tb->added) {
                dsv4_buf_append(&run, t->text + tb->off, tb->len);
                continue;
            }
        }
        if (run.len) {
            uint8_t *fixed = dsv4_xmalloc(3 * run.len + 3);
            size_t fl;
            dsv4_utf8_repair((const uint8_t *)run.p, run.len, true, fixed, &fl);
            dsv4_buf_append(&out, (const char *)fixed, fl);
            free(fixed);
            run.len = 0;
        }
        if (tb)
            dsv4_buf_append(&out, t->text + tb->off, tb->len);
    }
    free(run.p);
    *text = out.p;
    *len = out.len;
    return 0;
}
