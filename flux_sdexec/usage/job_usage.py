"""A job's usage gathered up the TBON to rank 0: one KVS record and one memo per job.

When a job shell's unit ends, its rank's record goes to this broker's gathering of the job
(``core.usage_gather.JobGather``): the ranks of the job's R under this broker in the
overlay (``overlay.topology``), this rank's own row and one message from each child whose
subtree holds a job rank. Once all are in, one message goes to the parent broker's sdexec
(``sdexec.usage-gather``, sent upstream); rank 0 writes the job's record to its KVS
directory in one commit (``job.<id>.sdexec-usage.<rank>``, a row per rank, a missing rank
as ``{"rank", "missing": why}``) and the job's totals as a memo (``{"sdexec": {"cpu",
"maxmem", ...}}``: ``flux jobs -o '{user.sdexec.cpu}'``). A memo of a job already inactive
is refused by the job manager (logged at debug level): the KVS record stays.

While some rank has not reported, the gathering looks at its children's health every
CHECK_S (``overlay.health``): a child lost or offline has its subtree's job ranks marked
missing; its own row too, when no shell of the job runs here and one ran (under this
sdexec) or none came for OWN_WAIT_S. A rank still up is waited for
(a job's ranks may end far apart), at most WAIT_MAX_S. What comes after a job's message
went up goes up alone, as a correction. OOM kills of a job shell's unit become a non-fatal
job exception of type ``oom``, raised by the rank at once.

A running job's rows are gathered the same way on demand (``flux sdexec usage [--watch]``):
``sdexec.usage-live`` to rank 0 asks each child whose subtree holds a job rank, each of them
its own, with a shorter wait at each level; every broker answers its parent once with its
subtree's rows, those of a child that did not answer in time marked missing.

An adopted job shell's record is looked up first (``broker/accounting.py`` says when): one
found is kept and nothing is sent or raised. Nothing here blocks or raises into the
caller: a failure is logged. flux only inside the methods that talk to it.
"""

import errno
import json
import time
from collections import OrderedDict
from itertools import islice

from flux_sdexec.core.shelljobs import job_number, shell_job
from flux_sdexec.core.usage_gather import JobGather, expected_ranks, job_totals
from flux_sdexec.core.usage_record import UsageRecord, kvs_dir, kvs_key
from flux_sdexec.core.values import parse_idset

OOM_TYPE = "oom"
GATHER_TOPIC = "sdexec.usage-gather"
CHECK_S = 5.0  # while a job's gathering waits: how often its children's health is looked at
OWN_WAIT_S = 60.0  # how long this rank's own record is awaited when no shell of it ran here
WAIT_MAX_S = 3600.0  # the longest a rank still up is waited for
REMEMBERED = 1024  # gatherings ended that are kept for late corrections
DOWN = ("lost", "offline")  # overlay.health's words for a child that is gone
LIVE_TOPIC = "sdexec.usage-live"
LIVE_WAIT_S = 2.0  # how long a live gathering waits for the subtree's rows, by default
LIVE_WAIT_MAX_S = 60.0  # ... at most
LIVE_STEP_S = 0.25  # each level down the tree waits this much less than the one above


