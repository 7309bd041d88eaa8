# SPDX-License-Identifier: MIT
"""End-to-end checks of dsv4-api, the HTTP API of the daemon set (suite e2e).

usage: test_api.py DSV4CTL MODEL_DIR SCRATCH_DIR SCENARIO [NODE SDK_SCRIPT]

MODEL_DIR is the tiny-confident fixture (it has a tokenizer). Each scenario starts its own set
in SCRATCH_DIR/api-<scenario> with --api-addr 127.0.0.1:0, stops it and checks that nothing
is left. What is compared is what `dsv4ctl gen` prints for the same request:
  chat        non-stream and stream (concatenated stream == non-stream content), temperature 0
              == `gen --chat`, seeded sampling == `gen --chat --temperature --seed` and
              usage (prompt ids == `tokenize --chat`), stop (text before it, in
              both modes), max_tokens / finish_reason, thinking (reasoning_content, never in
              content), logprobs (== `dsv4ctl score`), /v1/completions (echo, ids prompt,
              logprobs), /v1/messages (Anthropic), curl, /health, /v1/models, the api's counters
  tools       tools, an assistant's tool calls and tool results (OpenAI and Anthropic forms):
              the prompt's ids are those of the official encoder's rendering (by count against
              `dsv4ctl tokenize` of the expected text); tool_choice none; a given system message
  seed        seeded sampling (plain tiny fixture) == `gen --chat --temperature --seed`,
              reproducible in both modes, and different seeds give different texts
  errors      every error status: 400 (invalid JSON, wrong type, out of range: the field is
              named; context overflow with both numbers), 401 (--api-key-file), 404 (route,
              model), 405, 413, 503 while compute restarts; the per-client connection cap; a
              non-loopback --api-addr without a key is refused at start
  abort       a client that hangs up mid-stream cancels its generation (scheduler counts it,
              active back to 0); the next request is answered exactly
  concurrent  32 clients at once: each gets the exact text or a clean 429 with Retry-After
  restarts    kill -9 of the scheduler, then of compute, mid-stream: each stream goes on and
              equals the uninterrupted text; kill -9 of dsv4-api: restarted on the same address
  prefix      a conversation's second turn through /v1/chat/completions and /v1/messages
              reports the tokens the prefix cache restored (usage.prompt_tokens_details.
              cached_tokens; Anthropic cache_read_input_tokens, input_tokens the rest) and
              answers what an uncached set answers
  squatted    the default API (8080) and metrics (9464) ports held by someone else: start
              moves each to a free port with a warning, status names the ports in use, and
              both answer there
  sdk         the official `openai` and `@anthropic-ai/sdk` npm clients (tools/npm): chat,
              stream, completions, messages and a messages stream give the text gen gives
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

exe, model, scratch, scenario = sys.argv[1:5]
node = sys.argv[5] if len(sys.argv) > 5 else None
sdk_script = sys.argv[6] if len(sys.argv) > 6 else None
run_dir = os.path.join(scratch, "api-" + scenario)
if scenario == "seed":
    model = os.path.join(os.path.dirname(os.path.realpath(model)), "tiny")
MODEL_ID = os.path.basename(os.path.realpath(model))
MSG = "Tell me about the weather."
addr = None


def ctl(*args, check=True, timeout=60, env=None):
    p = subprocess.run([exe, *args], capture_output=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def env_with(**extra):
    env = dict(os.environ)
    env.pop("DSV4_RUN_DIR", None)
    env.update(extra)
    return env


def status():
    p = ctl("status", "--run-dir", run_dir, "--json", check=False)
    return json.loads(p.stdout)


def daemon(st, name):
    return next(d for d in st["daemons"] if d["name"] == name)


def start(*args, delay_ms="0"):
    global addr
    shutil.rmtree(run_dir, ignore_errors=True)
    ctl("start", "--model", model, "--run-dir", run_dir, "--no-metrics",
        "--api-addr", "127.0.0.1:0", *args, timeout=120,
        env=env_with(DSV4_TEST_FORWARD_DELAY_MS=delay_ms))
    with open(os.path.join(run_dir, "api-addr")) as f:
        addr = f.read().strip()
    st = status()
    assert st["api_addr"] == addr and daemon(st, "api")["state"] == "ready", st
    return st


def stop_and_check(st):
    pids = [d["pid"] for d in status()["daemons"]] + [st["supervisor_pid"]]
    ctl("stop", "--run-dir", run_dir, timeout=60)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            continue
        assert state == "Z", f"process {pid} survived stop (state {state})"
    assert not os.path.exists(os.path.join(run_dir, "api-addr"))
    with socket.socket() as s:     # the port is free again
        host, port = addr.rsplit(":", 1)
        assert s.connect_ex((host, int(port))) != 0, addr


def request(method, path, body=None, headers=None, raw=None, timeout=60):
    """(status, headers, parsed JSON or text)"""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    h = {"Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(f"http://{addr}{path}", data=data, headers=h, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, hdrs, text = r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        status, hdrs, text = e.code, dict(e.headers), e.read().decode()
    try:
        return status, hdrs, json.loads(text)
    except ValueError:
        return status, hdrs, text


def post(path, body, **kw):
    return request("POST", path, body, **kw)


def chat_body(content=MSG, **kw):
    return {"model": MODEL_ID, "messages": [{"role": "user", "content": content}], **kw}


def events(text):
    """The data: payloads of an SSE body, and whether it ended with [DONE]."""
    out, done = [], False
    for block in text.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                if line == "data: [DONE]":
                    done = True
                else:
                    out.append(json.loads(line[6:]))
    return out, done


def gen(*args, n=24):
    p = ctl("gen", "--run-dir", run_dir, "--max-tokens", str(n), *args)
    out = p.stdout.decode()
    assert out.endswith("\n"), out
    return out[:-1]


def stream_text(evs, key="content"):
    return "".join(e["choices"][0]["delta"].get(key) or "" for e in evs if e["choices"])


def check_error(status, body, want_status, param=None, anthropic=False):
    assert isinstance(body, dict), (status, body)
    if anthropic:
        assert status == want_status and body["type"] == "error", (status, body)
        assert body["error"]["type"] and body["error"]["message"], body
        return body["error"]["message"]
    assert status == want_status and set(body["error"]) == {"message", "type", "param", "code"}, \
        (status, want_status, body)
    if param is not None:
        assert body["error"]["param"] == param, (param, body)
    return body["error"]["message"]


# ---------------------------------------------------------------------------------------------
def chat():
    st = start()
    try:
        s, _, h = request("GET", "/health")
        assert s == 200 and h["status"] == "ok" and not h["not_ready"], h
        assert set(h["daemons"]) >= {"compute", "scheduler"}, h
        s, _, m = request("GET", "/v1/models")
        assert s == 200 and [d["id"] for d in m["data"]] == [MODEL_ID], m
        assert request("GET", f"/v1/models/{MODEL_ID}")[2]["id"] == MODEL_ID

        # temperature 0 == gen --chat; usage; finish_reason
        ref = gen("--chat", MSG, n=24)
        s, _, r = post("/v1/chat/completions", chat_body(max_tokens=24, temperature=0))
        assert s == 200, r
        msg = r["choices"][0]["message"]
        assert msg["role"] == "assistant" and msg["content"] == ref, (msg, ref)
        assert "reasoning_content" not in msg, msg
        ids = ctl("tokenize", "--model", model, "--chat", MSG).stdout.decode().split()
        u = r["usage"]
        assert u["prompt_tokens"] == len(ids) and u["completion_tokens"] <= 24, (u, len(ids))
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u
        assert u["prompt_tokens_details"]["cached_tokens"] == 0, u
        fin = r["choices"][0]["finish_reason"]
        assert fin == ("length" if u["completion_tokens"] == 24 else "stop"), r
        # max_completion_tokens is the same limit
        s, _, r2 = post("/v1/chat/completions", chat_body(max_completion_tokens=24, temperature=0))
        assert r2["choices"][0]["message"]["content"] == ref, r2

        # stream: concatenated == non-stream; include_usage; [DONE]
        s, hd, text = post("/v1/chat/completions",
                           chat_body(max_tokens=24, temperature=0, stream=True,
                                     stream_options={"include_usage": True}))
        assert s == 200 and hd["Content-Type"].startswith("text/event-stream"), (s, hd)
        evs, done = events(text)
        assert done and evs[0]["choices"][0]["delta"]["role"] == "assistant", evs[0]
        assert stream_text(evs) == ref, (stream_text(evs), ref)
        assert all(e["object"] == "chat.completion.chunk" and e["id"] == evs[0]["id"] for e in evs)
        assert evs[-2]["choices"][0]["finish_reason"] == fin and evs[-1]["choices"] == [], evs[-2:]
        assert evs[-1]["usage"] == u, (evs[-1], u)
        assert len([e for e in evs if e["choices"] and e["choices"][0]["delta"].get("content")]) > 1

        # stop: the text before the first occurrence, in both modes
        stop = ref[6:9]
        cut = ref[:ref.find(stop)]
        s, _, r = post("/v1/chat/completions", chat_body(max_tokens=24, temperature=0, stop=stop))
        assert r["choices"][0]["message"]["content"] == cut, (r, cut, stop)
        assert r["choices"][0]["finish_reason"] == "stop", r
        s, _, text = post("/v1/chat/completions",
                          chat_body(max_tokens=24, temperature=0, stop=["\u2603", stop],
                                    stream=True))
        evs, done = events(text)
        assert done and stream_text(evs) == cut, (stream_text(evs), cut)

        # thinking: reasoning apart from content; gen --think prints both
        s, _, r = post("/v1/chat/completions",
                       chat_body(max_tokens=24, temperature=0, thinking={"type": "enabled"}))
        m = r["choices"][0]["message"]
        g = gen("--chat", "--think", MSG, n=24)
        assert g in (m["reasoning_content"] + m["content"],
                     m["reasoning_content"] + "</think>" + m["content"]), (m, g)
        assert m["reasoning_content"], m
        s, _, text = post("/v1/chat/completions",
                          chat_body(max_tokens=24, temperature=0, reasoning_effort="high",
                                    stream=True))
        evs, _ = events(text)
        assert stream_text(evs, "reasoning_content") == m["reasoning_content"], evs
        assert stream_text(evs) == m["content"], evs
        # earlier turns' reasoning does not reach the prompt (V4 template): same answer
        conv = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello", "reasoning_content": "greeting"},
                {"role": "user", "content": MSG}]
        conv2 = [dict(c) for c in conv]
        conv2[1]["reasoning_content"] = "something else entirely"
        a = post("/v1/chat/completions", {"model": MODEL_ID, "messages": conv, "max_tokens": 8,
                                          "temperature": 0, "thinking": {"type": "enabled"}})[2]
        b = post("/v1/chat/completions", {"model": MODEL_ID, "messages": conv2, "max_tokens": 8,
                                          "temperature": 0, "thinking": {"type": "enabled"}})[2]
        assert a["usage"] == b["usage"] and a["choices"] == b["choices"], (a, b)

        # logprobs: the model's log-softmax of each token == what `dsv4ctl score` computes for
        # prompt + generated ids; the chosen token leads the alternatives at temperature 0
        gids = ctl("gen", "--run-dir", run_dir, "--chat", "--max-tokens", "24", "--format", "ids",
                   MSG).stdout.decode().split()
        rows = ctl("score", "--run-dir", run_dir, "--prompt-ids",
                   ",".join(ids + gids)).stdout.decode().splitlines()
        want = [float(rows[len(ids) + i - 1].split("\t")[2]) for i in range(len(gids))]
        if int(gids[-1]) == json.load(open(os.path.join(model, "config.json")))["eos_token_id"]:
            want.pop()      # EOS is not text: not reported
        s, _, r = post("/v1/chat/completions", chat_body(max_tokens=24, temperature=0,
                                                         logprobs=True, top_logprobs=3))
        lp = r["choices"][0]["logprobs"]["content"]
        assert len(lp) == len(want) and all(abs(a["logprob"] - b) < 1e-4
                                            for a, b in zip(lp, want)), (lp, want)
        for e in lp:
            assert len(e["top_logprobs"]) == 3 and e["top_logprobs"][0]["token"] == e["token"], e
            assert e["top_logprobs"][0]["logprob"] == e["logprob"], e
            assert bytes(e["bytes"]) == e["token"].encode(), e
            assert e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"] >= \
                e["top_logprobs"][2]["logprob"], e
        s, _, text = post("/v1/chat/completions", chat_body(max_tokens=24, temperature=0,
                                                            logprobs=True, top_logprobs=3,
                                                            stream=True))
        evs, _ = events(text)
        slp = [e for ev in evs if ev["choices"] and ev["choices"][0]["logprobs"]
               for e in ev["choices"][0]["logprobs"]["content"]]
        assert slp == lp and stream_text(evs) == ref, (slp, lp)
        s, _, r = post("/v1/completions", {"model": MODEL_ID, "prompt": "The sky", "max_tokens": 12,
                                           "temperature": 0, "logprobs": 2})
        tl = r["choices"][0]["logprobs"]
        assert len(tl["tokens"]) == len(tl["token_logprobs"]) == len(tl["top_logprobs"]), tl
        assert all(max(t.values()) == l for t, l in zip(tl["top_logprobs"], tl["token_logprobs"]))
        assert tl["text_offset"][0] == 0, tl

        # text parts are joined as one content
        s, _, r = post("/v1/chat/completions",
                       {"model": MODEL_ID, "max_tokens": 24, "temperature": 0,
                        "messages": [{"role": "user", "content": [
                            {"type": "text", "text": MSG[:7]}, {"type": "text", "text": MSG[7:]}]}]})
        assert r["choices"][0]["message"]["content"] == ref, r

        # completions: text (BOS + text, as gen without --chat), echo, ids
        cref = gen("The sky", n=12)
        s, _, r = post("/v1/completions", {"model": MODEL_ID, "prompt": "The sky",
                                           "max_tokens": 12, "temperature": 0})
        assert r["object"] == "text_completion" and r["choices"][0]["text"] == cref, (r, cref)
        s, _, r = post("/v1/completions", {"model": MODEL_ID, "prompt": ["The sky"], "echo": True,
                                           "max_tokens": 12, "temperature": 0})
        assert r["choices"][0]["text"] == "The sky" + cref, r
        pids = ctl("tokenize", "--model", model, "--bos", "The sky").stdout.decode().split()
        s, _, r = post("/v1/completions", {"model": MODEL_ID, "prompt": [int(i) for i in pids],
                                           "max_tokens": 12, "temperature": 0})
        assert r["choices"][0]["text"] == cref and r["usage"]["prompt_tokens"] == len(pids), r
        s, _, text = post("/v1/completions", {"model": MODEL_ID, "prompt": "The sky", "stream": True,
                                              "max_tokens": 12, "temperature": 0})
        evs, done = events(text)
        assert done and "".join(e["choices"][0]["text"] for e in evs) == cref, evs

        # Anthropic messages: same template, same text
        s, _, r = post("/v1/messages", {"model": MODEL_ID, "max_tokens": 24, "temperature": 0,
                                        "messages": [{"role": "user", "content": MSG}]})
        assert s == 200 and r["type"] == "message" and r["content"][-1]["text"] == ref, r
        assert r["usage"] == {"input_tokens": len(ids), "cache_creation_input_tokens": 0,
                              "cache_read_input_tokens": 0,
                              "output_tokens": u["completion_tokens"]}, r["usage"]
        assert r["stop_reason"] == ("max_tokens" if fin == "length" else "end_turn"), r
        s, _, r = post("/v1/messages", {"model": MODEL_ID, "max_tokens": 24, "temperature": 0,
                                        "stop_sequences": [stop],
                                        "messages": [{"role": "user", "content": MSG}]})
        assert r["content"][-1]["text"] == cut and r["stop_reason"] == "stop_sequence", r
        assert r["stop_sequence"] == stop, r
        s, hd, text = post("/v1/messages", {"model": MODEL_ID, "max_tokens": 24, "temperature": 0,
                                            "stream": True, "thinking": {"type": "enabled",
                                                                         "budget_tokens": 16},
                                            "messages": [{"role": "user", "content": MSG}]})
        kinds = [line[7:] for line in text.split("\n") if line.startswith("event: ")]
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
        evs, _ = events(text)
        th = "".join(e["delta"].get("thinking", "") for e in evs
                     if e["type"] == "content_block_delta")
        tx = "".join(e["delta"].get("text", "") for e in evs if e["type"] == "content_block_delta")
        mthink = post("/v1/chat/completions",
                      chat_body(max_tokens=24, temperature=0,
                                thinking={"type": "enabled"}))[2]["choices"][0]["message"]
        assert (th, tx) == (mthink["reasoning_content"], mthink["content"]), (th, tx, mthink)

        # curl, as the README shows it
        c = subprocess.run(["curl", "-sS", f"http://{addr}/v1/chat/completions",
                            "-H", "Content-Type: application/json",
                            "-d", json.dumps(chat_body(max_tokens=24, temperature=0))],
                           capture_output=True, timeout=60)
        assert json.loads(c.stdout)["choices"][0]["message"]["content"] == ref, c

        # counters: status and /metrics
        api = daemon(status(), "api")
        assert api["requests_ok"] >= 15 and api["requests_error"] == 0 and api["active"] == 0, api
        print(f"# chat: {api['requests_ok']} requests ok; reference {ref!r}")
    finally:
        stop_and_check(st)


def tools():
    """Tools through both APIs (long prompts: not in the sanitizer build, like goldens)."""
    st = start()
    try:
        # tools: the prompt is the official encoder's rendering (tools with a system message made
        # for them, the assistant's call as DSML, the result merged into a user turn); the ids
        # are checked by count against `dsv4ctl tokenize` of that text
        tools = [{"type": "function", "function": {
            "name": "get_weather", "description": "Weather of a city, \"quoted\" ✓",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                            "days": {"type": "integer"}},
                           "required": ["city"]}}}]
        conv = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather",
                                  "arguments": json.dumps({"city": "Paris", "days": 2})}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18C"}]
        ds = "\uff5cDSML\uff5c"
        tools_text = (
            "## Tools\n\nYou have access to a set of tools to help answer the user's question. You "
            f"can invoke tools by writing a \"<{ds}tool_calls>\" block like the following:\n\n"
            f"<{ds}tool_calls>\n<{ds}invoke name=\"$TOOL_NAME\">\n<{ds}parameter "
            f"name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</{ds}parameter>\n"
            f"...\n</{ds}invoke>\n<{ds}invoke name=\"$TOOL_NAME2\">\n...\n</{ds}invoke>\n"
            f"</{ds}tool_calls>\n\nString parameters should be specified as is and set "
            "`string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the "
            "value in JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled "
            "(triggered by <think>), you MUST output your complete reasoning inside "
            "<think>...</think> BEFORE any tool calls or final response.\n\nOtherwise, output "
            "directly after </think> with tool calls or final response.\n\n### Available Tool "
            "Schemas\n\n" + json.dumps(tools[0]["function"], ensure_ascii=False) +
            "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to "
            "invoke tool calls.\n")
        bos, eos = "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"
        usr, ast = "<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>"
        want = (bos + "\n\n" + tools_text + usr + "Weather in Paris?" + ast + "</think>" +
                f"\n\n<{ds}tool_calls>\n<{ds}invoke name=\"get_weather\">\n<{ds}parameter "
                f"name=\"city\" string=\"true\">Paris</{ds}parameter>\n<{ds}parameter name=\"days\" "
                f"string=\"false\">2</{ds}parameter>\n</{ds}invoke>\n</{ds}tool_calls>" + eos +
                usr + "<tool_result>18C</tool_result>" + ast + "</think>")
        want_ids = ctl("tokenize", "--model", model, want).stdout.decode().split()
        s, _, r = post("/v1/chat/completions", {"model": MODEL_ID, "messages": conv,
                                                "tools": tools, "max_tokens": 8, "temperature": 0})
        assert s == 200 and r["usage"]["prompt_tokens"] == len(want_ids), (r, len(want_ids))
        assert r["choices"][0]["finish_reason"] in ("stop", "length"), r   # no DSML from tiny
        # tool_choice none: the tools leave the prompt (the rest stays)
        s, _, r2 = post("/v1/chat/completions", {"model": MODEL_ID, "messages": conv, "tools": tools,
                                                 "tool_choice": "none", "max_tokens": 8,
                                                 "temperature": 0})
        no_tools = want.replace("\n\n" + tools_text, "")
        assert r2["usage"]["prompt_tokens"] == len(ctl("tokenize", "--model", model,
                                                       no_tools).stdout.split()), r2
        # the same conversation through the Anthropic shapes renders the same prompt
        s, _, ra = post("/v1/messages", {
            "model": MODEL_ID, "max_tokens": 8, "temperature": 0,
            "tools": [{"name": "get_weather", "description": tools[0]["function"]["description"],
                       "input_schema": tools[0]["function"]["parameters"]}],
            "messages": [{"role": "user", "content": "Weather in Paris?"},
                         {"role": "assistant", "content": [
                             {"type": "tool_use", "id": "call_1", "name": "get_weather",
                              "input": {"city": "Paris", "days": 2}}]},
                         {"role": "user", "content": [
                             {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"}]}]})
        # Anthropic counts the prefix cache's tokens apart (cache_read_input_tokens)
        assert s == 200 and ra["usage"]["input_tokens"] + \
            ra["usage"]["cache_read_input_tokens"] == len(want_ids), (ra, len(want_ids))
        # a system message of our own carries them: its content comes first
        s, _, r3 = post("/v1/chat/completions",
                        {"model": MODEL_ID, "messages": [{"role": "system", "content": "Be brief."}]
                         + conv, "tools": tools, "max_tokens": 8, "temperature": 0})
        sys_ids = ctl("tokenize", "--model", model,
                      want.replace(bos, bos + "Be brief.", 1)).stdout.split()
        assert r3["usage"]["prompt_tokens"] == len(sys_ids), r3

        print("# tools: OpenAI and Anthropic tool conversations render the official prompt")
    finally:
        stop_and_check(st)


def seed():
    """Seeded sampling (on the plain tiny fixture: the confident one samples its argmax even at
    temperature 2): == gen with the same seed, reproducible, and the seed matters."""
    st = start()
    try:
        samp = dict(temperature=1.5, top_p=0.95, top_k=40)
        outs = []
        for sd in (11, 12, 13, 14):
            s, _, r = post("/v1/chat/completions", chat_body(max_tokens=16, seed=sd, **samp))
            outs.append(r["choices"][0]["message"]["content"])
        s, _, r = post("/v1/chat/completions", chat_body(max_tokens=16, seed=11, **samp))
        assert r["choices"][0]["message"]["content"] == outs[0]
        s, _, text = post("/v1/chat/completions",
                          chat_body(max_tokens=16, seed=11, stream=True, **samp))
        assert stream_text(events(text)[0]) == outs[0]
        assert len(set(outs)) > 1, outs
        g = gen("--chat", "--temperature", "1.5", "--top-p", "0.95", "--top-k", "40",
                "--seed", "11", MSG, n=16)
        assert g == outs[0], (g, outs[0])
        s, _, r = post("/v1/messages", {"model": MODEL_ID, "max_tokens": 16, "temperature": 1.0,
                                        "messages": [{"role": "user", "content": MSG}]})
        assert s == 200, r
        print(f"# seed: {len(set(outs))} different texts from 4 seeds, each reproducible")
    finally:
        stop_and_check(st)


def errors():
    # a non-loopback address without a key is refused before anything starts
    p = ctl("start", "--model", model, "--run-dir", run_dir, "--api-addr", "0.0.0.0:0",
            check=False)
    assert p.returncode == 64 and b"--api-key-file" in p.stderr, p
    keyf = os.path.join(scratch, "api-errors.key")
    with open(keyf, "w") as f:
        f.write("sekrit-key\n")
    os.chmod(keyf, 0o600)
    st = start("--api-key-file", keyf, delay_ms="20")
    auth = {"Authorization": "Bearer sekrit-key"}
    try:
        C = "/v1/chat/completions"
        check_error(*[post(C, chat_body())[i] for i in (0, 2)], 401)
        check_error(*[post(C, chat_body(), headers={"Authorization": "Bearer nope"})[i]
                      for i in (0, 2)], 401)
        s, _, b = post("/v1/messages", {}, headers={"x-api-key": "wrong"})
        check_error(s, b, 401, anthropic=True)
        assert request("GET", "/health")[0] == 200     # for load balancers: no key
        assert request("GET", "/v1/models", headers=auth)[0] == 200
        assert request("GET", "/v1/models")[0] == 401

        def bad(body, param, raw=None, path=C):
            s, _, b = post(path, body, raw=raw, headers=auth)
            return check_error(s, b, 400, param)
        bad(None, None, raw=b"{not json")
        bad(None, None, raw=b"[1, 2]")
        bad(None, None, raw=b"[" * 100000)
        bad(chat_body(temperature="hot"), "temperature")
        bad(chat_body(temperature=2.5), "temperature")
        bad(chat_body(top_p=0), "top_p")
        bad(chat_body(max_tokens=0), "max_tokens")
        bad(chat_body(max_tokens=1.5), "max_tokens")
        bad(chat_body(n=2), "n")
        bad(chat_body(stop=["a", "b", "c", "d", "e"]), "stop")
        bad(chat_body(stop=""), "stop")
        bad(chat_body(stream="yes"), "stream")
        bad(chat_body(top_logprobs=3), "top_logprobs")
        bad(chat_body(logprobs=True, top_logprobs=21), "top_logprobs")
        bad({"model": MODEL_ID, "prompt": "x", "logprobs": 2, "echo": True}, "logprobs",
            path="/v1/completions")
        bad(chat_body(presence_penalty=0.5), "presence_penalty")
        bad({"model": MODEL_ID}, "messages")
        bad({"messages": [{"role": "user", "content": "x"}]}, "model")
        bad({"model": MODEL_ID, "messages": [{"role": "wizard", "content": "x"}]},
            "messages[0].role")
        bad({"model": MODEL_ID, "messages": [{"role": "user", "content": 5}]},
            "messages[0].content")
        bad({"model": MODEL_ID, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content")
        bad({"model": MODEL_ID, "prompt": [-1]}, "prompt", path="/v1/completions")
        bad({"model": MODEL_ID, "prompt": [10 ** 6]}, "prompt", path="/v1/completions")
        tl = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
        bad(chat_body(tools={"f": 1}), "tools")
        bad(chat_body(tools=[{"type": "function", "function": {"name": ""}}]), "tools[0]")
        bad(chat_body(tools=tl, tool_choice={"type": "function", "function": {"name": "g"}}),
            "tool_choice")
        bad(chat_body(tool_choice="required"), "tool_choice")
        bad({"model": MODEL_ID, "tools": tl, "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {
                "name": "f", "arguments": "[1]"}}]}]}, "messages[1].tool_calls")
        s, _, b = post("/v1/messages", {"model": MODEL_ID, "messages": []}, headers=auth)
        check_error(s, b, 400, anthropic=True)
        # context overflow names both numbers
        msg = bad(chat_body(max_tokens=100000), "messages")
        ctx = json.load(open(os.path.join(model, "config.json")))["max_position_embeddings"]
        assert str(ctx) in msg and "100000" in msg, msg
        assert post(C, chat_body(max_tokens=100000), headers=auth)[2]["error"]["code"] == \
            "context_length_exceeded"
        # 404: route, model (both endpoints); 405
        check_error(*[request("GET", "/v2/nothing", headers=auth)[i] for i in (0, 2)], 404)
        check_error(*[post(C, dict(chat_body(), model="gpt-9"), headers=auth)[i] for i in (0, 2)],
                    404, "model")
        s, _, b = post("/v1/messages", {"model": "claude", "max_tokens": 4,
                                        "messages": [{"role": "user", "content": "x"}]},
                       headers=auth)
        check_error(s, b, 404, anthropic=True)
        s, h, b = request("GET", C, headers=auth)
        check_error(s, b, 405)
        assert h["Allow"] == "POST", h
        # 413: over --max-body-mb (8)
        # announced by Content-Length: answered before the body is read
        host, port = addr.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sk:
            sk.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
                       b"Bearer sekrit-key\r\nContent-Length: %d\r\n\r\n" % (9 << 20))
            resp = b""
            while b"\r\n\r\n" not in resp or not resp.rstrip().endswith(b"}"):
                chunk = sk.recv(65536)
                if not chunk:
                    break
                resp += chunk
        head, body = resp.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 413"), head
        check_error(413, json.loads(body), 413)
        # chunked, no length: counted as it comes
        big = json.dumps(chat_body("x" * (9 << 20))).encode()
        c = http.client.HTTPConnection(host, int(port), timeout=60)
        c.request("POST", C, iter([big[i:i + 65536] for i in range(0, len(big), 65536)]),
                  {"Authorization": "Bearer sekrit-key", "Content-Type": "application/json"},
                  encode_chunked=True)
        r = c.getresponse()
        check_error(r.status, json.loads(r.read()), 413)
        c.close()
        # chunked at the edge: exactly the limit passes the size check (and is then refused
        # as JSON); one byte more is 413 even when that byte comes last
        for extra, want in ((0, 400), (1, 413)):
            raw = b"[" * ((8 << 20) + extra)
            c = http.client.HTTPConnection(host, int(port), timeout=60)
            c.request("POST", C, iter([raw[i:i + 65536] for i in range(0, len(raw), 65536)]),
                      {"Authorization": "Bearer sekrit-key", "Content-Type": "application/json"},
                      encode_chunked=True)
            r = c.getresponse()
            check_error(r.status, json.loads(r.read()), want)
            c.close()
        # the per-client connection cap (--max-conn-per-client, default 64): the next one is
        # closed unanswered; once they go, the client is served again
        socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(64)]
        extra = socket.create_connection((host, int(port)), timeout=10)
        extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            assert extra.recv(100) == b"", "the 65th connection was served"
        except ConnectionResetError:
            pass
        for sk in socks + [extra]:
            sk.close()
        def served():
            try:
                return request("GET", "/health", timeout=5)[0] == 200
            except (OSError, http.client.HTTPException):
                return False    # the server has not seen the closes yet
        wait_for("connections released", served)
        # 503 while compute restarts (and /health names it); then served again
        seen = False
        for _ in range(10):
            os.kill(daemon(status(), "compute")["pid"], signal.SIGKILL)
            t0 = time.time()
            while time.time() - t0 < 3:
                s, hd, h = request("GET", "/health")
                if s == 503:
                    assert "compute" in h["not_ready"], h
                    s, hd, b = post(C, chat_body(max_tokens=4), headers=auth)
                    if s == 503:
                        check_error(s, b, 503)
                        assert hd["Retry-After"] == "1", hd
                        seen = True
                    break
            if seen:
                break
        assert seen, "no 503 while compute restarted"
        for _ in range(100):
            if request("GET", "/health")[0] == 200:
                break
            time.sleep(0.1)
        s, _, r = post(C, chat_body(max_tokens=4, temperature=0), headers=auth)
        assert s == 200, r
        api = daemon(status(), "api")
        assert api["requests_error"] >= 20, api
        print(f"# errors: {api['requests_error']} refused with the right status")
    finally:
        stop_and_check(st)


def open_stream(body):
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=60)
    c.request("POST", "/v1/chat/completions", json.dumps(body),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.status
    return c, r


def wait_for(what, cond, timeout=20):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def abort():
    st = start(delay_ms="30")
    try:
        ref = gen("--chat", MSG, n=12)
        for i in range(2):
            c, r = open_stream(chat_body(max_tokens=400, temperature=0, stream=True))
            got = r.readline()      # the first event: generation is running
            assert got.startswith(b"data: "), got
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
            wait_for("the scheduler cancels",
                     lambda: daemon(status(), "scheduler")["requests_cancelled"] == i + 1)
            wait_for("nothing active", lambda: daemon(status(), "scheduler")["active"] == 0)
            s, _, b = post("/v1/chat/completions", chat_body(max_tokens=12, temperature=0))
            assert s == 200 and b["choices"][0]["message"]["content"] == ref, b
        # also while waiting for a non-streamed answer
        host, port = addr.rsplit(":", 1)
        sk = socket.create_connection((host, int(port)))
        body = json.dumps(chat_body(max_tokens=400, temperature=0)).encode()
        sk.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                   b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        wait_for("the request runs", lambda: daemon(status(), "scheduler")["active"] == 1)
        sk.close()
        wait_for("the scheduler cancels",
                 lambda: daemon(status(), "scheduler")["requests_cancelled"] == 3)
        api = daemon(status(), "api")
        assert api["requests_cancelled"] == 3 and api["active"] == 0, api
        print("# abort: 3 hang-ups cancelled, next requests exact")
    finally:
        stop_and_check(st)


def concurrent():
    st = start(delay_ms="10")
    try:
        prompts = [f"Question number {i}?" for i in range(32)]
        refs = [gen("--chat", p, n=8) for p in prompts]
        results = [None] * 32
        barrier = threading.Barrier(32)

        def client(i):
            barrier.wait()
            stream = i % 2 == 1
            s, h, b = post("/v1/chat/completions",
                           chat_body(prompts[i], max_tokens=8, temperature=0, stream=stream),
                           timeout=120)
            results[i] = (s, h, b, stream)
        ts = [threading.Thread(target=client, args=(i,)) for i in range(32)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        served = busy = 0
        for (s, h, b, stream), ref in zip(results, refs):
            if s == 429:
                check_error(s, b, 429)
                assert h["Retry-After"] == "1", h
                busy += 1
            else:
                assert s == 200, (s, b)
                text = stream_text(events(b)[0]) if stream else b["choices"][0]["message"]["content"]
                assert text == ref, (text, ref)
                served += 1
        assert served >= 1 and served + busy == 32, (served, busy)
        st2 = status()
        api, sch = daemon(st2, "api"), daemon(st2, "scheduler")
        assert api["requests_busy"] == busy == sch["requests_busy"], (api, sch)
        assert api["requests_ok"] == served, api
        print(f"# concurrent: served {served}, busy {busy}")
    finally:
        stop_and_check(st)


def restarts():
    st = start(delay_ms="20")
    try:
        ref = gen("--chat", MSG, n=48)
        for role in ("scheduler", "compute"):
            c, r = open_stream(chat_body(max_tokens=48, temperature=0, stream=True))
            buf = b""
            while buf.count(b"\n\n") < 6:
                buf += r.readline()
            os.kill(daemon(status(), role)["pid"], signal.SIGKILL)
            buf += r.read()
            c.close()
            evs, done = events(buf.decode())
            assert done and stream_text(evs) == ref, (role, stream_text(evs), ref)
            assert daemon(status(), role)["restarts"] == 1
            wait_for("ready again", lambda: request("GET", "/health")[0] == 200)
        # dsv4-api itself: restarted, same address, served again
        pid = daemon(status(), "api")["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_for("api restarted", lambda: (lambda a: a["restarts"] == 1 and a["state"] == "ready"
                                           and a["pid"] != pid)(daemon(status(), "api")))
        s, _, b = post("/v1/chat/completions", chat_body(max_tokens=48, temperature=0))
        assert s == 200 and b["choices"][0]["message"]["content"] == ref, b
        print("# restarts: scheduler and compute mid-stream invisible, api back on " + addr)
    finally:
        stop_and_check(st)


def prefix():
    """Turn 2 of a chat restores turn 1's blocks: cached_tokens > 0, same answer as uncached."""
    cache = os.path.join(scratch, "api-prefix-cache")
    shutil.rmtree(cache, ignore_errors=True)
    long_msg = " ".join(f"The weather on day {i} was mild and the wind came from the west."
                        for i in range(30))
    turn1 = [{"role": "user", "content": long_msg}]
    answers = {}
    for cached in (False, True):
        st = start(*(["--prefix-cache-dir", cache] if cached else ["--no-prefix-cache"]))
        try:
            s, _, r1 = post("/v1/chat/completions", {"model": MODEL_ID, "messages": turn1,
                                                     "max_tokens": 16, "temperature": 0})
            assert s == 200, r1
            turn2 = turn1 + [{"role": "assistant",
                              "content": r1["choices"][0]["message"]["content"]},
                             {"role": "user", "content": "And the day after?"}]
            s, _, r2 = post("/v1/chat/completions", {"model": MODEL_ID, "messages": turn2,
                                                     "max_tokens": 16, "temperature": 0})
            s, _, a2 = post("/v1/messages", {"model": MODEL_ID, "messages": turn2,
                                             "max_tokens": 16, "temperature": 0})
            assert s == 200, a2
            c2 = r2["usage"]["prompt_tokens_details"]["cached_tokens"]
            ca = a2["usage"]["cache_read_input_tokens"]
            if cached:
                assert 128 <= c2 < r2["usage"]["prompt_tokens"], r2["usage"]
                assert ca >= 128 and a2["usage"]["input_tokens"] + ca == \
                    r2["usage"]["prompt_tokens"], (a2["usage"], r2["usage"])
            else:
                assert c2 == 0 and ca == 0, (r2["usage"], a2["usage"])
            answers[cached] = (r1["choices"][0]["message"]["content"],
                               r2["choices"][0]["message"]["content"],
                               a2["content"][-1]["text"])
        finally:
            stop_and_check(st)
    assert answers[True] == answers[False], answers
    print(f"# prefix: turn 2 restored {c2} of {r2['usage']['prompt_tokens']} prompt tokens")


