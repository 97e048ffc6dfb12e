"""A job's usage rows brought to rank 0 two ways, at 64 brokers: our gather, or every rank
committing its own row (the KVS merges concurrent commits). Run by bench/gather_vs_commits.sh
as the initial program of ``flux start --test-size=64`` with our sdexec loaded by rc1.

    flux python bench/gather_vs_commits.py --conf-dir DIR [--reps 3] [--out FILE] [--lost]

Each repetition runs one ``-N64 -n64 true`` job in each mode, the order rotated:

- ``none``: ``[sdexec] usage = "none"``, nothing written (what the job itself costs);
- ``gather``: ``usage = "jobs"`` (the default), our ``sdexec.usage-gather`` up the tree and
  rank 0's one commit and memo;
- ``commits``: ``usage = "none"``, then the event ``gatherbench.write`` once the job is
  clean, and every rank's bench/gatherbench.py commits its row itself.

Around each job (from just before the submit to 2 s after the job is clean, or after the
event): rank 0's CPU (schedstat: the broker process, our sdexec process, gatherbench's),
with ``--traced-reps`` the messages crossing its overlay (``flux overlay trace``, in
repetitions of their own: the tracer costs CPU), its KVS's transactions and root versions
(``kvs.stats-get``), and the time from the last row ready (a rank's ``usage {`` debug
line, or its event) to the complete record (the memo of 64 ranks, or the last commit
answered). ``--lost`` then tries a rank that never writes: in ``commits`` mode rank 63
skips its write; in ``gather`` mode rank 63's broker is killed under a running job.
A JSON line per job goes to ``--out``; a table of medians to stdout.
"""

import argparse
import datetime
import errno
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import flux
import flux.constants
import flux.kvs
from flux.job import JobID

sys.path.insert(0, str(Path(__file__).resolve().parent))

from flux_cmd import log, rank_attrs, run  # noqa: E402
from procfs import cpu_seconds, module_children, proc_cmdline  # noqa: E402

HERE = Path(__file__).resolve().parent
LOST_POLLS = 240  # a lost rank's record looked for every 0.25 s, so for 60 s at most
SETTLE_S = 2.0  # after the job is clean (or the event): what comes late is counted too
ROW = {  # a row as our sdexec writes it (placed: rank, host, unit), figures made up
    "cpu_user_s": 0.041,
    "cpu_sys_s": 0.012,
    "memory_peak": 4530176,
    "tasks_peak": 3,
    "oom_kills": 0,
    "wall_s": 0.112,
    "result": "success",
    "status": 0,
    "host": "vm",
    "unit": "shell-0-fBENCH:tbench.service",
}
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z")


def epoch(iso):
    t = datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ")
    return t.replace(tzinfo=datetime.timezone.utc).timestamp()


class RankZero:
    """Counters of rank 0: its processes' CPU, its broker's messages, its KVS."""

    def __init__(self, h, broker_pid):
        self.h = h
        self.paths = {"broker": f"/proc/{broker_pid}"}
        for pid in module_children(broker_pid, "flux-module-"):
            args = " ".join(proc_cmdline(pid))
            for name in ("sdexec.py", "gatherbench.py"):
                if name in args:
                    self.paths[name.split(".")[0]] = f"/proc/{pid}"

    def read(self):
        out = {f"cpu_{k}": cpu_seconds(p) for k, p in self.paths.items()}
        kvs = self.h.rpc("kvs.stats-get", {}, nodeid=0).get()
        out["kvs_txns"] = kvs.get("transaction-opcount", {}).get("commit", {}).get("count", 0)
        out["kvs_roots"] = kvs["namespace"]["primary"]["store revision"]
        gather = self.h.rpc("sdexec.stats-get", {}, nodeid=0).get().get("usage-gather", {})
        out["gather_in"] = gather.get("messages-in", 0)
        return out


