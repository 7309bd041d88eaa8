/* SPDX-License-Identifier: MIT */
/*
 * The rules of encoding_dsv4.encode_messages for text conversations:
 *
 * 1. Consecutive user messages merge into one, joined by "\n\n"
 *    (merge_tool_messages turns each into a content block).
 * 2. Thinking mode with dropped reasoning (the default): before the last
 *    user/developer message, assistants lose their reasoning and developer
 *    messages disappear (_drop_thinking_messages).
 * 3. Each message renders as: system → content; user → <｜User｜>content;
 *    developer → <｜User｜>content; latest_reminder → marker + content;
 *    assistant → [reasoning + </think>] + content + EOS, the bracket only in
 *    thinking mode and only after the last user message or when reasoning
 *    is kept.
 * 4. A user/developer message followed by an assistant or latest_reminder
 *    message, or ending the conversation, gets <｜Assistant｜> then
 *    <think> (thinking mode, and it is the last user message or reasoning
 *    is kept) or </think>.
 * 5. The prompt starts with BOS and, in thinking mode with effort "max",
 *    the fixed effort preamble.
 */
#include "chat.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static const char effort_max_text[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n\n";

enum role { R_SYSTEM, R_USER, R_DEVELOPER, R_ASSISTANT, R_REMINDER };

struct msg {
    enum role role;
    char *content; /* owned (merged users) */
    const char *reasoning;
};

struct buf {
    char *p;
    size_t n, cap;
};

static void put(struct buf *b, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = dsv4_xrealloc(b->p, b->cap);
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static int parse_role(const char *r, enum role *out)
{
    static const struct {
        const char *name;
        enum role role;
    } roles[] = {
        { "system", R_SYSTEM },         { "user", R_USER },
        { "developer", R_DEVELOPER },   { "assistant", R_ASSISTANT },
        { "latest_reminder", R_REMINDER },
    };
    for (size_t i = 0; r && i < DSV4_ARRAY_SIZE(roles); i++)
        if (strcmp(r, roles[i].name) == 0) {
            *out = roles[i].role;
            return 0;
        }
    return -EINVAL;
}

static bool is_user(enum role r)
{
    return r == R_USER || r == R_DEVELOPER;
}

static void free_msgs(struct msg *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(m[i].content);
    free(m);
}

int dsv4_chat_render(const struct dsv4_chat_msg *msgs, size_t n, const struct dsv4_chat_opts *o,
                     char **text, size_t *len, struct dsv4_err *err)
{
    struct msg *m = dsv4_xcalloc(n ? n : 1, sizeof(*m));
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        enum role r;
        if (parse_role(msgs[i].role, &r)) {
            free_msgs(m, k);
            return dsv4_errf(err, -EINVAL, "chat: message %zu: role '%s' unsupported", i,
                             msgs[i].role ? msgs[i].role : "(null)");
        }
        if (r == R_DEVELOPER && !(msgs[i].content && msgs[i].content[0])) {
            free_msgs(m, k);
            return dsv4_errf(err, -EINVAL, "chat: message %zu: developer message is empty", i);
        }
        if (r == R_USER && k > 0 && m[k - 1].role == R_USER) { /* rule 1 */
            struct buf b = { m[k - 1].content, strlen(m[k - 1].content), 0 };
            b.cap = b.n + 1;
            put(&b, "\n\n");
            put(&b, msgs[i].content);
            m[k - 1].content = b.p;
            continue;
        }
        m[k].role = r;
        m[k].content = dsv4_xstrdup(msgs[i].content ? msgs[i].content : "");
        m[k].reasoning = msgs[i].reasoning;
        k++;
    }
    n = k;

    bool drop = !o->keep_reasoning;
    size_t last_user = SIZE_MAX;
    for (size_t i = n; i-- > 0;)
        if (is_user(m[i].role)) {
            last_user = i;
            break;
        }
    if (o->thinking && drop && last_user != SIZE_MAX) { /* rule 2 */
        size_t w = 0;
        for (size_t i = 0; i < n; i++) {
            if (i < last_user && m[i].role == R_DEVELOPER) {
                free(m[i].content);
                continue;
            }
            if (i < last_user && m[i].role == R_ASSISTANT)
                m[i].reasoning = NULL;
            m[w++] = m[i];
        }
        n = w;
        for (size_t i = n; i-- > 0;)
            if (is_user(m[i].role)) {
                last_user = i;
                break;
            }
    }

    struct buf b = { 0 };
    put(&b, o->no_bos ? "" : DSV4_CHAT_BOS);
    for (size_t i = 0; i < n; i++) {
        if (i == 0 && o->thinking && o->effort_max)
            put(&b, effort_max_text);
        switch (m[i].role) { /* rule 3 */
        case R_SYSTEM:
            put(&b, m[i].content);
            break;
        case R_USER:
        case R_DEVELOPER:
            put(&b, DSV4_CHAT_USER);
            put(&b, m[i].content);
            break;
        case R_REMINDER:
            put(&b, DSV4_CHAT_LATEST_REMINDER);
            put(&b, m[i].content);
            break;
        case R_ASSISTANT:
            if (o->thinking && (!drop || last_user == SIZE_MAX || i > last_user)) {
                put(&b, m[i].reasoning);
                put(&b, DSV4_CHAT_END_THINK);
            }
            put(&b, m[i].content);
            put(&b, DSV4_CHAT_EOS);
            break;
        }
        /* rule 4 */
        if (i + 1 < n && m[i + 1].role != R_ASSISTANT && m[i + 1].role != R_REMINDER)
            continue;
        if (!is_user(m[i].role))
            continue;
        put(&b, DSV4_CHAT_ASSISTANT);
        bool think = o->thinking && (!drop || i >= last_user);
        put(&b, think ? DSV4_CHAT_THINK : DSV4_CHAT_END_THINK);
    }
    free_msgs(m, n);
    *text = b.p;
    *len = b.n;
    return 0;
}

