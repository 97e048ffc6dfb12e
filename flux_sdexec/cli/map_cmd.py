"""``flux sdexec map``: ``python3 -m flux_sdexec.map`` as a subcommand (its options, its code)."""

from flux_sdexec.containment.mapper import command as mapcli


def register(subparsers):
    """Add the subcommand's parser."""
    sub = subparsers.add_parser(
        "map", help="the systemd properties a mapper gives for resource ids (no broker needed)"
    )
    sub.description = mapcli.DESCRIPTION
    mapcli.add_arguments(sub)
    sub.set_defaults(func=lambda args: mapcli.run(args))