class JobUsage:
    """The job side of one sdexec's accounting.

    Args:
        handle: the module's flux handle.
        log: the module's BrokerLogger.
        rank: this broker's rank; host: this node's host name.
        watchers: ``broker.watchers.Watchers`` (timers, futures' guarded callbacks).
        memos: ``broker.memo.JobMemos`` (``post``), the job's memo goes through it.
        registry: the service's Registry: whether a shell of a job still runs here.
    """

    def __init__(self, handle, log, rank, host, watchers, memos, registry):
        self.h, self.log, self.rank, self.host = handle, log, rank, host
        self.watchers, self.memos, self.registry = watchers, memos, registry
        self.pending = set()  # futures in flight
        self.jobs = OrderedDict()  # job id -> _Job, oldest first
        self.ended = 0  # how many of them have a complete gathering (_forget_old)
        self.topology = None  # this broker's subtree (overlay.topology), once answered
        self._waiting_topology = []  # what waits for the topology: callables
        self.live = set()  # the live gatherings not answered yet (their finish callables)
        self.counts = {
            "messages-in": 0,
            "messages-out": 0,
            "records-written": 0,
            "live-asked": 0,  # sdexec.usage-live requests this broker answered
            "live-asked-down": 0,  # ... and sent to its children
        }

    # ---- a shell's record ----

    def shell_started(self, plain):
        """A shell of job ``plain`` (f58plain) starts here: what its gathering needs (the
        job's R, the overlay's topology) is asked now, so that its end waits for neither."""
        self._job(job_number(plain)).shell_seen = True

    def shell_ended(self, plain, unit, usage, memory_max, check=None):
        """Job ``plain``'s (f58plain) shell ``unit`` on this rank ended having used ``usage``
        (a UsageRecord): gather it, and raise an ``oom`` exception on the job if it counts
        OOM kills (``memory_max``: the unit's MemoryMax, or None, for the exception's note).

        ``check``, an adopted shell's: look this rank's record up first; the one found is
        kept and nothing is sent or raised; none: as above; a failed lookup sends nothing.
        Then ``check.settle(record)`` with the usage settled.
        """
        if check is None:
            self._ended(plain, unit, usage, memory_max)
            return

        def on_reply(exc, record=None):
            settled = usage
            try:
                if record is not None:
                    settled = UsageRecord.from_json(record)
                    self.log.info(
                        f"{unit}: usage of job {plain} on rank {self.rank} was recorded "
                        "by the sdexec before: kept"
                    )
                elif exc is None or exc.errno == errno.ENOENT:
                    self._ended(plain, unit, usage, memory_max)
                else:
                    self.log.error(
                        f"{unit}: usage: cannot tell whether job {plain}'s record is written"
                        f" ({exc.strerror or exc}): left as it is"
                    )
            except Exception as bug:  # the held answers go out all the same
                self.log.error(f"{unit}: usage: {bug!r}")
            check.settle(settled)

        self._look_up(kvs_key(_dothex(job_number(plain)), self.rank), on_reply)

    def _ended(self, plain, unit, usage, memory_max):
        jobid = job_number(plain)
        self._offer(jobid, {self.rank: usage.placed(self.rank, self.host, unit)}, {}, None)
        if usage.oom_kills:
            from flux.job import job_raise_async  # flux's: not in the unit tier

            note = (
                f"rank {self.rank} ({self.host}): {usage.oom_kills} task(s) killed by the OOM "
                f"killer, " + (f"MemoryMax={memory_max}" if memory_max else "no MemoryMax set")
            )
            future = job_raise_async(self.h, jobid, OOM_TYPE, 1, note)
            self._hold(future, f"{unit}: oom exception")

    def received(self, body):
        """The payload of ``sdexec.usage-gather {"id", "rank", "rows", "missing"}`` from a
        child's sdexec, merged into the job's gathering.

        Raises:
            OSError: EPROTO, a malformed payload (nothing is merged).
        """
        try:
            jobid, sender = int(body["id"]), int(body["rank"])
            rows = {int(r): dict(row) for r, row in body.get("rows", {}).items()}
            missing = {int(r): str(why) for r, why in body.get("missing", {}).items()}
            late = bool(body.get("late", False))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise OSError(errno.EPROTO, f"usage-gather: malformed payload ({exc!r})")
        self.counts["messages-in"] += 1
        if late and jobid not in self.jobs:  # a correction of a gathering ended long ago
            self._pass_on(_Job(jobid), rows, missing, late=True)
            return
        self._offer(jobid, rows, missing, sender)

    # ---- a running job's rows, gathered on demand ----

    def gather_live(self, plain, own, wait, send):
        """Job ``plain``'s (f58plain) rows under this broker, for ``sdexec.usage-live``:
        ``own`` ({rank: row}, this rank's, read now), and each child whose subtree holds a
        job rank asked the same with LIVE_STEP_S less to wait; then ``send(rows, missing)``
        once, when all have answered or ``wait`` seconds have passed (the job ranks of a
        child that did not are missing; this rank, a job rank with no shell here, too).
        Without the job's R (or its lookup failing): this rank's rows alone. The job's
        ranks already known here (a shell of it started) are not looked up again."""
        jobid = job_number(plain)
        self.counts["live-asked"] += 1

        def have_ranks(ranks):
            self._with_topology(lambda: self._ask_down(jobid, plain, ranks, own, wait, send))

        def have_R(exc, R=None):
            if exc is not None or R is None:
                send(own, {})
            else:
                have_ranks(_ranks(R))

        known = self.jobs.get(jobid)
        if known is not None and known.ranks:
            have_ranks(known.ranks)
        else:
            self._look_up(f"{_job_dir(jobid)}.R", have_R)

    def _ask_down(self, jobid, plain, ranks, own, wait, send):
        want = expected_ranks(ranks, self.rank, self.topology)
        gather = JobGather(jobid, False, want["children"], time.monotonic(), wait)
        absent = {self.rank: "no job shell runs here"} if want["own"] and not own else {}
        gather.add(own, absent, None)
        timer = None

        def finish(expired=False):
            if finish in self.live:
                self.live.discard(finish)
                if timer is not None:
                    timer.stop()
                now = time.monotonic()
                send(*gather.take(max(now, gather.deadline()) if expired else now))

        def answered(future, child):
            self.pending.discard(future)
            try:
                body = future.get() or {}
                rows = {int(r): dict(row) for r, row in body.get("rows", {}).items()}
                missing = {int(r): str(why) for r, why in body.get("missing", {}).items()}
            except (OSError, TypeError, ValueError, AttributeError) as exc:
                why = f"rank {child}: {getattr(exc, 'strerror', None) or exc}"
                rows, missing = {}, {r: why for r in gather.children[child]}
            gather.add(rows, missing, child)
            if gather.complete:
                finish()

        self.live.add(finish)
        if gather.complete:
            finish()
            return
        timer = self.watchers.timer(wait, lambda: finish(expired=True), "usage-live")
        timer.start()
        below = {"jobid": plain, "wait": max(wait - LIVE_STEP_S, LIVE_STEP_S)}
        for child in want["children"]:
            future = self.h.rpc(LIVE_TOPIC, below, child)
            self.counts["live-asked-down"] += 1
            self.pending.add(future)
            future.then(self.watchers.guard(lambda f, c=child: answered(f, c), LIVE_TOPIC))

    # ---- one job's gathering ----

    def _job(self, jobid):
        """Job ``jobid``'s gathering here, begun (its R asked for) if new."""
        job = self.jobs.get(jobid)
        if job is None:
            job = self.jobs[jobid] = _Job(jobid)
            self._forget_old()
            self._look_up(f"{_job_dir(jobid)}.R", lambda exc, R=None: self._have_R(job, exc, R))
        return job

    def _offer(self, jobid, rows, missing, sender):
        job = self._job(jobid)
        if job.gather is None:
            job.early.append((rows, missing, sender))
            return
        job.gather.add(rows, missing, sender)
        self._advance(job)

    def _have_R(self, job, exc, R):
        """The job's R answered: the ranks to gather, once the topology is known too; none
        (no R, an error): each message goes on as it comes."""
        if exc is not None:
            self.log.error(f"usage of job {job.jobid}: R: {exc.strerror or exc}: ungathered")
        elif R is None:
            self.log.debug(f"usage of job {job.jobid}: no R: its records go on as they come")
        job.ranks = _ranks(R) if R is not None else set()
        self._with_topology(lambda: self._begin(job))

    def _with_topology(self, then):
        """``then()`` once this broker's subtree (``overlay.topology``) is known: now, or
        when it is answered."""
        if self.topology is not None:
            then()
            return
        self._waiting_topology.append(then)
        if len(self._waiting_topology) == 1:
            self._ask_topology()

    def _ask_topology(self):
        def answered(future):
            self.pending.discard(future)
            try:
                self.topology = future.get()
            except OSError as exc:
                self.log.error(f"overlay.topology: {exc.strerror or exc}: gathering alone")
                self.topology = {"rank": self.rank, "size": 1, "children": []}
            waiting, self._waiting_topology = self._waiting_topology, []
            for then in waiting:
                then()

        future = self.h.rpc("overlay.topology", {"rank": self.rank})
        self.pending.add(future)
        future.then(self.watchers.guard(answered, "overlay.topology"))

    def _begin(self, job):
        want = expected_ranks(job.ranks, self.rank, self.topology)
        own = want["own"] or not job.ranks  # no R: this rank's row, if any, alone
        job.gather = JobGather(
            job.jobid, own, want["children"], time.monotonic(), WAIT_MAX_S, rank=self.rank
        )
        early, job.early = job.early, []
        for rows, missing, sender in early:
            job.gather.add(rows, missing, sender)
        if not job.ranks:
            job.gather.add({}, {}, None)  # nothing to wait for
        self._advance(job)

    def _advance(self, job):
        """Pass on what is due; else look at the children's health in CHECK_S."""
        if not job.ended and job.gather.complete:  # after every add: complete stays so
            job.ended = True
            self.ended += 1
        now = time.monotonic()
        if job.gather.due(now):
            late = job.gather.sent
            rows, missing = job.gather.take(now)
            if rows or missing:
                self._pass_on(job, rows, missing, late)
            if job.timer is not None:
                job.timer.stop()
        elif job.timer is None:
            job.timer = self.watchers.timer(CHECK_S, lambda: self._check(job), "usage-gather")
            job.timer.start()
        else:
            job.timer.reset(CHECK_S)

    def _check(self, job):
        """CHECK_S passed with ranks awaited: mark those of children that are down, and this
        rank's own if no shell of the job runs here, missing; wait on for the others."""

        def answered(future):
            self.pending.discard(future)
            try:
                health = future.get()
            except OSError as exc:
                self.log.error(f"overlay.health: {exc.strerror or exc}")
                health = {"children": []}
            status = {c["rank"]: c["status"] for c in health.get("children", [])}
            own, children = job.gather.awaited()
            for child in children:
                if status.get(child) in DOWN:
                    why = f"rank {child} {status[child]}"
                    job.gather.add({}, {r: why for r in job.gather.children[child]}, child)
            job.checks += 1
            slow = job.checks * CHECK_S >= OWN_WAIT_S  # its shell may never start here
            if own and not self._runs_here(job.jobid) and (job.shell_seen or slow):
                job.gather.add({}, {self.rank: "no job shell ended on this rank"}, None)
            self._advance(job)

        future = self.h.rpc("overlay.health")
        self.pending.add(future)
        future.then(self.watchers.guard(answered, "overlay.health"))

    def _runs_here(self, jobid):
        """Whether a shell of job ``jobid`` runs here still."""
        for p in self.registry:
            plain = shell_job(p)
            if plain is not None and job_number(plain) == jobid and not p.unit.finished:
                return True
        return False

    def _pass_on(self, job, rows, missing, late=False):
        """Up to the parent's sdexec (``late``: after the job's message went), or written
        at rank 0."""
        if self.rank == 0:
            self._write(job, rows, missing)
            return
        import flux.constants  # flux's: not in the unit tier

        payload = {
            "id": job.jobid,
            "rank": self.rank,
            "rows": {str(r): row for r, row in rows.items()},
            "missing": {str(r): why for r, why in missing.items()},
            "late": late,
        }
        future = self.h.rpc(GATHER_TOPIC, payload, flux.constants.FLUX_NODEID_UPSTREAM)
        self.counts["messages-out"] += 1
        self._hold(future, f"usage of job {job.jobid}: to the parent broker")

    def _write(self, job, rows, missing):
        """Rank 0: the rows and marks new since the last write in one commit, then the
        job's totals as its memo (a memo's null deletes a key: ``missing`` once none is);
        a correction of a gathering forgotten here is written without a memo."""
        import flux.kvs  # flux's: not in the unit tier

        txn = flux.kvs.KVSTxn(self.h, kvs_dir(_dothex(job.jobid)))
        for rank, row in rows.items():
            txn.put(str(rank), row)
        for rank, why in missing.items():
            txn.put(str(rank), {"rank": rank, "missing": why})
        self._hold(flux.kvs.commit_async(self.h, _kvstxn=txn), f"usage of job {job.jobid}")
        self.counts["records-written"] += 1
        if job.gather is None:
            self.log.debug(f"usage of job {job.jobid}: a late record, written without a memo")
            return
        totals = dict(job_totals(job.gather.rows, job.gather.missing))
        totals.setdefault("missing", None)
        self.memos.post(job.jobid, {"sdexec": totals}, f"usage of job {job.jobid}: memo")

    def _forget_old(self):
        """Keep at most REMEMBERED gatherings that ended (the oldest go first): counted,
        not looked for, so a new job does not walk the REMEMBERED kept."""
        excess = self.ended - REMEMBERED
        if excess > 0:
            old = list(islice((j for j, job in self.jobs.items() if job.ended), excess))
            for jobid in old:
                del self.jobs[jobid]
            self.ended -= len(old)

    def stats(self):
        """``flux module stats sdexec``'s ``usage-gather``: messages in and out, records
        written, live gatherings answered and asked of children, gatherings waiting, and the
        most messages one child sent for one job."""
        gathers = [job.gather for job in self.jobs.values() if job.gather is not None]
        most = max((max(g.received_from.values(), default=0) for g in gathers), default=0)
        waiting = sum(1 for job in self.jobs.values() if not (job.gather and job.gather.complete))
        return dict(self.counts, waiting=waiting, **{"most-from-one-child": most})

    def close(self):
        """Unload: what each gathering holds goes on now (the rest follows as corrections
        to whoever comes next), each live one is answered with what it has; futures still
        out are let go."""
        for finish in list(self.live):
            finish()
        for job in self.jobs.values():
            if job.timer is not None:
                job.timer.stop()
            if job.gather is not None and not job.gather.sent:
                rows, missing = job.gather.rows, job.gather.missing
            elif job.gather is None:
                rows, missing = {}, {}
                for early_rows, early_missing, _ in job.early:
                    rows.update(early_rows)
                    missing.update(early_missing)
            else:
                continue
            if rows or missing:
                self._pass_on(job, rows, missing)
        self.pending.clear()

    # ---- flux ----

    def _look_up(self, key, on_reply):
        """Look ``key`` up without waiting; from the reactor, ``on_reply(None, value)``,
        ``on_reply(None)`` when absent, or ``on_reply(OSError)``."""
        import flux.kvs  # flux's: not in the unit tier
        from flux.core.inner import ffi
        from flux.future import Future

        def done(f):
            self.pending.discard(f)
            exc, value = None, None
            try:
                valp = ffi.new("char *[1]")
                flux.kvs.RAW.flux_kvs_lookup_get(f, valp)
                value = json.loads(ffi.string(valp[0]).decode()) if valp[0] else None
                if not isinstance(value, dict):
                    raise OSError(errno.EPROTO, f"{key}: not an object")
            except OSError as err:
                exc = None if err.errno == errno.ENOENT else err
            except Exception as err:  # a callback must not raise into the reactor
                exc = OSError(errno.EPROTO, f"{key}: {err!r}")
            on_reply(exc, value if exc is None else None)

        try:
            future = Future(flux.kvs.RAW.flux_kvs_lookup(self.h, None, 0, key))
        except Exception as exc:  # not sent
            on_reply(exc if isinstance(exc, OSError) else OSError(errno.EINVAL, repr(exc)))
            return
        self.pending.add(future)
        future.then(done)

    def _hold(self, future, what):
        """Keep ``future`` until it is fulfilled; log its error."""

        def done(f):
            self.pending.discard(f)
            try:
                f.get()
            except OSError as exc:
                self.log.error(f"{what}: {exc.strerror or exc}")

        self.pending.add(future)
        future.then(done)


class _Job:
    """One job's gathering at this broker: its R's ranks once looked up, the messages that
    came before, the JobGather once the ranks and the topology are known, its timer, and
    what its health checks go by."""

    __slots__ = ("jobid", "ranks", "early", "gather", "timer", "shell_seen", "checks", "ended")

    def __init__(self, jobid):
        self.jobid, self.ranks, self.early, self.gather, self.timer = jobid, None, [], None, None
        self.shell_seen = False  # a shell of the job started here (under this sdexec)
        self.checks = 0  # health checks made while ranks were awaited
        self.ended = False  # its gathering is complete (counted in JobUsage.ended)


def _dothex(jobid):
    """Job id ``jobid`` in the KVS's dotted-hex form (``0000.0012.3400.0000``)."""
    h = f"{jobid:016x}"
    return ".".join(h[i : i + 4] for i in range(0, 16, 4))


def _job_dir(jobid):
    return f"job.{_dothex(jobid)}"


def _ranks(R):
    """The ranks of an R (RFC 20 ``execution.R_lite[].rank`` idsets)."""
    ranks = set()
    for entry in R.get("execution", {}).get("R_lite", []):
        ranks |= set(parse_idset(entry["rank"]))
    return ranks
