"""What re-expanding [sdexec] allowed-devices costs per sdexec-mapper lookup.

Times MapperService.lookup (default HwlocMapper, this machine's topology, a
1-core R) without allowed-devices, with a typical list, and with a broad one,
against the real /dev. A benchmark, not a test: prints microseconds per lookup.

    python3 bench/mapper_lookup.py [N]
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flux_sdexec.containment.mapper import allowed  # noqa: E402
from flux_sdexec.containment.mapper.mapper_service import MapperService  # noqa: E402
from flux_sdexec.containment.mapper.topology import Topology  # noqa: E402

R = {"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}]}}
CASES = {
    "none": [],
    "typical (3 patterns)": ["/dev/cxi*", "/dev/hsn*", "/dev/fuse rwm"],
    "broad (/dev/tty*, /dev/*)": ["/dev/tty*", "/dev/*"],
}


def per_call(func, n):
    func()
    start = time.perf_counter()
    for _ in range(n):
        func()
    return (time.perf_counter() - start) / n * 1e6


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    xml = Topology().export_xml()
    for name, patterns in CASES.items():
        svc = MapperService(0, {"sdexec": {"allowed-devices": patterns}}, lambda: xml)
        lookup = per_call(lambda: svc.lookup(R), n)
        parsed = allowed.parse(patterns)
        matched = len(allowed.expand(parsed))
        expand = per_call(lambda: allowed.expand(parsed), n)
        print(
            f"{name:28} lookup {lookup:7.1f} us  expand alone {expand:7.1f} us  ({matched} devices)"
        )


if __name__ == "__main__":
    main()
