#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Decode tokens/s and time to first token through dsv4-api (HTTP, streamed) against
`dsv4ctl gen` on the same set, model and prompt, in one run: starts a set, alternates ROUNDS
`gen --stats` runs and streamed /v1/chat/completions requests (greedy, same chat prompt, same
text asserted), prints the medians and API / gen, stops the set.

What is compared: gen's own figures (its `--stats`: TTFT from its GENERATE to the first TOKEN,
decode rate over the tokens after the first) against the same two measured at the HTTP client
(TTFT from sending the request to the first content event, which includes parsing,
templating and tokenizing the request and the scheduler socket; decode rate over the events
after the first, from the usage's completion_tokens). Goals (issue 15): tok/s ratio >= 0.98,
TTFT overhead < 5 ms. The CPU time per generated token of each client side (the `gen`
processes; the dsv4-api daemon plus this script's HTTP client) moves much less with a loaded
machine than the rates.

usage: bench-api.py DSV4CTL MODEL_DIR [--tokens N] [--rounds R] [--threads T] [--memory-gb G]
"""
import argparse
import http.client
import json
import os
import re
import resource
import statistics
import subprocess
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("dsv4ctl")
ap.add_argument("model")
ap.add_argument("--tokens", type=int, default=128)
ap.add_argument("--rounds", type=int, default=7)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--memory-gb", type=float, default=0)
a = ap.parse_args()
run_dir = tempfile.mkdtemp(prefix="dsv4api-")
MSG = "Write a long story about a lighthouse keeper and the sea."
env = dict(os.environ)
env.pop("DSV4_RUN_DIR", None)


def ctl(*args, check=True):
    p = subprocess.run([a.dsv4ctl, *args], capture_output=True, env=env, timeout=600)
    if check and p.returncode != 0:
        raise SystemExit(f"dsv4ctl {' '.join(args)}: {p.stderr.decode()}")
    return p


def cpu_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def gen_round():
    p = ctl("gen", "--run-dir", run_dir, "--chat", MSG, "--max-tokens", str(a.tokens), "--stats",
            "--no-progress")
    err = p.stderr.decode()
    ttft = float(re.search(r"ttft: ([0-9.]+) s", err).group(1))
    m = re.search(r"decode: (\d+) tokens in ([0-9.]+) s", err)
    return p.stdout.decode()[:-1], ttft, int(m.group(1)) / float(m.group(2))


def api_round(host, port, model_id):
    body = json.dumps({"model": model_id, "messages": [{"role": "user", "content": MSG}],
                       "max_tokens": a.tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection(host, port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.status
    text, t_first, t_last, usage = "", None, None, None
    while True:
        line = r.readline()
        if not line:
            break
        if not line.startswith(b"data: {"):
            continue
        ev = json.loads(line[6:])
        if ev["choices"] and ev["choices"][0]["delta"].get("content"):
            now = time.perf_counter()
            t_first = t_first or now
            t_last = now
            text += ev["choices"][0]["delta"]["content"]
        if ev.get("usage"):
            usage = ev["usage"]
    c.close()
    n = usage["completion_tokens"]
    return text, t_first - t0, (n - 1) / (t_last - t_first) if t_last > t_first else float("nan")


start = ["start", "--model", a.model, "--run-dir", run_dir, "--threads", str(a.threads),
         "--no-metrics", "--api-addr", "127.0.0.1:0"]
if a.memory_gb:
    start += ["--memory-gb", str(a.memory_gb)]
ctl(*start)
try:
    host, port = open(os.path.join(run_dir, "api-addr")).read().strip().rsplit(":", 1)
    model_id = os.path.basename(os.path.realpath(a.model))
    ref = gen_round()[0]    # warm-up of both paths
    assert api_round(host, int(port), model_id)[0] == ref
    g_ttft, g_rate, h_ttft, h_rate = [], [], [], []
    st = json.loads(ctl("status", "--run-dir", run_dir, "--json").stdout)
    api_pid = next(d["pid"] for d in st["daemons"] if d["name"] == "api")
    cpu_gen = cpu_api = 0.0
    for _ in range(a.rounds):
        c0 = children_cpu()
        text, t, r = gen_round()
        cpu_gen += children_cpu() - c0
        assert text == ref
        g_ttft.append(t)
        g_rate.append(r)
        c0, s0 = cpu_of(api_pid), self_cpu()
        text, t, r = api_round(host, int(port), model_id)
        cpu_api += cpu_of(api_pid) - c0 + self_cpu() - s0
        assert text == ref, (text, ref)
        h_ttft.append(t)
        h_rate.append(r)
    med = statistics.median
    print(f"model {os.path.basename(os.path.realpath(a.model))}, {a.tokens} tokens, "
          f"{a.rounds} rounds, threads {a.threads}")
    print(f"gen decode: {med(g_rate):.1f} tok/s, ttft {med(g_ttft) * 1e3:.2f} ms (medians; rates "
          f"{[round(x, 1) for x in g_rate]})")
    print(f"api decode: {med(h_rate):.1f} tok/s, ttft {med(h_ttft) * 1e3:.2f} ms (medians; rates "
          f"{[round(x, 1) for x in h_rate]})")
    print(f"ratio api / gen: {med(h_rate) / med(g_rate):.3f}; ttft overhead "
          f"{(med(h_ttft) - med(g_ttft)) * 1e3:.2f} ms")
    n = a.rounds * a.tokens
    print(f"client cpu per token: gen process {cpu_gen / n * 1e6:.0f} us (with its start and "
          f"tokenizer load); dsv4-api + HTTP client {cpu_api / n * 1e6:.0f} us")
finally:
    ctl("stop", "--run-dir", run_dir, check=False)
