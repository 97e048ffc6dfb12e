"""``flux sdexec usage JOBID...``: what each rank's job shell used, and the job's total.

A finished job's record is its KVS directory ``sdexec-usage`` (a key per rank), written by
rank 0's sdexec once every rank's record came up the tree (``usage/job_usage.py``), the
same record whose totals are the job's memo (``flux jobs -o '{user.sdexec.cpu}'``). While
some rank has no record there, the job's running ranks are gathered up the tree
(``sdexec.usage-live`` to rank 0): each rank's figures read now, a rank that did not answer
in time marked missing (rank 0 waits ``-t`` less one second, at most the broker's
LIVE_WAIT_MAX_S; each level down LIVE_STEP_S less). ``--watch`` gathers them again every
INTERVAL seconds and shows each rank's CPU% since the last look, until the job's record is
complete or ^C. Exit status 1 if a job has no record.
"""

import argparse
import json
import sys
import time

import flux.idset
import flux.kvs
from flux.job import JobID

from flux_sdexec.cli import ask, usagerows
from flux_sdexec.usage.record import kvs_dir, total
from flux_sdexec.usage.job_usage import LIVE_STEP_S, LIVE_WAIT_MAX_S

# The least -t: the tree then waits 1 s at rank 0, and four levels each wait LIVE_STEP_S less
# than the one above. Below it the levels below rank 0 all get LIVE_STEP_S (the broker's
# floor), so a child's answer comes after its parent's deadline.
MIN_TIMEOUT_S = 1 + 4 * LIVE_STEP_S


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
    ask.add_output_options(sub, timeout_type=seconds)
    sub.set_defaults(func=run)


def seconds(text):
    """``-t``'s seconds (argparse's ``type``: its name is in the error for a non-number),
    refused under MIN_TIMEOUT_S."""
    value = float(text)
    if not value >= MIN_TIMEOUT_S:  # nan too
        raise argparse.ArgumentTypeError(
            f"{text} is too short: at least {MIN_TIMEOUT_S:g} s (the tree below rank 0 waits"
            f" one second less, {LIVE_STEP_S:g} s less at each level down)"
        )
    return value


def live_wait(timeout):
    """What rank 0's ``sdexec.usage-live`` may wait for the tree, the client waiting
    ``timeout``: a second less (for the answer to come back), at most LIVE_WAIT_MAX_S (the
    broker refuses more with EPROTO)."""
    return min(timeout - 1, LIVE_WAIT_MAX_S)


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
    """Job ``jobid``'s records: ``(records, complete)``, the kept ones (complete: every
    rank's is) and, for the other ranks, the live ones gathered up the tree now; none when
    nothing is kept and no rank has a live one (not an sdexec job, or not started)."""
    kept = _kept(h, jobid)
    others = [r for r in _ranks(h, jobid) if r not in kept]
    if others:
        payload = {"jobid": jobid.f58plain, "wait": live_wait(timeout)}
        live = ask.ask_all(h, "sdexec.usage-live", [0], payload, timeout)[0]
        if live.error:
            body = {"missing": {str(r): live.error[1] for r in others}}
        else:
            body = live.payload or {"missing": {str(r): "no answer" for r in others}}
        if not kept and not body.get("rows"):
            return [], False
        for rank in others:
            row = body.get("rows", {}).get(str(rank))
            if row is not None:
                kept[rank] = row
            elif str(rank) in body.get("missing", {}):
                kept[rank] = {"rank": rank, "missing": body["missing"][str(rank)]}
    return list(kept.values()), not others


def watch(h, args):
    """``--watch``: the table again every ``args.interval`` seconds, with CPU%, until every
    job has records and none runs (or ^C). A job without any at the first look: exit 1."""
    jobids = [JobID(text) for text in args.jobids]
    before, then, first = {}, time.monotonic(), True
    while True:
        looks = {j.f58: records(h, j, args.timeout) for j in jobids}
        samples = {f58: recs for f58, (recs, _) in looks.items()}
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
        if all(complete for _, complete in looks.values()):
            return 0
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
        recs, _ = records(h, jobid, args.timeout)
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
