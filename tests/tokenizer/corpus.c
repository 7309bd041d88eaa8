/* SPDX-License-Identifier: MIT */
/* Corpus generator (see corpus.h): fixed pools of pieces, combined by a seeded PRNG. */
#include "corpus.h"

#include <stdlib.h>
#include <string.h>

#include "utf8.h"
#include "util.h"

#define N(a) DSV4_ARRAY_SIZE(a)

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t below(size_t n)
{
    return (size_t)(rnd() % n);
}

struct sb {
    char *p;
    size_t n, cap;
};

static void add(struct sb *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = dsv4_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void adds(struct sb *b, const char *s)
{
    add(b, s, strlen(s));
}

static void addcp(struct sb *b, uint32_t cp)
{
    uint8_t u[4];
    add(b, (const char *)u, dsv4_utf8_encode(cp, u));
}

static const char *const code[] = {
    "#include <stdio.h>\nint main(void) {\n    printf(\"hello, %s!\\n\", \"world\");\n    return 0;\n}\n",
    "static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }",
    "for (size_t i = 0; i < n; i++) {\n\tsum += a[i] * b[i]; // dot\n}",
    "def fib(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "import numpy as np\nx = np.arange(12).reshape(3, 4)\nprint(x.T @ x, x.sum(axis=-1))",
    "class Foo(Bar):\n    def __init__(self, **kw):\n        super().__init__(**kw)\n        self._cache = {}\n",
    "const f = async (url) => { const r = await fetch(url); return r.ok ? r.json() : null; };",
    "export default function App({ items }) {\n  return <ul>{items.map((x) => <li key={x.id}>{x.name}</li>)}</ul>;\n}",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}",
    "impl<'a, T: Clone + Send> Iterator for Iter<'a, T> { type Item = &'a T; }",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tch := make(chan int, 3)\n\tfmt.Println(len(ch), cap(ch))\n}",
    "SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.user_id = u.id WHERE o.total >= 100.50 GROUP BY u.id;",
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Test &amp; demo</title></head></html>",
    "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do wc -l \"$f\" | awk '{print $1}'; done 2>/dev/null",
    "public static void main(String[] args) { System.out.println(String.format(\"%08.3f\", Math.PI)); }",
    "template <typename T> std::vector<T> merge(const std::vector<T>& a, std::vector<T>&& b);",
    "{\"name\": \"dsv4\", \"version\": \"0.1.0\", \"deps\": [\"cjson\", \"pcre2\"], \"ok\": true, \"n\": -1.5e-3}",
    "x := [1, 2, 3]; y = x[1:]; z = {k: v for k, v in zip(x, y)}  # comment with émojis 🎉",
    "    return self.__dict__.get('__slots__', None) or getattr(cls, \"_fields\", ())",
    "if (a != b && c <= d || !e) { x >>= 2; y <<= 3; z ^= ~w; } else { throw new Error(`bad ${x}`); }",
    "diff --git a/x.c b/x.c\n@@ -1,3 +1,4 @@\n-int a;\n+int a = 0;\n+int b;\n",
    "\\begin{equation} E = mc^2 \\quad \\sum_{i=1}^{n} x_i^2 \\end{equation}",
};

static const char *const words[] = {
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "World",
    "tokenizer", "DeepSeek", "don't", "it's", "we're", "I'll", "you've", "JSON", "HTTP/2",
    "e-mail", "naïve", "café", "résumé", "Straße", "über", "ÆØÅ", "Ñandú", "I'M", "O'Neil",
    "x86_64", "foo_bar", "camelCase", "SCREAMING_CASE", "kebab-case", "a.b.c", "v1.2.3",
    "Привет", "мир", "Ελληνικά", "γράμματα", "שלום", "مرحبا", "नमस्ते", "สวัสดี", "Tiếng",
    "Việt", "ქართული", "հայերեն", "አማርኛ", "ᏣᎳᎩ", "한국어", "日本語", "中文", "ひらがな",
    "カタカナ", "ｶﾀｶﾅ", "Ｆｕｌｌｗｉｄｔｈ", "İstanbul", "ǅemal", "ﬁne", "ℌilbert",
};

