# SPDX-License-Identifier: MIT
"""End-to-end checks of the daemon set on a tiny checkpoint (suite e2e).

usage: test_daemons.py DSV4CTL MODEL_DIR SCRATCH_DIR SCENARIO [WIRE_POKE]

Scenarios (each starts its own set in SCRATCH_DIR/<scenario>, stops it, and checks that no
process and no shared-memory segment is left):
  contracts   gen/score through the daemons print exactly what `dsv4ctl run`/`score` print
              (greedy, and temperature sampling with a seed); status --json is sane
  kill-fetcher, kill-compute, kill-scheduler
              kill -9 of that daemon at a random moment of a 64-token generation: the client
              still prints exactly the uninterrupted ids and the restart counter shows 1
  concurrent  16 clients at once: each is served (exact ids) or cleanly refused as busy
  malformed   WIRE_POKE sends malformed, truncated, oversized and wrong-version messages to
              every socket; every daemon keeps serving (same pids, gen still exact)
  stop        `dsv4ctl stop` during a generation: the client fails cleanly, nothing remains
  progress    a prefill fed in 2-row chunks: gen/run --progress print done/total lines on
              stderr only (stdout identical), the scheduler's prefill gauges move and return
              to 0/0; auto mode prints nothing on a pipe and a rewritten line on a tty
  watchdog    a slow model (forwards longer than the watchdog timeout) is not killed; a
              SIGSTOPped compute is killed by the heartbeat watchdog, and with heartbeats
              off by the progress-stall watchdog; a SIGSTOPped scheduler by the heartbeat
              watchdog: the client still prints exactly the uninterrupted ids, restarts = 1,
              watchdog_kills = 1 for that daemon only
  client-gone kill -9 of a client during decode, during a long prefill and while queued:
              the scheduler cancels each request (active 0, requests_cancelled + 1) and
              keeps serving
  batching    continuous batching: 6 requests at once (greedy and seeded sampling, different
              prompt lengths, one long prompt prefilled in chunks while the others decode, one
              that joins late and one cancelled midway) each print exactly their solo ids; the
              compute's steps carried several sessions (steps, step_sessions, step_rows) and
              the metrics endpoint shows the batching families; on the DSpark fixture with
              --dspark, speculating and plain requests share steps and stay exact
  prefix      the prefix cache through the daemons: a chat's second turn (its first turn plus
              more) restores the first turn's blocks (DONE n_cached, compute's counters) and
              prints exactly the uncached ids; after stop/start the disk tier serves it; a
              corrupted cache file is skipped and deleted (bad_files), the ids still exact;
              --no-prefix-cache restores nothing; with --dspark (the DSpark fixture) the
              drafter's state restores too and the ids stay those of plain decoding
  dspark      `start --dspark` on the DSpark fixture (verify length forced to the whole block,
              DSV4_TEST_DSPARK_VERIFY): for every golden prompt gen prints the ids of
              `dsv4ctl run --no-dspark`, the speculation counters move; then a kill -9 of compute
              in the middle of speculative steps still yields the uninterrupted ids
"""
import glob
import json
import os
import pty
import random
import shutil
import signal
import subprocess
import sys
import time

exe, model, scratch, scenario = sys.argv[1:5]
poke = sys.argv[5] if len(sys.argv) > 5 else None
run_dir = os.path.join(scratch, "e2e-" + scenario)
DELAY_MS = "15"     # per forward: makes a 64-token generation last ~1 s, so a kill lands inside
PROMPT = "0,5,6,7,8"


def ctl(*args, check=True, timeout=60, env=None):
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"dsv4ctl {' '.join(args)} exited {p.returncode}:\n{p.stderr}")
    return p


def daemon_env(**extra):
    env = dict(os.environ)
    env["DSV4_TEST_FORWARD_DELAY_MS"] = DELAY_MS
    env.pop("DSV4_RUN_DIR", None)
    env.update(extra)
    return env


def run_ref(prompt, n, *extra):
    return ctl("run", "--model", model, "--prompt-ids", prompt, "--max-tokens", str(n),
               "--format", "ids", *extra).stdout


def status():
    p = ctl("status", "--run-dir", run_dir, "--json", check=False)
    return p.returncode, json.loads(p.stdout)


def daemon(st, name):
    return next(d for d in st["daemons"] if d["name"] == name)


def start(*args, env=None, **env_extra):
    shutil.rmtree(run_dir, ignore_errors=True)
    ctl("start", "--model", model, "--run-dir", run_dir, *args, timeout=120,
        env=env or daemon_env(**env_extra))
    rc, st = status()
    assert rc == 0, st
    return st


def shm_segments():
    """This set's segments: /dsv4-<euid>-<RUN_DIR/shm-id>-<role or experts>."""
    try:
        with open(os.path.join(run_dir, "shm-id")) as f:
            i = f.read().strip()
    except OSError:
        return []
    return glob.glob(f"/dev/shm/dsv4-{os.geteuid()}-{i}-*")


