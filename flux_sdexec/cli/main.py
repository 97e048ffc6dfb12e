"""Entry point of ``flux sdexec``: one argparse subcommand per module of this package.

Each module in SUBCOMMANDS has ``register(subparsers)``, which adds its parser and sets
``func(args) -> exit status`` as the parser's default.
"""

import argparse
import sys

from flux_sdexec.cli import map_cmd, status, units, upgrade, usage

SUBCOMMANDS = (status, units, usage, map_cmd, upgrade)


def parser():
    """The whole command line of ``flux sdexec``."""
    top = argparse.ArgumentParser(
        prog="flux sdexec", description="See and manage the sdexec service on every rank."
    )
    subparsers = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for subcommand in SUBCOMMANDS:
        subcommand.register(subparsers)
    return top


def main(argv=None):
    """Run one subcommand; its exit status is ours (1, said on stderr, if it raised
    OSError or ValueError: no instance to talk to, a bad idset)."""
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (OSError, ValueError) as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"flux-sdexec {args.command}: {text}", file=sys.stderr)
        return 1
