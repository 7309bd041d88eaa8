# SPDX-License-Identifier: MIT
"""Peak memory of a running daemon set, as the memory plan counts it (docs/ARCHITECTURE.md,
"Memory plan"): resident private and file-backed pages of the supervisor and every daemon
(RssAnon + RssFile from /proc/PID/status: shared libraries are counted once per process, so
this over-counts slightly) plus the pages allocated in the set's /dev/shm segments (the expert
cache and the stats pages; st_blocks, so pages never touched are not counted, and pages mapped
by two processes are counted once). Used by tests/e2e/test_memory_budget.py and
tools/bench-roof.py.

    with MemWatch(dsv4ctl, run_dir) as w:
        ...             # sampled every `period` seconds on a thread
    w.peak, w.at_peak   # bytes, {name: bytes} at the peak
"""
import glob
import json
import os
import subprocess
import threading


def shm_id(run_dir):
    """The set's random id (RUN_DIR/shm-id, written by the supervisor at each start)."""
    try:
        with open(os.path.join(run_dir, "shm-id")) as f:
            return f.read().strip()
    except OSError:
        return None


def shm_paths(run_dir):
    """This set's segments: /dsv4-<euid>-<id>-<role> and /dsv4-<euid>-<id>-experts."""
    i = shm_id(run_dir)
    return glob.glob(f"/dev/shm/dsv4-{os.geteuid()}-{i}-*") if i else []


def set_pids(dsv4ctl, run_dir):
    """{name: pid} of the supervisor and the daemons (from `dsv4ctl status --json`)."""
    p = subprocess.run([dsv4ctl, "status", "--run-dir", run_dir, "--json"],
                       capture_output=True, text=True, timeout=30)
    st = json.loads(p.stdout)
    pids = {d["name"]: d["pid"] for d in st["daemons"] if d.get("pid")}
    pids["supervisor"] = st["supervisor_pid"]
    return pids


def rss_bytes(pid):
    """RssAnon + RssFile of pid (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            kb = sum(int(line.split()[1]) for line in f
                     if line.startswith(("RssAnon:", "RssFile:")))
        return kb * 1024
    except (OSError, ValueError):
        return 0


def sample(pids, run_dir):
    """{name: bytes} now: one entry per process and one per shm segment."""
    out = {name: rss_bytes(pid) for name, pid in pids.items()}
    for path in shm_paths(run_dir):
        try:
            out["shm:" + os.path.basename(path)] = os.stat(path).st_blocks * 512
        except OSError:
            pass
    return out


class MemWatch:
    """Samples the set's memory every `period` s while the block runs, and at least
    `min_samples` times in all (on a loaded machine a short block may see few periods: the
    count must not depend on timing)."""

    def __init__(self, dsv4ctl, run_dir, period=0.01, min_samples=12):
        self.run_dir, self.period, self.min_samples = run_dir, period, min_samples
        self.pids = set_pids(dsv4ctl, run_dir)
        self.peak, self.at_peak, self.samples = 0, {}, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while True:
            s = sample(self.pids, self.run_dir)
            total = sum(s.values())
            self.samples += 1
            if total > self.peak:
                self.peak, self.at_peak = total, s
            if self._stop.wait(self.period) and self.samples >= self.min_samples:
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False
