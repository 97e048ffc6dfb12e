"""Soak: how much each broker, and our module's process, grows per job over thousands of jobs.

Run by bench/soak.sh as the initial program of ``flux start --test-size=2`` with ``[exec]
service = "sdexec"``. For each module in ``--order`` in turn it loads the module on ranks 0
and 1 (plus sdbus for C), runs ``--warmup`` jobs, then ``--jobs`` jobs of ``true`` in bursts
of ``--batch`` (each checked as compare.sh's burst: every job COMPLETED with 0, no shell
unit of theirs left), reading the RSS of each broker and of our module's process on each
rank after the warm-up and after every burst, and unloads it. It prints the growth per job
after the warm-up, in KiB, per process; ``--json`` keeps every sample. The C module runs as
threads of the broker, so its memory is the broker's; ours is a process of its own
(flux-module-python-exec), whose messages the broker relays.
Standard library only.
"""

import argparse
import json

from procfs import BenchError, host_note, locate, rss_kb
from usage_burst import NoTasks

from flux_cmd import exit_with, instance_brokers, load_module, log, module_order, run, unload_module
from measure import measure_burst


def cache_kib(rank):
    """What the broker's content cache and KVS cache hold (KiB): both grow with the jobs'
    KVS objects until their purge and expiry catch up."""
    content = json.loads(run(["flux", "module", "stats", "content"], rank=rank).stdout)
    kvs = json.loads(run(["flux", "module", "stats", "kvs"], rank=rank).stdout)
    return content["size"] // 1024, int(kvs["cache"]["obj size total (MiB)"] * 1024)


def sample(broker_pids, module_pids, done):
    """RSS (KiB) of each broker and of each module process, and each broker's caches,
    after ``done`` jobs."""
    row = {"jobs": done}
    for rank, pid in broker_pids.items():
        row[f"broker{rank}"] = rss_kb(pid)
    for rank, pid in module_pids.items():
        row[f"module{rank}"] = rss_kb(pid)
    for rank in broker_pids:
        row[f"content{rank}"], row[f"kvs{rank}"] = cache_kib(rank)
    return row


def burst(n, timeout):
    res = measure_burst(NoTasks(), n, timeout)
    if res["bad"] or res["wait_rc"] or res["shell_units_ours"]:
        raise BenchError(
            f"burst of {n}: not COMPLETED/0: {res['bad'][:3]}, wait rc {res['wait_rc']} "
            f"{res['wait_out'][:300]}, shell units left: {list(res['shell_units_ours'])[:3]}"
        )
    return res["elapsed"]


def soak_module(kind, path, args, broker_pids):
    ranks = sorted(broker_pids)
    log(f"{kind}: loading {path} on ranks {ranks}")
    load_module(kind, path, ranks)
    try:
        where = locate(kind, path, broker_pids)
        # ours: /proc/<pid> of the module process; C: /proc/<broker>/task/<tid>, the broker's
        module_pids = {
            r: int(t.module[0].split("/")[2])
            for r, t in where.items()
            if "/task/" not in t.module[0]
        }
        log(f"{kind}: {args.warmup} warm-up jobs")
        done = 0
        while done < args.warmup:
            n = min(args.batch, args.warmup - done)
            burst(n, args.burst_timeout)
            done += n
        samples = [sample(broker_pids, module_pids, 0)]
        seconds, done = 0.0, 0
        while done < args.jobs:
            n = min(args.batch, args.jobs - done)
            seconds += burst(n, args.burst_timeout)
            done += n
            samples.append(sample(broker_pids, module_pids, done))
            log(f"{kind}: {done}/{args.jobs} jobs, RSS KiB {samples[-1]}")
    finally:
        log(f"{kind}: unloading")
        unload_module(kind, ranks)
    return {"kind": kind, "path": path, "samples": samples, "jps": args.jobs / seconds}


def growth(res, key, half=False):
    """KiB per job from the first sample (after the warm-up), or from the first one at
    half the jobs or beyond (``half``: once caches have filled), to the last."""
    samples = res["samples"]
    last = samples[-1]
    first = next(s for s in samples if s["jobs"] >= last["jobs"] / 2) if half else samples[0]
    if key not in first or last["jobs"] == first["jobs"]:
        return None
    return (last[key] - first[key]) / (last["jobs"] - first["jobs"])


KEYS = (
    ("module0", "our module, rank 0"),
    ("module1", "our module, rank 1"),
    ("broker0", "broker, rank 0"),
    ("broker1", "broker, rank 1"),
    ("content0", "  content cache, r0"),
    ("content1", "  content cache, r1"),
    ("kvs0", "  KVS cache, r0"),
    ("kvs1", "  KVS cache, r1"),
)


def table(results, order):
    """One row per process: KiB/job under each module, ours/C."""
    by_kind = {r["kind"]: r for r in results}
    c, o = by_kind["C"], by_kind["ours"]
    out = [f"order {','.join(order)}: KiB per job after the warm-up (all jobs; second half)"]
    out.append(f"{'process':<20} {'C':>7} {'ours':>7} {'ours/C':>7} {'C 2nd':>7} {'ours 2nd':>8}")
    for key, what in KEYS:
        vals = [growth(c, key), growth(o, key), growth(c, key, True), growth(o, key, True)]
        cv, ov = vals[0], vals[1]
        fmt = [f"{v:.2f}" if v is not None else "-" for v in vals]
        ratio = f"{ov / cv:.1f}" if cv and ov is not None else "-"
        out.append(f"{what:<20} {fmt[0]:>7} {fmt[1]:>7} {ratio:>7} {fmt[2]:>7} {fmt[3]:>8}")
    for r in results:
        s0, s1 = r["samples"][0], r["samples"][-1]
        out.append(
            f"{r['kind']}: {s1['jobs']} jobs at {r['jps']:.1f} jobs/s; KiB (RSS, caches) after the "
            f"warm-up {dict(list(s0.items())[1:])}, at the end {dict(list(s1.items())[1:])}"
        )
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--c-module", required=True)
    ap.add_argument("--py-module", required=True)
    ap.add_argument("--jobs", type=int, default=5000, help="jobs after the warm-up (5000)")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--batch", type=int, default=500, help="jobs per burst (500)")
    ap.add_argument("--burst-timeout", type=int, default=600)
    ap.add_argument("--order", default="C,ours")
    ap.add_argument("--json", help="also write every sample here")
    args = ap.parse_args()
    order = module_order(args.order)
    broker_pids = instance_brokers(size=2)
    paths = {"C": args.c_module, "ours": args.py_module}
    note = host_note()
    results = [soak_module(kind, paths[kind], args, broker_pids) for kind in order]
    print(table(results, order))
    print(f"host before: {note}\nhost after:  {host_note()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"order": order, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    exit_with(main)
