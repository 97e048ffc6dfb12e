"""The 200-job burst with flux-core's C sdexec and two of ours (e.g. before and after a
change) in one instance, rounds in ABBA order: what a change costs a burst, beside C.

    flux start --test-size=2 -c CONF flux python bench/usage_burst.py C=PATH before=PATH \\
        after=PATH [--jobs 200] [--rounds 2]

CONF must set ``[exec] service = "sdexec"`` and load no sdexec (systemd.enable off, as
bench/compare.sh renders it). Prints jobs/s per module and round, and the ratios to C.
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from flux_cmd import RANK_URI, load_module, rank_attrs, run, unload_module  # noqa: E402
from measure import measure_burst  # noqa: E402
from procfs import BenchError  # noqa: E402


class NoTasks:
    def read(self):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("modules", nargs="+", help="NAME=PATH; the one named C is flux-core's")
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    modules = [m.split("=", 1) for m in args.modules]
    attrs = rank_attrs(int(run(["flux", "getattr", "size"]).stdout))
    RANK_URI.update({r: a[0] for r, a in attrs.items()})
    ranks = sorted(attrs)
    jps = {name: [] for name, _ in modules}
    for round_no in range(args.rounds):
        order = modules if round_no % 2 == 0 else list(reversed(modules))
        for name, path in order:
            kind = "C" if name == "C" else "ours"
            load_module(kind, path, ranks)
            try:
                res = measure_burst(NoTasks(), args.jobs, 300)
            finally:
                unload_module(kind, ranks)
            if res["bad"] or res["wait_rc"]:
                raise BenchError(f"{name}: {res['bad'][:3]} wait rc {res['wait_rc']}")
            jps[name].append(res["jps"])
            print(f"round {round_no + 1} {name}: {res['jps']:.1f} jobs/s", flush=True)
    c = statistics.median(jps["C"]) if "C" in jps else None
    for name, values in jps.items():
        med = statistics.median(values)
        ratio = f", {med / c:.2f}x C" if c else ""
        print(f"{name}: median {med:.1f} jobs/s over {len(values)} rounds{ratio}")


if __name__ == "__main__":
    main()
