"""The orphan watch's own logic (broker/orphan_watch.py): when it asks, what it asks,
how often, and what it does with the answer. Stub handle and timers: no flux, no sleeping."""

import errno

from flux_sdexec.core import orphans, shelljobs
from flux_sdexec.broker import orphan_watch
from flux_sdexec.broker.orphan_watch import OrphanWatch
from flux_sdexec.core.events import StopUnit, WaitRequested
from flux_sdexec.core.machine import handle
from flux_sdexec.core.registry import Registry

from stubs import StubLog, StubWatchers
from test_orphans import shell

RUN, INACTIVE = 16, orphans.INACTIVE


class StubFuture:
    def __init__(self, topic, payload, nodeid):
        self.topic, self.payload, self.nodeid = topic, payload, nodeid
        self.callback = self.timeout = self.answer = None

    def then(self, callback, timeout=-1.0):
        self.callback, self.timeout = callback, timeout

    def get(self):
        if isinstance(self.answer, OSError):
            raise self.answer
        return self.answer

    def reply(self, answer):
        self.answer = answer
        self.callback(self)


class StubHandle:
    def __init__(self):
        self.sent = []

    def rpc(self, topic, payload, nodeid):
        f = StubFuture(topic, payload, nodeid)
        self.sent.append(f)
        return f


class Parts:
    """The watch's parts: a stub handle, log and timers, a real registry, and a ``feed``
    that runs the real state machine."""

    def __init__(self):
        self.h = StubHandle()
        self.log = StubLog()
        self.watchers = StubWatchers()
        self.registry = Registry()
        self.actions = []

    def feed(self, p, event, pump=False):
        self.actions += handle(p, event)


def watched(n=1):
    svc = Parts()
    procs = []
    for i in range(n):
        jobid = f"fA{shelljobs.F58_DIGITS[i]}"  # fA1, fA2, ...
        p = shell(label=f"shell-1-{jobid}", unit=f"shell-1-{jobid}-1:t1.service")
        svc.registry.add(p)
        procs.append(p)
    watch = OrphanWatch(svc.h, svc.log, svc.watchers, svc.registry, svc.feed, interval=10.0)
    return svc, watch, procs


def state(value):
    return {"job": {"id": 1, "state": value}}


def test_a_suspect_is_asked_about_after_half_a_second_on_rank_0():
    """One timer per suspect (considering it again adds none); then job-list.list-id of its
    job, by integer id, on rank 0, with a timeout."""
    svc, watch, (p,) = watched()
    watch.consider(p)
    watch.consider(p)
    assert [t.after for t in svc.watchers.armed()] == [0.5]
    svc.watchers.armed()[0].fire()
    (f,) = svc.h.sent
    assert (f.topic, f.nodeid) == ("job-list.list-id", 0)
    assert f.payload == {"id": shelljobs.job_number("fA1"), "attrs": ["state"]}
    assert f.timeout == orphan_watch.QUERY_TIMEOUT
    assert watch.checks == 1


def test_an_active_job_keeps_its_shell_and_is_asked_again_less_often():
    """RUN: nothing is fed, the answer is kept for sdexec.units, the next check comes after
    the next delay, up to the interval."""
    svc, watch, (p,) = watched()
    watch.consider(p)
    delays = []
    for _ in range(6):
        svc.watchers.armed()[0].fire()
        svc.h.sent[-1].reply(state(RUN))
        delays.append(svc.watchers.armed()[0].after)
    assert delays == [1.0, 2.0, 4.0, 10.0, 10.0, 10.0]
    assert svc.actions == [] and p.orphan is None
    assert watch.job_seen(p.unit.name) == "job fA1 is RUN"


def test_an_inactive_job_stops_its_shell_once():
    """INACTIVE: JobGone is fed (StopUnit, the reason logged by the core), counted; no more
    checks."""
    svc, watch, (p,) = watched()
    watch.consider(p)
    svc.watchers.armed()[0].fire()
    svc.h.sent[-1].reply(state(INACTIVE))
    assert StopUnit() in svc.actions
    assert p.orphan == "job fA1 is inactive"
    assert watch.stopped == 1
    assert svc.watchers.armed() == []


