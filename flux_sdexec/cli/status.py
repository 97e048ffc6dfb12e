"""``flux sdexec status``: the sdexec module of every rank in one table, alike ranks folded.

Asks every rank's ``sdexec.stats-get`` at once (cli/ask.py) and prints cli/report.py's
table; ``-o json`` prints every rank's record and the groups instead. Exit status 1
when some rank is unhealthy (no answer, sdexec unloaded or not ours, a constraint not
enforced under ``enforce``), 0 otherwise.
"""

import json
import sys

from flux_sdexec.cli import ask, report


def register(subparsers):
    """Add the subcommand's parser."""
    sub = subparsers.add_parser(
        "status",
        help="the sdexec module of every rank, alike ranks folded into one row",
        description="Show the sdexec module of every rank in one table; ranks that look "
        "alike share a row (process counts are summed). Exit status 1 if a rank is unhealthy.",
    )
    ask.add_output_options(sub)
    sub.set_defaults(func=run)


def records(h, timeout):
    """Every rank's ``report.judge`` record, asked all at once."""
    ranks = ask.instance_ranks(h)
    hosts = ask.hostnames(h)
    answers = ask.ask_all(h, "sdexec.stats-get", ranks, timeout=timeout)
    out = []
    for rank in ranks:
        a = answers[rank]
        host = hosts[rank] if rank < len(hosts) else None
        out.append(report.judge(rank, host, a.payload, a.error, timeout))
    return out


def run(args):
    h = ask.connect()
    recs = records(h, args.timeout)
    groups = report.fold(recs)
    healthy = all(r["healthy"] for r in recs)
    if args.output == "json":
        json.dump({"healthy": healthy, "ranks": recs, "groups": groups}, sys.stdout, indent=2)
        print()
    else:
        print("\n".join(report.lines(groups, ask.compress)))
    return 0 if healthy else 1
