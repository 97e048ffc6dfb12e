"""The upgrade's wait for jobs in their startup window (RFC 50 ``recoverable``).

job-exec refuses to reattach a bgexec job whose exec eventlog has no ``recoverable``
event yet, and a job being finalized when job-exec is removed never gets its release:
the removal waits until neither is left. Every wait goes through the Broker.
"""

import time

import flux.job

from flux_sdexec.cli import upgrade_plan as plan
from flux_sdexec.cli.upgrade_broker import Failure, say


def wait_startup(broker, force):
    """Wait (at most the timeout in all) until no bgexec job lacks its ``recoverable``
    event and none is being finalized or initialized; return job-exec's jobs as they
    are then (the removal follows at once)."""
    deadline = time.monotonic() + broker.timeout
    recoverable = set()
    while True:
        stats = broker.call("job-exec.stats-get", {}, 0, "job-exec stats")
        jobs = plan.sort_jobs(stats.get("jobs", {}))
        why = plan.refusal(jobs, force)
        if why:
            raise Failure(why.replace("refusing to upgrade", "a job started meanwhile"))
        pending = plan.in_startup(jobs.reattachable, recoverable)
        unsettled = jobs.finalizing + jobs.initializing
        if not pending and not unsettled:
            return jobs
        if not pending:  # a job being released or set up: a moment, then look again
            if time.monotonic() >= deadline:
                raise Failure(f"jobs still finalizing or initializing: {', '.join(unsettled)}")
            broker.pause(0.05)
            continue
        say(f"waiting for {len(pending)} job(s) in their startup window: {', '.join(pending)}")
        for jobid in pending:
            left = deadline - time.monotonic()
            if left <= 0 or not wait_recoverable(broker, jobid, left):
                raise Failure(
                    f"jobs still in their startup window after {broker.timeout:g}s: "
                    + ", ".join(plan.in_startup(pending, recoverable))
                )
            recoverable.add(jobid)  # recoverable, or over: it holds nothing up


def wait_recoverable(broker, jobid, seconds):
    """Watch the exec eventlog of ``jobid`` until ``recoverable`` or its end (True), or
    ``seconds`` pass (False)."""
    state = {"done": False}

    def on_event(future):
        if state["done"]:
            return
        try:
            event = future.get_event()
        except OSError:
            event = None  # no such job any more: over
        if event is not None and event.name not in ("recoverable", "done", "complete"):
            return
        state["done"] = True
        if event is not None:
            future.cancel(stop=False)
        broker.h.reactor_stop()

    future = flux.job.event_watch_async(
        broker.h, flux.job.JobID(jobid), eventlog="guest.exec.eventlog"
    )
    future.then(on_event)
    try:
        broker.run(seconds, lambda: state["done"])
    finally:
        finished = state["done"]
        if not finished:
            state["done"] = True
            future.cancel(stop=False)
    return finished
