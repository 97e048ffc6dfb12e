"""Reporting for bench.py: pooling the rounds, the ours/C table, per-round details."""

import fnmatch
import math
import os
import statistics

from procfs import CPU_KEYS


def percentile(values, q):
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def ratio(ours, c):
    if not c:
        return "n/a"
    return f"{ours / c:.2f}"


def aggregate(rounds, args):
    """Pool the rounds of one module: latency samples and cat rates pooled, CPU per unit."""

    def cpu(phase, per):
        return {k: sum(r[phase]["cpu"][k] for r in rounds) / per for k in CPU_KEYS}

    n = len(rounds)
    times = [t for r in rounds for t in r["lat"]["times"]]
    rates = [x for r in rounds for x in r["cat"]["all"]]
    return {
        "lat_median": statistics.median(times),
        "lat_p90": percentile(times, 90),
        "lat_cpu": cpu("lat", n * args.runs),
        "cat_mbs": statistics.median(rates),
        "cat_cpu": cpu("cat", n * args.cat_runs),
        "lat_p50": statistics.median(times),
        "lat_p99": percentile(times, 99),
        "cat_raw_mbs": statistics.median([x for r in rounds for x in r["cat_raw"]["all"]]),
        "conc32": statistics.median([r["conc32"]["wall"] for r in rounds]),
        "conc200": statistics.median([r["conc200"]["wall"] for r in rounds]),
        "rss_mb": max((r["rss_kb"] or 0) for r in rounds) / 1024 or None,
        "job_lat": statistics.median([t for r in rounds for t in r["job_lat"]["times"]]),
        "njob": sum(len(r["job_lat"]["times"]) for r in rounds),
        "jps": statistics.median([r["burst"]["jps"] for r in rounds]),
        "burst_cpu": cpu("burst", n * args.jobs),
        "nlat": len(times),
        "ncat": len(rates),
    }


def table(c, o, args, baseline):
    """The comparison as text: one row per metric, then the rexec reference."""
    rows = [(m, cv, ov, r, b) for m, cv, ov, r, b in summary(c, o, args, text=True)]
    w = max(len(r[0]) for r in rows)
    out = [f"{'metric':<{w}}  {'C':>9}  {'ours':>9}  {'ours/C':>7}  better"]
    out.append("-" * len(out[0]))
    for r in rows:
        out.append(f"{r[0]:<{w}}  {r[1]:>9}  {r[2]:>9}  {r[3]:>7}  {r[4]}")
    out.append("")
    out.append(
        f"reference: flux exec -r 0 true via rexec (no sdexec): median "
        f"{baseline['median'] * 1000:.1f} ms, p90 {baseline['p90'] * 1000:.1f} ms"
    )
    return "\n".join(out)


def summary(c, o, args, text=False):
    """Rows (metric, C, ours, ours/C, better); values formatted when ``text``."""
    rows = []

    def row(metric, cv, ov, fmt, better):
        if text:
            rows.append(
                (metric, fmt.format(cv) if cv else "n/a", fmt.format(ov), ratio(ov, cv), better)
            )
        else:
            rows.append((metric, cv, ov, ov / cv if cv else None, better))

    def cpu_rows(key, what, scale, unit):
        cc, oc = c[key], o[key]
        f = "{:.2f}" if scale == 1 else "{:.1f}"
        row(f"module CPU {unit} {what}", cc["module"] * scale, oc["module"] * scale, f, "lower")
        row(
            "  C: sdexec + sdbus threads",
            (cc["module"] + cc["sdbus"]) * scale,
            oc["module"] * scale,
            f,
            "lower",
        )
        row(
            "  ours + the broker's rexec relay thread",
            (cc["module"] + cc["sdbus"]) * scale,
            (oc["module"] + oc["rexec"]) * scale,
            f,
            "lower",
        )
        row("  broker(s) + module process", cc["server"] * scale, oc["server"] * scale, f, "lower")

    ms = 1000
    row(
        f"launch latency median (ms, n={c['nlat']})",
        c["lat_median"] * ms,
        o["lat_median"] * ms,
        "{:.1f}",
        "lower",
    )
    row("launch latency p90 (ms)", c["lat_p90"] * ms, o["lat_p90"] * ms, "{:.1f}", "lower")
    row("launch latency p99 (ms)", c["lat_p99"] * ms, o["lat_p99"] * ms, "{:.1f}", "lower")
    row("32 concurrent launches, wall (s)", c["conc32"], o["conc32"], "{:.2f}", "lower")
    row("200 concurrent launches, wall (s)", c["conc200"], o["conc200"], "{:.2f}", "lower")
    cpu_rows("lat_cpu", "per launch", ms, "ms")
    mb = os.path.getsize(args.file) / 1e6
    row(
        f"cat {mb:.0f} MB stdout (MB/s, median of {c['ncat']})",
        c["cat_mbs"],
        o["cat_mbs"],
        "{:.2f}",
        "higher",
    )
    cpu_rows("cat_cpu", "per cat run", 1, "s")
    row(
        "cat raw mode (MB/s) vs C's line mode",
        c["cat_mbs"],
        o["cat_raw_mbs"],
        "{:.2f}",
        "higher",
    )
    row("cat raw mode (MB/s), both", c["cat_raw_mbs"], o["cat_raw_mbs"], "{:.2f}", "higher")
    row(
        f"one job launch, flux run true, median (ms, n={c['njob']})",
        c["job_lat"] * ms,
        o["job_lat"] * ms,
        "{:.1f}",
        "lower",
    )
    row(f"burst of {args.jobs} jobs (jobs/s)", c["jps"], o["jps"], "{:.1f}", "higher")
    cpu_rows("burst_cpu", "per job (ranks 0+1)", ms, "ms")
    row("module RSS after the round (MB; C: in the broker)", None, o["rss_mb"], "{:.1f}", "lower")
    return rows


