"""``flux sdexec status``: placeholder until its issue lands (replace this whole file)."""


def register(subparsers):
    """Add the subcommand's parser."""
    sub = subparsers.add_parser("status", help="(not yet written)")
    sub.set_defaults(func=lambda args: 2)
