"""Orphan shells: a job shell whose job is over does not hold its node.

A job shell's label (bgexec's ``shell-<rank>-<f58plain>``, ``imp-shell-...`` for
multi-user jobs) or unit name (bulk-exec's verbatim ``shell-<rank>-<f58plain>.service``)
carries its job id (``shelljobs.job_id``). A shell is *suspect* while it runs in the background
and no client waits on it (``suspect``): adopted at load, or left by a job-exec that was
removed. For each suspect the adapter (broker/orphan_watch.py) asks the instance the
state of its job, one query at a time, at growing intervals (``check_delay``), until the
shell is waited on again, ends, or is judged (``verdict``):

- the job is active, in any state (its startup window included): the shell is kept;
- the job is inactive, or unknown to the instance: the shell is an orphan. ``JobGone``
  stops it, logs the reason, and its unit is let go once it is over (``job_gone``); a
  record kept for a job-exec that may reattach (waits.py) is let go;
- no answer, or any other error (job-list not loaded, a timeout): nothing is decided,
  the shell is asked about again later.

Pure: stdlib only.
"""

import errno
import syslog

from flux_sdexec.core.events import Log
from flux_sdexec.core.shelljobs import shell_job
from flux_sdexec.core.states import Claim, ProcState
from flux_sdexec.core.waits import release

S = ProcState

# flux_job_state_t (flux-core's job.h)
JOB_STATES = {
    1: "NEW",
    2: "DEPEND",
    4: "PRIORITY",
    8: "SCHED",
    16: "RUN",
    32: "CLEANUP",
    64: "INACTIVE",
}
INACTIVE = 64

# seconds from a shell becoming suspect to each check, then ``cap`` between checks
CHECK_DELAYS = (0.5, 1.0, 2.0, 4.0)
DEFAULT_INTERVAL = 10.0

KEEP, STOP, RETRY = "keep", "stop", "retry"


def suspect(p):
    """``p`` is a job shell that may outlive its job: it runs (or starts) in the
    background, no client waits on it, and it is not being stopped as an orphan; or its
    record is kept for a client that may never come (answered and kept while its job runs,
    or in a claim window: revived, adopted; waits.py)."""
    if p.orphan is not None or shell_job(p) is None:
        return False
    if p.state is S.ANSWERED:
        return p.wait.kept
    if p.state is S.ZOMBIE:
        return p.wait.waiter is None and p.wait.claim is not Claim.NONE
    return p.cmd.background and p.state in (S.STARTING, S.RUNNING) and p.wait.waiter is None


def check_delay(attempt, cap=DEFAULT_INTERVAL):
    """Seconds before check number ``attempt`` (0 first) of one suspect."""
    if attempt < len(CHECK_DELAYS):
        return min(CHECK_DELAYS[attempt], cap)
    return cap


def verdict(jobid, state=None, errnum=None, text=None):
    """What a job query's answer means for a suspect shell of job ``jobid``.

    Args:
        jobid: the job id as printed.
        state: the job's state (flux_job_state_t), when the query answered one.
        errnum, text: the query's error, when it failed.

    Returns:
        ``(KEEP, why)``, ``(STOP, reason)`` or ``(RETRY, why)``.
    """
    if errnum == errno.ENOENT:
        return STOP, f"job {jobid} is unknown to this instance"
    if errnum is not None:
        name = errno.errorcode.get(errnum, str(errnum))
        return RETRY, f"job {jobid}: state not known ({name}: {text or ''})"
    if state == INACTIVE:
        return STOP, f"job {jobid} is inactive"
    if state in JOB_STATES:
        return KEEP, f"job {jobid} is {JOB_STATES[state]}"
    return RETRY, f"job {jobid}: unknown state {state!r}"


def job_gone(p, event, out):
    """``JobGone``: stop a shell whose job is over; a zombie record of it, or one kept
    once answered, is let go.

    Whatever waits on it still gets its status: the stop is an ordinary end.
    """
    if p.state is S.ANSWERED:
        if not p.wait.kept:
            return p.state  # in its grace: it goes at the grace's end
        p.wait.answered_to, p.wait.kept = None, False
        out.append(Log(syslog.LOG_INFO, f"{p.logname}[{p.pid}]: {event.reason}: let go"))
        return release(p, out)
    if p.orphan is not None and p.state is not S.ZOMBIE:
        return p.state  # being stopped already
    p.orphan = event.reason
    if p.state is S.ZOMBIE:
        if p.wait.waiter is not None:
            return p.state
        out.append(Log(syslog.LOG_WARNING, f"{p.logname}[{p.pid}]: {event.reason}: let go"))
        return release(p, out)
    out.append(
        Log(syslog.LOG_WARNING, f"{p.logname}[{p.pid}]: {event.reason}: stopping the orphan")
    )
    out += p.forget(final=True)  # final: a start job still queued is cancelled, not run
    return p.state
