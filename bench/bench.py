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
import fnmatch
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
    """The CPU accounting targets of one module (on one rank, or merged)."""

    def __init__(self):
        self.module = []  # stat paths: the sdexec thread or process
        self.sdbus = []  # stat paths: sdbus threads (C module only)
        self.rexec = []  # stat paths: the broker's rexec thread (message channel of
        #                  exec'd modules: it relays every message of a Python module)
        self.server = []  # stat paths: broker processes, plus module processes
        self.desc = []

    def read(self):
        return {k: sum(cpu_seconds(p) for p in getattr(self, k)) for k in CPU_KEYS}

    def merge(self, other):
        for k in CPU_KEYS + ("desc",):
            getattr(self, k).extend(getattr(other, k))
        return self


CPU_KEYS = ("module", "sdbus", "rexec", "server")


def cpu_delta(c0, c1):
    return {k: c1[k] - c0[k] for k in c0}


def locate(kind, module_path, broker_pids):
    """Find where the module runs on each rank: a broker thread, or a child process.

    Returns {rank: Tasks}.
    """
    found = {}
    for rank, bpid in broker_pids.items():
        tasks = found[rank] = Tasks()
        tasks.server.append(f"/proc/{bpid}/stat")
        children = [  # a module loader (flux-module-exec, flux-module-python-exec.py)
            p for p in module_children(bpid, "flux-module-") if module_path in proc_cmdline(p)
        ]
        threads = broker_threads(bpid, "sdexec")
        if children:
            if len(children) != 1:
                raise BenchError(f"rank {rank}: several sdexec processes: {children}")
            pid = children[0]
            tasks.module.append(f"/proc/{pid}/stat")
            tasks.server.append(f"/proc/{pid}/stat")
            argv = " ".join(os.path.basename(a) for a in proc_cmdline(pid)[1:])
            tasks.desc.append(f"rank {rank}: process pid {pid} (child of broker {bpid}: {argv})")
        elif len(threads) == 1:
            tasks.module.append(threads[0])
            tid = threads[0].split("/")[4]
            tasks.desc.append(f"rank {rank}: thread 'sdexec' tid {tid} of broker pid {bpid}")
        else:
            raise BenchError(f"rank {rank}: cannot find the sdexec task (threads={threads})")
        for name in ("sdbus", "rexec"):
            for path in broker_threads(bpid, name):
                getattr(tasks, name).append(path)
                tasks.desc.append(
                    f"rank {rank}: thread '{name}' tid {path.split('/')[4]} of broker pid {bpid}"
                )
    return found


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