def proc_stat(pid):
    """The fields of /proc/PID/stat after the command name, or None when there is no such pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def proc_state(pid):
    st = proc_stat(pid)
    return st[0] if st else None


def proc_start(pid):
    """The process's start time (stat field 22): tells a reused pid from the one we knew."""
    st = proc_stat(pid)
    return st[19] if st else None


def stop_and_check(st):
    pids = [d["pid"] for d in st["daemons"]] + [st["supervisor_pid"]]
    before = shm_segments()
    assert len(before) == 5, before    # four stats pages (api's too) and the fetcher's expert cache
    ctl("stop", "--run-dir", run_dir, timeout=60)
    for pid in pids:
        state = proc_state(pid)
        assert state in (None, "Z"), f"process {pid} survived stop (state {state})"
    left = [p for p in before if os.path.exists(p)]
    assert not left, f"shm segments left: {left}"
    socks = glob.glob(os.path.join(run_dir, "*.sock"))
    assert not socks, socks


def gen(*args, prompt=PROMPT, n=64, timeout=60):
    return subprocess.Popen([exe, "gen", "--run-dir", run_dir, "--prompt-ids", prompt,
                             "--max-tokens", str(n), "--format", "ids", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def contracts():
    st = start()
    try:
        for prompt in (PROMPT, "0," + ",".join(str((i * 37 + 11) % 250 + 2) for i in range(80))):
            ref = run_ref(prompt, 24)
            got = ctl("gen", "--run-dir", run_dir, "--prompt-ids", prompt, "--max-tokens", "24",
                      "--format", "ids").stdout
            assert got == ref, (prompt, got, ref)
            for extra in (["--temperature", "0.8", "--seed", "11"],
                          ["--temperature", "1.5", "--seed", "3"]):
                ref = run_ref(prompt, 24, *extra)
                got = ctl("gen", "--run-dir", run_dir, "--prompt-ids", prompt, "--max-tokens",
                          "24", "--format", "ids", *extra).stdout
                assert got == ref, (extra, got, ref)
            ref = ctl("score", "--model", model, "--prompt-ids", prompt, "--format", "tsv").stdout
            got = ctl("score", "--run-dir", run_dir, "--prompt-ids", prompt,
                      "--format", "tsv").stdout
            assert got == ref, (got, ref)
        # top-k 1 is greedy whatever the temperature; jsonl carries the same ids
        ref = run_ref(PROMPT, 12)
        got = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "12",
                  "--temperature", "2", "--top-k", "1", "--seed", "9", "--format", "ids").stdout
        assert got == ref, (got, ref)
        lines = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "12",
                    "--format", "jsonl").stdout.splitlines()
        evs = [json.loads(x) for x in lines]
        assert [e["id"] for e in evs[:-1]] == [int(x) for x in ref.split()], evs
        assert evs[-1]["done"] and evs[-1]["n_generated"] == len(evs) - 1, evs[-1]
        rc, st2 = status()
        sch = daemon(st2, "scheduler")
        assert rc == 0 and sch["requests_ok"] >= 9 and st2["queue_depth"] == 0, st2
        assert sch["generated_tokens"] >= 9 * 12, st2
        # bad requests are refused with a reason, the set keeps serving
        p = ctl("gen", "--run-dir", run_dir, "--prompt-ids", "0,99999", "--format", "ids",
                check=False)
        assert p.returncode == 65 and "vocabulary" in p.stderr, (p.returncode, p.stderr)
        assert ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "12",
                   "--format", "ids").stdout == ref
        # Ctrl-C cancels: exit 130, the ids printed so far are a prefix, the scheduler counts it
        g = gen()
        first = os.read(g.stdout.fileno(), 1).decode()  # streaming began: SIGINT is handled now
        g.send_signal(signal.SIGINT)
        out, err = g.communicate(timeout=30)
        out = first + out
        full = run_ref(PROMPT, 64).split()
        assert g.returncode == 130 and len(out.split()) < 64, (g.returncode, out, err)
        assert out.split() == full[:len(out.split())], out
        rc, st3 = status()
        if daemon(st3, "scheduler")["requests_cancelled"] != 1:
            with open(os.path.join(run_dir, "scheduler.log")) as f:
                raise AssertionError(f"requests_cancelled {st3}\n{f.read()[-4000:]}")
    finally:
        stop_and_check(st)