def details(res):
    out = [f"== {res['kind']} (round {res['round']}): {res['path']}"]
    out += [f"   runs in: {d}" for d in res.get("where", [])]
    lat, cat, b = res["lat"], res["cat"], res["burst"]
    out.append(
        f"   latency min/median/p90/max ms: {lat['min'] * 1e3:.1f}/{lat['median'] * 1e3:.1f}/"
        f"{lat['p90'] * 1e3:.1f}/{lat['max'] * 1e3:.1f}"
    )
    verified = {True: "yes", False: "NO", None: "not checked this round"}[cat["verified"]]
    out.append(
        f"   cat MB/s: {', '.join(f'{r:.2f}' for r in cat['all'])}; "
        f"output verified (sha256): {verified}"
    )
    raw, c32, c200 = res["cat_raw"], res["conc32"], res["conc200"]
    out.append(f"   latency p99 ms: {lat['p99'] * 1e3:.1f}; RSS kB: {res.get('rss_kb') or 'n/a'}")
    out.append(f"   cat raw mode MB/s: {', '.join(f'{r:.2f}' for r in raw['all'])}")
    out.append(
        f"   concurrent launches: 32 in {c32['wall']:.2f}s ({c32['failed']} failed), "
        f"200 in {c200['wall']:.2f}s ({c200['failed']} failed)"
    )
    out.append(
        f"   burst: {b['jps']:.1f} jobs/s ({b['elapsed']:.2f}s), flux job wait --all "
        f"rc={b['wait_rc']}, {b['counted']} jobs listed, not COMPLETED/0: {len(b['bad'])}"
    )
    for phase in ("lat", "cat", "burst"):
        cpu = res[phase]["cpu"]
        out.append(f"   CPU s in {phase:5}: " + ", ".join(f"{k} {cpu[k]:.2f}" for k in CPU_KEYS))
    if b["wait_out"]:
        out.append("   job wait said: " + b["wait_out"][:500].replace("\n", "\n      "))
    for r in b["bad"][:5]:
        out.append(f"      bad job: {' '.join(r)}")
    out.append(
        f"   *shell* units of these jobs left: {len(b['shell_units_ours'])}; "
        f"*shell* units in the user manager: {len(b['shell_units_all'])}"
    )
    for u, s in list(b["shell_units_all"].items())[:5]:
        out.append(f"      {u} {s}")
    glob_ = res.get("glob")
    new = res["new_units"]
    if glob_:
        mine = {u: s for u, s in new.items() if fnmatch.fnmatch(u, glob_)}
        out.append(
            f"   units new since load: {len(new)}, of which named like this module's "
            f"({glob_}): {len(mine)}"
        )
        shown = list(mine.items())[:10]
    else:
        out.append(f"   units new since load (any owner): {len(new)}")
        shown = list(new.items())[:10]
    for u, s in shown:
        out.append(f"      {u} {s}")
    if res.get("usage_source"):
        out.append(
            "   usage read from: "
            + ", ".join(f"rank {r} {s}" for r, s in sorted(res["usage_source"].items()))
        )
    out.append(f"   flux dmesg warnings/errors (ranks 0,1): {len(res['dmesg'])}")
    for line in res["dmesg"][:10]:
        out.append(f"      {line}")
    if res.get("profile"):
        out.append("   profile of one extra cat run:")
        out += ["      " + line for line in res["profile"]]
    return "\n".join(out)
