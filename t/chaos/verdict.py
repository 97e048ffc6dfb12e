"""The chaos test's verdict, from what a run recorded: which jobs were lost, what else is wrong.

Pure: reads the run's result (a JSON-able dict, see ``run.py``), returns problems and the
closing report as text. A job record is a dict with ``id``, ``nodes``, ``sleep``, ``code`` (the
exit code it was told to end with), ``events`` (its main eventlog, ``[name, context]`` pairs),
``exec_events`` (its exec eventlog) and ``log_lines`` (the instance's log lines naming it), both
fetched only for a job that did not end as asked, and
``submit_error`` (None, or why it could not be submitted). A run on the nodes of t/site/nodes.sh
(its result has ``hostnames``) also judges which jobs a node fault ended (nodeverdict.py).

A multi-user job shell starts through flux-core's ``flux imp-exec-helper``, which asks systemd
for its own unit (GetUnitByInvocationID, through flux-core's sdbus module) before the IMP runs
the shell; the helper does not retry, so a manager reexec or bus kill in that instant fails the
job ("Message recipient disconnected from message bus"), whichever sdexec runs it, and the IMP's
error drains the rank. Such a job is not lost by sdexec: it is counted apart and named, and only
when it ended (no hang); the drain naming it is explained by it.
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


HELPER_PREFIX = "imp_exec_helper: "
# how flux-core's sdbus reports the bus lost under a call: the manager gone (reexec), the bus
# gone while the call waited, or already gone when sdbus sent it (its socket reset)
BUS_LOST = (
    "disconnected from message bus",
    "received Disconnected signal from bus",
    "error sending sdbus request: Connection reset by peer",
)


def helper_failure(job):
    """The line of flux-core's imp-exec-helper that failed ``job`` at a bus loss, or None.

    Only for a job that ended (``clean``): a hang is always sdexec's to answer for.
    """
    if "clean" not in [name for name, _ in job.get("events", [])]:
        return None
    lines = [c.get("data", "") for name, c in job.get("exec_events", []) if name == "log"]
    # sdexec's "<date> sdexec.err[RANK]: <label>[PID]: <stderr line>"
    lines += [line.split("]: ", 2)[-1] for line in job.get("log_lines", [])]
    for data in lines:
        if data.startswith(HELPER_PREFIX) and any(text in data for text in BUS_LOST):
            return data.strip()
    return None


def lost_jobs(jobs):
    """``[(id, problems)]`` for every job that did not end as it should, in submit order, but
    those flux-core's imp-exec-helper failed (see judge)."""
    return judge({"jobs": jobs})[0]


def judge(result):
    """``(lost, ended, helper_failed)``, in submit order: the jobs lost (``[(id, problems)]``),
    on the nodes the jobs a node fault ended as it may (``[(id, problems, sentence)]``), and the
    jobs flux-core's imp-exec-helper failed at a bus loss (``[(id, helper line)]``)."""
    nodes = "hostnames" in result
    hostnames = {int(rank): name for rank, name in result.get("hostnames", {}).items()}
    lost, ended, helper_failed = [], [], []
    for job in result.get("jobs", []):
        problems = job_problems(job)
        if not problems:
            continue
        jobid = job.get("id") or "(no id)"
        line = helper_failure(job)
        why = nodes and nodeverdict.explaining_fault(job, result.get("fault_log", []), hostnames)
        if line:
            helper_failed.append((jobid, line))
        elif why:
            ended.append((jobid, problems, why))
        else:
            lost.append((jobid, problems))
    return lost, ended, helper_failed


def drain_problems(result, helper_failed):
    """Drains nothing explains: not naming a job of ``helper_failed`` (judge's third list), and
    (on the nodes) with no fault on their ranks just before (nodeverdict.unexplained_drains);
    elsewhere every drain."""
    helper_failed = {jobid for jobid, _ in helper_failed}
    drains = [
        d for d in result.get("drains", [])
        if not any(f"job {jobid}" in d.get("reason", "") for jobid in helper_failed)
    ]  # fmt: skip
    if "hostnames" in result:
        drains = nodeverdict.unexplained_drains(drains, result.get("fault_log", []))
    return [f"rank(s) {d['ranks']} drained, nothing explains it: {d['reason']}" for d in drains]


def node_problems(result):
    """On the nodes: guest processes left."""
    return [f"guest process left: {text}" for text in result.get("guest_procs_left", [])]


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
    lost, _, helper_failed = judge(result)
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
    found += node_problems(result) + drain_problems(result, helper_failed)
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
    lost, ended, helper_failed = judge(result)
    left = result.get("units_left", []) + result.get("units_left_after_shutdown", [])
    lines.append(f"jobs run {len(jobs)}, lost {len(lost)}; units left {len(left)}")
    if helper_failed:
        lines.append(
            f"failed in flux-core's imp-exec-helper at a bus loss (not sdexec's): "
            f"{len(helper_failed)}: " + " ".join(jobid for jobid, _ in helper_failed)
        )
    if "hostnames" in result:
        lines += _node_lines(result, ended)
    lines += _drain_lines(result.get("drains", []))
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
        + (f" helper-failed={len(helper_failed)}" if helper_failed else "")
    )
    return lines


def _node_lines(result, ended):
    """What the node faults did: the jobs they ended (and how), the drains and methods."""
    lines = [f"jobs ended by node faults {len(ended)}"]
    for jobid, problems, why in ended:
        lines.append(f"  {jobid}: {why}: {'; '.join(problems)}")
    methods = {}
    for job in result.get("jobs", []):
        methods[job.get("method")] = methods.get(job.get("method"), 0) + 1
    ordered = sorted(methods.items(), key=lambda item: str(item[0]))
    lines.append("jobs per method: " + ", ".join(f"{m} {n}" for m, n in ordered))
    return lines


def _drain_lines(drains):
    """Each drain the run saw (and undid), when there were any."""
    if not drains:
        return []
    return [f"drains {len(drains)} (each undrained)"] + [
        f"  ranks {d['ranks']} at {d['timestamp']:.1f}: {d['reason']}" for d in drains
    ]
