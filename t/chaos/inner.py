"""The chaos run inside the instance (``flux python -m chaos --inner``, started by run.py).

Jobs are fed on the reactor (jobs.Feeder), faults injected in a thread (faults.Injector), the
module processes' RSS sampled on a timer. When the chaos time is up, no new job or fault is
started; every job then has ``--settle`` seconds to become inactive. Then the end checks:
jobs still active (their eventlogs printed, then cancelled), units of the instance left,
sdexec answering on every rank; the result goes to ``<workdir>/result.json``.
"""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import flux

from . import nodesrun, procs, schedule, verdict
from .drains import DrainKeeper
from .faults import Injector
from .jobs import GUESTS, Feeder
from .run import module_file, say, unit_globs, units_left

TICK = 0.5  # seconds between the reactor's checks of the clock (and RSS samples)
DRAIN_TICK = 3.0  # seconds between looks for drained ranks
CMD_TIMEOUT = 60  # seconds a flux command of the end checks may take
RSS_WARMUP = 5  # seconds a module process runs before its RSS baseline is taken
LOG_LINES = 40  # broker log lines printed per lost job, at most


def main(args):
    workdir = Path(args.workdir)
    h = flux.Flux()
    size = int(h.attr_get("size"))
    brokers = {r: int(_attr(h, "broker.pid", r)) for r in range(size)}
    instance, glob = _logged_instance()
    result = {
        "seed": args.seed,
        "duration": args.duration,
        "instance": instance,
        "globs": unit_globs(instance, glob, args.nodes and "bulk-exec" in args.methods),
        "rss_growth_kb": verdict.RSS_GROWTH_KB,
        "harness_errors": [],
    }
    nodes = nodesrun.NodeRun(args, say) if args.nodes else None
    drains = nodes.drain_keeper if nodes else DrainKeeper(say)
    module = str(module_file(args.checkout))
    say(f"chaos: brokers {brokers}, module {module}, units {' '.join(result['globs'])}")
    # about one fault per second at most: enough for the whole duration
    plan = schedule.fault_schedule(
        args.seed, int(args.duration) + 2, args.kinds, args.long_stall, ranks=size
    )
    if nodes:
        injector = nodes.injector(plan, brokers, module, args.checkout)
    else:
        injector = Injector(plan, brokers, module, args.checkout, say)
    feeder = Feeder(h, schedule.job_mix(args.seed, size if nodes else 2), args.inflight)
    rss = {}
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if nodes:
            nodes.start(feeder)
        _run(h, args, feeder, injector, (brokers, module), rss, None if nodes else drains)
    finally:
        if not injector.stop(timeout=360):
            result["harness_errors"].append("a fault was still running 360s after the end")
        if nodes:
            nodes.stop()
    result["faults"] = injector.counts
    result["skip_reasons"] = injector.skip_reasons
    result["fault_failures"] = injector.failures
    result["fault_log"] = injector.fault_log
    result["rss"] = {n: [first, peak] for n, (_, first, peak) in rss.items() if first is not None}
    _refetch_unfinished(feeder)
    _fetch_exec_eventlogs(feeder.jobs)
    _print_unfinished(feeder)
    if nodes:
        result["units_left"] = nodes.units_left(result["globs"])
        result["guest_procs_left"] = nodes.guest_procs_left(GUESTS)
        result["hostnames"] = nodes.hostnames()
        nodes.add_ranks([j for j in feeder.jobs if verdict.job_problems(j)])
    else:
        result["units_left"] = units_left(result["globs"])
    drains.round()  # the last ones, so that no rank stays drained
    result["drains"] = drains.drains
    result["answers"] = {str(r): _answers(r) for r in range(size)}
    result["jobs"] = feeder.jobs
    lost = verdict.judge(result)[0]
    if result["units_left"] or lost:
        logs = _save_dmesg(workdir, size)
        if nodes:
            nodes.print_left(result["units_left"])
        else:
            _print_left(result["units_left"], logs)
        _print_lost(feeder.jobs, lost, logs)
        say(f"chaos: broker logs in {workdir}/dmesg.<rank> and {workdir}/broker.log")
    (workdir / "result.json").write_text(json.dumps(result))
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _attr(h, name, rank):
    return h.rpc("attr.get", {"name": name}, nodeid=rank).get()["value"]


