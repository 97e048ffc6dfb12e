"""Asking the instance about the job of each suspect shell (the decisions: orphans.py).

A shell becomes suspect when it is adopted at load, or when the client waiting on it
(job-exec) disconnects; ``consider(p)`` is called then. Each suspect gets one
``job-list.list-id`` query at a time, on rank 0, after ``orphans.check_delay``; a
shell that is waited on again, ends, or is forgotten is dropped at its next turn. At
most MAX_IN_FLIGHT queries are out at once (the others wait their turn a second), so a
rank with many suspects (an sdexec reload under many jobs) asks at a bounded rate.
A query is answered within QUERY_TIMEOUT or counts as no answer.

A job shell's answered record kept while its job runs (core/waits.py) is asked about the
same way; at most KEPT_COUNT are kept, the oldest let go past that.
"""

from collections import OrderedDict

from flux_sdexec.core import orphans
from flux_sdexec.core.events import JobGone
from flux_sdexec.core.shelljobs import job_number, shell_job
from flux_sdexec.core.states import ProcState

TOPIC = "job-list.list-id"
MAX_IN_FLIGHT = 16
QUERY_TIMEOUT = 10.0
BUSY_DELAY = 1.0
KEPT_COUNT = 1024  # answered job shells' records kept while their jobs run, at most


class OrphanWatch:
    """The suspect shells of one sdexec and their job queries.

    Args:
        h: the module's flux handle (the queries).
        log: the module's BrokerLogger.
        watchers: a ``watchers.Watchers`` (the check timers).
        registry: the ``Registry`` of SdProcs.
        feed: ``feed(p, input, pump=False)``, the way into the state machine.
        interval: the longest wait between two checks of one suspect (seconds).
    """

    def __init__(self, h, log, watchers, registry, feed, interval=orphans.DEFAULT_INTERVAL):
        self._h, self._log, self._watchers = h, log, watchers
        self._registry, self._feed = registry, feed
        self.interval = interval
        self._seen = {}  # unit -> what the last query of its job said (sdexec.units)
        self._timers = {}  # unit -> its timer watcher, while a check is due
        self._attempts = {}  # unit -> checks made so far
        self._in_flight = {}  # future -> unit
        self._kept = OrderedDict()  # unit -> None: the kept records watched, oldest first
        self.checks = 0  # job queries sent since load (stats-get)
        self.stopped = 0  # orphans stopped since load (stats-get)

    def consider(self, p):
        """Watch ``p`` if it is a suspect shell and not watched already."""
        unit = p.unit.name
        if unit in self._timers or unit in self._in_flight.values():
            return
        if orphans.suspect(p):
            self._attempts[unit] = 0
            self._arm(unit, orphans.check_delay(0, self.interval))
            if p.state is ProcState.ANSWERED:
                self._keep(unit)

    def _keep(self, unit):
        """Count ``unit``'s kept record; past KEPT_COUNT, the oldest still kept goes."""
        self._kept[unit] = None
        while len(self._kept) > KEPT_COUNT:
            p = self._registry.by_unit(self._kept.popitem(last=False)[0])
            if p is not None and orphans.suspect(p) and p.state is ProcState.ANSWERED:
                self._feed(p, JobGone(f"more than {KEPT_COUNT} answered records kept"), True)

    def job_seen(self, unit):
        """What the last query of ``unit``'s job said, None before any (or once it is no
        suspect any more)."""
        return self._seen.get(unit)

    def _arm(self, unit, delay):
        timer = self._watchers.timer(delay, lambda: self._due(unit), "orphan check")
        self._timers[unit] = timer
        timer.start()

    def _drop(self, unit):
        timer = self._timers.pop(unit, None)
        if timer is not None:
            timer.stop()
            timer.destroy()
        self._clear(unit)

    def _clear(self, unit):
        """No more checks of ``unit``: what was kept of it goes."""
        self._attempts.pop(unit, None)
        self._seen.pop(unit, None)
        self._kept.pop(unit, None)

    def _due(self, unit):
        timer = self._timers.pop(unit)
        timer.destroy()
        p = self._registry.by_unit(unit)
        if p is None or not orphans.suspect(p):
            self._clear(unit)
            return
        if len(self._in_flight) >= MAX_IN_FLIGHT:
            self._arm(unit, BUSY_DELAY)
            return
        jobid = shell_job(p)
        payload = {"id": job_number(jobid), "attrs": ["state"]}
        future = self._h.rpc(TOPIC, payload, 0)
        self.checks += 1
        self._in_flight[future] = unit
        what = f"{TOPIC} of {jobid}"
        future.then(self._watchers.shield(self._answered, what), timeout=QUERY_TIMEOUT)

    def _answered(self, future):
        unit = self._in_flight.pop(future, None)
        p = self._registry.by_unit(unit) if unit is not None else None
        if p is None:
            self._clear(unit)
            return
        jobid = shell_job(p)
        try:
            state = future.get()["job"]["state"]
            action, why = orphans.verdict(jobid, state=state)
        except OSError as exc:
            action, why = orphans.verdict(jobid, errnum=exc.errno, text=exc.strerror)
        except (KeyError, TypeError, ValueError) as exc:
            action, why = orphans.RETRY, f"job {jobid}: bad {TOPIC} answer ({exc!r})"
        if action == orphans.STOP:
            self._clear(unit)
            if p.orphan is None:
                if p.state in (ProcState.STARTING, ProcState.RUNNING):  # not a kept record
                    self.stopped += 1
                self._feed(p, JobGone(why), pump=True)
            return
        if action == orphans.RETRY and why != self._seen.get(unit):  # once per kind of failure
            self._log.warning(f"{p.logname}: {why}")
        self._seen[unit] = why
        attempt = self._attempts.get(unit, 0) + 1
        self._attempts[unit] = attempt
        self._arm(unit, orphans.check_delay(attempt, self.interval))

    def close(self):
        """Unload: no more checks (queries still out are left unanswered)."""
        for unit in list(self._timers):
            self._drop(unit)
        self._in_flight.clear()
        self._kept.clear()
