"""Draw bench.py's summaries (``--json``) as one PNG, every metric in one direction.

Usage: python3 bench/chart.py RESULTS.json OUT.png [RESULTS2.json ...] (matplotlib;
several result files are drawn side by side, one bar per run).

Each bar is how many times better ours is than C: C/ours for times and CPU (lower is
better), ours/C for rates (higher is better); bars grow from the parity line at 1, right
where ours is better, left where C is. Each label carries C's figure (its range over the
runs). Where a metric is bound by a floor no module can pass, a dashed mark shows the best
ratio that floor allows (doc/dev/performance.md: the broker's relay of a Python module's
messages, the client's decoding).
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

C_SDBUS = "  C: sdexec + sdbus threads"
RELAY = "  ours + the broker's rexec relay thread"
# doc/dev/performance.md: with a module costing nothing, the broker's relay of a Python
# module's messages (5.9 µs a line) holds line-mode cat near 0.87x C on two cores
RELAY_LINE_MODE = 0.87
# doc/dev/performance.md: flux exec decoded 27 MB of raw output in 0.24 s of user CPU
CLIENT_MB_PER_S = 27 / 0.24

# summary row name -> (label, unit of C's figure); the C/ours direction comes from the row
LABELS = {
    "launch latency median (ms, n=120)": ("launch latency, median", "ms"),
    "launch latency p90 (ms)": ("launch latency, p90", "ms"),
    "launch latency p99 (ms)": ("launch latency, p99", "ms"),
    "32 concurrent launches, wall (s)": ("32 launches at once, wall", "s"),
    "200 concurrent launches, wall (s)": ("200 launches at once, wall", "s"),
    "module CPU ms per launch": ("module CPU per launch", "ms"),
    "module CPU ms per launch +relay": ("module + broker relay CPU per launch", "ms"),
    "cat 20 MB stdout (MB/s, median of 6)": ("cat 20 MB, line mode", "MB/s"),
    "module CPU s per cat run": ("module CPU per line-mode cat", "s"),
    "module CPU s per cat run +relay": ("module + broker relay CPU per cat", "s"),
    "cat raw mode (MB/s) vs C's line mode": ("cat raw mode vs C's line mode", "MB/s"),
    "cat raw mode (MB/s), both": ("cat raw mode, both", "MB/s"),
    "burst of 200 jobs (jobs/s)": ("burst of 200 jobs", "jobs/s"),
    "module CPU ms per job (ranks 0+1)": ("module CPU per job", "ms"),
    "module CPU ms per job (ranks 0+1) +relay": ("module + broker relay CPU per job", "ms"),
}


def rows_of(summary):
    """``{metric: (C, ours, better)}``: module CPU against C's sdexec + sdbus threads
    together, and a ``+relay`` row for ours plus the broker's relay thread."""
    out, parent = {}, None
    for m, c, o, _, better in summary:
        if not m.startswith("  "):
            parent = m
            if c is not None and o is not None:
                out[m] = (c, o, better)
        elif m == C_SDBUS:
            out[parent] = (c, o, better)
        elif m == RELAY:
            out[f"{parent} +relay"] = (c, o, better)
    return out


def gain(c, ours, better):
    """How many times better ours is: C/ours when lower is better, ours/C otherwise."""
    return c / ours if better == "lower" else ours / c


FLOORS = {
    "relay": ("red", "--", "the broker's relay of a Python module's messages"),
    "client": ("purple", ":", "the client's decoding (flux exec)"),
}


def floor(metric, c, ours, rows):
    """(kind, the best gain the floor allows) for ``metric``, or None where none binds."""
    if metric.startswith("cat 20 MB"):
        return "relay", RELAY_LINE_MODE
    if metric.startswith("cat raw mode"):
        return "client", CLIENT_MB_PER_S / c
    if metric == "module CPU s per cat run +relay":
        module = rows["module CPU s per cat run"][1]
        return "relay", c / (ours - module)  # the relay thread's own CPU, a module costing 0
    return None


def main(out, paths):
    runs = [rows_of(json.load(open(p))["summary"]) for p in paths]
    metrics = [m for m in LABELS if m in runs[0]] + [m for m in runs[0] if m not in LABELS]
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(metrics) + 2))
    height = 0.8 / len(runs)
    for i, rows in enumerate(runs):
        ys = [j - 0.4 + height * (i + 0.5) for j in range(len(metrics))]
        gains = [gain(*rows[m]) if m in rows else 1.0 for m in metrics]
        ax.barh(ys, [g - 1 for g in gains], height, left=1, label=f"run {i + 1}")
        for m, y, g in zip(metrics, ys, gains):
            if m not in rows:
                continue
            side = "left" if g >= 1 else "right"
            ax.text(g, y, f" {g:.2f} ", fontsize=6, va="center", ha=side)
            found = floor(m, rows[m][0], rows[m][1], rows)
            if found is not None:
                color, style, _ = FLOORS[found[0]]
                ax.plot(
                    [found[1]] * 2,
                    [y - height / 2, y + height / 2],
                    color=color,
                    linestyle=style,
                    linewidth=2,
                )
    labels = []
    for m in metrics:
        name, unit = LABELS.get(m, (m, ""))
        cs = [r[m][0] for r in runs if m in r]
        low, high = min(cs), max(cs)
        figure = f"{low:.3g}" if f"{low:.3g}" == f"{high:.3g}" else f"{low:.3g}–{high:.3g}"
        labels.append(f"{name}  (C: {figure} {unit})")
    ax.set_yticks(range(len(metrics)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(0.18, 30)
    ax.axvline(1.0, color="black", linewidth=1.5)
    ax.text(1.0, -0.9, " parity", fontsize=8, va="bottom")
    for color, style, what in FLOORS.values():
        ax.plot([], [], color=color, linestyle=style, linewidth=2, label=f"floor: {what}")
    ticks = [0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 10, 20]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel(
        "times better than C (C/ours for times and CPU, ours/C for rates; log scale)\n"
        "← C better | ours better →"
    )
    ax.set_title("flux-sdexec vs flux-core's C sdexec (bench/compare.sh)", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    main(sys.argv[2], [sys.argv[1], *sys.argv[3:]])
