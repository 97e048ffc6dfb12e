"""``flux sdexec units``: this instance's processes on each rank, with their job ids.

Asks ``sdexec.units`` of the chosen ranks at once (cli/ask.py); ``--all`` adds the units
of this instance that systemd holds on a rank and its sdexec does not track (leftovers
after an incident). Exit status 1 if a rank gave no answer (said on stderr).
"""

import errno
import json
import sys

from flux.job import JobID

from flux_sdexec.cli import ask, unitrows


def register(subparsers):
    """Add the subcommand's parser."""
    sub = subparsers.add_parser(
        "units",
        help="this instance's sdexec processes per rank (--all: and untracked units)",
        description="List the processes sdexec runs for this instance on each rank: rank, "
        "unit, job id, state, pid, start time, label.",
    )
    sub.add_argument(
        "-r", "--ranks", metavar="IDSET", default="all", help="ranks to ask (default: all)"
    )
    sub.add_argument(
        "-a",
        "--all",
        action="store_true",
        help="also the units of this instance systemd holds that sdexec does not track",
    )
    ask.add_output_options(sub)
    sub.set_defaults(func=run)


def run(args):
    h = ask.connect()
    ranks = ask.instance_ranks(h, args.ranks)
    answers = ask.ask_all(h, "sdexec.units", ranks, {"all": args.all}, args.timeout)
    got = {r: a.payload for r, a in answers.items() if a.payload is not None}
    failed = False
    for rank in ranks:
        a = answers[rank]
        if a.payload is None:
            failed = True
            if a.error is None:
                why = f"no answer within {args.timeout:g}s"
            elif a.error[0] == errno.ENOSYS:
                why = "no sdexec.units here (sdexec unloaded, or not ours)"
            else:
                why = a.error[1]
            print(f"flux-sdexec: rank {rank}: {why}", file=sys.stderr)
    rows = unitrows.rows(got, lambda plain: JobID(plain).f58)
    if args.output == "json":
        json.dump(rows, sys.stdout, indent=2, ensure_ascii=False)
        print()
    else:
        print("\n".join(unitrows.lines(rows)))
    return 1 if failed else 0
