/* SPDX-License-Identifier: MIT */
/*
 * OpenAI request parsing and validation (api_req.h): /v1/chat/completions
 * and /v1/completions bodies into a struct api_req. Fields we cannot honour
 * (n > 1, penalties, logit_bias, logprobs, tools, non-text content, ...) are
 * refused with 400 naming the field rather than silently ignored; fields
 * that change nothing for us (user, metadata, store, ...) are ignored.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api_req.h"
#include "util.h"

int api_err(struct api_error *e, int status, const char *type, const char *param,
            const char *code, const char *fmt, ...)
{
    memset(e, 0, sizeof(*e));
    e->status = status;
    snprintf(e->type, sizeof(e->type), "%s", type);
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    snprintf(e->code, sizeof(e->code), "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    return -1;
}

int api_bad(struct api_error *e, const char *param, const char *fmt, ...)
{
    char msg[sizeof(e->msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return api_err(e, 400, "invalid_request_error", param, NULL, "%s", msg);
}

/*
 * The structure of the text before cJSON sees it: nesting depth (cJSON
 * recurses) and the number of values (each becomes a heap node). Strings
 * are skipped honouring escapes; malformed JSON is left to the parser.
 */
int api_json_prescan(const char *body, size_t len, struct api_error *e)
{
    int depth = 0;
    size_t values = 1;
    for (size_t i = 0; i < len; i++) {
        char c = body[i];
        if (c == '"') {
            for (i++; i < len && body[i] != '"'; i++)
                if (body[i] == '\\')
                    i++;
        } else if (c == '[' || c == '{') {
            if (++depth > API_MAX_DEPTH)
                return api_bad(e, NULL, "request body nested deeper than %d", API_MAX_DEPTH);
        } else if (c == ']' || c == '}') {
            depth--;
        } else if (c == ',' || c == ':') {
            if (++values > 2 * (size_t)API_MAX_NODES)
                return api_bad(e, NULL, "request body has more than %d JSON values", API_MAX_NODES);
        }
    }
    return 0;
}

cJSON *api_parse_root(const char *body, size_t len, struct api_req *r, struct api_error *e)
{
    if (api_json_prescan(body, len, e) < 0)
        return NULL;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) {
        api_bad(e, NULL, "request body is not valid JSON");
        return NULL;
    }
    r->root = root;
    if (!cJSON_IsObject(root)) {
        api_bad(e, NULL, "request body must be a JSON object");
        return NULL;
    }
    return root;
}

char *api_own(struct api_req *r, char *s)
{
    r->owned = dsv4_xrealloc(r->owned, (r->n_owned + 1) * sizeof(char *));
    r->owned[r->n_owned++] = s;
    return s;
}

void api_req_free(struct api_req *r)
{
    for (size_t i = 0; i < r->n_owned; i++)
        free(r->owned[i]);
    free(r->owned);
    free(r->msgs);
    free(r->prompt_ids);
    cJSON_Delete(r->root);
    memset(r, 0, sizeof(*r));
}

/* 1 present, 0 absent or null, -1 error. */
int api_get_number(const cJSON *o, const char *key, double lo, double hi, double *out,
                   struct api_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return api_bad(e, key, "'%s' must be a number", key);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return api_bad(e, key, "'%s' must be in [%g, %g], got %g", key, lo, hi, v->valuedouble);
    *out = v->valuedouble;
    return 1;
}

int api_get_int(const cJSON *o, const char *key, double lo, double hi, long long *out,
                struct api_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return api_bad(e, key, "'%s' must be an integer", key);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return api_bad(e, key, "'%s' must be in [%.0f, %.0f], got %.0f", key, lo, hi,
                       v->valuedouble);
    *out = (long long)v->valuedouble;
    return 1;
}

int api_get_bool(const cJSON *o, const char *key, bool *out, struct api_error *e)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsBool(v))
        return api_bad(e, key, "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return 1;
}

int api_add_stop(struct api_req *r, const char *s, const char *param, struct api_error *e)
{
    size_t n = strlen(s) + 1;
    if (n == 1)
        return api_bad(e, param, "'%s': stop strings must not be empty", param);
    if (r->n_stop + n > sizeof(r->stop))
        return api_bad(e, param, "'%s': stop strings longer than %zu bytes in all", param,
                       sizeof(r->stop));
    memcpy(r->stop + r->n_stop, s, n);
    r->n_stop += n;
    return 0;
}