def kill_one(role):
    st = start()
    if role == "fetcher" and not any(d["name"] == "fetcher" for d in st["daemons"]):
        stop_and_check(st)
        print("1..0 # SKIP dsv4-fetcher is not built in this tree")
        sys.exit(77)
    try:
        ref = run_ref(PROMPT, 64)
        assert len(ref.split()) == 64, ref
        rng = random.Random(os.getpid())
        g = gen()
        time.sleep(rng.uniform(0.1, 0.8))
        victim = daemon(st, role)["pid"]
        os.kill(victim, signal.SIGKILL)
        out, err = g.communicate(timeout=60)
        assert g.returncode == 0, (g.returncode, err)
        assert out == ref, f"after kill -9 {role}:\n{out}\n!=\n{ref}"
        rc, st2 = status()
        d = daemon(st2, role)
        assert rc == 0 and d["restarts"] == 1 and d["pid"] != victim, st2
        for other in st2["daemons"]:
            if other["name"] != role:
                assert other["restarts"] == 0 and other["pid"] == daemon(st, other["name"])["pid"]
        # and the set still serves
        assert ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "64",
                   "--format", "ids").stdout == ref
        st = st2
    finally:
        stop_and_check(st)


def concurrent():
    st = start()
    try:
        prompts = [f"0,{i + 2},{(i * 7) % 200 + 3},{(i * 13) % 200 + 4}" for i in range(16)]
        refs = [run_ref(p, 16) for p in prompts]
        procs = [gen(prompt=p, n=16) for p in prompts]
        served = busy = 0
        for p, ref, pr in zip(prompts, refs, procs):
            out, err = pr.communicate(timeout=120)
            if pr.returncode == 75:
                assert "busy" in err and out == "", (out, err)
                busy += 1
            else:
                assert pr.returncode == 0 and out == ref, (p, pr.returncode, out, ref, err)
                served += 1
        assert served >= 1 and served + busy == 16
        rc, st2 = status()
        sch = daemon(st2, "scheduler")
        assert sch["requests_busy"] == busy and sch["requests_ok"] == served, (st2, busy)
        print(f"# served {served}, busy {busy}")
    finally:
        stop_and_check(st)


def malformed():
    st = start()
    try:
        ref = run_ref(PROMPT, 16)
        p = subprocess.run([poke, run_dir, str(os.getpid())], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        print("\n".join("# " + x for x in p.stdout.splitlines()))
        rc, st2 = status()
        assert rc == 0, st2
        for d in st2["daemons"]:
            assert d["restarts"] == 0 and d["pid"] == daemon(st, d["name"])["pid"], st2
        assert sum(d["bad_messages"] for d in st2["daemons"]) > 0, st2
        assert ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "16",
                   "--format", "ids").stdout == ref
    finally:
        stop_and_check(st)


def stop_during():
    st = start()
    g = gen()
    time.sleep(0.3)
    stop_and_check(st)
    out, err = g.communicate(timeout=30)
    assert g.returncode != 0, (out, err)


def bad_model():
    """The first daemon exits 78 on a checkpoint it cannot load: start fails with the reason,
    no respawn, nothing left behind."""
    bad = os.path.join(scratch, "e2e-bad-model-dir")
    shutil.rmtree(bad, ignore_errors=True)
    os.makedirs(bad)
    shutil.copy(os.path.join(model, "config.json"), bad)
    shutil.rmtree(run_dir, ignore_errors=True)
    p = ctl("start", "--model", bad, "--run-dir", run_dir, check=False, timeout=120)
    assert p.returncode == 69 and "exited with status 78 (bad config); not restarting" in p.stderr, \
        (p.returncode, p.stderr)
    for _ in range(100):
        if ctl("status", "--run-dir", run_dir, check=False).stdout.find("supervisor 0,") >= 0:
            break
        time.sleep(0.05)
    assert not shm_segments(), shm_segments()
    log = open(os.path.join(run_dir, "supervisor.log")).read()
    assert log.count("started ") == 1, log
    shutil.rmtree(bad)


def crash_loop():
    """Five deaths of compute within 120 s trip the breaker: the set stops, nothing is left."""
    st = start()
    pids = [(p, proc_start(p)) for p in [d["pid"] for d in st["daemons"]] +
            [st["supervisor_pid"]]]
    backoffs = []
    for i in range(5):
        deadline = time.time() + 30
        while True:
            rc, cur = status()
            c = daemon(cur, "compute") if cur["daemons"] else None
            if c and c["state"] == "ready" and c["restarts"] == i:
                break
            assert time.time() < deadline, cur
            time.sleep(0.02)
        pids.append((c["pid"], proc_start(c["pid"])))
        os.kill(c["pid"], signal.SIGKILL)
    deadline = time.time() + 30
    while ctl("status", "--run-dir", run_dir, check=False).stdout.find("supervisor 0,") < 0:
        assert time.time() < deadline, "supervisor still running after the crash loop"
        time.sleep(0.05)
    log = open(os.path.join(run_dir, "supervisor.log")).read()
    assert "crash loop" in log and log.count("started compute") == 5, log
    for ms in ("100 ms (1/5)", "200 ms (2/5)", "400 ms (3/5)", "800 ms (4/5)"):
        assert ms in log, (ms, log)
    # every killed compute is gone (or a zombie); a SIGKILLed process may take a moment to
    # exit on a loaded machine, and its pid may meanwhile belong to another process
    deadline = time.time() + 10
    for pid, t0 in pids:
        while proc_start(pid) == t0 and proc_state(pid) != "Z":
            assert time.time() < deadline, (pid, proc_state(pid))
            time.sleep(0.05)
    assert not shm_segments(), shm_segments()


