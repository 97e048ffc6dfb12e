"""``flux sdexec upgrade``: reload sdexec on every rank under running jobs, safely.

Stop scheduling, wait until no bgexec job is in its startup window (RFC 50
``recoverable``), remove job-exec, reload sdexec on every rank, check what each rank
runs, load job-exec, start the queues again. Jobs whose shells would end with job-exec
(bulk-exec) make it refuse, changing nothing, unless ``--force``. However the run ends
after the first change (a failed step, Ctrl-C, SIGTERM or SIGHUP, an unexpected error),
service comes back (sdexec and job-exec loaded, queues started) and the command says what
went wrong. The steps are in upgrade_steps.py, the decisions in upgrade_plan.py.
"""

import signal

import flux

from flux_sdexec.cli.upgrade_broker import Broker, Failure, Interrupted, error, say
from flux_sdexec.cli.upgrade_steps import Upgrade


def register(subparsers):
    """Add the subcommand's parser."""
    sub = subparsers.add_parser(
        "upgrade",
        help="reload sdexec on every rank under running jobs",
        description="Reload sdexec on every rank while jobs run: stop scheduling, wait for "
        "jobs in their startup window, remove job-exec, reload sdexec, check every rank, "
        "load job-exec, start scheduling again.",
    )
    sub.add_argument(
        "--module",
        metavar="PATH",
        help="the sdexec module file to load (default: the file the running one came from)",
    )
    sub.add_argument(
        "--force",
        action="store_true",
        help="go on even though running jobs (bulk-exec) would end, and say which",
    )
    sub.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="bound of every wait, and of the whole wait for startup windows (default 120)",
    )
    sub.set_defaults(func=main)


def main(args):
    """Run the upgrade; on any end but success, restore service. Exit status: 0, 1 for a
    failure, 128 + the signal's number when interrupted."""
    broker = Broker(flux.Flux(), args.timeout)
    broker.catch_signals()
    up = Upgrade(broker, int(broker.h.attr_get("size")))
    try:
        report = up.run(args.module, args.force)
    except BaseException as exc:  # every way out restores service
        error(describe(exc))
        try:
            problems = up.restore()
        except Exception as bug:  # say so, rather than a traceback instead of the rest
            problems = [f"internal error: {bug!r}"]
        for problem in problems:
            error(f"restoring: {problem}")
        if isinstance(exc, Interrupted):
            return 128 + exc.signum
        if isinstance(exc, KeyboardInterrupt):
            return 128 + signal.SIGINT
        return 1
    for line in report.lines():
        say(line)
    return 0


def describe(exc):
    """What went wrong, in one line."""
    if isinstance(exc, Failure):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return str(Interrupted(signal.SIGINT))
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}"
    return f"internal error: {exc!r}"
