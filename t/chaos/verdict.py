"""The chaos test's verdict, from what a run recorded: which jobs were lost, what else is wrong.

Pure: reads the run's result (a JSON-able dict, see ``run.py``), returns problems and the
closing report as text. A job record is a dict with ``id``, ``nodes``, ``sleep``, ``code`` (the
exit code it was told to end with), ``events`` (its main eventlog, ``[name, context]`` pairs) and
``submit_error`` (None, or why it could not be submitted). A run on the nodes of t/site/nodes.sh
(its result has ``hostnames``) also judges which jobs a node fault ended (nodeverdict.py).
"""

from . import nodeverdict
from .schedule import ALL_KINDS

RSS_GROWTH_KB = 64 * 1024  # a module process may grow this much over its first sample


def job_problems(job):
    """What is wrong with one job's end, as short sentences (empty: it ended as it should).

    A job is right when it became inactive (``clean``), raised no exception and its
    ``finish`` status is its own exit code (a wait status of ``code << 8``).
    """
    if job.get("submit_error"):
        return [f"submit failed: {job['submit_error']}"]
    problems = []
    events = job.get("events", [])
    names = [name for name, _ in events]
    for name, context in events:
        if name == "exception":
            problems.append(
                f"exception type={context.get('type')} severity={context.get('severity')}: "
                f"{context.get('note', '')}"
            )
    finish = [context for name, context in events if name == "finish"]
    if finish:
        status = finish[0].get("status")
        if status != job["code"] << 8:
            problems.append(f"finish status {_status(status)}, expected exit {job['code']}")
    elif "clean" in names:
        problems.append("inactive without a finish event")
    if "clean" not in names:
        last = names[-1] if names else "nothing"
        problems.append(f"not inactive after the chaos ended (last event: {last})")
    return problems


def _status(status):
    if not isinstance(status, int):
        return repr(status)
    if status & 0x7F:
        return f"{status} (signal {status & 0x7F})"
    return f"{status} (exit {status >> 8})"


def lost_jobs(jobs):
    """``[(id, problems)]`` for every job that did not end as it should, in submit order."""
    lost = []
    for job in jobs:
        problems = job_problems(job)
        if problems:
            lost.append((job.get("id") or "(no id)", problems))
    return lost


def judge(result):
    """``(lost, ended)``: the jobs lost (``[(id, problems)]``, see lost_jobs) and, on the nodes,
    the jobs a node fault ended as it may (``[(id, problems, sentence)]``), in submit order."""
    if "hostnames" not in result:
        return lost_jobs(result.get("jobs", [])), []
    hostnames = {int(rank): name for rank, name in result["hostnames"].items()}
    lost, ended = [], []
    for job in result.get("jobs", []):
        problems = job_problems(job)
        if not problems:
            continue
        jobid = job.get("id") or "(no id)"
        why = nodeverdict.explaining_fault(
            job, result.get("fault_log", []), hostnames, result.get("lost_units", [])
        )
        if why:
            ended.append((jobid, problems, why))
        else:
            lost.append((jobid, problems))
    return lost, ended


def node_problems(result):
    """On the nodes: guest processes left, drains that no fault explains."""
    found = [f"guest process left: {text}" for text in result.get("guest_procs_left", [])]
    for drain in nodeverdict.unexplained_drains(
        result.get("drains", []), result.get("fault_log", [])
    ):
        found.append(f"rank(s) {drain['ranks']} drained, no fault there: {drain['reason']}")
    return found


def rss_problems(rss, growth_kb=RSS_GROWTH_KB):
    """Module processes whose peak RSS exceeded their first sample by more than ``growth_kb``.

    Args:
        rss: ``{name: [first_kb, peak_kb]}``, one entry per module process sampled.
    """
    return [
        f"{name}: RSS grew from {first} kB to {peak} kB (bound: +{growth_kb} kB)"
        for name, (first, peak) in sorted(rss.items())
        if peak - first > growth_kb
    ]


def violations(result):
    """Every violated invariant of a run, one sentence each (empty: the run passed)."""
    found = []
    lost, _ = judge(result)
    if lost:
        found.append(f"{len(lost)} of {len(result.get('jobs', []))} jobs lost")
    if not result.get("jobs"):
        found.append("no job ran")
    if result.get("units_left"):
        found.append(f"{len(result['units_left'])} unit(s) of the instance left")
    if result.get("units_left_after_shutdown"):
        found.append(
            f"{len(result['units_left_after_shutdown'])} unit(s) left after the instance exited"
        )
    for rank, answer in sorted(result.get("answers", {}).items()):
        if answer is not True:
            found.append(f"sdexec on rank {rank} does not answer afterwards: {answer}")
    found += node_problems(result)
    found += rss_problems(result.get("rss", {}), result.get("rss_growth_kb", RSS_GROWTH_KB))
    found += [f"fault failed: {text}" for text in result.get("fault_failures", [])]
    found += result.get("harness_errors", [])
    return found


def report(result):
    """The closing report: faults per kind, jobs run and lost, units left, the verdict line."""
    faults = result.get("faults", {})
    lines = [f"{'fault':<11} {'injected':>8} {'skipped':>8} {'failed':>7}"]
    for kind in ALL_KINDS:
        count = faults.get(kind, {})
        lines.append(
            f"{kind:<11} {count.get('injected', 0):>8} {count.get('skipped', 0):>8} "
            f"{count.get('failed', 0):>7}"
            + (
                f"  ({result['skip_reasons'][kind]})"
                if kind in result.get("skip_reasons", {})
                else ""
            )
        )
    jobs = result.get("jobs", [])
    lost, ended = judge(result)
    left = result.get("units_left", []) + result.get("units_left_after_shutdown", [])
    lines.append(f"jobs run {len(jobs)}, lost {len(lost)}; units left {len(left)}")
    if "hostnames" in result:
        lines += _node_lines(result, ended)
    for name, (first, peak) in sorted(result.get("rss", {}).items()):
        lines.append(f"rss {name}: first {first} kB, peak {peak} kB")
    found = violations(result)
    for text in found:
        lines.append(f"violation: {text}")
    injected = sum(count.get("injected", 0) for count in faults.values())
    lines.append(
        f"chaos: {'FAIL' if found else 'PASS'} seed={result.get('seed')} "
        f"duration={result.get('duration', 0):g}s jobs={len(jobs)} lost={len(lost)} "
        f"units-left={len(left)} faults={injected}"
        + (f" ended-by-node-faults={len(ended)}" if "hostnames" in result else "")
    )
    return lines


def _node_lines(result, ended):
    """What the node faults did: the jobs they ended (and how), the drains and methods."""
    lines = [f"jobs ended by node faults {len(ended)}"]
    for jobid, problems, why in ended:
        lines.append(f"  {jobid}: {why}: {'; '.join(problems)}")
    drains = result.get("drains", [])
    lines.append(f"drains {len(drains)} (each undrained)")
    for drain in drains:
        lines.append(f"  ranks {drain['ranks']} at {drain['timestamp']:.1f}: {drain['reason']}")
    methods = {}
    for job in result.get("jobs", []):
        methods[job.get("method")] = methods.get(job.get("method"), 0) + 1
    ordered = sorted(methods.items(), key=lambda item: str(item[0]))
    lines.append("jobs per method: " + ", ".join(f"{m} {n}" for m, n in ordered))
    return lines
