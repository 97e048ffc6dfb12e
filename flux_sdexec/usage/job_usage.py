"""A job's usage gathered up the TBON to rank 0: the flux side of ``usage/gatherings.py``.

When a job shell's unit ends, its rank's record goes into this broker's ``Gatherings``
(``usage/gatherings.py``, which owns the rules); this adapter performs what it asks: look
up the job's R and this broker's subtree (``overlay.topology``), arm each job's check timer,
ask ``overlay.health``, send a job's message to the parent broker's sdexec
(``sdexec.usage-gather``, sent upstream), and on rank 0 write the job's record to its KVS
directory in one commit (``job.<id>.sdexec-usage.<rank>``, a row per rank, a missing rank
as ``{"rank", "missing": why}``) and the job's totals as a memo (``{"sdexec": {"cpu",
"maxmem", ...}}``: ``flux jobs -o '{user.sdexec.cpu}'``). A memo of a job already inactive
is refused by the job manager (logged at debug level): the KVS record stays. OOM kills of a
job shell's unit become a non-fatal job exception of type ``oom``, raised by the rank at
once (``job-manager.raise``); the shell's end waits for its answer too, so the exception is
in the job's eventlog before its finish.

Rows handed in here (this rank's shell's, a child's message) are answered once handed on:
sent up and answered by the parent, written at rank 0 (the commit answered, the memo posted
before it), or merged into a gathering that awaits the job's other ranks; a gathering that
cannot begin yet (the job's R, or at rank 0 its record read back, being looked up) holds
them until it can. So the answer of a job's last shell reaches job-exec after its memo is
posted, while the job is active. Each wait on a parent's or the KVS's answer is bounded
(HAND_ON_S); an unload lets go of all of them. Rank 0 has one record commit out at a time:
the records that come meanwhile go in one transaction when it is answered
(``usage/record_commits.py``), each job's memo posted as its record's commit is sent; a
job's record is read back only after its commits are answered. A broker with no children
(a leaf, rank 0 aside) looks up no R: its rows go up as they come.

A running job's rows are gathered the same way on demand (``flux sdexec usage [--watch]``):
``sdexec.usage-live`` to rank 0 asks each child whose subtree holds a job rank, each of them
its own, with a shorter wait at each level; every broker answers its parent once with its
subtree's rows, those of a child that did not answer in time marked missing.

An adopted job shell's record is looked up first (``usage/accounting.py`` says when): one
found is kept and nothing is sent or raised (a missing mark found is no record). A job begun
under the sdexec before this one has its record read back at rank 0, a lookup per rank,
before its rows are gathered. Every timer is destroyed once done with (the flux handle keeps
it otherwise), and every callback is shielded. Nothing here blocks or raises into the
caller: a failure is logged. flux only inside the methods that talk to it.
"""

import errno
import json
import time

from flux_sdexec.core.shelljobs import job_number, shell_job
from flux_sdexec.core.values import parse_idset
from flux_sdexec.usage.gather_events import (
    ArmCheck,
    AskHealth,
    CancelCheck,
    CheckDue,
    HealthFound,
    LookUpRanks,
    OOM_TYPE,
    parse_gather,
    RaiseOom,
    RanksFound,
    ReadRecord,
    RecordRead,
    SendUp,
    ShellEnded,
    ShellStarted,
    SubtreeFound,
    WriteRecord,
)
from flux_sdexec.usage.gatherings import Gatherings
from flux_sdexec.usage.job_gather import JobGather, expected_ranks
from flux_sdexec.usage.record import UsageRecord, dothex, kvs_key
from flux_sdexec.usage.record_commits import RecordCommits

GATHER_TOPIC = "sdexec.usage-gather"
RAISE_TOPIC = "job-manager.raise"  # a job exception: {"id", "type", "severity", "note"}
LIVE_TOPIC = "sdexec.usage-live"
LIVE_WAIT_S = 2.0  # how long a live gathering waits for the subtree's rows, by default
LIVE_WAIT_MAX_S = 60.0  # ... at most
LIVE_STEP_S = 0.25  # each level down the tree waits this much less than the one above
HAND_ON_S = 60.0  # the longest rows handed in wait for the parent's (or the KVS's) answer


