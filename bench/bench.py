#!/usr/bin/env python3
"""Measure one sdexec module after another inside a running Flux instance.

Run by bench/compare.sh as the initial program of ``flux start --test-size=2``
(FLUX_URI points at rank 0). For each module it loads the module on ranks 0
and 1 (plus sdbus for the C module), measures

  1. launch latency of ``flux exec --service sdexec -r 0 true`` (p50/p90/p99);
  2. stdout throughput of ``flux exec --service sdexec -r 0 cat FILE``, line mode and
     raw mode (``stdout_LINE_BUFFER=false``);
  3. the wall time of 32 and of 200 launches started at once;
  4. a burst of N jobs (``[exec] service = "sdexec"`` must be configured);
  5. the module's CPU seconds (schedstat run time) in each phase, and our module's RSS,

then unloads it and prints a comparison table (``--json``: also the rows, for
bench/chart.py). This file measures; procfs.py finds the module's tasks in /proc;
report.py pools the rounds and formats. Standard library only.
"""

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

from procfs import BenchError, Tasks, cpu_delta, host_note, locate, rss_kb
from report import aggregate, details, percentile, summary, table

DEVNULL = subprocess.DEVNULL


def log(text):
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


RANK_URI = {}  # rank -> local-uri, for commands aimed at one broker (see rank_uris())


def run(args, timeout=60, check=True, rank=None, **kw):
    """Run a command (against broker ``rank`` if given); return CompletedProcess."""
    if rank is not None:
        kw["env"] = dict(os.environ, FLUX_URI=RANK_URI[rank])
    kw.setdefault("stdin", DEVNULL)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    try:
        p = subprocess.run(args, timeout=timeout, text=True, **kw)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout}s: {' '.join(args)}") from None
    if check and p.returncode != 0:
        raise BenchError(f"rc={p.returncode}: {' '.join(args)}\n{p.stderr or ''}")
    return p


def rank_attrs(size):
    """{rank: (local-uri, broker.pid)}: all brokers run on this host (--test-size).

    Asked over RPC rather than with ``flux exec -r N``: flux-core 0.88's rexec logs
    "fbuf_read_watcher on stdout" errors for some multi-line outputs.
    """
    import flux

    h = flux.Flux()
    attrs = {}
    for rank in range(size):

        def get(name):
            return h.rpc("attr.get", {"name": name}, nodeid=rank).get()["value"]

        attrs[rank] = (get("local-uri"), int(get("broker.pid")))
    return attrs


# ---- the measurements ----


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


# ---- module load/unload ----


def loaded(rank):
    p = run(["flux", "module", "list"], rank=rank, timeout=30)
    return {line.split()[0] for line in p.stdout.splitlines()[1:] if line.strip()}


def load_module(kind, path, ranks):
    for rank in ranks:
        if kind == "C" and "sdbus" not in loaded(rank):
            run(["flux", "module", "load", "sdbus"], rank=rank, timeout=60)
        run(["flux", "module", "load", path], rank=rank, timeout=60)
        if "sdexec" not in loaded(rank):
            raise BenchError(f"rank {rank}: sdexec not listed after loading {path}")


def unload_module(kind, ranks):
    for rank in reversed(ranks):
        run(["flux", "module", "remove", "sdexec"], rank=rank, timeout=60)
        if kind == "C":
            run(["flux", "module", "remove", "sdbus"], rank=rank, timeout=60)


def dmesg_lines(rank):
    return run(["flux", "dmesg"], rank=rank, timeout=30).stdout.splitlines()


def dmesg_problems(ranks):
    keys = (".err[", ".crit[", ".alert[", ".emerg[", ".warning[")
    return [line for r in ranks for line in dmesg_lines(r) if any(k in line for k in keys)]


def bench_module(kind, path, args, broker_pids, digest, round_no):
    ranks = sorted(broker_pids)
    res = {"kind": kind, "path": path, "round": round_no}
    for rank in ranks:
        run(["flux", "dmesg", "-C"], rank=rank, timeout=30)
    units_before = list_units()
    log(f"{kind}: loading {path} on ranks {ranks}")
    load_module(kind, path, ranks)
    try:
        per_rank = locate(kind, path, broker_pids)
        tasks = Tasks()
        for t in per_rank.values():
            tasks.merge(t)
        rank0 = per_rank[0]  # phases 1 and 2 run on rank 0 only
        res["where"] = tasks.desc
        for line in tasks.desc:
            log(f"{kind}: {line}")
        # our module names its units <label>:<instance>.service and logs the glob
        res["glob"] = None
        for line in dmesg_lines(0):
            if "sdexec.info[0]" in line and "(glob " in line:
                res["glob"] = line.rsplit("(glob ", 1)[1].rstrip(")")
        log(f"{kind}: latency ({args.warmup} warm-up + {args.runs} runs)")
        res["lat"] = measure_latency(rank0, args.runs, args.warmup)
        log(f"{kind}: cat throughput ({'1 check + ' if digest else ''}{args.cat_runs} runs)")
        res["cat"] = measure_cat(rank0, args.file, args.cat_runs, digest)
        log(f"{kind}: raw-mode cat throughput ({args.cat_runs} runs)")
        res["cat_raw"] = measure_cat(rank0, args.file, args.cat_runs, None, raw=True)
        for n in (32, 200):
            log(f"{kind}: {n} concurrent launches")
            res[f"conc{n}"] = measure_concurrent(rank0, n)
        log(f"{kind}: burst of {args.jobs} jobs")
        res["burst"] = measure_burst(tasks, args.jobs, args.burst_timeout)
        # our module is a process of its own; the C module's memory is the broker's
        res["rss_kb"] = rss_kb(int(rank0.module[0].split("/")[2])) if kind == "ours" else None
        if args.profile and kind in args.profile.split(",") and round_no == 1:
            res["profile"] = profile(args, rank0)
    finally:
        log(f"{kind}: unloading")
        unload_module(kind, ranks)
    # units the module started must go: wait until none is left, at most 10 s
    deadline = time.monotonic() + 10
    while True:
        after = list_units()
        new = {u: s for u, s in after.items() if u not in units_before}
        if not new or time.monotonic() > deadline:
            break
    res["new_units"] = new
    res["dmesg"] = dmesg_problems(ranks)
    return res


