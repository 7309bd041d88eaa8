/* SPDX-License-Identifier: MIT */
/*
 * The rules of encoding_dsv4.encode_messages:
 *
 * 1. Tool results and user messages become user turns made of blocks
 *    (merge_tool_messages): a tool result <tool_result>content</tool_result>,
 *    a user message its text; consecutive ones merge into one turn, the
 *    blocks joined by "\n\n". A turn's tool results are put in the order
 *    of the calls of the last assistant message that made calls
 *    (sort_tool_results_by_call_order; unknown ids count as the first).
 * 2. Thinking mode with dropped reasoning (the default, but never when a
 *    message has tools): before the last user/developer message,
 *    assistants lose their reasoning and developer messages disappear
 *    (_drop_thinking_messages).
 * 3. Each message renders as: system → content [+ "\n\n" + tools section];
 *    user → <｜User｜>blocks; developer → <｜User｜>content [+ "\n\n" + tools];
 *    latest_reminder → marker + content; assistant → [reasoning + </think>]
 *    + content + ["\n\n" + DSML tool calls] + EOS, the bracket only in
 *    thinking mode and only after the last user message or when reasoning
 *    is kept.
 * 4. A user/developer message followed by an assistant or latest_reminder
 *    message, or ending the conversation, gets <｜Assistant｜> then
 *    <think> (thinking mode, and it is the last user message or reasoning
 *    is kept) or </think>.
 * 5. The prompt starts with BOS and, in thinking mode with effort "max",
 *    the fixed effort preamble.
 * Tools are rendered as render_tools does: each tool's "function" object as
 * Python's json.dumps writes it (", " and ": " separators, non-ASCII kept),
 * one per line. A tool call's arguments: each key of the JSON object as a
 * DSML parameter, a string as is (string="true"), anything else as JSON;
 * arguments that are not JSON become one parameter named "arguments".
 */
#include "chat.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "util.h"

