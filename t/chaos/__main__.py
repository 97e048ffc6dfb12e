"""``python3 -m chaos`` with t/ on PYTHONPATH: see run.py."""

import sys

from .run import main

sys.exit(main())