def test_an_unknown_job_stops_its_shell_other_errors_ask_again():
    """ENOENT: stopped; ENOSYS (job-list not loaded) or a timeout: asked again, logged once
    per kind of failure."""
    svc, watch, (p, q) = watched(2)
    watch.consider(p)
    watch.consider(q)
    for t in svc.watchers.armed():
        t.fire()
    fp, fq = svc.h.sent
    fq.reply(OSError(errno.ENOSYS, "Function not implemented"))
    assert q.orphan is None and len(svc.watchers.armed()) == 1
    assert "state not known (ENOSYS" in svc.log.at("warning")[0]
    fp.reply(OSError(errno.ENOENT, "unknown job"))
    assert p.orphan == "job fA1 is unknown to this instance"
    for _ in range(2):
        svc.watchers.armed()[0].fire()
        svc.h.sent[-1].reply(OSError(errno.ETIMEDOUT, "Connection timed out"))
    assert q.orphan is None and len(svc.watchers.armed()) == 1
    assert len(svc.log.at("warning")) == 2  # ENOSYS, then ETIMEDOUT once: not every retry


def test_a_shell_waited_on_again_or_forgotten_is_dropped_without_asking():
    """job-exec reattached (a wait came) or the process is gone: its check asks nothing and
    arms nothing; its last answer is cleared."""
    svc, watch, (p, q) = watched(2)
    watch.consider(p)
    watch.consider(q)
    for t in svc.watchers.armed():
        t.fire()
    for f in svc.h.sent:
        f.reply(state(RUN))  # both running: asked again later
    assert watch.job_seen(p.unit.name) == "job fA1 is RUN"
    asked = len(svc.h.sent)
    handle(p, WaitRequested("job-exec"))
    svc.registry.remove(q)
    for t in svc.watchers.armed():
        t.fire()
    assert len(svc.h.sent) == asked and svc.watchers.armed() == []
    assert watch.job_seen(p.unit.name) is None and watch.job_seen(q.unit.name) is None


def test_at_most_max_in_flight_queries_at_once():
    """The suspect over the limit waits its turn a second; an answer makes room."""
    n = orphan_watch.MAX_IN_FLIGHT + 1
    svc, watch, procs = watched(n)
    for p in procs:
        watch.consider(p)
    for t in svc.watchers.armed():
        t.fire()
    assert len(svc.h.sent) == orphan_watch.MAX_IN_FLIGHT
    (busy,) = svc.watchers.armed()
    assert busy.after == orphan_watch.BUSY_DELAY
    svc.h.sent[0].reply(state(RUN))
    busy.fire()
    assert len(svc.h.sent) == n


def test_close_disarms_every_check_and_a_late_answer_does_nothing():
    svc, watch, (p, q) = watched(2)
    watch.consider(p)
    watch.consider(q)
    svc.watchers.armed()[0].fire()
    watch.close()
    assert svc.watchers.armed() == []
    svc.h.sent[0].reply(state(INACTIVE))
    assert svc.actions == [] and p.orphan is None


def kept(n, svc):
    """``n`` job shells answered and kept while their jobs run (test_answer_kept.py)."""
    from test_answer_kept import kept as answered

    procs = []
    for i in range(n):
        jobid = f"f{shelljobs.F58_DIGITS[i]}"
        p, _ = answered(label=f"shell-0-{jobid}", unit=f"shell-0-{jobid}:t1.service")
        svc.registry.add(p)
        procs.append(p)
    return procs


def test_a_kept_record_goes_when_its_job_is_inactive_and_counts_no_orphan():
    svc = Parts()
    watch = OrphanWatch(svc.h, svc.log, svc.watchers, svc.registry, svc.feed, interval=10.0)
    (p,) = kept(1, svc)
    watch.consider(p)
    svc.watchers.armed()[0].fire()
    (query,) = svc.h.sent
    query.reply(state(RUN))
    assert p.state is orphans.S.ANSWERED and len(svc.watchers.armed()) == 1
    svc.watchers.armed()[0].fire()
    svc.h.sent[-1].reply(state(INACTIVE))
    assert p.state is orphans.S.RELEASING and watch.stopped == 0


def test_past_kept_count_the_oldest_kept_record_goes(monkeypatch):
    monkeypatch.setattr(orphan_watch, "KEPT_COUNT", 2)
    svc = Parts()
    watch = OrphanWatch(svc.h, svc.log, svc.watchers, svc.registry, svc.feed, interval=10.0)
    procs = kept(3, svc)
    for p in procs:
        watch.consider(p)
    assert [p.state for p in procs] == [orphans.S.RELEASING] + [orphans.S.ANSWERED] * 2
