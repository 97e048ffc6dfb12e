"""Per-unit cost of the usage read at a unit's exit: ``Accounting._record`` (the cgroup
files of one accounting slice, and the kernel log on v1) on this machine's layout, timed
over the parent slice sdexec's units share (the same files as a unit's own slice).

    python3 bench/usage_read.py [N]      (after any sdexec job made app-sdexec.slice)
"""

import logging
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flux_sdexec.usage.accounting import Accounting  # noqa: E402
from flux_sdexec.config import Settings  # noqa: E402
from flux_sdexec.core.registry import Registry  # noqa: E402


def main(n=2000):
    log = logging.getLogger("bench")
    acc = Accounting(log, 0, "bench", Settings(), Registry(), None, set(), None)
    acc.parent = "/app.slice"
    name = "app-sdexec.slice"
    unit = types.SimpleNamespace(name="sdexec.service", finished=True, result=None, wait_status=0)
    p = types.SimpleNamespace(unit=unit, cmd=types.SimpleNamespace(opts={}), started_at=time.time())
    rec = acc._record(p, name).to_json()
    start = time.perf_counter()
    for _ in range(n):
        acc._record(p, name)
    per = (time.perf_counter() - start) / n * 1e6
    print(f"layout {acc.layout}: {per:.0f} us per read ({n} reads); record: {rec}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
