# SPDX-License-Identifier: MIT
"""The /metrics exporter end to end (suite e2e).

usage: test_metrics.py DSV4CTL MODEL_DIR SCRATCH_DIR SCENARIO

Scenarios (each starts its own daemon set with --metrics-addr 127.0.0.1:0 and stops it):
  promtool    a scrape taken while a generation streams passes `promtool check metrics` and
              carries every family dsv4 promises; after kill -9 of each daemon in turn every
              counter is >= its value before (the stats pages outlive the processes) and that
              daemon's restarts counter went up by one; a second set asking for the same
              --metrics-addr fails to start with the reason
  prometheus  a real Prometheus server (loopback, free port, 1 s scrape interval, temporary
              data dir) scrapes the set; its HTTP API reports dsv4_generated_tokens_total equal
              to the tokens the clients received, one restart of compute after a kill -9, and
              no counter reset across it
  slow        60 slow clients holding connections open do not delay a scrape
Skips (exit 77) only when the promtool / prometheus binary is missing (Debian: prometheus).
"""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

exe, model, scratch, scenario = sys.argv[1:5]
run_dir = os.path.join(scratch, "metrics-" + scenario)
PROMPT = "0,5,6,7,8"
FAMILIES = [
    "dsv4_build_info", "dsv4_daemon_up", "dsv4_daemon_state", "dsv4_daemon_restarts_total",
    "dsv4_daemon_resident_memory_bytes", "dsv4_requests_total", "dsv4_prompt_tokens_total",
    "dsv4_generated_tokens_total", "dsv4_queue_depth", "dsv4_time_to_first_token_seconds",
    "dsv4_token_latency_seconds", "dsv4_request_duration_seconds", "dsv4_prefill_done_tokens",
    "dsv4_prefill_length_tokens", "dsv4_spec_proposed_tokens_total",
    "dsv4_spec_accepted_tokens_total", "dsv4_spec_verify_steps_total",
    "dsv4_spec_quench_events_total", "dsv4_memory_resident_bytes", "dsv4_memory_budget_bytes",
    "dsv4_expert_cache_hits_total", "dsv4_expert_cache_misses_total",
    "dsv4_expert_prefetch_issued_total", "dsv4_expert_prefetch_used_total",
    "dsv4_expert_read_bytes_total", "dsv4_expert_evictions_total", "dsv4_expert_pinned_slots",
    "dsv4_expert_read_latency_seconds",
]


def need(binary):
    path = shutil.which(binary)
    if not path:
        print(f"1..0 # SKIP {binary} not found: install the Debian package prometheus "
              "(tools/setup-deps.sh does)")
        sys.exit(77)
    return path


def ctl(*args, check=True, timeout=60):
    env = dict(os.environ)
    env["DSV4_TEST_FORWARD_DELAY_MS"] = "15"    # a 64-token generation lasts ~1 s
    env.pop("DSV4_RUN_DIR", None)
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def status():
    return json.loads(ctl("status", "--run-dir", run_dir, "--json", check=False).stdout)


def start():
    shutil.rmtree(run_dir, ignore_errors=True)
    ctl("start", "--model", model, "--run-dir", run_dir, "--metrics-addr", "127.0.0.1:0",
        timeout=120)
    st = status()
    with open(os.path.join(run_dir, "metrics-addr")) as fh:
        addr = fh.read().strip()
    assert st["metrics_addr"] == addr and re.fullmatch(r"127\.0\.0\.1:\d+", addr), (st, addr)
    return st, addr


def stop():
    """Stop the set; a sanitizer report in any log (the exporter runs in the supervisor, whose
    stderr is supervisor.log) fails the test."""
    ctl("stop", "--run-dir", run_dir, timeout=60)
    for log in glob.glob(os.path.join(run_dir, "*.log")):
        text = open(log, errors="replace").read()
        assert "Sanitizer" not in text and "runtime error:" not in text, f"{log}:\n{text}"
    shutil.rmtree(run_dir, ignore_errors=True)


def scrape(addr):
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
        return r.read().decode()