def squatted():
    """Someone else holds the default ports: the set serves on other ones and says where."""
    held, ours = [], set()
    for port in (8080, 9464):
        sq = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sq.bind(("127.0.0.1", port))
            sq.listen(1)
            held.append(sq)
            ours.add(port)
        except OSError:
            # already held by someone else (e.g. a concurrent test's set): the same situation,
            # but that holder may let go before our set starts, so only ports we hold are
            # asserted to be avoided
            sq.close()
    shutil.rmtree(run_dir, ignore_errors=True)
    ctl("start", "--model", model, "--run-dir", run_dir, timeout=120, env=env_with())
    try:
        st = status()
        api, met = st["api_addr"], st["metrics_addr"]
        global addr
        addr = api      # stop_and_check's requests go there too, whatever fails below
        assert api.startswith("127.0.0.1:") and (8080 not in ours or not api.endswith(":8080")), st
        assert met.startswith("127.0.0.1:") and (9464 not in ours or not met.endswith(":9464")), st
        assert daemon(st, "api")["state"] == "ready", st
        s, _, body = request("GET", "/health")
        assert s == 200, (s, body)
        with urllib.request.urlopen(f"http://{met}/metrics", timeout=10) as r:
            assert b"dsv4_daemon_restarts_total" in r.read()
        log = open(os.path.join(run_dir, "supervisor.log")).read()
        assert (9464 not in ours or "metrics on another port" in log) and \
            (8080 not in ours or "API on another port" in log), log[-2000:]
        print(f"# squatted defaults: API on {api}, metrics on {met}")
    finally:
        stop_and_check(status())
        for sq in held:
            sq.close()