int dsv4_chat_encode(dsv4_tokenizer *t, const struct dsv4_chat_msg *msgs, size_t n,
                     const struct dsv4_chat_opts *o, struct dsv4_ids *ids, struct dsv4_err *err)
{
    static const char *const markers[] = {
        DSV4_CHAT_BOS,   DSV4_CHAT_EOS,       DSV4_CHAT_USER,
        DSV4_CHAT_ASSISTANT, DSV4_CHAT_THINK, DSV4_CHAT_END_THINK,
    };
    char *text;
    size_t len;
    int rc = dsv4_chat_render(msgs, n, o, &text, &len, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(markers); i++) {
        uint32_t id;
        if (strstr(text, markers[i]) && !dsv4_tokenizer_find(t, markers[i], &id)) {
            free(text);
            return dsv4_errf(err, -EINVAL, "chat: the tokenizer has no token '%s'", markers[i]);
        }
    }
    /* The BOS is part of the text: never add a second one (spec §18 item 28). */
    dsv4_tokenizer_encode(t, text, len, false, ids);
    free(text);
    return 0;
}

int dsv4_chat_prompt(dsv4_tokenizer *t, const char *text, size_t len, enum dsv4_prompt_kind kind,
                     struct dsv4_ids *ids, struct dsv4_err *err)
{
    if (kind == DSV4_PROMPT_RAW || kind == DSV4_PROMPT_RAW_BOS) {
        uint32_t bos;
        if (kind == DSV4_PROMPT_RAW_BOS && !dsv4_tokenizer_bos(t, &bos))
            return dsv4_errf(err, -EINVAL, "the tokenizer has no BOS token");
        dsv4_tokenizer_encode(t, text, len, kind == DSV4_PROMPT_RAW_BOS, ids);
        return 0;
    }
    char *content = dsv4_xmalloc(len + 1);
    memcpy(content, text, len);
    content[len] = '\0';
    struct dsv4_chat_msg msg = { .role = "user", .content = content };
    struct dsv4_chat_opts o = { .thinking = kind == DSV4_PROMPT_CHAT_THINK };
    int rc = dsv4_chat_encode(t, &msg, 1, &o, ids, err);
    free(content);
    return rc;
}