class OverlayTrace:
    """``flux overlay trace`` at rank 0 while it runs: the messages crossing its overlay
    (an event sent to every child is one line)."""

    LINE = re.compile(r" (rx|tx) \S+ ([<>e]) (\S+) ")

    def __init__(self):
        self.out = tempfile.TemporaryFile("w+")
        args = ["flux", "overlay", "trace", "--color=never"]
        self.p = subprocess.Popen(args, stdout=self.out)
        time.sleep(0.5)

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=30)
        self.out.seek(0)
        text = self.out.read()
        self.out.close()
        counts = {"ov_rx": 0, "ov_tx": 0, "ov_events": 0}
        topics = {}
        for found in map(self.LINE.search, text.splitlines()):
            if found:
                way, kind, topic = found.groups()
                counts[f"ov_{way}"] += 1
                counts["ov_events"] += kind == "e"
                topics[topic] = topics.get(topic, 0) + 1
        counts["ov_gather"] = topics.get("sdexec.usage-gather", 0)
        counts["ov_relaycommit"] = topics.get("kvs.relaycommit", 0)
        counts["ov_setroot"] = topics.get("kvs.namespace-primary-setroot", 0)
        return counts


def delta(before, after):
    return {k: round(after[k] - before[k], 4) for k in before}


def set_usage(h, conf_dir, scope, size):
    """``[sdexec] usage = scope`` on every rank (a config reload, checked on the last)."""
    (Path(conf_dir) / "zz-usage.toml").write_text(f'[sdexec]\nusage = "{scope}"\n')
    run(["flux", "config", "reload"])
    for _ in range(100):
        conf = h.rpc("config.get", {}, nodeid=size - 1).get()
        if conf.get("sdexec", {}).get("usage") == scope:
            time.sleep(0.5)  # the last rank's modules are told after its broker
            return
        time.sleep(0.1)
    raise RuntimeError(f"rank {size - 1} did not take usage = {scope}")


def submit(size, command=("true",)):
    out = run(["flux", "submit", f"-N{size}", f"-n{size}", *command]).stdout.strip()
    return JobID(out)


def wait_event(jobid, name, timeout=120, path=None):
    args = ["flux", "job", "wait-event", "-t", str(timeout)]
    if path:
        args += ["-p", path]
    run(args + [str(jobid), name], timeout=timeout + 10)


def eventlog(jobid):
    out = run(["flux", "job", "eventlog", "-f", "json", str(jobid)]).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def full_memo_time(events, size):
    for e in events:
        if e["name"] == "memo" and e.get("context", {}).get("sdexec", {}).get("ranks") == size:
            return e["timestamp"]
    return None


def event_time(events, name):
    return next((e["timestamp"] for e in events if e["name"] == name), None)


def rows_in_kvs(h, jobid):
    """(rows written, ranks marked missing) of the job's record."""
    try:
        d = flux.kvs.get_dir(h, f"job.{jobid.dothex}.sdexec-usage")
    except FileNotFoundError:
        return 0, 0
    rows = [d[k] for k in d.keys()]
    return len(rows), sum(1 for r in rows if isinstance(r, dict) and "missing" in r)


def dmesg(h, rank):
    """Rank ``rank``'s log ring buffer, a line each."""
    f = h.rpc(
        "log.dmesg",
        {"follow": False, "nobacklog": False},
        nodeid=rank,
        flags=flux.constants.FLUX_RPC_STREAMING,
    )
    lines = []
    while True:
        try:
            lines.append(f.get_str())
        except OSError as exc:
            if exc.errno == errno.ENODATA:
                return lines
            raise
        f.reset()


def rows_ready(h, jobid, ranks):
    """When each rank's sdexec read the job's exited shell (its ``usage {`` debug line)."""
    needle = re.compile(rf"shell-\d+-{jobid.f58plain}\.service: usage \{{")
    times = []
    for rank in ranks:
        for line in dmesg(h, rank):
            if needle.search(line):
                times.append(epoch(ISO.search(line).group(0)))
    return times