static const char *const emoji[] = {
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵", "1️⃣", "❤️", "🧑🏿‍💻", "👩‍❤️‍💋‍👨",
    "🐈‍⬛", "😶‍🌫️", "🫠", "🏴‍☠️", "👁️‍🗨️", "✌🏻", "🤌", "🦀", "🐍", "☕", "⚡", "✅",
    "🔥🔥🔥", "🎉🎊", "#️⃣", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
};

static const char *const marks[] = {
    "e\xcc\x81", "a\xcc\x88\xcc\x84", "n\xcc\x83", "o\xcc\x8b", "क्षत्रिय", "नमस्ते",
    "مَرْحَبًا", "שָׁלוֹם", "สวัสดีครับ", "Tiếng Việt", "Z\xcd\x91\xcd\xa2" "a\xcc\x95l\xcd\x81g\xcd\xa0o",
    "\xcc\x81" "start", "ñ\xcc\x83\xcc\x83\xcc\x83", "à̀̀", "각", "ⓐⓑ", "x\xe2\x83\x97",
    "\xd9\x8b", "ི", "ꦲꦤꦕꦫꦏ",
};

static const char *const digits[] = {
    "٠١٢٣٤٥٦٧٨٩", "０１２３４", "²³¹", "½¾⅓", "ⅠⅡⅫ", "१२३", "๑๒๓", "①②③", "𝟙𝟚𝟛",
    "1,234,567.89", "3.14159", "-42", "+1e-10", "0x7FFF_FFFF", "2026-12-02T13:50:39Z",
    "192.168.0.1", "v4.0.1", "100%", "$19.99", "#1234", "07:30", "1/2/3",
};

static const char *const spaces[] = {
    " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", "\r\r\n", "\v",
    "\f", "\xc2\xa0", "\xe3\x80\x80", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xef\xbb\xbf",
    "\xc2\x85", "\xe2\x80\x8b", "\xe2\x80\x83", "\xe2\x80\xaf", " \n ", "\t \n", " \r\n\t",
};

static const char *const punct[] = {
    "!", "?", ".", ",", ";", ":", "'", "\"", "(", ")", "[", "]", "{", "}", "<", ">", "@",
    "#", "$", "%", "^", "&", "*", "-", "_", "=", "+", "|", "\\", "/", "~", "`", "...", "…",
    "—", "«»", "“”", "‘’", "¿¡", "©®™", "€£¥₹", "±×÷", "→⇒", "∀∃∑√∞≠≤≥", "。", "、", "「」",
    "！？", "：；", "·", "§¶", "†‡", "•", "°", "′″", "!!!", "?!", ">;\n", "*/", "//", "->",
    "=>", "::", "&&", "||", "!=", "<=", "\\n",
};

static const char *const specials[] = {
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<think>", "</think>", "｜DSML｜", "<｜DSML｜invoke name=\"get\">", "<｜latest_reminder｜>",
    "<｜place▁holder▁no▁5｜>", "<|place_holder_mm_span_0100|>", "<｜image｜>", "<｜▁pad▁｜>",
    "<｜tool▁calls▁begin｜>", "<｜fim▁hole｜>", "<|EOT|>", "<｜User", "<think", "think>", "<｜",
    "｜>", "<<think>>", "</think></think>", "<｜Assistant｜ >", "< think>",
};

static const char *const invalid[] = {
    "\x80", "\xbf", "\xc0\xaf", "\xc1\x81", "\xe0\x80\xaf", "\xed\xa0\x80", "\xed\xbf\xbf",
    "\xf4\x90\x80\x80", "\xf5", "\xff", "\xfe", "\xe4\xb8", "\xf0\x9f\x98", "\xe4", "\xc3",
    "\xf0\x9f", "\x80\x80\x80", "\xe2\x28\xa1", "\xf8\x88\x80\x80\x80", "\xc3\x28",
};

static void cjk(struct sb *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t k = below(10);
        uint32_t cp = k < 5   ? 0x4E00 + (uint32_t)below(0x9FA5 - 0x4E00 + 1)
                      : k < 6 ? 0x3041 + (uint32_t)below(0x3096 - 0x3041 + 1)
                      : k < 7 ? 0x30A1 + (uint32_t)below(0x30FA - 0x30A1 + 1)
                      : k < 8 ? 0xAC00 + (uint32_t)below(0xD7A3 - 0xAC00 + 1)
                      : k < 9 ? (uint32_t[]){ 0x3001, 0x3002, 0x300C, 0x300D, 0x30FC, 0xFF0C, 0xFF01 }[below(7)]
                              : 0x9FA6 + (uint32_t)below(0x9FEF - 0x9FA6 + 1); /* outside the split's CJK class */
        addcp(b, cp);
    }
}

