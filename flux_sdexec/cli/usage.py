"""``flux sdexec usage JOBID...``: what each rank's job shell used, and the job's total.

A finished rank's record is the job's KVS key ``sdexec-usage.<rank>``, written by that
rank's sdexec when the shell's unit exited; a rank whose shell still runs is asked
(``sdexec.usage``) and answers with figures read now. Exit status 1 if a job has no record.
"""

import json
import sys

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


def run(args):
    h = ask.connect()
    status = 0
    table, document = [], {}
    for text in args.jobids:
        jobid = JobID(text)
        recs = records(h, jobid, args.timeout)
        if not recs:
            print(f"flux-sdexec: {text}: no usage record (not an sdexec job?)", file=sys.stderr)
            status = 1
            continue
        document[jobid.f58] = {"ranks": recs, "total": total(recs)}
        table += usagerows.rows(jobid.f58, recs)
    if args.output == "json":
        json.dump(document, sys.stdout, indent=2, ensure_ascii=False)
        print()
    elif table:
        print("\n".join(usagerows.lines(table)))
    return status