class JobUsage:
    """The job side of one sdexec's accounting.

    Args:
        handle: the module's flux handle.
        log: the module's BrokerLogger.
        rank: this broker's rank; host: this node's host name.
        watchers: ``broker.watchers.Watchers`` (timers, futures' shielded callbacks).
        memos: ``broker.memo.JobMemos`` (``post``), the job's memo goes through it.
        registry: the service's Registry: whether a shell of a job still runs here.
    """

    def __init__(self, handle, log, rank, host, watchers, memos, registry):
        self.h, self.log, self.rank = handle, log, rank
        self.watchers, self.memos, self.registry = watchers, memos, registry
        self.gatherings = Gatherings(rank, host, time.time())
        self.timers = {}  # job id -> its check timer, while armed
        self.pending = set()  # futures in flight
        self.handing = {}  # job id -> what waits for its rows handed in to be handed on
        self.holding = {}  # future held until answered -> what waits for its answer
        self.topology = None  # this broker's subtree (overlay.topology), once answered
        self._waiting_topology = []  # what waits for the topology: callables
        self.live = set()  # the live gatherings not answered yet (their finish callables)
        self.commits = RecordCommits(HAND_ON_S)  # rank 0's record writes, batched
        self.unwritten = {}  # job id -> its record writes not committed yet (rank 0)
        self.after_written = {}  # job id -> what waits for them (a read back): callables
        self.counts = {
            "live-asked": 0,  # sdexec.usage-live requests this broker answered
            "live-asked-down": 0,  # ... and sent to its children
            "record-commits": 0,  # rank 0: KVS commits of records (several jobs' each, at times)
        }

    # ---- a shell's record ----

    def shell_started(self, plain):
        """A shell of job ``plain`` (f58plain) starts here: what its gathering needs (the
        job's R, the overlay's topology) is asked now, so that its end waits for neither."""
        self._handle(ShellStarted(job_number(plain)))

    def shell_ended(self, plain, unit, usage, memory_max, settle, look_up_first=False):
        """Job ``plain``'s (f58plain) shell ``unit`` on this rank ended having used ``usage``
        (a UsageRecord): gather it, and raise an ``oom`` exception on the job if it counts
        OOM kills (``memory_max``: the unit's MemoryMax, or None, for the exception's note);
        ``settle(record)`` once it is handed on (the module docstring).

        ``look_up_first``, an adopted shell's: look this rank's record up first; the one
        found is kept (``settle`` with it) and nothing is sent or raised; none: as above; a
        failed lookup sends nothing.
        """
        ended, jobid = ShellEnded(plain, unit, usage, memory_max), job_number(plain)
        if not look_up_first:
            self._hand_in(jobid, ended, lambda: settle(usage))
            return

        def on_reply(exc, record=None):
            try:
                if record is not None and "missing" not in record:
                    self.log.info(
                        f"{unit}: usage of job {plain} on rank {self.rank} was recorded "
                        "by the sdexec before: kept"
                    )
                    settle(UsageRecord.from_json(record))
                    return
                if exc is None or exc.errno == errno.ENOENT:
                    self._hand_in(jobid, ended, lambda: settle(usage))
                    return
                self.log.error(
                    f"{unit}: usage: cannot tell whether job {plain}'s record is written"
                    f" ({exc.strerror or exc}): left as it is"
                )
            except Exception as bug:  # the held answers go out all the same
                self.log.error(f"{unit}: usage: {bug!r}")
            settle(usage)

        self._look_up(kvs_key(dothex(jobid), self.rank), on_reply)

    def received(self, body, then):
        """The payload of ``sdexec.usage-gather`` from a child's sdexec, merged into the
        job's gathering; ``then()`` once handed on (the module docstring).

        Raises:
            RequestError: EPROTO, a malformed payload (nothing is merged, ``then`` dropped).
        """
        came = parse_gather(body)
        self._hand_in(came.jobid, came, then)

    def _hand_in(self, jobid, event, then):
        """Rows of job ``jobid`` handed in (``event``): ``then()`` once handed on."""
        self.handing.setdefault(jobid, []).append(then)
        self._handle(event)

    def _handle(self, event):
        """Feed ``event`` to the gatherings and perform what they ask, in order; then what
        waits for a job's rows to be handed on waits for the send or write that carries
        them, or goes now (merged, awaiting the job's other ranks), unless its gathering
        cannot begin yet."""
        carried, now = {}, time.monotonic()
        if self.gatherings.leaf is None and self.topology is not None:
            self.gatherings.handle(SubtreeFound(self.topology), now)
        for action in self.gatherings.handle(event, now):
            after = self._perform(action)
            if after is not None:
                carried.setdefault(action.jobid, []).append(after)
        for jobid in [j for j in self.handing if not self.gatherings.waiting_to_begin(j)]:
            waiting = self.handing.pop(jobid)
            if jobid in carried:
                self._after_all(carried[jobid], waiting)
            else:
                self._call(waiting)

    def _after_all(self, afters, waiting):
        """``waiting`` called once every list of ``afters`` is called (each a list of what
        waits for one answer: the commit or send that carries the rows, the oom
        exception's raise)."""
        left = len(afters)

        def one_done():
            nonlocal left
            left -= 1
            if not left:
                self._call(waiting)

        for after in afters:
            after.append(one_done)

    def _perform(self, action):
        """One action of the gatherings: its RPC, KVS commit, memo or timer; for a send or
        write or an oom exception, the list of what waits for its answer."""
        if isinstance(action, WriteRecord):
            return self._write(action)
        if isinstance(action, SendUp):
            import flux.constants  # flux's: not in the unit tier

            future = self.h.rpc(GATHER_TOPIC, action.payload, flux.constants.FLUX_NODEID_UPSTREAM)
            what = f"usage of job {action.jobid}: to the parent broker"
            return self._await_answer(future, what, HAND_ON_S)
        if isinstance(action, RaiseOom):  # answered before the rows are handed on
            raised = {"id": action.jobid, "type": OOM_TYPE, "severity": 1, "note": action.note}
            future = self.h.rpc(RAISE_TOPIC, raised)
            return self._await_answer(
                future, f"usage of job {action.jobid}: oom exception", HAND_ON_S
            )
        if isinstance(action, LookUpRanks):
            self._look_up_ranks(action.jobid)
        elif isinstance(action, ReadRecord):
            self._read_record(action.jobid, action.ranks)
        elif isinstance(action, ArmCheck):
            self._arm(action.jobid, action.seconds)
        elif isinstance(action, CancelCheck):
            timer = self.timers.pop(action.jobid, None)
            if timer is not None:
                timer.destroy()
        elif isinstance(action, AskHealth):
            self._ask_health(action.jobid)
        else:
            raise TypeError(f"not a gathering action: {action!r}")
        return None

    def _write(self, action):
        """Rank 0: the record's entries committed now, or with the next batch while a
        commit is out (``usage/record_commits.py``); returns what waits for the answer."""
        waiters = []
        self.unwritten[action.jobid] = self.unwritten.get(action.jobid, 0) + 1
        batch, timeout = self.commits.add((action, waiters), time.monotonic())
        if batch:
            self._commit(batch, timeout)
        return waiters

    def _commit(self, batch, timeout):
        """The entries of every write of ``batch`` (``(WriteRecord, waiters)`` each) in one
        transaction, keys in full, then each job's memo, if any (``job-manager.memo`` takes
        one job a request); once the commit is answered (or ``timeout`` seconds passed),
        each write's waiters, then the next batch."""
        import flux.kvs  # flux's: not in the unit tier

        what = "usage of job " + ", ".join(str(action.jobid) for action, _ in batch)
        try:
            txn = flux.kvs.KVSTxn(self.h)
            for action, _ in batch:
                for key, value in action.entries.items():
                    txn.put(f"{action.directory}.{key}", value)
            future = flux.kvs.commit_async(self.h, _kvstxn=txn)
            self.counts["record-commits"] += 1
        except Exception as exc:  # not sent: its waiters go all the same, the next batch too
            self.log.error(f"{what}: commit: {exc!r}")
            future = None
        for action, _ in batch:
            if action.memo is not None:
                self.memos.post(action.jobid, action.memo, f"usage of job {action.jobid}: memo")
        if future is None:
            self._committed(batch)
            return
        self._await_answer(future, what, timeout).append(lambda: self._committed(batch))

    def _committed(self, batch):
        """``batch``'s commit answered: its waiters go, a job's record read back waits no
        longer once its writes are all committed; then the writes that waited, committed."""
        for action, waiters in batch:
            left = self.unwritten.pop(action.jobid) - 1
            if left:
                self.unwritten[action.jobid] = left
            else:
                self._call(self.after_written.pop(action.jobid, []))
            self._call(waiters)
        batch, timeout = self.commits.answered(time.monotonic())
        if batch:
            self._commit(batch, timeout)

    def _look_up_ranks(self, jobid):
        """The job's R, then the topology: RanksFound (no R, an error, or an R without
        ranks: no ranks)."""

        def have_R(exc, R=None):
            ranks, started = frozenset(), None
            if exc is not None:
                self.log.error(f"usage of job {jobid}: R: {exc.strerror or exc}: ungathered")
            elif R is None:
                self.log.debug(f"usage of job {jobid}: no R: its records go on as they come")
            else:
                try:
                    ranks, started = frozenset(_ranks(R)), _started(R)
                except (KeyError, TypeError, ValueError, AttributeError) as bad:
                    self.log.error(f"usage of job {jobid}: R: {bad!r}: ungathered")
            found = RanksFound
            self._with_topology(lambda: self._handle(found(jobid, ranks, self.topology, started)))

        self._look_up(f"job.{dothex(jobid)}.R", have_R)

    def _read_record(self, jobid, ranks):
        """Rank 0: each rank's entry of the job's record, then RecordRead (a lookup that
        fails counts as no entry, and says so); after the job's writes not committed yet."""
        if jobid in self.unwritten:
            self.after_written.setdefault(jobid, []).append(lambda: self._read_record(jobid, ranks))
            return
        directory = dothex(jobid)
        entries, left = {}, set(ranks)

        def have(rank, exc, entry=None):
            if exc is not None:
                self.log.error(f"usage of job {jobid}: rank {rank}: {exc.strerror or exc}")
            elif entry is not None:
                entries[rank] = entry
            left.discard(rank)
            if not left:
                self._handle(RecordRead(jobid, entries))

        for rank in sorted(ranks):
            self._look_up(kvs_key(directory, rank), lambda *a, r=rank: have(r, *a))

    def _arm(self, jobid, seconds):
        """Job ``jobid``'s check in ``seconds``: its one timer started, or reset."""
        timer = self.timers.get(jobid)
        if timer is not None:
            timer.reset(seconds)
            return

        def due():
            self.timers.pop(jobid).destroy()
            self._handle(CheckDue(jobid))

        timer = self.timers[jobid] = self.watchers.timer(seconds, due, "usage-gather")
        timer.start()

    def _ask_health(self, jobid):
        """``overlay.health``, then HealthFound (an error: no child's status)."""

        def answered(future):
            self.pending.discard(future)
            try:
                status = {c["rank"]: c["status"] for c in future.get().get("children", [])}
            except (OSError, KeyError, TypeError, AttributeError) as exc:
                self.log.error(f"overlay.health: {getattr(exc, 'strerror', None) or exc!r}")
                status = {}
            self._handle(HealthFound(jobid, status, self._runs_here(jobid)))

        future = self.h.rpc("overlay.health")
        self.pending.add(future)
        future.then(self.watchers.shield(answered, "overlay.health"))

    def _runs_here(self, jobid):
        """Whether a shell of job ``jobid`` runs here still."""
        for p in self.registry:
            plain = shell_job(p)
            if plain is not None and job_number(plain) == jobid and not p.unit.finished:
                return True
        return False

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

        known = self.gatherings.ranks_of(jobid)
        if known is not None:
            have_ranks(known)
        else:
            self._look_up(f"job.{dothex(jobid)}.R", have_R)

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
                    timer.destroy()
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
            future.then(self.watchers.shield(lambda f, c=child: answered(f, c), LIVE_TOPIC))

    # ---- the subtree ----

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
        future.then(self.watchers.shield(answered, "overlay.topology"))

    def stats(self):
        """``flux module stats sdexec``'s ``usage-gather``: messages in and out, records
        written and the commits that carried them, live gatherings answered and asked of
        children, gatherings waiting, and the most messages one child sent for one job."""
        return dict(self.gatherings.stats(), **self.counts)

    def close(self):
        """Unload: what each gathering holds goes on now (the rest follows as corrections
        to whoever comes next), each live one is answered with what it has, what waits for
        rows to be handed on goes; futures still out are let go."""
        for finish in list(self.live):
            finish()
        for action in self.gatherings.unloading():
            self._perform(action)
        waiting = self.commits.drain()
        if waiting:
            self._commit(waiting, HAND_ON_S)
        self.after_written.clear()
        waiting = [*self.handing.values(), *self.holding.values()]
        self.handing, self.holding = {}, {}
        for then in waiting:
            self._call(then)
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
        future.then(self.watchers.shield(done, key))

    def _await_answer(self, future, what, timeout=-1.0):
        """Keep ``future`` until it is answered (or ``timeout`` seconds passed); log its
        error; returns the list of what waits for it (each called then, once)."""
        after = []

        def done(f):
            self.holding.pop(f, None)
            try:
                f.get()
            except OSError as exc:
                self.log.error(f"{what}: {exc.strerror or exc}")
            self._call(after)

        self.holding[future] = after
        future.then(self.watchers.shield(done, what), timeout=timeout)
        return after

    def _call(self, waiting):
        """Call each of ``waiting`` once, emptying it; one that raises is logged."""
        while waiting:
            then = waiting.pop(0)
            try:
                then()
            except Exception as exc:  # the others go all the same
                self.log.error(f"usage: handed on: {exc!r}")


def _ranks(R):
    """The ranks of an R (RFC 20 ``execution.R_lite[].rank`` idsets)."""
    ranks = set()
    for entry in R.get("execution", {}).get("R_lite", []):
        ranks |= set(parse_idset(entry["rank"]))
    return ranks


def _started(R):
    """When the job of an R started (``execution.starttime``, seconds since the epoch), or
    None."""
    started = R.get("execution", {}).get("starttime")
    return float(started) if started else None