def goldens():
    """Every golden prompt of the committed tiny fixtures: gen/score through the daemons print
    exactly what `dsv4ctl run`/`score` print in-process."""
    global model
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
    found = 0
    for fx in ("tiny", "tiny-confident"):
        path = os.path.join(fixtures, fx, "goldens.json")
        if not os.path.exists(path):
            continue
        with open(path) as fh:
            g = json.load(fh)
        model = os.path.join(fixtures, fx)
        st = start()
        try:
            for pr in g["prompts"]:
                ids = ",".join(map(str, pr["tokens"]))
                n = str(g.get("n_greedy", 16))
                ref = run_ref(ids, int(n))
                got = ctl("gen", "--run-dir", run_dir, "--prompt-ids", ids, "--max-tokens", n,
                          "--format", "ids").stdout
                assert got == ref, (fx, ids, got, ref)
                ref = ctl("score", "--model", model, "--prompt-ids", ids, "--format", "tsv").stdout
                got = ctl("score", "--run-dir", run_dir, "--prompt-ids", ids).stdout
                assert got == ref, (fx, ids)
                found += 1
        finally:
            stop_and_check(st)
    if not found:
        print("1..0 # SKIP no committed fixtures with goldens")
        sys.exit(77)
    print(f"# {found} golden prompts identical")


def wait_for(what, cond, timeout=20):
    """Poll status until cond(status) holds (a deadline, not a timing assertion)."""
    deadline = time.time() + timeout
    while True:
        rc, st = status()
        if cond(st):
            return st
        assert time.time() < deadline, f"{what}: {st}"
        time.sleep(0.02)


def progress_lines(err):
    """(done, total) of every `prefill D/T tokens` line."""
    out = []
    for line in err.replace("\r", "\n").splitlines():
        if line.startswith("prefill ") and "ETA" in line:
            d, t = line.split()[1].split("/")
            out.append((int(d), int(t)))
    return out


def progress_steps(ev, total):
    """The distinct done counts, in order, after checking totals and order. The scheduler also
    sends PROGRESS as a probe when a client heard nothing for 1 s: a repeat of the last count
    (or 0 while queued), so repeats and zeros are allowed and dropped here."""
    assert all(t == total for _, t in ev), ev
    done = [d for d, _ in ev]
    assert done == sorted(done), ev
    return sorted(set(done) - {0})


def progress():
    long_prompt = "0," + ",".join(str((i * 37 + 11) % 250 + 2) for i in range(79))
    # the prefix cache off: a sequence's partial last block (an earlier scenario's run of a
    # prompt like this one) would restore part of the prompt and shift the counts
    st = start("--no-prefix-cache", DSV4_PREFILL_ROWS="2", DSV4_TEST_FORWARD_DELAY_MS="30")
    try:
        prompt = "0,5,6,7,8,9,10,11,12,13,14,15"
        ref = run_ref(prompt, 8)
        g = ctl("gen", "--run-dir", run_dir, "--prompt-ids", prompt, "--max-tokens", "8",
                "--format", "ids", "--progress")
        assert g.stdout == ref, (g.stdout, ref)
        ev = progress_lines(g.stderr)
        assert progress_steps(ev, 12) == [2, 4, 6, 8, 10], g.stderr
        for extra in ([], ["--no-progress"]):    # a pipe: auto is off; --no-progress is off
            g = ctl("gen", "--run-dir", run_dir, "--prompt-ids", prompt, "--max-tokens", "8",
                    "--format", "ids", *extra)
            assert g.stdout == ref and "prefill" not in g.stderr, (extra, g.stdout, g.stderr)
        # auto on a terminal: one line rewritten in place, erased before the first token
        master, slave = pty.openpty()
        p = subprocess.Popen([exe, "gen", "--run-dir", run_dir, "--prompt-ids", prompt,
                              "--max-tokens", "8", "--format", "ids"],
                             stdout=subprocess.PIPE, stderr=slave, text=True)
        os.close(slave)
        out, _ = p.communicate(timeout=60)
        tty = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            tty += chunk
        os.close(master)
        assert p.returncode == 0 and out == ref, (out, ref)
        assert progress_steps(progress_lines(tty.decode()), 12) == [2, 4, 6, 8, 10], tty
        assert tty.count(b"\n") == 0 and tty.endswith(b"\r\x1b[K"), tty
        # the scheduler's gauges during a 79-row prefill, and 0/0 after it
        g = gen(prompt=long_prompt, n=4)
        mid = wait_for("prefill gauges", lambda s: s["prefill_total"] == 80 and
                       0 < s["prefill_done"] < 80)
        out, err = g.communicate(timeout=60)
        assert g.returncode == 0 and out == run_ref(long_prompt, 4), (out, err)
        rc, after = status()
        assert after["prefill_done"] == 0 and after["prefill_total"] == 0, after
        print(f"# gauges mid-prefill {mid['prefill_done']}/{mid['prefill_total']}")
        # in-process run: the same lines per --chunk, stdout unchanged
        r = ctl("run", "--model", model, "--prompt-ids", prompt, "--max-tokens", "8",
                "--format", "ids", "--chunk", "3", "--progress", "--no-prefix-cache")
        assert r.stdout == ref, (r.stdout, ref)
        assert progress_lines(r.stderr) == [(3, 12), (6, 12), (9, 12)], r.stderr
        r = ctl("run", "--model", model, "--prompt-ids", prompt, "--max-tokens", "8",
                "--format", "ids", "--chunk", "3", "--no-prefix-cache")
        assert r.stdout == ref and "prefill" not in r.stderr, r.stderr
    finally:
        stop_and_check(st)