def unit_instance(h):
    """The instance part of our units' names, as rank 0's sdexec logged it at load."""
    for line in dmesg(h, 0):
        found = re.search(r"units named <label>:(\S+)\.service", line)
        if found:
            return found.group(1)
    raise RuntimeError("sdexec logged no unit names at load")


def one_job(h, zero, mode, size, conf_dir, trace=False):
    set_usage(h, conf_dir, "jobs" if mode == "gather" else "none", size)
    tracer = OverlayTrace() if trace else None
    before = zero.read()
    jobid = submit(size)
    wait_event(jobid, "clean")
    if mode == "commits":
        h.event_send("gatherbench.write", {"jobid": int(jobid), "row": ROW, "skip": []})
    time.sleep(SETTLE_S)
    res = {"mode": mode, "jobid": jobid.f58, **delta(before, zero.read())}
    if tracer:
        res.update(tracer.stop(), traced=True)
    res["rows"], res["marked"] = rows_in_kvs(h, jobid)
    events = eventlog(jobid)
    if mode == "gather":
        ready = rows_ready(h, jobid, range(size))
        memo = full_memo_time(events, size)
        res["ready"] = len(ready)
        if ready and memo:
            res["ms_to_record"] = round((memo - max(ready)) * 1e3, 1)
            res["ms_to_finish"] = round((event_time(events, "finish") - max(ready)) * 1e3, 1)
    elif mode == "commits":
        times = [
            h.rpc("gatherbench.times", {"jobid": int(jobid)}, nodeid=r).get() for r in range(size)
        ]
        answered = [t["answered"] for t in times if "answered" in t]
        res["ready"] = len(times)
        res["errors"] = [t["error"] for t in times if "error" in t]
        if len(answered) == size:
            res["ms_to_record"] = round((max(answered) - max(t["event"] for t in times)) * 1e3, 1)
    res["ms_clean"] = round((event_time(events, "clean") - event_time(events, "submit")) * 1e3)
    return res


def lost_commits(h, size, conf_dir, broker_pids):
    """Rank 63 never writes: what the record holds 10 s on, and who knows."""
    set_usage(h, conf_dir, "none", size)
    jobid = submit(size)
    wait_event(jobid, "clean")
    h.event_send("gatherbench.write", {"jobid": int(jobid), "row": ROW, "skip": [size - 1]})
    time.sleep(10)
    rows, marked = rows_in_kvs(h, jobid)
    # unloaded before the broker kill: a Python module fails at shutdown if left loaded
    run(["flux", "exec", "-r", "all", "flux", "module", "remove", "gatherbench"], 300)
    return {"mode": "commits-lost", "jobid": jobid.f58, "rows": rows, "marked": marked}


def lost_gather(h, size, conf_dir, broker_pids):
    """Rank 63's broker killed under a running job: when the record comes, what it holds."""
    set_usage(h, conf_dir, "jobs", size)
    jobid = submit(size, ("sleep", "300"))
    wait_event(jobid, "shell.start", path="exec")
    time.sleep(1)
    killed = time.time()
    os.kill(broker_pids[size - 1], signal.SIGKILL)
    log(f"killed rank {size - 1}'s broker (pid {broker_pids[size - 1]})")
    wait_event(jobid, "clean", timeout=300)
    rows = marked = 0
    for _ in range(LOST_POLLS):  # the record may come after the job ended
        rows, marked = rows_in_kvs(h, jobid)
        if rows == size:
            break
        time.sleep(0.25)
    complete = time.time()
    events = eventlog(jobid)
    memos = [e for e in events if e["name"] == "memo" and "sdexec" in e.get("context", {})]
    last = memos[-1]["context"]["sdexec"] if memos else {}
    exc = next((e for e in events if e["name"] == "exception"), None)
    return {
        "mode": "gather-lost",
        "jobid": jobid.f58,
        "rows": rows,
        "marked": marked,
        "memo_ranks": last.get("ranks"),
        "memo_missing": last.get("missing"),
        "s_kill_to_exception": exc and round(exc["timestamp"] - killed, 2),
        "exception": exc and exc["context"].get("note"),
        "s_kill_to_memo": memos and round(memos[-1]["timestamp"] - killed, 2),
        "s_kill_to_clean": round(event_time(events, "clean") - killed, 2),
        "s_kill_to_record": round(complete - killed, 2) if rows == size else None,
    }


