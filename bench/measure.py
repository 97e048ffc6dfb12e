"""The benchmark's measurements of one loaded module: launch latency, cat throughput,
concurrent launches, a job burst, each with the module's CPU time.
"""

import hashlib
import os
import statistics
import subprocess
import time

from procfs import BenchError, cpu_delta
from report import percentile

from flux_cmd import DEVNULL, log, run


def exec_cmd(service, *cmd):
    return ["flux", "exec", "--service", service, "-r", "0", *cmd]


def measure_latency(tasks, runs, warmup, service="sdexec"):
    for _ in range(warmup):
        run(exec_cmd(service, "true"), timeout=30, stdout=DEVNULL)
    c0 = tasks.read() if tasks else None
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run(exec_cmd(service, "true"), timeout=30, stdout=DEVNULL)
        times.append(time.perf_counter() - t0)
    c1 = tasks.read() if tasks else None
    return {
        "median": statistics.median(times),
        "p90": percentile(times, 90),
        "p99": percentile(times, 99),
        "min": min(times),
        "max": max(times),
        "times": times,
        "cpu": cpu_delta(c0, c1) if c0 else None,
    }


def measure_job_latency(runs, warmup):
    """Wall time of one job, ``flux run -N1 true``, one after another: its shell is a unit
    with an accounting slice (``[sdexec] usage = "jobs"``, the default)."""
    cmd = ["flux", "run", "-N1", "true"]
    for _ in range(warmup):
        run(cmd, timeout=60, stdout=DEVNULL)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run(cmd, timeout=60, stdout=DEVNULL)
        times.append(time.perf_counter() - t0)
    return {"median": statistics.median(times), "p90": percentile(times, 90), "times": times}


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def measure_cat(tasks, path, runs, expect_digest, raw=False):
    """Throughput of ``cat path`` through the module, line mode or raw mode (one message
    per read: ``stdout_LINE_BUFFER=false``)."""
    size = os.path.getsize(path)
    cat = ["--setopt=stdout_LINE_BUFFER=false"] if raw else []
    cat += ["cat", path]
    ok = None
    if expect_digest:  # one untimed run to check the output arrives complete and in order
        p = subprocess.run(
            exec_cmd("sdexec", *cat),
            stdin=DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=120,
        )
        if p.returncode != 0:
            raise BenchError(f"cat check: rc={p.returncode} {p.stderr.decode()[-500:]}")
        ok = hashlib.sha256(p.stdout).hexdigest() == expect_digest
        if not ok:
            log(f"cat check: output differs ({len(p.stdout)} of {size} bytes)")
    c0 = tasks.read()
    rates = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run(exec_cmd("sdexec", *cat), timeout=120, stdout=DEVNULL)
        rates.append(size / 1e6 / (time.perf_counter() - t0))
    c1 = tasks.read()
    return {
        "mbs": statistics.median(rates),
        "all": rates,
        "cpu": cpu_delta(c0, c1) if c0 else None,
        "verified": ok,
    }


def measure_concurrent(tasks, n):
    """Wall time of ``n`` launches of ``true`` started at once, each its own client."""
    c0 = tasks.read()
    t0 = time.perf_counter()
    procs = [subprocess.Popen(exec_cmd("sdexec", "true"), stdin=DEVNULL) for _ in range(n)]
    rcs = [p.wait(timeout=120) for p in procs]
    wall = time.perf_counter() - t0
    return {
        "n": n,
        "wall": wall,
        "failed": sum(1 for rc in rcs if rc),
        "cpu": cpu_delta(c0, tasks.read()),
    }


def list_units(pattern=None):
    args = ["systemctl", "--user", "list-units", "--all", "--no-legend", "--plain"]
    if pattern:
        args.append(pattern)
    p = run(args, timeout=30)
    return {line.split()[0]: " ".join(line.split()[1:4]) for line in p.stdout.splitlines() if line}


def measure_burst(tasks, njobs, timeout):
    c0 = tasks.read()
    t0 = time.perf_counter()
    p = run(["flux", "submit", "--flags=waitable", f"--cc=1-{njobs}", "true"], timeout=timeout)
    ids = p.stdout.split()
    w = run(["flux", "job", "wait", "--all"], timeout=timeout, check=False)
    elapsed = time.perf_counter() - t0
    c1 = tasks.read()
    if len(ids) != njobs:
        raise BenchError(f"submitted {len(ids)} jobs, expected {njobs}")
    # every job: COMPLETED with exit code 0
    q = run(["flux", "jobs", "-n", "-o", "{id.f58plain} {result} {returncode}", *ids], timeout=60)
    rows = [line.split() for line in q.stdout.splitlines()]
    bad = [r for r in rows if r[1:] != ["COMPLETED", "0"]]
    plain = {r[0] for r in rows}
    # the job shells' units must be gone (allow a few seconds for the stop/reset to land)
    deadline = time.time() + 10
    while True:
        shells = list_units("*shell*")
        mine = {u: s for u, s in shells.items() if any(j in u for j in plain)}
        if not mine or time.time() > deadline:
            break
        time.sleep(0.5)
    return {
        "jps": njobs / elapsed,
        "elapsed": elapsed,
        "cpu": cpu_delta(c0, c1) if c0 else None,
        "wait_rc": w.returncode,
        "wait_out": (w.stdout + w.stderr).strip(),
        "bad": bad,
        "counted": len(rows),
        "shell_units_ours": mine,
        "shell_units_all": shells,
    }