def sdk():
    if not node or not os.path.exists(os.path.join(os.path.dirname(sdk_script), "..", "..",
                                                   "tools", "npm", "node_modules", "openai")):
        print("1..0 # SKIP node or tools/npm/node_modules (tools/setup-deps.sh) missing")
        return
    st = start()
    try:
        ref = gen("--chat", MSG, n=24)
        cref = gen("The sky", n=12)
        p = subprocess.run([node, sdk_script, f"http://{addr}", MODEL_ID, MSG], capture_output=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr.decode()
        out = json.loads(p.stdout)
        assert out["chat"] == ref and out["chat_stream"] == ref, (out, ref)
        assert out["completion"] == cref, (out, cref)
        assert out["messages"] == ref and out["messages_stream"] == ref, (out, ref)
        assert out["bad_status"] == 400 and out["bad_param"] == "temperature", out
        assert out["tools_finish"] in ("stop", "length"), out
        print("# sdk: openai and @anthropic-ai/sdk clients get gen's text")
    finally:
        stop_and_check(st)


scenarios = {"squatted": squatted, "prefix": prefix, "chat": chat, "tools": tools, "seed": seed, "errors": errors, "abort": abort, "concurrent": concurrent,
             "restarts": restarts, "sdk": sdk}
scenarios[scenario]()
