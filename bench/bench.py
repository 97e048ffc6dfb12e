#!/usr/bin/env python3
"""Measure one sdexec module after another inside a running Flux instance.

Run by bench/compare.sh as the initial program of ``flux start --test-size=2``
(FLUX_URI points at rank 0). For each module it loads the module on ranks 0
and 1 (plus sdbus for the C module), measures

  1. launch latency of ``flux exec --service sdexec -r 0 true`` (p50/p90/p99);
  2. stdout throughput of ``flux exec --service sdexec -r 0 cat FILE``, line mode and
     raw mode (``stdout_LINE_BUFFER=false``);
  3. the wall time of 32 and of 200 launches started at once;
  4. one job's launch (``flux run -N1 true``, one after another: the job shell's unit has an
     accounting slice), then a burst of N jobs (``[exec] service = "sdexec"`` must be
     configured);
  5. the module's CPU seconds (schedstat run time) in each phase, and our module's RSS,

then unloads it and prints a comparison table (``--json``: also the rows, for
bench/chart.py). This file runs the rounds; measure.py measures; flux_cmd.py runs flux
commands; procfs.py finds the module's tasks in /proc; report.py pools the rounds and formats.
Standard library only.
"""

import argparse
import json
import os
import subprocess
import time

from procfs import Tasks, host_note, locate, rss_kb
from report import aggregate, details, summary, table

from flux_cmd import (
    DEVNULL,
    log,
    run,
    instance_brokers,
    module_order,
    exit_with,
    load_module,
    unload_module,
    dmesg_lines,
    dmesg_problems,
    usage_sources,
)
from measure import (
    exec_cmd,
    measure_latency,
    file_digest,
    measure_cat,
    measure_concurrent,
    list_units,
    measure_burst,
    measure_job_latency,
)


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
        log(f"{kind}: job launch latency ({args.job_warmup} warm-up + {args.job_runs} runs)")
        res["job_lat"] = measure_job_latency(args.job_runs, args.job_warmup)
        log(f"{kind}: burst of {args.jobs} jobs")
        res["burst"] = measure_burst(tasks, args.jobs, args.burst_timeout)
        if kind == "ours":
            res["usage_source"] = usage_sources(ranks)
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
    ap.add_argument("--job-runs", type=int, default=20, help="one-job launches (default 20)")
    ap.add_argument("--job-warmup", type=int, default=3)
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

    broker_pids = instance_brokers(size=2)
    digest = file_digest(args.file)
    note_before = host_note()
    log("reference: flux exec via rexec")
    baseline = measure_latency(None, 10, 2, service="rexec")

    paths = {"C": args.c_module, "ours": args.py_module}
    order = module_order(args.order)
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
    exit_with(main)
