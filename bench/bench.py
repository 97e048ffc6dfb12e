#!/usr/bin/env python3
"""Measure one sdexec module after another inside a running Flux instance.

Run by bench/compare.sh as the initial program of ``flux start --test-size=2``
(FLUX_URI points at rank 0). For each module it loads the module on ranks 0
and 1 (plus sdbus for the C module), measures

  1. launch latency of ``flux exec --service sdexec -r 0 true``;
  2. stdout throughput of ``flux exec --service sdexec -r 0 cat FILE``;
  3. the module's CPU seconds (user+sys, /proc stat) during phases 1, 2 and 4;
  4. a burst of N jobs (``[exec] service = "sdexec"`` must be configured),

then unloads it and prints a comparison table. Standard library only.
"""

import argparse
import glob
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
DEVNULL = subprocess.DEVNULL


class BenchError(Exception):
    pass


def log(text):
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def run(args, timeout=60, check=True, rank=None, **kw):
    """Run a command (on ``rank`` through ``flux exec`` with rexec); return CompletedProcess."""
    if rank is not None and rank != 0:
        args = ["flux", "exec", "-n", "-r", str(rank)] + args
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


# ---- finding the module's task and reading its CPU time ----


def cpu_seconds(stat_path):
    """utime+stime of a /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat, in seconds."""
    with open(stat_path) as f:
        text = f.read()
    fields = text[text.rindex(")") + 2 :].split()  # fields from #3 (state) on
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # #14 utime, #15 stime


def proc_ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    return int(text[text.rindex(")") + 2 :].split()[1])


def proc_cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]


def broker_threads(bpid, comm):
    """Stat paths of the broker's threads whose comm (thread name) is ``comm``."""
    found = []
    for task in glob.glob(f"/proc/{bpid}/task/*"):
        try:
            with open(f"{task}/comm") as f:
                if f.read().strip() == comm:
                    found.append(f"{task}/stat")
        except OSError:
            pass
    return found


def module_children(bpid, needle):
    """Pids of the broker's child processes whose command line mentions ``needle``."""
    pids = []
    for d in glob.glob("/proc/[0-9]*"):
        pid = int(d.rsplit("/", 1)[1])
        try:
            if proc_ppid(pid) == bpid and any(needle in a for a in proc_cmdline(pid)):
                pids.append(pid)
        except (OSError, ValueError):
            pass
    return pids


class Tasks:
    """The CPU accounting targets of one module on every rank."""

    def __init__(self):
        self.module = []  # stat paths: the sdexec thread or process, per rank
        self.helper = []  # stat paths: sdbus threads (C module only)
        self.desc = []

    def read(self):
        return (
            sum(cpu_seconds(p) for p in self.module),
            sum(cpu_seconds(p) for p in self.helper),
        )


def locate(kind, module_path, broker_pids):
    """Find where the module runs on each rank: a broker thread, or a child process.

    Returns {rank: Tasks}.
    """
    found = {}
    for rank, bpid in broker_pids.items():
        tasks = found[rank] = Tasks()
        children = [  # a module loader (flux-module-exec, flux-module-python-exec.py)
            p
            for p in module_children(bpid, "flux-module-")
            if module_path in proc_cmdline(p)
        ]
        threads = broker_threads(bpid, "sdexec")
        if children:
            if len(children) != 1:
                raise BenchError(f"rank {rank}: several sdexec processes: {children}")
            pid = children[0]
            tasks.module.append(f"/proc/{pid}/stat")
            argv = " ".join(os.path.basename(a) for a in proc_cmdline(pid)[1:])
            tasks.desc.append(f"rank {rank}: process pid {pid} (child of broker {bpid}: {argv})")
        elif len(threads) == 1:
            tasks.module.append(threads[0])
            tid = threads[0].split("/")[4]
            tasks.desc.append(f"rank {rank}: thread 'sdexec' tid {tid} of broker pid {bpid}")
        else:
            raise BenchError(f"rank {rank}: cannot find the sdexec task (threads={threads})")
        if kind == "C":
            sdbus = broker_threads(bpid, "sdbus")
            if len(sdbus) == 1:
                tasks.helper.append(sdbus[0])
                tid = sdbus[0].split("/")[4]
                tasks.desc.append(f"rank {rank}: thread 'sdbus' tid {tid} of broker pid {bpid}")
    return found


def merge(per_rank):
    tasks = Tasks()
    for t in per_rank.values():
        tasks.module += t.module
        tasks.helper += t.helper
        tasks.desc += t.desc
    return tasks


# ---- the measurements ----


def percentile(values, q):
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def exec_cmd(service, *cmd):
    return ["flux", "exec", "--service", service, "-r", "0", *cmd]