def _logged_instance():
    """The instance part and the unit glob our sdexec logged at load (rank 0's dmesg)."""
    out = subprocess.run(["flux", "dmesg"], capture_output=True, text=True, timeout=CMD_TIMEOUT)
    found = re.findall(r"units named <label>:(\S+)\.service \(glob (\S+)\)", out.stdout)
    if not found:
        raise RuntimeError("sdexec did not log its unit names at load (is it our module?)")
    return found[-1]


def _run(h, args, feeder, injector, modules, rss, drains):
    """Feed jobs and inject faults for ``args.duration`` s, then let the jobs settle; every
    DRAIN_TICK s, ``drains`` (a DrainKeeper, or None when another thread keeps them) undrains."""
    t0 = time.monotonic()
    next_drain_round = t0 + DRAIN_TICK
    chaos_end = t0 + args.duration
    settle_end = chaos_end + args.long_stall + args.settle

    def tick(h, watcher, revents, _args):
        nonlocal next_drain_round
        now = time.monotonic()
        _sample_rss(*modules, rss)
        if drains and now >= next_drain_round:
            drains.round()
            next_drain_round = now + DRAIN_TICK
        if feeder.accepting and now >= chaos_end:
            feeder.accepting = False
            injector.stop(timeout=0)
            say(f"chaos: time is up after {now - t0:.1f}s; {feeder.active} jobs still active")
        if not feeder.accepting and (feeder.active == 0 or now >= settle_end):
            h.reactor_stop()

    timer = h.timer_watcher_create(TICK, tick, repeat=TICK)
    timer.start()
    injector.start()
    feeder.top_up()
    try:
        if h.reactor_run() < 0:
            raise RuntimeError("the reactor stopped with an error")
    finally:
        timer.stop()
        timer.destroy()


def _sample_rss(brokers, module, rss):
    """Sample each module process's RSS: its baseline is the first sample once it has run
    RSS_WARMUP seconds (a module still importing would make any growth look large)."""
    now = time.monotonic()
    for rank, bpid in brokers.items():
        pid = procs.module_pid(bpid, module)
        kb = procs.rss_kb(pid) if pid else None
        if kb is None:
            continue
        name = f"rank {rank} pid {pid}"
        seen, first, peak = rss.get(name, (now, None, kb))
        if first is None and now - seen >= RSS_WARMUP:
            first = kb
        rss[name] = (seen, first, max(peak, kb))


def _eventlog(job, which="eventlog"):
    """``(events, stamps)``: ``job``'s eventlog ``which`` as ``[name, context]`` pairs, and
    the time of each."""
    res = subprocess.run(
        ["flux", "job", "eventlog", "-f", "json", "-p", which, str(job["jobid"])],
        capture_output=True, text=True, timeout=CMD_TIMEOUT,
    )  # fmt: skip
    events, stamps = [], []
    for line in res.stdout.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        events.append([entry.get("name"), entry.get("context", {})])
        stamps.append(entry.get("timestamp"))
    return events, stamps


def _refetch_unfinished(feeder):
    """A job whose watch ended early is judged by its eventlog as the KVS has it now."""
    for job in feeder.unfinished():
        events, stamps = _eventlog(job)
        if events:
            job["events"], job["stamps"] = events, stamps


def _fetch_exec_eventlogs(jobs):
    """A job that did not end as asked gets its exec eventlog, and the lines of the instance's
    log (``$CHAOS_BROKER_LOG``, rank 0's: every rank's errors) naming it: sdexec logs a
    background shell's stderr there, which bgexec's exec eventlog does not get."""
    bad = [job for job in jobs if job.get("jobid") and verdict.job_problems(job)]
    lines = _broker_log_lines() if bad else []
    for job in bad:
        job["exec_events"] = _eventlog(job, "exec")[0]
        needle = f"-{job['id']}"
        job["log_lines"] = [line.strip() for line in lines if needle in line][:LOG_LINES]