def watchdog():
    ref = run_ref(PROMPT, 64)
    # A slow model: the forward (5 layers x 700 ms) outlasts both watchdog timeouts, but
    # compute heartbeats and progresses after every layer, so nothing is killed.
    st = start("--watchdog-s", "3", "--stall-s", "3", DSV4_TEST_LAYER_DELAY_MS="700")
    try:
        out = ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "1",
                  "--format", "ids").stdout
        assert out.split() == ref.split()[:1], (out, ref)
        rc, st2 = status()
        for d in st2["daemons"]:
            assert d["restarts"] == 0 and d["watchdog_kills"] == 0, st2
    finally:
        stop_and_check(st)
    # A hung daemon (SIGSTOP: alive, silent) is killed and restarted; the stream is intact.
    # Compute by the heartbeat watchdog, then, with heartbeats ignored, by the stall watchdog;
    # the scheduler by the heartbeat watchdog (the client resubmits to the new one).
    for role, args, cause in (("compute", ["--watchdog-s", "3"], "hung: no heartbeat for 3 s"),
                              ("compute", ["--watchdog-s", "0", "--stall-s", "3"],
                               "stalled: progress"),
                              ("scheduler", ["--watchdog-s", "3"], "hung: no heartbeat for 3 s")):
        st = start(*args)
        try:
            g = gen()
            first = os.read(g.stdout.fileno(), 1).decode()    # generation under way
            time.sleep(random.Random(os.getpid()).uniform(0.0, 0.5))
            victim = daemon(st, role)["pid"]
            os.kill(victim, signal.SIGSTOP)
            out, err = g.communicate(timeout=60)
            rc, st2 = status()
            assert g.returncode == 0, (g.returncode, err)
            assert first + out == ref, f"after SIGSTOP {role}:\n{first + out}\n!=\n{ref}"
            d = daemon(st2, role)
            assert d["restarts"] == 1 and d["watchdog_kills"] == 1 and d["pid"] != victim, st2
            for other in st2["daemons"]:
                if other["name"] != role:
                    assert other["restarts"] == 0 and other["watchdog_kills"] == 0, st2
            log = open(os.path.join(run_dir, "supervisor.log")).read()
            assert f"{role}[{victim}] {cause}" in log, log
            st = st2
        finally:
            stop_and_check(st)
        print(f"# SIGSTOP {role}, {cause}: killed, restarted, ids identical")
    # The fetcher too (it heartbeats like the others): a stopped fetcher is not "ready" for
    # ever; it is killed and restarted, re-attaches to its segment, and generation goes on.
    st = start("--watchdog-s", "3")
    try:
        victim = daemon(st, "fetcher")["pid"]
        os.kill(victim, signal.SIGSTOP)
        g = gen()
        out, err = g.communicate(timeout=60)
        assert g.returncode == 0 and out == ref, (g.returncode, err, out)
        st = wait_for("the stopped fetcher killed and restarted",
                      lambda s: daemon(s, "fetcher")["restarts"] == 1 and
                      daemon(s, "fetcher")["state"] == "ready")
        d = daemon(st, "fetcher")
        assert d["watchdog_kills"] == 1 and d["pid"] != victim and d["state"] == "ready", st
        log = open(os.path.join(run_dir, "supervisor.log")).read()
        assert f"fetcher[{victim}] hung: no heartbeat for 3 s" in log, log
    finally:
        stop_and_check(st)
    print("# SIGSTOP fetcher: killed by the heartbeat watchdog, restarted, ids identical")