static const char effort_max_text[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n\n";

/* The official TOOLS_TEMPLATE with its markers filled in; the schemas go between the halves. */
#define D DSV4_CHAT_DSML
static const char tools_head[] =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    "by writing a \"<" D "tool_calls>\" block like the following:\n\n"
    "<" D "tool_calls>\n"
    "<" D "invoke name=\"$TOOL_NAME\">\n"
    "<" D "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" D
    "parameter>\n"
    "...\n"
    "</" D "invoke>\n"
    "<" D "invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</" D "invoke>\n"
    "</" D "tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
static const char tools_tail[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n";

enum role { R_SYSTEM, R_USER, R_DEVELOPER, R_ASSISTANT, R_REMINDER, R_TOOL };

struct block {
    bool tool;
    const char *text, *id;
};

struct msg {
    enum role role;
    const char *content;
    const char *reasoning;
    const struct dsv4_chat_msg *src;
    struct block *blocks;       /* user turns */
    size_t n_blocks;
};

struct buf {
    char *p;
    size_t n, cap;
};

static void putn(struct buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = dsv4_xrealloc(b->p, b->cap);
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void put(struct buf *b, const char *s)
{
    putn(b, s, s ? strlen(s) : 0);
}

static int parse_role(const char *r, enum role *out)
{
    static const struct {
        const char *name;
        enum role role;
    } roles[] = {
        { "system", R_SYSTEM },         { "user", R_USER },
        { "developer", R_DEVELOPER },   { "assistant", R_ASSISTANT },
        { "latest_reminder", R_REMINDER }, { "tool", R_TOOL },
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
        free(m[i].blocks);
    free(m);
}

/* ---- json.dumps(value, ensure_ascii=False) ---- */
static void py_str(struct buf *b, const char *s)
{
    putn(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char e[8];
        switch (*p) {
        case '"': putn(b, "\\\"", 2); break;
        case '\\': putn(b, "\\\\", 2); break;
        case '\n': putn(b, "\\n", 2); break;
        case '\r': putn(b, "\\r", 2); break;
        case '\t': putn(b, "\\t", 2); break;
        case '\b': putn(b, "\\b", 2); break;
        case '\f': putn(b, "\\f", 2); break;
        default:
            if (*p < 0x20) {
                snprintf(e, sizeof(e), "\\u%04x", *p);
                putn(b, e, 6);
            } else {
                putn(b, (const char *)p, 1);
            }
        }
    }
    putn(b, "\"", 1);
}

/* Numbers: integral values as integers (JSON does not say int or float once parsed), others
 * as Python's repr: the shortest text that reads back the same. */
static void py_num(struct buf *b, double v)
{
    char t[40];
    if (v == floor(v) && fabs(v) < 9007199254740992.0) {
        snprintf(t, sizeof(t), "%.0f", v);
    } else if (!isfinite(v)) {
        snprintf(t, sizeof(t), "%s", isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
    } else {
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(t, sizeof(t), "%.*g", prec, v);
            if (strtod(t, NULL) == v)
                break;
        }
    }
    put(b, t);
}

static void py_dumps(struct buf *b, const cJSON *v, int depth)
{
    if (depth > 128 || cJSON_IsNull(v) || cJSON_IsInvalid(v)) {
        put(b, "null");
    } else if (cJSON_IsBool(v)) {
        put(b, cJSON_IsTrue(v) ? "true" : "false");
    } else if (cJSON_IsNumber(v)) {
        py_num(b, v->valuedouble);
    } else if (cJSON_IsString(v)) {
        py_str(b, v->valuestring);
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        bool obj = cJSON_IsObject(v);
        putn(b, obj ? "{" : "[", 1);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child)
                putn(b, ", ", 2);
            if (obj) {
                py_str(b, c->string ? c->string : "");
                putn(b, ": ", 2);
            }
            py_dumps(b, c, depth + 1);
        }
        putn(b, obj ? "}" : "]", 1);
    } else {
        put(b, "null");
    }
}

/* render_tools: the template around each tool's "function" object, one per line. */
static int put_tools(struct buf *b, const char *tools, size_t i, struct dsv4_err *err)
{
    cJSON *t = cJSON_Parse(tools);
    if (!cJSON_IsArray(t)) {
        cJSON_Delete(t);
        return dsv4_errf(err, -EINVAL, "chat: message %zu: tools must be a JSON list", i);
    }
    if (!t->child) {    /* an empty list is no tools (`if tools:`) */
        cJSON_Delete(t);
        return 0;
    }
    put(b, "\n\n");
    put(b, tools_head);
    for (const cJSON *x = t->child; x; x = x->next) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(x, "function");
        if (!cJSON_IsObject(f)) {
            cJSON_Delete(t);
            return dsv4_errf(err, -EINVAL, "chat: message %zu: each tool needs a \"function\" "
                                           "object", i);
        }
        if (x != t->child)
            put(b, "\n");
        py_dumps(b, f, 0);
    }
    put(b, tools_tail);
    cJSON_Delete(t);
    return 0;
}

/* The DSML block of an assistant's tool calls (encode_arguments_to_dsml). */
static int put_tool_calls(struct buf *b, const struct dsv4_chat_msg *m, size_t i,
                          struct dsv4_err *err)
{
    put(b, "\n\n<" D "tool_calls>\n");
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        const struct dsv4_chat_tool_call *tc = &m->tool_calls[k];
        if (k)
            put(b, "\n");
        put(b, "<" D "invoke name=\"");
        put(b, tc->name);
        put(b, "\">\n");
        const char *args = tc->arguments ? tc->arguments : "";
        cJSON *a = cJSON_Parse(args);
        if (a && !cJSON_IsObject(a)) {
            cJSON_Delete(a);
            return dsv4_errf(err, -EINVAL, "chat: message %zu: tool call %zu: arguments are not "
                                           "a JSON object", i, k);
        }
        if (!a) {   /* not JSON: one parameter holding the text */
            put(b, "<" D "parameter name=\"arguments\" string=\"true\">");
            put(b, args);
            put(b, "</" D "parameter>");
        }
        for (const cJSON *p = a ? a->child : NULL; p; p = p->next) {
            if (p != a->child)
                put(b, "\n");
            put(b, "<" D "parameter name=\"");
            put(b, p->string);
            put(b, cJSON_IsString(p) ? "\" string=\"true\">" : "\" string=\"false\">");
            if (cJSON_IsString(p))
                put(b, p->valuestring);
            else
                py_dumps(b, p, 0);
            put(b, "</" D "parameter>");
        }
        cJSON_Delete(a);
        put(b, "\n</" D "invoke>");
    }
    put(b, "\n</" D "tool_calls>");
    return 0;
}

static void add_block(struct msg *m, bool tool, const char *text, const char *id)
{
    m->blocks = dsv4_xrealloc(m->blocks, (m->n_blocks + 1) * sizeof(*m->blocks));
    m->blocks[m->n_blocks++] = (struct block){ tool, text ? text : "", id };
}

