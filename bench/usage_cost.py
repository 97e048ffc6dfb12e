"""What a job's usage costs each process, per job: the brokers by rank, our module's
process on each rank, the systemd user manager and the session bus daemon, for modules
(e.g. before and after a change) with ``[sdexec] usage`` on (jobs) and off (none), in one
instance, the variants in ABBA order round after round.

    flux start --test-size=2 -c CONF flux python bench/usage_cost.py --conf-dir CONF \\
        before=PATH after=PATH [--jobs 200] [--warmup 20] [--rounds 2] [--json F.jsonl]

CONF must set ``[exec] service = "sdexec"`` and load no sdexec; its ``sdexec.toml`` is
rewritten before each variant (``flux config reload``). CPU is each process's schedstat
run time (ns) read before and after a burst of ``--jobs`` ``true`` jobs; every process is
found by pid (the manager's and the bus's asked of the bus). Prints ms per job per process
(median over rounds) and jobs/s; ``--json`` appends one line per burst.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "t"))

from flux_cmd import instance_brokers, load_module, log, run, unload_module  # noqa: E402
from measure import measure_burst  # noqa: E402
from procfs import BenchError, cpu_seconds, host_note, locate  # noqa: E402

from chaos.procs import bus_pid, manager_pid  # noqa: E402

USAGES = ("jobs", "none")


class Processes:
    """The processes a burst is charged to: {label: /proc path}."""

    def __init__(self, brokers, module_path):
        self.paths = {f"broker {r}": f"/proc/{pid}" for r, pid in brokers.items()}
        for rank, tasks in locate("ours", module_path, brokers).items():
            self.paths[f"module {rank}"] = tasks.module[0]
        for label, pid in (("user manager", manager_pid()), ("bus daemon", bus_pid())):
            if pid is None:
                raise BenchError(f"the session bus did not say the {label}'s pid")
            self.paths[label] = f"/proc/{pid}"

    def read(self):
        return {label: cpu_seconds(path) for label, path in self.paths.items()}


def set_usage(conf_dir, usage):
    with open(os.path.join(conf_dir, "sdexec.toml"), "w") as f:
        f.write(f'[sdexec]\nusage = "{usage}"\n')
    run(["flux", "config", "reload"], timeout=30)


def burst(name, path, usage, brokers, args):
    """One variant: loaded, warmed up, a burst measured, unloaded."""
    ranks = sorted(brokers)
    set_usage(args.conf_dir, usage)
    load_module("ours", path, ranks)
    try:
        procs = Processes(brokers, path)
        measure_burst(NoTasks(), args.warmup, 300)
        before = procs.read()
        res = measure_burst(NoTasks(), args.jobs, 300)
        after = procs.read()
    finally:
        unload_module("ours", ranks)
    if res["bad"] or res["wait_rc"]:
        raise BenchError(f"{name}/{usage}: {res['bad'][:3]} wait rc {res['wait_rc']}")
    ms = {k: (after[k] - before[k]) * 1e3 / args.jobs for k in before}
    return {"module": name, "usage": usage, "jps": res["jps"], "ms_per_job": ms}


class NoTasks:
    def read(self):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("modules", nargs="+", help="NAME=PATH of our module")
    ap.add_argument("--conf-dir", required=True)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="append one JSON line per burst")
    args = ap.parse_args()
    variants = [(n, p, u) for n, p in (m.split("=", 1) for m in args.modules) for u in USAGES]
    brokers = instance_brokers()
    log(host_note())
    results = []
    for round_no in range(args.rounds):
        order = variants if round_no % 2 == 0 else list(reversed(variants))
        for name, path, usage in order:
            res = burst(name, path, usage, brokers, args)
            res.update(round=round_no + 1, time=time.strftime("%Y-%m-%dT%H:%M:%S"))
            res["loadavg"] = open("/proc/loadavg").read().split()[:3]
            results.append(res)
            total = sum(res["ms_per_job"].values())
            log(
                f"round {round_no + 1} {name} usage={usage}: {res['jps']:.1f} jobs/s, "
                f"{total:.2f} ms/job"
            )
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(res) + "\n")
    print_table(results, variants)


def print_table(results, variants):
    """Median ms per job per process, and jobs/s, of each variant."""
    cols = [(n, u) for n, _, u in variants]
    labels = list(results[0]["ms_per_job"])
    med = {}
    for col in cols:
        mine = [r for r in results if (r["module"], r["usage"]) == col]
        med[col] = {k: statistics.median(r["ms_per_job"][k] for r in mine) for k in labels}
        med[col]["jobs/s"] = statistics.median(r["jps"] for r in mine)
        med[col]["total"] = sum(med[col][k] for k in labels)
    print("| process | " + " | ".join(f"{n} usage={u}" for n, u in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for k in [*labels, "total", "jobs/s"]:
        print(f"| {k} | " + " | ".join(f"{med[c][k]:.2f}" for c in cols) + " |")


if __name__ == "__main__":
    try:
        main()
    except (BenchError, subprocess.SubprocessError) as exc:
        log(f"error: {exc}")
        sys.exit(2)
