#!/usr/bin/env python3
"""Fan-out: ``flux exec --service sdexec -r all true`` with every broker on one manager.

Run by bench/fanout.sh as the initial program of ``flux start --test-size=N`` (FLUX_URI
points at rank 0). Loads the C module (with sdbus) and ours on every rank in turn, in
the order given (default C,ours,ours,C), times ``--runs`` launches on all ranks after
``--warmup`` ones, and prints one JSON object: per module the times of each round, and
the CPU seconds (schedstat) all module tasks spent in the timed launches. For ours it
also reads ``flux module stats sdexec`` on every rank: how many signals of units the
module does not track reached Python (``signals.untracked``). Standard library only.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from procfs import BenchError, locate

DEVNULL = subprocess.DEVNULL


def run(args, timeout=300, **kw):
    try:
        p = subprocess.run(
            args, timeout=timeout, stdin=DEVNULL, capture_output=True, text=True, **kw
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout}s: {' '.join(args)}") from None
    if p.returncode != 0:
        raise BenchError(f"rc={p.returncode}: {' '.join(args)}\n{p.stderr}")
    return p.stdout


def on_all(*cmd):
    """Run a flux command on every rank at once (the broker's own rexec service)."""
    return run(["flux", "exec", "-r", "all", *cmd])


def broker_pids(size):
    import flux

    h = flux.Flux()
    return {
        r: int(h.rpc("attr.get", {"name": "broker.pid"}, nodeid=r).get()["value"])
        for r in range(size)
    }


def load(kind, path):
    if kind == "C":
        on_all("flux", "module", "load", "sdbus")
    on_all("flux", "module", "load", path)


def unload(kind):
    on_all("flux", "module", "remove", "sdexec")
    if kind == "C":
        on_all("flux", "module", "remove", "sdbus")


def untracked_signals(size):
    """signals.untracked of our module's stats on each rank."""
    import flux

    h = flux.Flux()
    out = []
    for r in range(size):
        stats = h.rpc("sdexec.stats-get", {}, nodeid=r).get()
        out.append(stats.get("signals", {}).get("untracked"))
    return out


def measure(kind, path, size, runs, warmup, pids):
    load(kind, path)
    try:
        tasks = locate(kind, path, pids)
        cmd = ["flux", "exec", "--service", "sdexec", "-r", "all", "true"]
        for _ in range(warmup):
            run(cmd, timeout=120)
        cpu0 = sum(t.read()["module"] + t.read()["sdbus"] for t in tasks.values())
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            run(cmd, timeout=120)
            times.append(time.perf_counter() - t0)
        cpu1 = sum(t.read()["module"] + t.read()["sdbus"] for t in tasks.values())
        row = {"times": times, "cpu_per_exec": (cpu1 - cpu0) / runs}
        if kind == "ours":
            row["untracked"] = untracked_signals(size)
        return row
    finally:
        unload(kind)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--c-module", required=True)
    ap.add_argument("--py-module", required=True)
    ap.add_argument("--order", default="C,ours,ours,C")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    size = int(run(["flux", "getattr", "size"]).strip())
    pids = broker_pids(size)
    paths = {"C": args.c_module, "ours": args.py_module}
    result = {"size": size, "rounds": []}
    for kind in args.order.split(","):
        t0 = time.time()
        row = measure(kind, paths[kind], size, args.runs, args.warmup, pids)
        row["kind"] = kind
        result["rounds"].append(row)
        print(
            f"[fanout N={size}] {kind}: median {statistics.median(row['times']):.3f} s,"
            f" module CPU {row['cpu_per_exec']:.3f} s per exec ({time.time() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        main()
    except BenchError as exc:
        sys.exit(f"fanout.py: {exc}")