def client_gone():
    long_prompt = "0," + ",".join(str((i * 37 + 11) % 250 + 2) for i in range(79))
    st = start(DSV4_PREFILL_ROWS="2", DSV4_TEST_FORWARD_DELAY_MS="30")  # a 1.2 s prefill
    try:
        ref = run_ref(PROMPT, 64)
        for n, (prompt, wait_first) in enumerate(((PROMPT, True), (long_prompt, False))):
            g = gen(prompt=prompt, n=200 if wait_first else 64)
            if wait_first:                   # killed during decode
                os.read(g.stdout.fileno(), 1)
            else:                            # killed during the prefill
                wait_for("prefill", lambda s: 0 < s["prefill_done"] < s["prefill_total"])
            g.kill()
            g.wait()
            st2 = wait_for("cancel after kill -9",
                           lambda s: s["active"] == 0 and s["queue_depth"] == 0 and
                           daemon(s, "scheduler")["requests_cancelled"] == n + 1, timeout=10)
            assert daemon(st2, "scheduler")["requests_ok"] == 0, st2
        # killed while queued behind --max-active (4) others: only the 1 s probe reaches it
        busy = [gen(n=200) for _ in range(4)]
        for b in busy:
            os.read(b.stdout.fileno(), 1)
        q = gen(n=200)
        wait_for("queued", lambda s: s["active"] == 4 and s["queue_depth"] == 1)
        q.kill()
        q.wait()
        wait_for("queued request cancelled", lambda s: s["queue_depth"] == 0 and
                 daemon(s, "scheduler")["requests_cancelled"] == 3, timeout=10)
        for b in busy:
            b.kill()
            b.wait()
        st2 = wait_for("all cancelled", lambda s: s["active"] == 0 and
                       daemon(s, "scheduler")["requests_cancelled"] == 7, timeout=10)
        assert daemon(st2, "scheduler")["requests_ok"] == 0, st2
        assert ctl("gen", "--run-dir", run_dir, "--prompt-ids", PROMPT, "--max-tokens", "64",
                   "--format", "ids").stdout == ref
        log = open(os.path.join(run_dir, "scheduler.log")).read()
        assert log.count("client gone, cancelling") == 7, log
    finally:
        stop_and_check(st)


def batching_on(extra_start, prompts, sampled, dspark_model):
    """Requests at once: each prints its solo ids; the steps carried several sessions."""
    st = start(*extra_start)
    try:
        jobs = []       # (args, prompt, n, ref)
        for i, (prompt, n) in enumerate(prompts):
            extra = ["--temperature", "0.9", "--seed", str(40 + i)] if i in sampled else []
            if dspark_model and i % 2:
                extra += ["--no-dspark"]
            ref = run_ref(prompt, n, *(x for x in extra if x != "--no-dspark"),
                          *(["--no-dspark"] if dspark_model else []))
            jobs.append((extra, prompt, n, ref))
        before = daemon(status()[1], "compute")
        procs = [gen(*j[0], prompt=j[1], n=j[2]) for j in jobs[:-2]]
        # one joins once the others are decoding; one is cancelled midway (it leaves)
        first = os.read(procs[0].stdout.fileno(), 1).decode()
        late = gen(*jobs[-2][0], prompt=jobs[-2][1], n=jobs[-2][2])
        quitter = gen(prompt=jobs[-1][1], n=200)
        os.read(quitter.stdout.fileno(), 1)
        quitter.send_signal(signal.SIGINT)
        quitter.communicate(timeout=60)
        for k, pr in enumerate(procs + [late]):
            out, err = pr.communicate(timeout=120)
            if k == 0:   # its first byte was read above
                out = first + out
            ref = jobs[k if k < len(procs) else len(jobs) - 2][3]
            assert pr.returncode == 0 and out == ref, (k, pr.returncode, out, ref, err)
        rc, st2 = status()
        c = daemon(st2, "compute")
        steps = c["steps"] - before["steps"]
        sess = c["step_sessions"] - before["step_sessions"]
        assert steps > 0 and sess / steps > 1.5, (steps, sess)     # steps were shared
        assert st2["latency"]["step_rows"]["count"] >= steps, st2["latency"]
        assert st2["latency"]["queue_wait"]["count"] >= len(jobs), st2["latency"]
        print(f"# {len(jobs)} requests exact; {sess / steps:.2f} sessions per step, "
              f"{c['experts_union_saved']} expert leases saved by the union")
        if st2["metrics_addr"]:
            import urllib.request
            body = urllib.request.urlopen(f"http://{st2['metrics_addr']}/metrics",
                                          timeout=10).read().decode()
            for fam in ("dsv4_steps_total", "dsv4_step_sessions_total", "dsv4_step_rows_bucket",
                        "dsv4_queue_wait_seconds_bucket", "dsv4_experts_union_saved_total"):
                assert fam in body, fam
    finally:
        stop_and_check(st)