/* Rule 1's ordering: a turn's tool results in the order of the calls that asked for them. */
static void sort_results(struct msg *m, const struct dsv4_chat_msg *calls)
{
    size_t n_tool = 0;
    for (size_t i = 0; i < m->n_blocks; i++)
        n_tool += m->blocks[i].tool;
    if (n_tool < 2 || !calls)
        return;
    struct block *t = dsv4_xmalloc(n_tool * sizeof(*t));
    size_t *key = dsv4_xmalloc(n_tool * sizeof(*key)), k = 0;
    for (size_t i = 0; i < m->n_blocks; i++) {
        if (!m->blocks[i].tool)
            continue;
        size_t order = 0;
        for (size_t c = 0; c < calls->n_tool_calls; c++)
            if (m->blocks[i].id && calls->tool_calls[c].id &&
                !strcmp(m->blocks[i].id, calls->tool_calls[c].id)) {
                order = c;
                break;
            }
        size_t j = k++;     /* stable insertion by order */
        while (j > 0 && key[j - 1] > order) {
            t[j] = t[j - 1];
            key[j] = key[j - 1];
            j--;
        }
        t[j] = m->blocks[i];
        key[j] = order;
    }
    k = 0;
    for (size_t i = 0; i < m->n_blocks; i++)
        if (m->blocks[i].tool)
            m->blocks[i] = t[k++];
    free(t);
    free(key);
}

int dsv4_chat_render(const struct dsv4_chat_msg *msgs, size_t n, const struct dsv4_chat_opts *o,
                     char **text, size_t *len, struct dsv4_err *err)
{
    struct msg *m = dsv4_xcalloc(n ? n : 1, sizeof(*m));
    size_t k = 0;
    bool any_tools = false;
    const struct dsv4_chat_msg *calls = NULL;   /* the last assistant message with tool calls */
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
        if (msgs[i].tools && !any_tools) {
            cJSON *t = cJSON_Parse(msgs[i].tools);
            any_tools = cJSON_IsArray(t) && t->child;
            cJSON_Delete(t);
        }
        if (r == R_ASSISTANT && msgs[i].n_tool_calls)
            calls = &msgs[i];
        if (r == R_USER || r == R_TOOL) {   /* rule 1 */
            if (k == 0 || m[k - 1].role != R_USER) {
                m[k].role = R_USER;
                m[k].src = &msgs[i];
                k++;
            }
            add_block(&m[k - 1], r == R_TOOL, msgs[i].content, msgs[i].tool_call_id);
            if (r == R_TOOL)
                sort_results(&m[k - 1], calls);
            continue;
        }
        m[k].role = r;
        m[k].content = msgs[i].content ? msgs[i].content : "";
        m[k].reasoning = msgs[i].reasoning;
        m[k].src = &msgs[i];
        k++;
    }
    n = k;

    bool drop = !o->keep_reasoning && !any_tools;
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
                free(m[i].blocks);
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
    int rc = 0;
    put(&b, o->no_bos ? "" : DSV4_CHAT_BOS);
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (i == 0 && o->thinking && o->effort_max)
            put(&b, effort_max_text);
        switch (m[i].role) { /* rule 3 */
        case R_SYSTEM:
            put(&b, m[i].content);
            if (m[i].src->tools)
                rc = put_tools(&b, m[i].src->tools, (size_t)(m[i].src - msgs), err);
            break;
        case R_USER:
            put(&b, DSV4_CHAT_USER);
            for (size_t j = 0; j < m[i].n_blocks; j++) {
                if (j)
                    put(&b, "\n\n");
                put(&b, m[i].blocks[j].tool ? "<tool_result>" : "");
                put(&b, m[i].blocks[j].text);
                put(&b, m[i].blocks[j].tool ? "</tool_result>" : "");
            }
            break;
        case R_DEVELOPER:
            put(&b, DSV4_CHAT_USER);
            put(&b, m[i].content);
            if (m[i].src->tools)
                rc = put_tools(&b, m[i].src->tools, (size_t)(m[i].src - msgs), err);
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
            if (m[i].src->n_tool_calls)
                rc = put_tool_calls(&b, m[i].src, (size_t)(m[i].src - msgs), err);
            put(&b, DSV4_CHAT_EOS);
            break;
        case R_TOOL:
            break;  /* merged into user turns above */
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
    if (rc < 0) {
        free(b.p);
        return rc;
    }
    *text = b.p;
    *len = b.n;
    return 0;
}
#undef D

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