def measure_cat(tasks, path, runs, expect_digest):
    size = os.path.getsize(path)
    ok = None
    if expect_digest:  # one untimed run to check the output arrives complete and in order
        p = subprocess.run(
            exec_cmd("sdexec", "cat", path),
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
        run(exec_cmd("sdexec", "cat", path), timeout=120, stdout=DEVNULL)
        rates.append(size / 1e6 / (time.perf_counter() - t0))
    c1 = tasks.read()
    return {
        "mbs": statistics.median(rates),
        "all": rates,
        "cpu": cpu_delta(c0, c1) if c0 else None,
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
        log(f"{kind}: burst of {args.jobs} jobs")
        res["burst"] = measure_burst(tasks, args.jobs, args.burst_timeout)
        if args.profile and kind in args.profile.split(",") and round_no == 1:
            res["profile"] = profile(args, rank0)
    finally:
        log(f"{kind}: unloading")
        unload_module(kind, ranks)
    time.sleep(0.5)
    after = list_units()
    res["new_units"] = {u: s for u, s in after.items() if u not in units_before}
    res["dmesg"] = dmesg_problems(ranks)
    return res


def profile(args, rank0):
    """Sample the module with py-spy (``--profile-cmd``) during one extra, untimed cat run.

    Returns summary lines: the hottest leaf frames, and the innermost flux_sdexec frame of
    each sample (where in our code the time goes, native frames below it included).
    """
    pid = rank0.module[0].split("/")[-2]
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


# ---- report ----


def ratio(ours, c):
    if not c:
        return "n/a"
    return f"{ours / c:.2f}"


def aggregate(rounds, args):
    """Pool the rounds of one module: latency samples and cat rates pooled, CPU per unit."""

    def cpu(phase, per):
        return {k: sum(r[phase]["cpu"][k] for r in rounds) / per for k in CPU_KEYS}

    n = len(rounds)
    times = [t for r in rounds for t in r["lat"]["times"]]
    rates = [x for r in rounds for x in r["cat"]["all"]]
    return {
        "lat_median": statistics.median(times),
        "lat_p90": percentile(times, 90),
        "lat_cpu": cpu("lat", n * args.runs),
        "cat_mbs": statistics.median(rates),
        "cat_cpu": cpu("cat", n * args.cat_runs),
        "jps": statistics.median([r["burst"]["jps"] for r in rounds]),
        "burst_cpu": cpu("burst", n * args.jobs),
        "nlat": len(times),
        "ncat": len(rates),
    }


def table(c, o, args, baseline):
    rows = []

    def row(metric, cv, ov, fmt, better):
        rows.append((metric, fmt.format(cv), fmt.format(ov), ratio(ov, cv), better))

    def cpu_rows(key, what, scale, unit):
        cc, oc = c[key], o[key]
        f = "{:.2f}" if scale == 1 else "{:.1f}"
        row(f"module CPU {unit} {what}", cc["module"] * scale, oc["module"] * scale, f, "lower")
        row(
            "  C: sdexec + sdbus threads",
            (cc["module"] + cc["sdbus"]) * scale,
            oc["module"] * scale,
            f,
            "lower",
        )
        row("  broker(s) + module process", cc["server"] * scale, oc["server"] * scale, f, "lower")

    ms = 1000
    row(
        f"launch latency median (ms, n={c['nlat']})",
        c["lat_median"] * ms,
        o["lat_median"] * ms,
        "{:.1f}",
        "lower",
    )
    row("launch latency p90 (ms)", c["lat_p90"] * ms, o["lat_p90"] * ms, "{:.1f}", "lower")
    cpu_rows("lat_cpu", "per launch", ms, "ms")
    mb = os.path.getsize(args.file) / 1e6
    row(
        f"cat {mb:.0f} MB stdout (MB/s, median of {c['ncat']})",
        c["cat_mbs"],
        o["cat_mbs"],
        "{:.2f}",
        "higher",
    )
    cpu_rows("cat_cpu", "per cat run", 1, "s")
    row(f"burst of {args.jobs} jobs (jobs/s)", c["jps"], o["jps"], "{:.1f}", "higher")
    cpu_rows("burst_cpu", "per job (ranks 0+1)", ms, "ms")
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
    out = [f"== {res['kind']} (round {res['round']}): {res['path']}"]
    out += [f"   runs in: {d}" for d in res.get("where", [])]
    lat, cat, b = res["lat"], res["cat"], res["burst"]
    out.append(
        f"   latency min/median/p90/max ms: {lat['min'] * 1e3:.1f}/{lat['median'] * 1e3:.1f}/"
        f"{lat['p90'] * 1e3:.1f}/{lat['max'] * 1e3:.1f}"
    )
    verified = {True: "yes", False: "NO", None: "not checked this round"}[cat["verified"]]
    out.append(
        f"   cat MB/s: {', '.join(f'{r:.2f}' for r in cat['all'])}; "
        f"output verified (sha256): {verified}"
    )
    out.append(
        f"   burst: {b['jps']:.1f} jobs/s ({b['elapsed']:.2f}s), flux job wait --all "
        f"rc={b['wait_rc']}, {b['counted']} jobs listed, not COMPLETED/0: {len(b['bad'])}"
    )
    for phase in ("lat", "cat", "burst"):
        cpu = res[phase]["cpu"]
        out.append(f"   CPU s in {phase:5}: " + ", ".join(f"{k} {cpu[k]:.2f}" for k in CPU_KEYS))
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
    glob_ = res.get("glob")
    new = res["new_units"]
    if glob_:
        mine = {u: s for u, s in new.items() if fnmatch.fnmatch(u, glob_)}
        out.append(
            f"   units new since load: {len(new)}, of which named like this module's "
            f"({glob_}): {len(mine)}"
        )
        shown = list(mine.items())[:10]
    else:
        out.append(f"   units new since load (any owner): {len(new)}")
        shown = list(new.items())[:10]
    for u, s in shown:
        out.append(f"      {u} {s}")
    out.append(f"   flux dmesg warnings/errors (ranks 0,1): {len(res['dmesg'])}")
    for line in res["dmesg"][:10]:
        out.append(f"      {line}")
    if res.get("profile"):
        out.append("   profile of one extra cat run:")
        out += ["      " + line for line in res["profile"]]
    return "\n".join(out)


def host_note():
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    brokers = 0
    for d in glob.glob("/proc/[0-9]*"):
        try:
            args = proc_cmdline(int(d.rsplit("/", 1)[1]))
        except (OSError, ValueError):
            continue
        if args and os.path.basename(args[0]) == "flux-broker":
            brokers += 1
    return f"{os.cpu_count()} CPUs, loadavg {load}, flux-broker processes on host: {brokers}"


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
        with open(args.json, "w") as f:
            json.dump({"baseline": baseline, **results}, f, indent=1, default=str)
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
