#!/usr/bin/env python3
"""Print bench/fanout.sh's rows (one JSON object per size and run) as a Markdown table.

Usage: python3 bench/fanout_table.py ROWS.jsonl. Per size: the median wall time of each
module in each run (its rounds pooled), ours/C per run, the median module CPU per exec
over all rounds, and the most signals of untracked units any of our modules saw.
"""

import json
import statistics
import sys


def medians(run, kind):
    return statistics.median(t for r in run["rounds"] if r["kind"] == kind for t in r["times"])


def main(path):
    by_size = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            by_size.setdefault(row["size"], []).append(row)
    print(
        "| brokers | C (s), per run | ours (s), per run | ours/C | CPU per exec, C / ours (s)"
        " | untracked signals, max |"
    )
    print("|---|---|---|---|---|---|")
    for size in sorted(by_size):
        runs = by_size[size]
        c = [medians(r, "C") for r in runs]
        ours = [medians(r, "ours") for r in runs]
        cpu = {
            kind: statistics.median(
                x["cpu_per_exec"] for r in runs for x in r["rounds"] if x["kind"] == kind
            )
            for kind in ("C", "ours")
        }
        seen = [v for r in runs for x in r["rounds"] for v in x.get("untracked") or () if v]
        fmt = ", ".join
        print(
            f"| {size} | {fmt(f'{v:.2f}' for v in c)} | {fmt(f'{v:.2f}' for v in ours)}"
            f" | {fmt(f'{o / v:.2f}' for o, v in zip(ours, c))}"
            f" | {cpu['C']:.3f} / {cpu['ours']:.3f} | {max(seen) if seen else '-'} |"
        )


if __name__ == "__main__":
    main(sys.argv[1])