/* What both OpenAI endpoints share: model, sampling, stop, stream, refused extras. */
static int common_fields(const cJSON *root, struct api_req *r, struct api_error *e)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsString(model))
        return api_bad(e, "model", "'model' is required and must be a string");
    r->model = model->valuestring;
    r->temperature = 1.0;
    r->top_p = 1.0;
    long long v;
    double d;
    if (api_get_number(root, "temperature", 0, 2, &r->temperature, e) < 0 ||
        api_get_number(root, "top_p", 0, 1, &r->top_p, e) < 0)
        return -1;
    if (r->top_p == 0)
        return api_bad(e, "top_p", "'top_p' must be in (0, 1]");
    int k = api_get_int(root, "top_k", 0, INT32_MAX, &v, e);
    if (k < 0)
        return -1;
    r->top_k = k ? (int)v : 0;
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(root, "seed");
    if (seed && !cJSON_IsNull(seed)) {     /* any integer: taken modulo 2^64 */
        double sd = seed->valuedouble;
        if (!cJSON_IsNumber(seed) || sd != floor(sd) || !(fabs(sd) < 1.8e19))
            return api_bad(e, "seed", "'seed' must be an integer");
        r->seed = sd < 0 ? (uint64_t)(int64_t)fmax(sd, -9.2e18) : (uint64_t)sd;
        r->has_seed = true;
    }
    if ((k = api_get_int(root, "n", 1, 1, &v, e)) < 0)
        return -1;
    static const char *const zero[] = { "presence_penalty", "frequency_penalty" };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(zero); i++) {
        d = 0;
        if (api_get_number(root, zero[i], -2, 2, &d, e) < 0)
            return -1;
        if (d != 0)
            return api_bad(e, zero[i], "'%s' is not supported (only 0)", zero[i]);
    }
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (lb && !cJSON_IsNull(lb) && !(cJSON_IsObject(lb) && !lb->child))
        return api_bad(e, "logit_bias", "'logit_bias' is not supported");
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (cJSON_IsString(stop)) {
        if (api_add_stop(r, stop->valuestring, "stop", e) < 0)
            return -1;
    } else if (cJSON_IsArray(stop)) {
        int n = 0;
        for (const cJSON *s = stop->child; s; s = s->next, n++) {
            if (n >= API_MAX_STOP)
                return api_bad(e, "stop", "'stop' takes at most %d strings", API_MAX_STOP);
            if (!cJSON_IsString(s))
                return api_bad(e, "stop", "'stop' must be a string or a list of strings");
            if (api_add_stop(r, s->valuestring, "stop", e) < 0)
                return -1;
        }
    } else if (stop && !cJSON_IsNull(stop)) {
        return api_bad(e, "stop", "'stop' must be a string or a list of strings");
    }
    if (api_get_bool(root, "stream", &r->stream, e) < 0)
        return -1;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so))
            return api_bad(e, "stream_options", "'stream_options' must be an object");
        if (!r->stream)
            return api_bad(e, "stream_options", "'stream_options' is only allowed with stream");
        if (api_get_bool(so, "include_usage", &r->include_usage, e) < 0)
            return api_bad(e, "stream_options.include_usage", "%s", e->msg);
    }
    return 0;
}

static int max_tokens(const cJSON *root, const char *key, struct api_req *r, struct api_error *e)
{
    long long v;
    int k = api_get_int(root, key, 1, INT32_MAX, &v, e);
    if (k > 0)
        r->max_tokens = (int)v;
    return k < 0 ? -1 : 0;
}