def profile(args, rank0):
    """Sample the module with py-spy (``--profile-cmd``) during one extra, untimed cat run.

    Returns summary lines: the hottest leaf frames, and the innermost flux_sdexec frame of
    each sample (where in our code the time goes, native frames below it included).
    """
    pid = rank0.module[0].split("/")[-1]
    out = os.path.join(os.path.dirname(args.file), f"profile-{pid}.txt")
    cmd = [a.replace("{pid}", pid).replace("{out}", out) for a in args.profile_cmd.split()]
    log(f"profiling: {' '.join(cmd)}")
    try:
        prof = subprocess.Popen(
            cmd, stdin=DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
    except OSError as exc:
        return [f"profiler failed to start: {exc}"]
    time.sleep(1)
    run(exec_cmd("sdexec", "cat", args.file), timeout=120, stdout=DEVNULL)
    prof.send_signal(2)  # py-spy writes its output on SIGINT
    try:
        text = prof.communicate(timeout=60)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        prof.kill()
        text = prof.communicate()[0].decode(errors="replace")
    leaf, ours, total = {}, {}, 0
    try:
        with open(out) as f:
            for line in f:
                stack, _, n = line.rstrip("\n").rpartition(" ")
                if not stack:
                    continue
                frames, n = stack.split(";"), int(n)
                total += n
                leaf[frames[-1]] = leaf.get(frames[-1], 0) + n
                mine = [f for f in frames if "flux_sdexec/" in f]
                key = mine[-1] if mine else "(outside flux_sdexec: reactor, flux bindings)"
                ours[key] = ours.get(key, 0) + n
    except (OSError, ValueError) as exc:
        return [f"no profile: {exc}", *text.strip().splitlines()[-5:]]
    lines = [f"{total} samples ({' '.join(cmd[:2])}); hottest leaf frames:"]
    for fr, n in sorted(leaf.items(), key=lambda kv: -kv[1])[:8]:
        lines.append(f"  {100 * n / total:5.1f}%  {fr}")
    lines.append("innermost flux_sdexec frame of each sample:")
    for fr, n in sorted(ours.items(), key=lambda kv: -kv[1])[:8]:
        lines.append(f"  {100 * n / total:5.1f}%  {fr}")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--c-module", required=True)
    ap.add_argument("--py-module", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--cat-runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--burst-timeout", type=int, default=150)
    ap.add_argument("--order", default="C,ours")
    ap.add_argument("--rounds", type=int, default=1, help="rounds, in ABBA order (default 1)")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--profile", help="modules to profile in an extra cat run, e.g. 'ours'")
    ap.add_argument(
        "--profile-cmd",
        default="py-spy record --native -r 200 -f raw -o {out} --pid {pid}",
        help="profiler command writing collapsed stacks to {out}; {pid} is the module's pid",
    )
    args = ap.parse_args()

    size = int(run(["flux", "getattr", "size"]).stdout)
    if size != 2:
        raise BenchError(f"instance size is {size}, expected 2")
    conf = json.loads(run(["flux", "config", "get"]).stdout)
    if conf.get("exec", {}).get("service") != "sdexec":
        raise BenchError('[exec] service = "sdexec" is not configured')
    attrs = rank_attrs(size)
    RANK_URI.update({r: a[0] for r, a in attrs.items()})
    broker_pids = {r: a[1] for r, a in attrs.items()}
    for rank in broker_pids:
        if "sdexec" in loaded(rank):
            raise BenchError(f"rank {rank}: an sdexec module is already loaded")
    digest = file_digest(args.file)
    note_before = host_note()
    log("reference: flux exec via rexec")
    baseline = measure_latency(None, 10, 2, service="rexec")

    paths = {"C": args.c_module, "ours": args.py_module}
    order = args.order.split(",")
    if sorted(order) != ["C", "ours"]:
        raise BenchError("--order must name C and ours once each")
    results = {kind: [] for kind in order}
    done = []
    for round_no in range(1, args.rounds + 1):
        # ABBA: every other round runs the modules in the opposite order
        for kind in order if round_no % 2 else reversed(order):
            res = bench_module(
                kind, paths[kind], args, broker_pids, digest if round_no == 1 else None, round_no
            )
            results[kind].append(res)
            done.append(res)

    print()
    print(table(aggregate(results["C"], args), aggregate(results["ours"], args), args, baseline))
    print(f"host before: {note_before}")
    print(f"host after:  {host_note()}")
    print()
    for res in done:
        print(details(res))
    if args.json:
        rows = summary(aggregate(results["C"], args), aggregate(results["ours"], args), args)
        with open(args.json, "w") as f:
            json.dump({"summary": rows, "baseline": baseline, **results}, f, indent=1, default=str)
    failed = sorted(
        {
            r["kind"]
            for r in done
            if r["burst"]["bad"]
            or r["burst"]["wait_rc"]
            or r["cat"]["verified"] is False
            or r["burst"]["shell_units_ours"]
        }
    )
    if failed:
        print(f"\nFAILED checks for: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        log(f"error: {exc}")
        sys.exit(2)