TABLE = (
    ("cpu_broker", "rank 0 broker CPU s", 3),
    ("cpu_sdexec", "rank 0 sdexec CPU s", 3),
    ("cpu_gatherbench", "rank 0 gatherbench CPU s", 3),
    ("ov_rx", "rank 0 overlay msgs rx (traced)", 0),
    ("ov_tx", "rank 0 overlay msgs tx (traced)", 0),
    ("ov_gather", "  of which sdexec.usage-gather (traced)", 0),
    ("ov_relaycommit", "  of which kvs.relaycommit (traced)", 0),
    ("ov_setroot", "  of which kvs setroot events (traced)", 0),
    ("kvs_txns", "rank 0 KVS transactions", 0),
    ("kvs_roots", "rank 0 KVS root versions", 0),
    ("gather_in", "rank 0 usage-gather msgs in", 0),
    ("rows", "rows in the KVS", 0),
    ("ms_to_record", "last row ready to complete record, ms", 1),
    ("ms_clean", "submit to clean, ms", 0),
)


def table(results):
    modes = ["none", "gather", "commits"]
    lines = ["| figure (median) | " + " | ".join(modes) + " |", "|---" * 4 + "|"]
    for key, label, digits in TABLE:
        cells = []
        for mode in modes:
            # CPU and times from the runs without a trace (the tracer costs rank 0 CPU)
            runs = [r for r in results if r["mode"] == mode]
            if key.startswith(("cpu_", "ms_")):
                runs = [r for r in runs if not r.get("traced")]
            vals = [r[key] for r in runs if r.get(key) is not None]
            cells.append(f"{statistics.median(vals):.{digits}f} (n={len(vals)})" if vals else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conf-dir", required=True, help="the instance's --config-path")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="/dev/null")
    ap.add_argument("--lost", action="store_true")
    ap.add_argument("--traced-reps", type=int, default=0, help="more, overlay traced")
    ap.add_argument("--instance-file", help="where to write the units' instance part")
    args = ap.parse_args()
    h = flux.Flux()
    size = int(h.attr_get("size"))
    brokers = {r: a[1] for r, a in rank_attrs(size).items()}
    if args.instance_file:
        Path(args.instance_file).write_text(unit_instance(h) + "\n")
    run(["flux", "exec", "-r", "all", "flux", "module", "load", str(HERE / "gatherbench.py")], 300)
    zero = RankZero(h, brokers[0])
    log(f"rank 0 processes measured: {zero.paths}")
    results = []
    with open(args.out, "a") as out:
        for mode in ("gather", "commits"):  # warm-up: R, topology, first commits
            log(f"warm-up {mode}: {one_job(h, zero, mode, size, args.conf_dir)}")
        modes = ["none", "gather", "commits"]
        for rep in range(args.reps + args.traced_reps):
            traced = rep >= args.reps
            for mode in modes[rep % 3 :] + modes[: rep % 3]:
                res = dict(one_job(h, zero, mode, size, args.conf_dir, traced), rep=rep)
                log(json.dumps(res))
                out.write(json.dumps(res) + "\n")
                results.append(res)
        print(table(results), flush=True)
        if not args.lost:
            run(["flux", "exec", "-r", "all", "flux", "module", "remove", "gatherbench"], 300)
        if args.lost:
            for lost in (lost_commits, lost_gather):
                res = lost(h, size, args.conf_dir, brokers)
                log(json.dumps(res))
                out.write(json.dumps(res) + "\n")
                print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