def parse(text):
    """{(name, labels): value} and {family: type}."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, fam, typ = line.split()
            types[fam] = typ
        elif line and not line.startswith("#"):
            key, val = line.rsplit(" ", 1)
            name, _, labels = key.partition("{")
            samples[(name, labels.rstrip("}"))] = float(val)
    return samples, types


def counters(samples, types):
    """Every sample of a counter family, and histogram buckets/counts/sums (also monotonic)."""
    out = {}
    for (name, labels), v in samples.items():
        fam = re.sub(r"_(bucket|sum|count)$", "", name)
        if types.get(name) == "counter" or types.get(fam) == "histogram":
            out[(name, labels)] = v
    return out


def gen(n):
    return subprocess.Popen([exe, "gen", "--run-dir", run_dir, "--prompt-ids", PROMPT,
                             "--max-tokens", str(n), "--format", "ids"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_ready(role, restarts, deadline_s=60):
    end = time.time() + deadline_s
    while True:
        st = status()
        d = next(d for d in st["daemons"] if d["name"] == role)
        if d["state"] == "ready" and d["restarts"] == restarts:
            return st
        assert time.time() < end, st
        time.sleep(0.05)


def promtool():
    tool = need("promtool")
    st, addr = start()
    try:
        g = gen(64)
        os.read(g.stdout.fileno(), 1)   # streaming began
        text = None
        while g.poll() is None:
            s, _ = parse(t := scrape(addr))
            if s[("dsv4_active_requests", "")] == 1 and s[("dsv4_generated_tokens_total", "")] > 0:
                text = t
                break
            time.sleep(0.01)
        out, err = g.communicate(timeout=60)
        assert g.returncode == 0, err
        assert text, "the generation ended before a scrape saw it"
        p = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), \
            (p.returncode, p.stdout, p.stderr)
        samples, types = parse(text)
        for fam in FAMILIES:
            assert fam in types, f"family {fam} missing"
        assert samples[("dsv4_daemon_up", 'daemon="scheduler"')] == 1
        print(f"# promtool check metrics: ok on a {len(text)}-byte scrape taken mid-generation "
              f"({samples[('dsv4_generated_tokens_total', '')]:.0f} tokens out)")

        # kill -9 each daemon in turn: no counter goes backwards, restarts go up by one
        before = counters(*parse(scrape(addr)))
        for i, role in enumerate(d["name"] for d in st["daemons"]):
            pid = next(d["pid"] for d in status()["daemons"] if d["name"] == role)
            os.kill(pid, signal.SIGKILL)
            wait_ready(role, 1)
            g = gen(8)
            out, err = g.communicate(timeout=60)
            assert g.returncode == 0 and len(out.split()) == 8, (role, out, err)
            after = counters(*parse(scrape(addr)))
            back = {k: (before[k], v) for k, v in after.items() if k in before and v < before[k]}
            assert not back, f"counters went backwards across a restart of {role}: {back}"
            assert set(before) <= set(after), set(before) - set(after)
            key = ("dsv4_daemon_restarts_total", f'daemon="{role}"')
            assert after[key] == 1, (role, after[key])
            assert after[("dsv4_generated_tokens_total", "")] == \
                before[("dsv4_generated_tokens_total", "")] + 8
            before = after
            log = open(os.path.join(run_dir, "supervisor.log")).read()
            assert re.search(rf"{role}\[{pid}\] killed by signal SIGKILL, restarting in", log), log
        print(f"# {len(before)} counter samples monotonic across kill -9 of each daemon")
        # an address asked for must work: a second set on the same one refuses to start
        other = run_dir + "-second"
        shutil.rmtree(other, ignore_errors=True)
        p = ctl("start", "--model", model, "--run-dir", other, "--metrics-addr", addr,
                check=False, timeout=120)
        assert p.returncode == 69 and f"metrics address {addr}: Address already in use" in \
            p.stderr, (p.returncode, p.stderr)
        shutil.rmtree(other, ignore_errors=True)
    finally:
        stop()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(port, path, **params):
    url = f"http://127.0.0.1:{port}/api/v1/{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]


def query(port, q):
    """{labels-as-tuple: value} of an instant vector."""
    res = api(port, "query", query=q)["result"]
    skip = ("instance", "job", "__name__")
    return {tuple(sorted((k, v) for k, v in r["metric"].items() if k not in skip)):
            float(r["value"][1]) for r in res}


def eventually(fn, what, deadline_s=20):
    end = time.time() + deadline_s
    while True:
        got = fn()
        if got:
            return got
        assert time.time() < end, f"Prometheus never saw {what}"
        time.sleep(0.25)


def start_prometheus(tmp, target):
    binary = need("prometheus")
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as fh:
        fh.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                 "scrape_configs:\n  - job_name: dsv4\n"
                 f"    static_configs:\n      - targets: ['{target}']\n")
    for _ in range(5):  # the free port may be taken between the probe and the bind
        port = free_port()
        log = open(os.path.join(tmp, "prometheus.log"), "w")
        p = subprocess.Popen([binary, f"--config.file={cfg}",
                              f"--storage.tsdb.path={os.path.join(tmp, 'data')}",
                              f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                             stdout=log, stderr=subprocess.STDOUT)
        end = time.time() + 30
        while p.poll() is None and time.time() < end:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return p, port
            except OSError:
                time.sleep(0.1)
        p.kill()
        p.wait()
    raise AssertionError("prometheus did not start:\n" + open(log.name).read())


def prometheus():
    need("prometheus")
    st, addr = start()
    tmp = tempfile.mkdtemp(prefix="dsv4-prom-", dir=scratch)
    prom = None
    try:
        prom, port = start_prometheus(tmp, addr)
        eventually(lambda: any(t["health"] == "up" for t in
                               api(port, "targets")["activeTargets"]), "the target up")
        received = 0
        for n in (24, 17):
            g = gen(n)
            out, err = g.communicate(timeout=60)
            assert g.returncode == 0, err
            received += len(out.split())
        want = {(): float(received)}
        got = eventually(lambda: query(port, "dsv4_generated_tokens_total") == want and want,
                         f"dsv4_generated_tokens_total == {received}")
        print(f"# prometheus: dsv4_generated_tokens_total = {got[()]:.0f} = tokens received")
        up = query(port, "dsv4_daemon_up")
        assert up == {(("daemon", d["name"]),): 1.0 for d in st["daemons"]}, up
        assert query(port, 'dsv4_requests_total{outcome="ok"}') == {(("outcome", "ok"),): 2.0}
        assert query(port, "dsv4_time_to_first_token_seconds_count") == {(): 2.0}
        info = query(port, "dsv4_build_info")
        assert len(info) == 1 and dict(next(iter(info)))["version"], info

        victim = next(d["pid"] for d in st["daemons"] if d["name"] == "compute")
        os.kill(victim, signal.SIGKILL)
        wait_ready("compute", 1)
        g = gen(11)
        out, err = g.communicate(timeout=60)
        assert g.returncode == 0, err
        received += len(out.split())
        want = {(("daemon", "compute"),): 1.0}
        eventually(lambda: query(port, 'dsv4_daemon_restarts_total{daemon="compute"}') == want,
                   "one compute restart")
        want_tok = {(): float(received)}
        eventually(lambda: query(port, "dsv4_generated_tokens_total") == want_tok,
                   f"dsv4_generated_tokens_total == {received} after the restart")
        resets = query(port, "resets(dsv4_forward_calls_total[5m]) + "
                             "resets(dsv4_generated_tokens_total[5m])")
        assert resets == {(): 0.0}, resets
        print(f"# prometheus: compute restarts = 1 after kill -9, {received} tokens, no resets")
    finally:
        if prom:
            prom.terminate()
            prom.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
        stop()


def slow():
    """60 slow clients (a header byte every second, never finishing) do not starve a scrape:
    each is answered within 2 s (they used to hold every connection slot for 25 s)."""
    st, addr = start()
    host, port = addr.rsplit(":", 1)
    socks = []
    try:
        for _ in range(60):
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        t_end = time.monotonic() + 6
        scrapes = 0
        while time.monotonic() < t_end:
            for s in socks:
                try:
                    s.sendall(b"X")     # one byte of a header that never ends
                except OSError:
                    pass
            t0 = time.monotonic()
            text = scrape(addr)
            assert time.monotonic() - t0 < 2.0, "a scrape waited behind slow clients"
            assert "dsv4_daemon_up" in text
            scrapes += 1
            time.sleep(1)
        assert scrapes >= 4, scrapes
    finally:
        for s in socks:
            s.close()
        stop()
    print(f"ok: {scrapes} scrapes answered promptly beside 60 slow clients")


{"promtool": promtool, "prometheus": prometheus, "slow": slow}[scenario]()
print(f"ok {scenario}")
