# SPDX-License-Identifier: MIT
"""Two daemon sets behind a real nginx running docs/deploy/nginx-dsv4.conf (suite e2e).

usage: test_nginx.py DSV4CTL MODEL_DIR SCRATCH_DIR NGINX_CONF

Starts two sets (tiny-confident, API on free ports), nginx with the shipped config (its two
upstream lines and its listen line replaced by those ports), then:
  - requests through nginx are answered with exactly `dsv4ctl gen --chat`'s text, stream or not;
  - requests carrying the same X-Session-Id all land on one set (the sets' api counters);
  - kill -9 of every process of one set: every later request is still answered, exactly.
Skips when nginx is not installed.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

exe, model, scratch, conf_src = sys.argv[1:5]
base = os.path.join(scratch, "nginx-e2e")
MODEL_ID = os.path.basename(os.path.realpath(model))
MSG = "Which set answers?"


def ctl(*args, check=True, timeout=120):
    env = dict(os.environ)
    env.pop("DSV4_RUN_DIR", None)
    p = subprocess.run([exe, *args], capture_output=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def status(rd):
    return json.loads(ctl("status", "--run-dir", rd, "--json", check=False).stdout)


def api_ok(rd):
    return next(d for d in status(rd)["daemons"] if d["name"] == "api")["requests_ok"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body, headers=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def content(status, text, stream):
    assert status == 200, (status, text)
    if not stream:
        return json.loads(text)["choices"][0]["message"]["content"]
    out = ""
    for line in text.split("\n"):
        if line.startswith("data: {"):
            ev = json.loads(line[6:])
            if ev["choices"]:
                out += ev["choices"][0]["delta"].get("content") or ""
    assert "data: [DONE]" in text, text
    return out


def main():
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                      else None)
    if not nginx:
        print("1..0 # SKIP nginx is not installed (tools/setup-deps.sh)")
        return
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    sets = [os.path.join(base, "set-a"), os.path.join(base, "set-b")]
    ports = []
    ng = None
    try:
        for rd in sets:
            ctl("start", "--model", model, "--run-dir", rd, "--no-metrics", "--api-addr",
                "127.0.0.1:0")
            with open(os.path.join(rd, "api-addr")) as f:
                ports.append(int(f.read().strip().rsplit(":", 1)[1]))
        # the shipped config, with our ports, inside a minimal main config
        with open(conf_src) as f:
            site = f.read()
        lport = free_port()
        site, n = re.subn(r"server 127\.0\.0\.1:8080 ", f"server 127.0.0.1:{ports[0]} ", site)
        site, m = re.subn(r"server 127\.0\.0\.1:8081 ", f"server 127.0.0.1:{ports[1]} ", site)
        site, k = re.subn(r"listen 127\.0\.0\.1:8000;", f"listen 127.0.0.1:{lport};", site)
        assert n == m == k == 1, "docs/deploy/nginx-dsv4.conf changed shape"
        for d in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(base, "tmp", d), exist_ok=True)
        os.chmod(base, 0o755)
        main_conf = os.path.join(base, "nginx.conf")
        with open(main_conf, "w") as f:
            f.write(f"""pid {base}/nginx.pid;
error_log {base}/error.log info;
worker_processes 1;
events {{ worker_connections 256; }}
http {{
    access_log {base}/access.log;
    client_body_temp_path {base}/tmp/client_body;
    proxy_temp_path {base}/tmp/proxy;
    fastcgi_temp_path {base}/tmp/fastcgi;
    uwsgi_temp_path {base}/tmp/uwsgi;
    scgi_temp_path {base}/tmp/scgi;
{site}
}}
""")
        ng = subprocess.Popen([nginx, "-p", base, "-c", main_conf, "-g", "daemon off;"],
                              stderr=subprocess.PIPE)
        t0 = time.time()
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", lport)) == 0:
                    break
            assert ng.poll() is None, ng.stderr.read().decode()
            assert time.time() - t0 < 20, "nginx did not listen"
            time.sleep(0.05)

        ref = ctl("gen", "--run-dir", sets[0], "--chat", "--max-tokens", "16",
                  MSG).stdout.decode()[:-1]
        body = {"model": MODEL_ID, "messages": [{"role": "user", "content": MSG}],
                "max_tokens": 16, "temperature": 0}
        for i in range(8):
            stream = i % 2 == 1
            assert content(*post(lport, dict(body, stream=stream)), stream) == ref
        # affinity: one conversation, one set
        before = [api_ok(rd) for rd in sets]
        for _ in range(6):
            assert content(*post(lport, body, {"X-Session-Id": "conversation-42"}), False) == ref
        moved = [api_ok(rd) - b for rd, b in zip(sets, before)]
        assert sorted(moved) == [0, 6], moved
        # kill -9 a whole set (supervisor and daemons): nginx fails over, every request answered
        victim = sets[moved.index(6)]
        st = status(victim)
        for pid in [d["pid"] for d in st["daemons"]] + [st["supervisor_pid"]]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        served = 0
        for i in range(12):
            stream = i % 3 == 2
            hdr = {"X-Session-Id": "conversation-42"} if i % 2 else None
            assert content(*post(lport, dict(body, stream=stream), hdr), stream) == ref
            served += 1
        survivor = sets[1 - sets.index(victim)]
        print(f"# nginx: 8 balanced, 6 with affinity on one set, {served}/12 answered after "
              f"kill -9 of {os.path.basename(victim)} (survivor served {api_ok(survivor)} in all)")
    finally:
        if ng:
            ng.terminate()
            try:
                ng.wait(timeout=10)
            except subprocess.TimeoutExpired:
                ng.kill()
        for rd in sets:
            ctl("stop", "--run-dir", rd, check=False, timeout=60)
        # the killed set left its stats pages: remove them as its supervisor would have
        for rd in sets:
            h = 0xcbf29ce484222325
            for b in os.path.realpath(rd).encode():
                h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
            for p in os.listdir("/dev/shm"):
                if p.startswith(f"dsv4-{os.getuid()}-{h:016x}-") or p == f"dsv4-{h:016x}-experts":
                    os.unlink(os.path.join("/dev/shm", p))


main()