/* A message's content: a string, null, or a list of {"type":"text","text":...} parts. */
static int content_text(struct api_req *r, const cJSON *c, size_t i, const char **out,
                        struct api_error *e)
{
    char param[64];
    snprintf(param, sizeof(param), "messages[%zu].content", i);
    if (!c || cJSON_IsNull(c)) {
        *out = NULL;
        return 0;
    }
    if (cJSON_IsString(c)) {
        *out = c->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(c))
        return api_bad(e, param, "'%s' must be a string or a list of text parts", param);
    size_t total = 1;
    for (const cJSON *p = c->child; p; p = p->next) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsObject(p) || !cJSON_IsString(t))
            return api_bad(e, param, "'%s': each part must be an object with a 'type'", param);
        if (strcmp(t->valuestring, "text") != 0)
            return api_bad(e, param, "'%s': part type '%.40s' is not supported (text only)",
                           param, t->valuestring);
        if (!cJSON_IsString(x))
            return api_bad(e, param, "'%s': a text part needs a string 'text'", param);
        total += strlen(x->valuestring);
    }
    char *s = api_own(r, dsv4_xmalloc(total)), *w = s;
    for (const cJSON *p = c->child; p; p = p->next) {
        const char *x = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        size_t n = strlen(x);
        memcpy(w, x, n);
        w += n;
    }
    *w = '\0';
    *out = s;
    return 0;
}

/*
 * "tools" (function tools) and "tool_choice": the tools rendered into the prompt as JSON text
 * (*json NULL when none); "none" renders none, a named function only that one; "required" is
 * accepted but not enforced (the model decides).
 */
static int tools_field(const cJSON *root, struct api_req *r, const char **json,
                       struct api_error *e)
{
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    *json = NULL;
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools))
        return api_bad(e, "tools", "'tools' must be a list");
    int i = 0;
    for (const cJSON *t = tools ? tools->child : NULL; t; t = t->next, i++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(f, "parameters");
        char param[48];
        snprintf(param, sizeof(param), "tools[%d]", i);
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
            !cJSON_IsObject(f) || !cJSON_IsString(name) || !name->valuestring[0] ||
            (params && !cJSON_IsObject(params)))
            return api_bad(e, param, "'%s' must be {\"type\": \"function\", \"function\": "
                                     "{\"name\": ..., \"parameters\": {...}}}", param);
    }
    const char *only = NULL;
    if (tc && !cJSON_IsNull(tc)) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "none"))
            return 0;
        if (cJSON_IsObject(tc) && cJSON_IsString(name))
            only = name->valuestring;
        else if (!cJSON_IsString(tc) || (strcmp(tc->valuestring, "auto") &&
                                         strcmp(tc->valuestring, "required")))
            return api_bad(e, "tool_choice", "'tool_choice' must be none, auto, required or "
                                             "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        if (!tools || !tools->child)
            return api_bad(e, "tool_choice", "'tool_choice' needs 'tools'");
    }
    if (!tools || !tools->child)
        return 0;
    cJSON *list = cJSON_CreateArray();
    for (const cJSON *t = tools->child; t; t = t->next) {
        const char *nm = cJSON_GetObjectItemCaseSensitive(
                             cJSON_GetObjectItemCaseSensitive(t, "function"), "name")->valuestring;
        if (!only || !strcmp(only, nm))
            cJSON_AddItemToArray(list, cJSON_Duplicate(t, true));
    }
    if (only && !list->child) {
        cJSON_Delete(list);
        return api_bad(e, "tool_choice", "'tool_choice' names '%.64s', which is not in 'tools'",
                       only);
    }
    *json = api_own(r, cJSON_PrintUnformatted(list));
    cJSON_Delete(list);
    return 0;
}

/* An assistant message's "tool_calls": [{"id", "type": "function", "function": {"name",
 * "arguments"}}]. */
static int assistant_calls(struct api_req *r, const cJSON *m, size_t i, struct dsv4_chat_msg *cm,
                           struct api_error *e)
{
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    char param[64];
    snprintf(param, sizeof(param), "messages[%zu].tool_calls", i);
    if (!calls || cJSON_IsNull(calls))
        return 0;
    if (strcmp(cm->role, "assistant") != 0 || !cJSON_IsArray(calls))
        return api_bad(e, param, "'%s' is a list, on assistant messages only", param);
    size_t n = (size_t)cJSON_GetArraySize(calls), k = 0;
    struct dsv4_chat_tool_call *v = (void *)api_own(r, dsv4_xcalloc(n ? n : 1, sizeof(*v)));
    for (const cJSON *c = calls->child; c; c = c->next, k++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        if (!cJSON_IsObject(c) || (id && !cJSON_IsString(id)) || !cJSON_IsString(name) ||
            !cJSON_IsString(args))
            return api_bad(e, param, "'%s[%zu]' must have a string id and function {\"name\", "
                                     "\"arguments\"} strings", param, k);
        cJSON *parsed = cJSON_Parse(args->valuestring);
        bool bad_args = parsed && !cJSON_IsObject(parsed);
        cJSON_Delete(parsed);
        if (bad_args)
            return api_bad(e, param, "'%s[%zu].function.arguments' must be a JSON object", param,
                           k);
        v[k] = (struct dsv4_chat_tool_call){ id ? id->valuestring : NULL, name->valuestring,
                                             args->valuestring };
    }
    cm->tool_calls = v;
    cm->n_tool_calls = n;
    return 0;
}

