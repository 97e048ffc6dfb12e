"""Keeping jobs in flight through sdexec and recording how each one ended (flux side).

Runs on the flux reactor of the run's handle: each job is submitted asynchronously and its
main eventlog watched until ``clean``; a finished job is replaced at once, so about
``inflight`` jobs are always pending or running until ``accepting`` is cleared. With
CHAOS_GUESTS (user names; the run is root's, against a site instance) each job is submitted by
one of those users in turn, with ``flux job submit`` run as that user (a multi-user job).
"""

import os
import pwd
import subprocess
import time

import flux.job
from flux.job import JobID, JobspecV1


class Feeder:
    """Submits the jobs of ``mix`` (an iterator of schedule.JobSpec), ``inflight`` at a time."""

    def __init__(self, h, mix, inflight):
        self.h = h
        self.mix = mix
        self.inflight = inflight
        self.accepting = True
        self.method = None  # job-exec's method now, as the run set it (None: not set)
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
               "code": spec.code, "events": [], "stamps": [], "submit_error": None,
               "method": self.method}  # fmt: skip
        self.jobs.append(job)
        jobspec = JobspecV1.from_command(spec.command(), num_tasks=spec.nodes, num_nodes=spec.nodes)
        jobspec.cwd = "/tmp"
        jobspec.environment = dict(os.environ)
        self.active += 1
        if GUESTS:
            self._submit_as_guest(jobspec, len(self.jobs) - 1)
            return
        flux.job.submit_async(self.h, jobspec).then(self._submitted, len(self.jobs) - 1)

    def _submit_as_guest(self, jobspec, index):
        user = pwd.getpwnam(GUESTS[index % len(GUESTS)])
        jobspec.environment = {"HOME": user.pw_dir, "PATH": "/usr/local/bin:/usr/bin:/bin"}
        self.jobs[index]["user"] = user.pw_name
        try:
            res = subprocess.run(
                as_user(user, ["flux", "job", "submit"]), input=jobspec.dumps(),
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            res = subprocess.CompletedProcess([], 1, "", "flux job submit timed out")
        if res.returncode != 0:
            self.jobs[index]["submit_error"] = res.stderr.strip() or f"exit {res.returncode}"
            self._ended(index)
            return
        self._watch(index, JobID(res.stdout.strip()))

    def _submitted(self, future, index):
        job = self.jobs[index]
        try:
            jobid = JobID(future.get_id())
        except OSError as exc:
            job["submit_error"] = exc.strerror or str(exc)
            self._ended(index)
            return
        self._watch(index, jobid)

    def _watch(self, index, jobid):
        job = self.jobs[index]
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
            job["stamps"].append(time.time())
            self._ended(index)
            return
        if event is None:
            self._ended(index)
            return
        job["events"].append([event.name, event.context])
        job["stamps"].append(event.timestamp)
        if event.name == "clean":
            self._ended(index)

    def _ended(self, index):
        if self._watches.pop(index, None) is not None or self.jobs[index]["submit_error"]:
            self.active -= 1
            self.top_up()


GUESTS = os.environ.get("CHAOS_GUESTS", "").split()


def as_user(user, cmd):
    """``cmd`` run as ``user`` (a pwd entry): its uid, groups and a clean environment."""
    return [
        "setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
        "env", "-i", f"HOME={user.pw_dir}", "PATH=/usr/local/bin:/usr/bin:/bin",
        f"FLUX_URI={os.environ['FLUX_URI']}", *cmd,
    ]  # fmt: skip


def _clean(job):
    return any(name == "clean" for name, _ in job["events"])
