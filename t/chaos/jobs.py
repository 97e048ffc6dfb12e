"""Keeping jobs in flight through sdexec and recording how each one ended (flux side).

Runs on the flux reactor of the run's handle: each job is submitted asynchronously and its
main eventlog watched until ``clean``; a finished job is replaced at once, so about
``inflight`` jobs are always pending or running until ``accepting`` is cleared.
"""

import os

import flux.job
from flux.job import JobID, JobspecV1


class Feeder:
    """Submits the jobs of ``mix`` (an iterator of schedule.JobSpec), ``inflight`` at a time."""

    def __init__(self, h, mix, inflight):
        self.h = h
        self.mix = mix
        self.inflight = inflight
        self.accepting = True
        self.active = 0
        self.jobs = []  # one record per job, in submit order (see verdict.py)
        self._watches = {}  # record index -> its eventlog watch (kept alive until clean)

    def top_up(self):
        """Submit jobs until ``inflight`` are active (none once ``accepting`` is cleared)."""
        while self.accepting and self.active < self.inflight:
            self._submit(next(self.mix))

    def unfinished(self):
        """The records of jobs that have not become inactive."""
        return [j for j in self.jobs if j.get("id") and not _clean(j)]

    def _submit(self, spec):
        job = {"id": None, "jobid": None, "nodes": spec.nodes, "sleep": spec.sleep,
               "code": spec.code, "events": [], "submit_error": None}  # fmt: skip
        self.jobs.append(job)
        jobspec = JobspecV1.from_command(spec.command(), num_tasks=spec.nodes, num_nodes=spec.nodes)
        jobspec.cwd = "/tmp"
        jobspec.environment = dict(os.environ)
        self.active += 1
        flux.job.submit_async(self.h, jobspec).then(self._submitted, len(self.jobs) - 1)

    def _submitted(self, future, index):
        job = self.jobs[index]
        try:
            jobid = JobID(future.get_id())
        except OSError as exc:
            job["submit_error"] = exc.strerror or str(exc)
            self._ended(index)
            return
        job["id"], job["jobid"] = jobid.f58plain, int(jobid)
        watch = flux.job.event_watch_async(self.h, jobid)
        self._watches[index] = watch
        watch.then(self._event, index)

    def _event(self, future, index):
        job = self.jobs[index]
        try:
            event = future.get_event()
        except OSError as exc:
            job["events"].append(["watch-error", {"note": str(exc)}])
            self._ended(index)
            return
        if event is None:
            self._ended(index)
            return
        job["events"].append([event.name, event.context])
        if event.name == "clean":
            self._ended(index)

    def _ended(self, index):
        if self._watches.pop(index, None) is not None or self.jobs[index]["submit_error"]:
            self.active -= 1
            self.top_up()


def _clean(job):
    return any(name == "clean" for name, _ in job["events"])
