"""``python3 -m chaos`` with t/ on PYTHONPATH: the outer run (run.py), or with ``--inner``
the run inside the instance (inner.py, which needs flux: only under flux start)."""

import sys

from .run import outer, parse_args

args = parse_args(sys.argv[1:])
if args.inner:
    from . import inner

    sys.exit(inner.main(args))
sys.exit(outer(args))
