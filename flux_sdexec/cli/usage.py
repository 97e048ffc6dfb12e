"""``flux sdexec usage JOBID...``: what each rank's job shell used, and the job's total.

A finished job's record is its KVS directory ``sdexec-usage`` (a key per rank), written by
rank 0's sdexec once every rank's record came up the tree (``usage/job_usage.py``), the
same record whose totals are the job's memo (``flux jobs -o '{user.sdexec.cpu}'``); a rank
whose shell still runs is asked (``sdexec.usage``) and answers with figures read now.
``--watch`` asks the running ranks again every INTERVAL seconds and shows each one's CPU%
since the last look, until the job's shells have all ended or ^C. Exit status 1 if a job
has no record.
"""

import json
import sys
import time

import flux.idset
import flux.kvs
from flux.job import JobID

from flux_sdexec.cli import ask, usagerows
from flux_sdexec.core.usage_record import kvs_dir, total


def register(subparsers):
    """Add the subcommand's parser."""
    sub = subparsers.add_parser(
        "usage",
        help="CPU, peak memory, peak tasks and OOM kills of a job's shells, per rank",
        description="Show what each rank's job shell used (CPU user/system, peak memory, "
        "peak tasks, OOM kills, systemd result) and the job's total; live for a running job.",
    )
    sub.add_argument("jobids", metavar="JOBID", nargs="+", help="job ids")
    sub.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="refresh the running ranks' figures, with CPU%%, until the job ends",
    )
    sub.add_argument(
        "-i",
        "--interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="seconds between two looks with --watch (default 2)",
    )
    ask.add_output_options(sub)
    sub.set_defaults(func=run)


def _kept(h, jobid):
    """``{rank: record}`` from the job's KVS directory."""
    try:
        directory = flux.kvs.get_dir(h, kvs_dir(jobid.dothex))
    except FileNotFoundError:
        return {}
    return {int(rank): directory[rank] for rank in directory.keys()}


def _ranks(h, jobid):
    """The ranks of the job's R (none before it has resources)."""
    try:
        R = flux.kvs.get(h, f"job.{jobid.dothex}.R")
    except FileNotFoundError:
        return []
    out = []
    for entry in R.get("execution", {}).get("R_lite", []):
        out += list(flux.idset.IDset(entry["rank"]))
    return sorted(set(out))


def records(h, jobid, timeout):
    """Every rank's record of job ``jobid``: kept ones, then live ones for the others."""
    kept = _kept(h, jobid)
    missing = [r for r in _ranks(h, jobid) if r not in kept]
    if missing:
        plain = jobid.f58plain
        answers = ask.ask_all(h, "sdexec.usage", missing, {"jobid": plain}, timeout)
        for rank, a in answers.items():
            for proc in (a.payload or {}).get("procs", []):
                kept[rank] = dict(proc, rank=rank, host=a.payload.get("host"))
    return list(kept.values())


def watch(h, args):
    """``--watch``: the table again every ``args.interval`` seconds, with CPU%, until every
    job has records and none runs (or ^C). A job without any at the first look: exit 1."""
    jobids = [JobID(text) for text in args.jobids]
    before, then, first = {}, time.monotonic(), True
    while True:
        samples = {j.f58: records(h, j, args.timeout) for j in jobids}
        now = time.monotonic()
        if first and not all(samples.values()):
            none = [f58 for f58, recs in samples.items() if not recs]
            print(f"flux-sdexec: {', '.join(none)}: no usage record", file=sys.stderr)
            return 1
        table = []
        for f58, recs in samples.items():
            after = {r["rank"]: r for r in recs}
            percent = usagerows.cpu_percent(before.get(f58, {}), after, now - then)
            before[f58] = after
            table += usagerows.rows(f58, recs, percent)
        then, first = now, False
        print(time.strftime("%H:%M:%S"))
        print("\n".join(usagerows.lines(table, watch=True)), flush=True)
        running = any(r.get("running") for recs in samples.values() for r in recs)
        if not running and all(samples.values()):  # between the last exit and the record:
            return 0  # no rank answers, none is written yet: look again
        time.sleep(args.interval)
        print()


def run(args):
    h = ask.connect()
    if args.watch:
        try:
            return watch(h, args)
        except KeyboardInterrupt:
            return 130
    status = 0
    table, document = [], {}
    for text in args.jobids:
        jobid = JobID(text)
        recs = records(h, jobid, args.timeout)
        if not recs:
            print(f"flux-sdexec: {text}: no usage record (not an sdexec job?)", file=sys.stderr)
            status = 1
            continue
        document[jobid.f58] = {"ranks": recs, "total": total(usagerows.recorded(recs))}
        table += usagerows.rows(jobid.f58, recs)
    if args.output == "json":
        json.dump(document, sys.stdout, indent=2, ensure_ascii=False)
        print()
    elif table:
        print("\n".join(usagerows.lines(table)))
    return status
