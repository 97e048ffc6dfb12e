"""Draw bench.py's summary (``--json``) as one PNG: ours/C per metric, 1.0 = parity.

Usage: python3 bench/chart.py RESULTS.json OUT.png [RESULTS2.json ...] (matplotlib;
several result files are drawn side by side, one bar per run).
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def fair(rows):
    """The rows to draw: module CPU against C's sdexec + sdbus threads together."""
    out, parent = [], None
    for m, c, o, r, better in rows:
        if not m.startswith("  "):
            parent = m
            out.append((m, c, o, r, better))
        elif m.startswith("  C: sdexec + sdbus"):
            out[-1] = (f"{parent} (C: sdexec+sdbus)", c, o, r, better)
    return out


def main(out, paths):
    runs = [fair(json.load(open(p))["summary"]) for p in paths]
    metrics = [m for m, c, o, r, _ in runs[0] if r is not None]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(metrics) + 1.5))
    height = 0.8 / len(runs)
    for i, rows in enumerate(runs):
        ratios = {m: r for m, c, o, r, _ in rows}
        ys = [j + i * height for j in range(len(metrics))]
        ax.barh(ys, [ratios.get(m) or 0 for m in metrics], height, label=f"run {i + 1}")
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks([j + 0.4 - height / 2 for j in range(len(metrics))])
    ax.set_yticklabels(metrics, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ours / C (log scale; see each metric for which side is better)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    main(sys.argv[2], [sys.argv[1], *sys.argv[3:]])