/* DeepSeek's "thinking": {"type": "enabled"|"disabled"}, or any reasoning_effort. */
static int thinking_fields(const cJSON *root, struct api_req *r, struct api_error *e)
{
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(root, "thinking");
    if (th && !cJSON_IsNull(th)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(th, "type");
        if (!cJSON_IsObject(th) || !cJSON_IsString(t) ||
            (strcmp(t->valuestring, "enabled") && strcmp(t->valuestring, "disabled")))
            return api_bad(e, "thinking", "'thinking' must be {\"type\": \"enabled\"|\"disabled\"}");
        r->chat.thinking = strcmp(t->valuestring, "enabled") == 0;
    }
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(root, "reasoning_effort");
    if (re && !cJSON_IsNull(re)) {
        if (!cJSON_IsString(re))
            return api_bad(e, "reasoning_effort", "'reasoning_effort' must be a string");
        r->chat.thinking = true;
        r->chat.effort_max = strcmp(re->valuestring, "max") == 0;
    }
    return 0;
}

int api_parse_chat(const char *body, size_t len, struct api_req *r, struct api_error *e)
{
    memset(r, 0, sizeof(*r));
    r->kind = API_CHAT;
    cJSON *root = api_parse_root(body, len, r, e);
    if (!root || common_fields(root, r, e) < 0 || max_tokens(root, "max_tokens", r, e) < 0 ||
        max_tokens(root, "max_completion_tokens", r, e) < 0 || thinking_fields(root, r, e) < 0)
        return -1;
    long long v;
    int k;
    if (api_get_bool(root, "logprobs", &r->logprobs, e) < 0 ||
        (k = api_get_int(root, "top_logprobs", 0, DSV4_WIRE_MAX_LOGPROBS, &v, e)) < 0)
        return -1;
    if (k && !r->logprobs)
        return api_bad(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r->top_logprobs = k ? (int)v : 0;
    const char *tools_json = NULL;
    if (tools_field(root, r, &tools_json, e) < 0)
        return -1;
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    if (rf && !cJSON_IsNull(rf)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rf, "type");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0)
            return api_bad(e, "response_format", "'response_format' other than text is not supported");
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(msgs) || !msgs->child)
        return api_bad(e, "messages", "'messages' is required: a non-empty list");
    size_t n = (size_t)cJSON_GetArraySize(msgs);
    if (n > API_MAX_MESSAGES)
        return api_bad(e, "messages", "'messages' has more than %d entries", API_MAX_MESSAGES);
    r->msgs = dsv4_xcalloc(n + 1, sizeof(*r->msgs));   /* + a system message for the tools */
    size_t i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        char param[64];
        snprintf(param, sizeof(param), "messages[%zu]", i);
        if (!cJSON_IsObject(m))
            return api_bad(e, param, "'%s' must be an object", param);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        snprintf(param, sizeof(param), "messages[%zu].role", i);
        if (!cJSON_IsString(role))
            return api_bad(e, param, "'%s' is required and must be a string", param);
        const char *rs = role->valuestring;
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") &&
            strcmp(rs, "developer") && strcmp(rs, "tool"))
            return api_bad(e, param, "'%s': unknown role '%.40s'", param, rs);
        struct dsv4_chat_msg *cm = &r->msgs[i];
        cm->role = rs;
        if (content_text(r, cJSON_GetObjectItemCaseSensitive(m, "content"), i, &cm->content, e) < 0)
            return -1;
        if (!strcmp(rs, "tool")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
            snprintf(param, sizeof(param), "messages[%zu].tool_call_id", i);
            if (id && !cJSON_IsString(id))
                return api_bad(e, param, "'%s' must be a string", param);
            cm->tool_call_id = id ? id->valuestring : NULL;
        }
        if (assistant_calls(r, m, i, cm, e) < 0)
            return -1;
        if (!cm->content && strcmp(rs, "assistant") != 0) {
            snprintf(param, sizeof(param), "messages[%zu].content", i);
            return api_bad(e, param, "'%s' is required for role %s", param, rs);
        }
        if (!strcmp(rs, "developer") && !cm->content[0]) {
            snprintf(param, sizeof(param), "messages[%zu].content", i);
            return api_bad(e, param, "'%s': a developer message must not be empty", param);
        }
        const cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        if (rc && !cJSON_IsNull(rc)) {
            snprintf(param, sizeof(param), "messages[%zu].reasoning_content", i);
            if (!cJSON_IsString(rc))
                return api_bad(e, param, "'%s' must be a string", param);
            cm->reasoning = rc->valuestring;
        }
    }
    r->n_msgs = n;
    if (tools_json) {   /* the tools go with the system message, one is made if there is none */
        if (strcmp(r->msgs[0].role, "system") != 0) {
            memmove(r->msgs + 1, r->msgs, n * sizeof(*r->msgs));
            r->msgs[0] = (struct dsv4_chat_msg){ .role = "system", .content = "" };
            r->n_msgs++;
        }
        r->msgs[0].tools = tools_json;
        r->tools = true;
    }
    return 0;
}