def measure_latency(tasks, runs, warmup, service="sdexec"):
    for _ in range(warmup):
        run(exec_cmd(service, "true"), timeout=30, stdout=DEVNULL)
    c0 = tasks.read() if tasks else (0, 0)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run(exec_cmd(service, "true"), timeout=30, stdout=DEVNULL)
        times.append(time.perf_counter() - t0)
    c1 = tasks.read() if tasks else (0, 0)
    return {
        "median": statistics.median(times),
        "p90": percentile(times, 90),
        "min": min(times),
        "max": max(times),
        "cpu": c1[0] - c0[0],
        "cpu_helper": c1[1] - c0[1],
    }


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def measure_cat(tasks, path, runs, expect_digest):
    size = os.path.getsize(path)
    # one untimed run to check the output arrives complete and in order
    p = subprocess.run(
        exec_cmd("sdexec", "cat", path), stdin=DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, timeout=120,
    )
    if p.returncode != 0:
        raise BenchError(f"cat check: rc={p.returncode} {p.stderr.decode()[-500:]}")
    got = hashlib.sha256(p.stdout).hexdigest()
    ok = got == expect_digest
    if not ok:
        log(f"cat check: output differs ({len(p.stdout)} of {size} bytes)")
    c0 = tasks.read()
    rates = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run(exec_cmd("sdexec", "cat", path), timeout=120, stdout=DEVNULL)
        rates.append(size / 1e6 / (time.perf_counter() - t0))
    c1 = tasks.read()
    return {
        "mbs": statistics.median(rates),
        "all": rates,
        "cpu": c1[0] - c0[0],
        "cpu_helper": c1[1] - c0[1],
        "verified": ok,
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
    p = run(
        ["flux", "submit", "--flags=waitable", f"--cc=1-{njobs}", "true"], timeout=timeout
    )
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
        "cpu": c1[0] - c0[0],
        "cpu_helper": c1[1] - c0[1],
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


def dmesg_problems():
    p = run(["flux", "dmesg"], timeout=30)
    keys = (".err[", ".crit[", ".alert[", ".emerg[", ".warning[")
    return [line for line in p.stdout.splitlines() if any(k in line for k in keys)]


def bench_module(kind, path, args, broker_pids, digest):
    ranks = sorted(broker_pids)
    res = {"kind": kind, "path": path}
    run(["flux", "dmesg", "-C"], timeout=30)
    units_before = list_units()
    log(f"{kind}: loading {path} on ranks {ranks}")
    load_module(kind, path, ranks)
    try:
        per_rank = locate(kind, path, broker_pids)
        tasks = merge(per_rank)
        rank0 = per_rank[0]  # phases 1 and 2 run on rank 0 only
        res["where"] = tasks.desc
        for line in tasks.desc:
            log(f"{kind}: {line}")
        log(f"{kind}: latency ({args.warmup} warm-up + {args.runs} runs)")
        res["lat"] = measure_latency(rank0, args.runs, args.warmup)
        log(f"{kind}: cat throughput (1 check + {args.cat_runs} runs)")
        res["cat"] = measure_cat(rank0, args.file, args.cat_runs, digest)
        log(f"{kind}: burst of {args.jobs} jobs")
        res["burst"] = measure_burst(tasks, args.jobs, args.burst_timeout)
        if args.profile_cmd and kind == "ours":
            res["profile"] = profile(args, rank0)
    finally:
        log(f"{kind}: unloading")
        unload_module(kind, ranks)
    time.sleep(0.5)
    after = list_units()
    res["new_units"] = {u: s for u, s in after.items() if u not in units_before}
    res["dmesg"] = dmesg_problems()
    return res


def profile(args, rank0):
    """Run the profiler command (pid substituted for {pid}) during one extra cat run."""
    pid = rank0.module[0].split("/")[2]
    cmd = [a.replace("{pid}", pid) for a in args.profile_cmd.split()]
    log(f"profiling: {' '.join(cmd)}")
    prof = subprocess.Popen(cmd, stdin=DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    time.sleep(1)
    run(exec_cmd("sdexec", "cat", args.file), timeout=120, stdout=DEVNULL)
    prof.send_signal(2)  # py-spy record writes its output on SIGINT
    try:
        out = prof.communicate(timeout=60)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        prof.kill()
        out = prof.communicate()[0].decode(errors="replace")
    return out[-3000:]


# ---- report ----


def ratio(ours, c):
    if c == 0:
        return "n/a"
    return f"{ours / c:.2f}"


def table(c, o, args, baseline):
    rows = []

    def row(metric, cv, ov, fmt, better):
        rows.append((metric, fmt.format(cv), fmt.format(ov), ratio(ov, cv), better))

    ms = 1000
    row("launch latency median (ms)", c["lat"]["median"] * ms, o["lat"]["median"] * ms, "{:.1f}", "lower")
    row("launch latency p90 (ms)", c["lat"]["p90"] * ms, o["lat"]["p90"] * ms, "{:.1f}", "lower")
    row(f"module CPU, {args.runs} launches (s)", c["lat"]["cpu"], o["lat"]["cpu"], "{:.2f}", "lower")
    row(
        "  C: + sdbus thread (s)",
        c["lat"]["cpu"] + c["lat"]["cpu_helper"], o["lat"]["cpu"], "{:.2f}", "lower",
    )
    row("cat 20 MB stdout (MB/s, median of 3)", c["cat"]["mbs"], o["cat"]["mbs"], "{:.1f}", "higher")
    row(f"module CPU, {args.cat_runs} cat runs (s)", c["cat"]["cpu"], o["cat"]["cpu"], "{:.2f}", "lower")
    row(
        "  C: + sdbus thread (s)",
        c["cat"]["cpu"] + c["cat"]["cpu_helper"], o["cat"]["cpu"], "{:.2f}", "lower",
    )
    row(f"burst of {args.jobs} jobs (jobs/s)", c["burst"]["jps"], o["burst"]["jps"], "{:.1f}", "higher")
    row("module CPU, burst, ranks 0+1 (s)", c["burst"]["cpu"], o["burst"]["cpu"], "{:.2f}", "lower")
    row(
        "  C: + sdbus threads (s)",
        c["burst"]["cpu"] + c["burst"]["cpu_helper"], o["burst"]["cpu"], "{:.2f}", "lower",
    )
    w = max(len(r[0]) for r in rows)
    out = [f"{'metric':<{w}}  {'C':>9}  {'ours':>9}  {'ours/C':>7}  better"]
    out.append("-" * len(out[0]))
    for r in rows:
        out.append(f"{r[0]:<{w}}  {r[1]:>9}  {r[2]:>9}  {r[3]:>7}  {r[4]}")
    out.append("")
    out.append(
        f"reference: flux exec -r 0 true via rexec (no sdexec): median "
        f"{baseline['median'] * ms:.1f} ms, p90 {baseline['p90'] * ms:.1f} ms"
    )
    return "\n".join(out)


def details(res):
    out = [f"== {res['kind']}: {res['path']}"]
    out += [f"   runs in: {d}" for d in res.get("where", [])]
    lat, cat, b = res["lat"], res["cat"], res["burst"]
    out.append(
        f"   latency min/median/p90/max ms: {lat['min'] * 1e3:.1f}/{lat['median'] * 1e3:.1f}/"
        f"{lat['p90'] * 1e3:.1f}/{lat['max'] * 1e3:.1f}"
    )
    out.append(
        f"   cat MB/s: {', '.join(f'{r:.1f}' for r in cat['all'])}; "
        f"output verified (sha256): {'yes' if cat['verified'] else 'NO'}"
    )
    out.append(
        f"   burst: {b['elapsed']:.2f}s, flux job wait --all rc={b['wait_rc']}, "
        f"{b['counted']} jobs listed, not COMPLETED/0: {len(b['bad'])}"
    )
    if b["wait_out"]:
        out.append("   job wait said: " + b["wait_out"][:500].replace("\n", "\n      "))
    for r in b["bad"][:5]:
        out.append(f"      bad job: {' '.join(r)}")
    out.append(
        f"   *shell* units of these jobs left: {len(b['shell_units_ours'])}; "
        f"*shell* units in the user manager: {len(b['shell_units_all'])}"
    )
    for u, s in list(b["shell_units_all"].items())[:5]:
        out.append(f"      {u} {s}")
    out.append(f"   units new since load (any owner): {len(res['new_units'])}")
    for u, s in list(res["new_units"].items())[:10]:
        out.append(f"      {u} {s}")
    out.append(f"   flux dmesg warnings/errors: {len(res['dmesg'])}")
    for line in res["dmesg"][:10]:
        out.append(f"      {line}")
    if res.get("profile"):
        out.append("   profiler output (tail):")
        out += ["      " + line for line in res["profile"].splitlines()[-25:]]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--c-module", required=True)
    ap.add_argument("--py-module", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--cat-runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--burst-timeout", type=int, default=150)
    ap.add_argument("--order", default="C,ours")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--profile-cmd", help="e.g. 'py-spy record -o /tmp/x.svg --pid {pid}'")
    args = ap.parse_args()

    size = run(["flux", "getattr", "size"]).stdout.strip()
    if size != "2":
        raise BenchError(f"instance size is {size}, expected 2")
    conf = json.loads(run(["flux", "config", "get"]).stdout)
    if conf.get("exec", {}).get("service") != "sdexec":
        raise BenchError('[exec] service = "sdexec" is not configured')
    for rank in (0, 1):
        if "sdexec" in loaded(rank):
            raise BenchError(f"rank {rank}: an sdexec module is already loaded")
    broker_pids = {
        r: int(run(["flux", "getattr", "broker.pid"], rank=r).stdout) for r in (0, 1)
    }
    digest = file_digest(args.file)
    log("reference: flux exec via rexec")
    baseline = measure_latency(None, 10, 2, service="rexec")

    paths = {"C": args.c_module, "ours": args.py_module}
    results = {}
    for kind in args.order.split(","):
        results[kind] = bench_module(kind, paths[kind], args, broker_pids, digest)

    print()
    print(table(results["C"], results["ours"], args, baseline))
    print()
    for kind in args.order.split(","):
        print(details(results[kind]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"baseline": baseline, **results}, f, indent=1, default=str)
    failed = [
        k for k, r in results.items()
        if r["burst"]["bad"] or r["burst"]["wait_rc"] or not r["cat"]["verified"]
        or r["burst"]["shell_units_ours"]
    ]
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