static void piece(struct sb *b, size_t kind)
{
    switch (kind) {
    case 0: {
        const char *c = code[below(N(code))];
        size_t n = strlen(c), s = below(n), l = 1 + below(n - s);
        add(b, c + s, l); /* a slice (may cut a character: repaired like any input) */
        break;
    }
    case 1: adds(b, words[below(N(words))]); break;
    case 2: cjk(b, 1 + below(12)); break;
    case 3: adds(b, emoji[below(N(emoji))]); break;
    case 4: adds(b, marks[below(N(marks))]); break;
    case 5:
        if (below(2)) {
            for (size_t i = 1 + below(20); i > 0; i--)
                addcp(b, '0' + (uint32_t)below(10));
        } else {
            adds(b, digits[below(N(digits))]);
        }
        break;
    case 6: adds(b, spaces[below(N(spaces))]); break;
    case 7: adds(b, punct[below(N(punct))]); break;
    case 8: adds(b, specials[below(N(specials))]); break;
    default: adds(b, invalid[below(N(invalid))]); break;
    }
}

static void push(struct corpus *c, struct sb *b)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 1024;
        c->s = dsv4_xrealloc(c->s, c->cap * sizeof(*c->s));
        c->len = dsv4_xrealloc(c->len, c->cap * sizeof(*c->len));
    }
    if (!b->p)
        add(b, "", 0);
    c->s[c->n] = b->p;
    c->len[c->n] = b->n;
    c->n++;
    memset(b, 0, sizeof(*b));
}

/* Pieces of one kind, joined by spaces or nothing. */
static void themed(struct corpus *c, size_t kind, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        struct sb b = { 0 };
        for (size_t k = 1 + below(8); k > 0; k--) {
            piece(&b, kind);
            if (below(3) == 0)
                piece(&b, below(2) ? 1 : 6);
            else if (below(2))
                adds(&b, " ");
        }
        push(c, &b);
    }
}

static void long_words(struct corpus *c)
{
    static const char *const unit[] = { "a", "ab", "é", "a\xcc\x81", "中", "😀", "!", " ", "7", "ÿ", "\n" };
    for (size_t u = 0; u < N(unit); u++) {
        struct sb b = { 0 };
        for (size_t i = 0; i < 10000; i++)
            adds(&b, unit[u]);
        push(c, &b);
    }
    struct sb b = { 0 };
    for (size_t i = 0; i < 10000; i++)
        addcp(&b, 'a' + (uint32_t)below(26));
    push(c, &b);
    cjk(&b, 10000);
    push(c, &b);
}

void corpus_generate(struct corpus *c, uint64_t seed, size_t n_min)
{
    memset(c, 0, sizeof(*c));
    rng_state = seed;
    struct sb b = { 0 };
    /* Every fixed piece on its own, and each code sample with other line endings. */
    const char *const *pools[] = { code, words, emoji, marks, digits, spaces, punct, specials, invalid };
    size_t sizes[] = { N(code), N(words), N(emoji), N(marks), N(digits), N(spaces), N(punct),
                       N(specials), N(invalid) };
    for (size_t p = 0; p < N(pools); p++)
        for (size_t i = 0; i < sizes[p]; i++) {
            adds(&b, pools[p][i]);
            push(c, &b);
        }
    for (size_t i = 0; i < N(code); i++) {
        for (const char *s = code[i]; *s; s++)
            adds(&b, *s == '\n' ? "\r\n" : (char[]){ *s, 0 });
        push(c, &b);
        for (const char *s = code[i]; *s; s++)
            adds(&b, *s == '\n' ? "\r" : *s == ' ' ? "\t" : (char[]){ *s, 0 });
        push(c, &b);
    }
    long_words(c);
    for (size_t kind = 0; kind < 10; kind++)
        themed(c, kind, 150);
    /* Mixtures of everything until there are enough. */
    while (c->n < n_min) {
        for (size_t k = 1 + below(24); k > 0; k--)
            piece(&b, below(10));
        push(c, &b);
    }
}

void corpus_free(struct corpus *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->s[i]);
    free(c->s);
    free(c->len);
    memset(c, 0, sizeof(*c));
}