int api_parse_completion(const char *body, size_t len, struct api_req *r, struct api_error *e)
{
    memset(r, 0, sizeof(*r));
    r->kind = API_COMPLETION;
    cJSON *root = api_parse_root(body, len, r, e);
    if (!root || common_fields(root, r, e) < 0 || max_tokens(root, "max_tokens", r, e) < 0)
        return -1;
    if (!cJSON_GetObjectItemCaseSensitive(root, "max_tokens"))
        r->max_tokens = 16;     /* OpenAI's default for this endpoint */
    if (api_get_bool(root, "echo", &r->echo, e) < 0)
        return -1;
    long long lp;
    int k = api_get_int(root, "logprobs", 0, DSV4_WIRE_MAX_LOGPROBS, &lp, e);
    if (k < 0)
        return -1;
    r->logprobs = k > 0;
    r->top_logprobs = k ? (int)lp : 0;
    if (r->logprobs && r->echo)
        return api_bad(e, "logprobs", "'logprobs' with 'echo' (prompt logprobs) is not supported");
    const cJSON *sfx = cJSON_GetObjectItemCaseSensitive(root, "suffix");
    if (sfx && !cJSON_IsNull(sfx))
        return api_bad(e, "suffix", "'suffix' is not supported");
    long long v;
    if (api_get_int(root, "best_of", 1, 1, &v, e) < 0)
        return -1;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    /* a list of one prompt is the same as the prompt */
    if (cJSON_IsArray(p) && p->child && !p->child->next &&
        (cJSON_IsString(p->child) || cJSON_IsArray(p->child)))
        p = p->child;
    if (cJSON_IsString(p)) {
        r->prompt = p->valuestring;
        r->prompt_len = strlen(p->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(p) || !p->child)
        return api_bad(e, "prompt", "'prompt' must be a string, a list of token ids or a "
                                    "list of one of those");
    size_t n = (size_t)cJSON_GetArraySize(p);
    if (n > API_MAX_PROMPT_IDS)
        return api_bad(e, "prompt", "'prompt' has more than %d ids", API_MAX_PROMPT_IDS);
    r->prompt_ids = dsv4_xmalloc(n * sizeof(uint32_t));
    for (const cJSON *t = p->child; t; t = t->next) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) ||
            t->valuedouble < 0 || t->valuedouble > INT32_MAX)
            return api_bad(e, "prompt", "'prompt': token ids must be non-negative integers "
                                        "(one prompt per request)");
        r->prompt_ids[r->n_prompt_ids++] = (uint32_t)t->valuedouble;
    }
    return 0;
}