def _broker_log_lines():
    path = os.environ.get("CHAOS_BROKER_LOG")
    if not path:
        return []
    try:
        with open(path, errors="replace") as f:
            return f.readlines()
    except OSError as exc:
        say(f"chaos: cannot read the instance's log {path}: {exc}")
        return []


def _print_unfinished(feeder):
    """Print the eventlogs of jobs still active, then cancel them (bounded)."""
    stuck = feeder.unfinished()
    for job in stuck:
        say(f"not inactive: {job['id']} ({job['nodes']} node(s), exit {job['code']})")
        for which in ("eventlog", "exec"):
            for name, context in _eventlog(job, which)[0]:
                say(f"    {which}: {name} {json.dumps(context)}")
    if stuck:
        subprocess.run(
            ["flux", "cancel", *[str(j["jobid"]) for j in stuck]],
            capture_output=True, timeout=CMD_TIMEOUT,
        )  # fmt: skip
        for job in stuck:
            subprocess.run(
                ["flux", "job", "wait-event", "-t", "30", str(job["jobid"]), "clean"],
                capture_output=True, timeout=CMD_TIMEOUT,
            )  # fmt: skip


def _answers(rank):
    """True when sdexec on ``rank`` runs a command, else what went wrong."""
    try:
        res = subprocess.run(
            ["flux", "exec", "--service", "sdexec", "-r", str(rank), "echo", "ok"],
            capture_output=True, text=True, timeout=CMD_TIMEOUT,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"no answer within {CMD_TIMEOUT}s"
    if res.returncode == 0 and res.stdout == "ok\n":
        return True
    return f"exit {res.returncode}: {res.stderr.strip() or res.stdout.strip()}"


def _save_dmesg(workdir, size):
    """Each rank's broker log ring (saved as <workdir>/dmesg.<rank>), as lists of lines."""
    logs = []
    for rank in range(size):
        res = subprocess.run(
            ["flux", "exec", "-r", str(rank), "flux", "dmesg"],
            capture_output=True, text=True, timeout=CMD_TIMEOUT,
        )  # fmt: skip
        (workdir / f"dmesg.{rank}").write_text(res.stdout)
        logs.append(res.stdout.splitlines())
    return logs


def _print_log_lines(logs, *needles):
    for rank, lines in enumerate(logs):
        hits = [line for line in lines if any(n in line for n in needles)]
        for line in hits[-LOG_LINES:]:
            say(f"    log[{rank}]: {line}")


def _print_left(units, logs):
    """For each unit left: what systemd says of it, and the broker log lines naming it."""
    for unit in units:
        res = subprocess.run(
            ["systemctl", "--user", "show", "-p", "ActiveState,SubState,Result,ExecMainStatus",
             "--value", unit],
            capture_output=True, text=True, timeout=CMD_TIMEOUT,
        )  # fmt: skip
        say(f"left: {unit} ({' '.join(res.stdout.split())})")
        _print_log_lines(logs, unit.split(":")[0])


def _print_lost(jobs, lost, logs):
    """For each lost job: what is wrong, its eventlogs, and the broker log lines naming it."""
    by_id = {j["id"]: j for j in jobs}
    for jobid, problems in lost:
        job = by_id.get(jobid, {})
        say(f"lost: {jobid} ({job.get('nodes')} node(s), exit {job.get('code')}): "
            + "; ".join(problems))  # fmt: skip
        if not job.get("jobid"):
            continue
        for which in ("eventlog", "exec"):
            for name, context in _eventlog(job, which)[0]:
                say(f"    {which}: {name} {json.dumps(context)}")
        _print_log_lines(logs, jobid, flux.job.JobID(job["jobid"]).f58)