def batching():
    global model
    long_prompt = "0," + ",".join(str((i * 37 + 11) % 250 + 2) for i in range(150))
    prompts = [(PROMPT, 40), ("0,9,8", 25), (long_prompt, 20), ("0,3,17,29,31,44,2", 33),
               ("0,77", 30), ("0,12,13", 64)]
    batching_on([], prompts, sampled={1, 4}, dspark_model=False)
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
    model = os.path.join(fixtures, "tiny-dspark")
    with open(os.path.join(model, "goldens.json")) as fh:
        g = json.load(fh)
    prompts = [(",".join(map(str, pr["tokens"][:pr["prompt_len"]])), 30) for pr in g["prompts"]]
    prompts = (prompts * 3)[:6]
    batching_on(["--dspark"], prompts, sampled=set(), dspark_model=True)


def gen_done(*args, prompt, n):
    """gen --format jsonl: (ids as `--format ids` prints them, the DONE event)."""
    out = ctl("gen", "--run-dir", run_dir, "--prompt-ids", prompt, "--max-tokens", str(n),
              "--format", "jsonl", *args).stdout.splitlines()
    evs = [json.loads(x) for x in out]
    return " ".join(str(e["id"]) for e in evs[:-1]) + "\n", evs[-1]


def prefix():
    global model
    cache = os.path.join(scratch, "e2e-prefix-cache")
    shutil.rmtree(cache, ignore_errors=True)
    turn1 = "0," + ",".join(str((i * 37 + 11) % 250 + 2) for i in range(299))   # 300 ids
    for dspark in (False, True):
        if dspark:
            fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
            model = os.path.join(fixtures, "tiny-dspark")
            shutil.rmtree(cache, ignore_errors=True)
        extra = ["--dspark"] if dspark else []
        ref1 = run_ref(turn1, 20, "--no-prefix-cache", *(["--no-dspark"] if dspark else []))
        turn2 = turn1 + "," + ref1.replace(" ", ",").strip() + ",7,8,9"
        ref2 = run_ref(turn2, 20, "--no-prefix-cache", *(["--no-dspark"] if dspark else []))
        st = start("--prefix-cache-dir", cache, *extra)
        try:
            ids, done = gen_done(prompt=turn1, n=20)
            assert ids == ref1 and done["n_cached"] == 0, (ids, ref1, done)
            ids, done = gen_done(prompt=turn2, n=20)
            n2 = len(turn2.split(","))
            assert ids == ref2, (ids, ref2)
            assert 256 <= done["n_cached"] < n2, done     # turn 1's two 128-token blocks, at least
            c = daemon(status()[1], "compute")
            assert c["prefix_hit_tokens"] == done["n_cached"] and c["prefix_disk_entries"] >= 2, c
            log = open(os.path.join(run_dir, "compute.log")).read()
            assert "restored" in log and "prefix cache" in log, log[-2000:]
        finally:
            stop_and_check(st)
        # the disk tier after a restart
        st = start("--prefix-cache-dir", cache, *extra)
        try:
            ids, done = gen_done(prompt=turn2, n=20)
            assert ids == ref2 and done["n_cached"] >= 256, (ids, done)
        finally:
            stop_and_check(st)
        # damaged block files (RAM is empty after the restart): each skipped with one log line
        # and deleted, never a wrong token
        blocks = [f for f in glob.glob(os.path.join(cache, "**"), recursive=True)
                  if os.path.isfile(f)]
        assert blocks, cache
        for f in blocks:
            with open(f, "r+b") as fh:
                fh.seek(os.path.getsize(f) // 2)
                b = fh.read(1)
                fh.seek(-1, 1)
                fh.write(bytes([b[0] ^ 0x55]))
        st = start("--prefix-cache-dir", cache, *extra)
        try:
            ids, done = gen_done(prompt=turn2, n=20)
            assert ids == ref2 and done["n_cached"] == 0, (ids, ref2, done)
            c = daemon(status()[1], "compute")
            assert c["prefix_bad_files"] >= 1, c
        finally:
            stop_and_check(st)
    # off: nothing restored
    st = start("--prefix-cache-dir", cache, "--no-prefix-cache")
    try:
        ids, done = gen_done(prompt=turn1, n=20)
        ids, done = gen_done(prompt=turn1, n=20)
        assert done["n_cached"] == 0, done
    finally:
        stop_and_check(st)
    print("# prefix cache: RAM hit, disk hit after restart, corrupt files skipped, off")


def dspark():
    global model
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
    model = os.path.join(fixtures, "tiny-dspark")
    with open(os.path.join(model, "goldens.json")) as fh:
        g = json.load(fh)
    env = daemon_env()
    env["DSV4_TEST_FORWARD_DELAY_MS"] = "40"   # a 64-token generation lasts ~0.6 s
    env["DSV4_TEST_DSPARK_VERIFY"] = "5"
    trace = os.path.join(scratch, "e2e-dspark-trace.jsonl")
    if os.path.exists(trace):
        os.unlink(trace)
    st = start("--dspark", "--dspark-trace", trace, env=env)
    try:
        for pr in g["prompts"]:
            ids = ",".join(map(str, pr["tokens"][:pr["prompt_len"]]))
            n = str(g["n_greedy"])
            ref = run_ref(ids, int(n), "--no-dspark")
            got = ctl("gen", "--run-dir", run_dir, "--prompt-ids", ids, "--max-tokens", n,
                      "--format", "ids").stdout
            assert got == ref, (ids, got, ref)
            got = ctl("gen", "--run-dir", run_dir, "--prompt-ids", ids, "--max-tokens", n,
                      "--format", "ids", "--no-dspark").stdout
            assert got == ref, (ids, got, ref)
        rc, st2 = status()
        sch = daemon(st2, "scheduler")
        assert sch["spec_verify_steps"] > 0 and 0 < sch["spec_accepted"] <= sch["spec_proposed"], sch
        print(f"# {len(g['prompts'])} golden prompts identical; scheduler {sch}")
        # the daemon set's trace: one line per verify step, the acceptance rule visible in it
        # (accepted drafts are the drafts, the first rejected one differs), and the drafts
        # those of `dsv4ctl run --dspark-trace` at the same positions (same drafter, same taps)
        steps = [json.loads(x) for x in open(trace)]
        with open(os.path.join(model, "config.json")) as fh:
            eos = json.load(fh)["eos_token_id"]
        assert len(steps) == sch["spec_verify_steps"], (len(steps), sch)
        for t in steps:
            v, a = t["verified"], t["accepted"]
            assert 1 <= v <= len(t["drafts"]) and 0 <= a <= v and len(t["out"]) >= a, t
            assert t["out"][:a] == t["drafts"][:a], t
            # an accepted EOS ends the list where it is (nothing after it is emitted)
            ended = a >= 1 and t["out"][a - 1] == eos and len(t["out"]) == a
            assert ended or a == v or (len(t["out"]) == a + 1 and t["out"][a] != t["drafts"][a]), t
        pr = g["prompts"][0]
        ids = ",".join(map(str, pr["tokens"][:pr["prompt_len"]]))
        rtrace = os.path.join(scratch, "e2e-dspark-run-trace.jsonl")
        run_ref(ids, int(g["n_greedy"]), "--dspark", "--dspark-verify", "5", "--dspark-no-quench",
                "--dspark-trace", rtrace)
        by_pos = {t["pos"]: t["drafts"] for t in map(json.loads, open(rtrace)) if t["drafts"]}
        first_req = steps[0]["req"]
        mine = [t for t in steps if t["req"] == first_req]
        common = [t for t in mine if t["pos"] in by_pos]
        assert common, (mine[:3], list(by_pos)[:5])
        for t in common:
            assert t["drafts"] == by_pos[t["pos"]], (t, by_pos[t["pos"]])
        print(f"# trace: {len(steps)} verify steps; {len(common)} positions match run's drafts")
        # kill -9 of compute while speculative steps run
        prompt = "0,140,9,103,6,127"
        ref = run_ref(prompt, 64, "--no-dspark")
        rng = random.Random(os.getpid())
        done0 = daemon(status()[1], "scheduler")["generated_tokens"]
        gp = gen(prompt=prompt)
        # kill once speculative steps are under way (a few tokens out, before the end)
        want = done0 + rng.randint(3, 24)
        deadline = time.time() + 60
        while daemon(status()[1], "scheduler")["generated_tokens"] < want:
            assert time.time() < deadline and gp.poll() is None, "generation did not start"
            time.sleep(0.01)
        victim = daemon(st, "compute")["pid"]
        os.kill(victim, signal.SIGKILL)
        out, err = gp.communicate(timeout=60)
        assert gp.returncode == 0, (gp.returncode, err)
        assert out == ref, f"after kill -9 compute:\n{out}\n!=\n{ref}"
        rc, st = status()
        assert daemon(st, "compute")["restarts"] == 1, st
        # the kill landed inside the generation: the scheduler replayed committed tokens
        assert daemon(st, "scheduler")["replays"] >= 1, st
    finally:
        stop_and_check(st)


scenarios = {"progress": progress, "watchdog": watchdog, "client-gone": client_gone,
             "dspark": dspark, "batching": batching, "prefix": prefix,
             "goldens": goldens, "crash-loop": crash_loop, "bad-model": bad_model, "contracts": contracts, "kill-fetcher": lambda: kill_one("fetcher"),
             "kill-compute": lambda: kill_one("compute"),
             "kill-scheduler": lambda: kill_one("scheduler"), "concurrent": concurrent,
             "malformed": malformed, "stop": stop_during}
scenarios[scenario]()
shutil.rmtree(run_dir, ignore_errors=True)
print(f"ok {scenario}")
