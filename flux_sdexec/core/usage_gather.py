"""Gathering a job's usage rows up the TBON: what each broker waits for, merges and sends.

Each broker with a job rank in its subtree keeps one ``JobGather`` per job: its own row (if
its rank is in the job) and what each child whose subtree holds a job rank sends, merged and
sent up as ONE message once every job rank below has a row or a mark, or the wait is over;
what arrives later goes up alone as a correction. Rank 0 ends with the job's record
(``rows``, one placed ``UsageRecord`` JSON per rank, and ``missing``, why a rank has none)
and its memo (``job_totals``).

``Gatherings`` holds one broker's gatherings: events in (a shell started or ended, rows came,
the job's ranks found, a record read back, a check due, the children's health found),
actions out (look the ranks up, read a record back, arm or cancel a job's check, ask the
health, send up, write the record and memo, raise an ``oom`` exception). The wait begins
with the job's first row or mark here, not with its start: a job may run for days. From
then, while some rank has not reported, the children's health is looked at every CHECK_S:
a child lost or offline has its subtree's job ranks marked missing; this rank's own row
too, when no shell of the job runs here and one ran (under this sdexec) or none came for
OWN_WAIT_S. A rank still up is waited for (a job's ranks may end far apart), at most
WAIT_MAX_S.

A job that started before this sdexec loaded (an upgrade, a restart with the jobs kept) had
its gathering begun by the sdexec before, which may have sent or written part of it: here a
broker other than rank 0 passes each of its messages on as it comes, and rank 0 reads back
what the job's record already holds before it gathers the rest.

The adapter (``usage/job_usage.py``) owns RPCs, timers and the KVS; this module owns the
rules and the ``sdexec.usage-gather`` payload. Pure: stdlib only; imports only the core.
"""

import dataclasses
import errno
from collections import OrderedDict
from itertools import islice
from typing import Optional

from flux_sdexec.core.errors import RequestError
from flux_sdexec.core.shelljobs import job_number
from flux_sdexec.core.usage_record import FIGURES, kvs_dir, summed, total
from flux_sdexec.core.values import encode_idset

WAIT_S = 30.0  # default bound on waiting for a subtree's rows (seconds)


def subtree_ranks(topology):
    """Every rank of ``topology`` (flux's ``overlay.topology`` shape: ``{"rank", "size",
    "children": [same shape, ...]}``)."""
    ranks, todo = set(), [topology]
    while todo:
        node = todo.pop()
        ranks.add(node["rank"])
        todo.extend(node.get("children", ()))
    return ranks


def expected_ranks(job_ranks, rank, topology):
    """What broker ``rank`` gathers of a job on ``job_ranks``: ``{"own": bool, "children":
    {child rank: job ranks in its subtree}}``, children with no job rank left out.

    Raises:
        ValueError: ``topology`` is not rooted at ``rank``.
    """
    if topology["rank"] != rank:
        raise ValueError(f"topology is rooted at {topology['rank']}, not at rank {rank}")
    job_ranks = set(job_ranks)
    children = {}
    for child in topology.get("children", ()):
        held = subtree_ranks(child) & job_ranks
        if held:
            children[child["rank"]] = held
    return {"own": rank in job_ranks, "children": children}


def _nulls(row):
    """How many of the record's figures ``row`` has null."""
    return sum(row.get(figure) is None for figure in FIGURES)


class JobGather:
    """One job's gathering at one broker. The adapter ``add``s each message, and ``take``s
    and sends when ``due``; once ``sent``, it takes after each ``add`` (a correction). It is
    complete once every job rank expected here has a row or a mark, however many messages
    brought them (a child's sdexec unloading sends what it holds, the rest follows).

    Args:
        jobid: the job's integer id.
        own_expected: this broker's rank is one of the job's.
        children: ``{child rank: job ranks in its subtree}`` (``expected_ranks``).
        started: when the wait began (the adapter's clock, seconds); None: not yet
            (``start``).
        wait_s: how long to wait for the rows before marking the rest missing.
        rank: this broker's rank; needed when ``own_expected``, to mark its own row
            missing once the wait is over.

    Raises:
        ValueError: ``own_expected`` without ``rank``.
    """

    def __init__(self, jobid, own_expected, children, started=None, wait_s=WAIT_S, *, rank=None):
        if own_expected and rank is None:
            raise ValueError("own_expected needs this broker's rank")
        self.jobid = jobid
        self.own_expected = own_expected
        self.children = {child: set(ranks) for child, ranks in children.items()}
        self.started = started
        self.wait_s = wait_s
        self.rank = rank
        self._rows = {}  # rank -> row: the best seen
        self._missing = {}  # rank -> why it has no row, while it has none
        self._untaken = set()  # ranks whose row or mark the next take gives
        self._received = {}  # child rank -> messages from it
        self._sent = False

    def start(self, now):
        """The wait begins at ``now``, unless it began before."""
        if self.started is None:
            self.started = now

    def recall(self, rows, missing):
        """What was given before this gathering began (the job's record, read back): kept
        as ``add`` keeps it, and never given again by a take."""
        self.add(rows, missing, None)
        self._untaken.clear()

    def add(self, rows, missing, sender):
        """Merge one message: ``rows`` ({rank: placed record JSON}), ``missing`` ({rank:
        reason}), from child ``sender`` (None: this broker's own row). Of two rows of a
        rank the one with fewer null figures stays (a tie: the first); a row replaces a
        missing mark, and a mark never replaces a row."""
        if sender is not None:
            self._received[sender] = self._received.get(sender, 0) + 1
        for rank, row in rows.items():
            kept = self._rows.get(rank)
            if kept is None or _nulls(row) < _nulls(kept):
                self._rows[rank] = row
                self._missing.pop(rank, None)
                self._untaken.add(rank)
        for rank, why in missing.items():
            if rank not in self._rows and rank not in self._missing:
                self._missing[rank] = why
                self._untaken.add(rank)

    def expected(self):
        """Every job rank gathered here."""
        ranks = set().union(*self.children.values())
        if self.own_expected:
            ranks.add(self.rank)
        return ranks

    def unreported(self):
        """The job ranks gathered here with neither a row nor a mark yet."""
        return self.expected() - self._rows.keys() - self._missing.keys()

    @property
    def complete(self):
        """Every job rank gathered here has a row or a mark."""
        return not self.unreported()

    def deadline(self):
        """When the wait is over (None: it has not begun)."""
        return None if self.started is None else self.started + self.wait_s

    def over(self, now):
        """The wait began and is over."""
        return self.started is not None and now >= self.deadline()

    def due(self, now):
        """Complete, or the wait is over."""
        return self.complete or self.over(now)

    def take(self, now):
        """What to send up (or write, at rank 0) now: ``(rows, missing)``, each row or mark
        given once (nothing new: two empty dicts). Once the wait is over, a job rank
        expected but not reported is marked missing ("no record within 30 s"); a row that
        comes later, or a better duplicate, is given alone by the next take."""
        if self.over(now):
            why = f"no record within {self.wait_s:g} s"
            for rank in self.unreported():
                self._missing[rank] = why
                self._untaken.add(rank)
        rows = {r: self._rows[r] for r in sorted(self._untaken) if r in self._rows}
        missing = {r: self._missing[r] for r in sorted(self._untaken) if r in self._missing}
        self._untaken.clear()
        self._sent = True
        return rows, missing

    @property
    def sent(self):
        """A take has given this job's message."""
        return self._sent

    def awaited(self):
        """Who has not reported yet: ``(own row awaited, {child rank with a job rank
        unreported})``."""
        unreported = self.unreported()
        children = {child for child, ranks in self.children.items() if ranks & unreported}
        return self.rank in unreported, children

    @property
    def rows(self):
        """Every row kept so far: ``{rank: row}``."""
        return dict(self._rows)

    @property
    def missing(self):
        """Every rank marked missing and still without a row: ``{rank: why}``."""
        return dict(self._missing)

    @property
    def received_from(self):
        """Messages received per child rank: ``{child rank: count}``."""
        return dict(self._received)


def job_totals(rows, missing):
    """The job's memo from its ``rows`` and ``missing`` (``JobGather.take`` at rank 0,
    accumulated), built on ``usage_record.total``; a figure no rank gave is None:

    - ``cpu``: user and system CPU seconds, summed; ``cpu_user``, ``cpu_sys``: each alone
    - ``maxmem``: the largest rank's ``memory_peak`` (bytes); ``maxmem_rank``: that rank
    - ``mem_sum``: ``memory_peak`` summed (bytes)
    - ``tasks``: the largest ``tasks_peak``
    - ``oom``: ``oom_kills`` summed
    - ``ranks``: how many ranks gave a row
    - ``missing``: the ranks of ``missing`` without a row, an RFC 22 idset (``"3,5-7"``);
      absent when none
    """
    records = [rows[rank] for rank in sorted(rows)]
    t = total(records)
    cpu = [t[key] for key in ("cpu_user_s", "cpu_sys_s") if t[key] is not None]
    memo = {
        "cpu": round(sum(cpu), 6) if cpu else None,
        "cpu_user": t["cpu_user_s"],
        "cpu_sys": t["cpu_sys_s"],
        "maxmem": t["memory_peak"],
        "mem_sum": summed(records, "memory_peak"),
        "maxmem_rank": t["memory_peak_rank"],
        "tasks": t["tasks_peak"],
        "oom": t["oom_kills"],
        "ranks": t["ranks"],
    }
    absent = missing.keys() - rows.keys()
    if absent:
        memo["missing"] = encode_idset(absent)
    return memo


# ---- one broker's gatherings: events in, actions out ----

CHECK_S = 5.0  # while a job's gathering waits: how often its children's health is looked at
OWN_WAIT_S = 60.0  # how long this rank's own record is awaited when no shell of it ran here
WAIT_MAX_S = 3600.0  # the longest a rank still up is waited for
REMEMBERED = 1024  # gatherings ended that are kept for late corrections
DOWN = ("lost", "offline")  # overlay.health's words for a child that is gone
OOM_TYPE = "oom"  # the type of the job exception raised for OOM kills


@dataclasses.dataclass(frozen=True)
class ShellStarted:
    """A shell of job ``jobid`` starts on this rank (under this sdexec)."""

    jobid: int


@dataclasses.dataclass(frozen=True)
class ShellEnded:
    """Job ``plain``'s (f58plain) shell ``unit`` ended on this rank having used ``record``
    (a UsageRecord); ``memory_max``: the unit's MemoryMax, or None."""

    plain: str
    unit: str
    record: object
    memory_max: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class RowsCame:
    """Rows and missing marks of job ``jobid``: this rank's own (``sender`` None) or a
    child's message (``late``: a correction sent after the child's message went)."""

    jobid: int
    rows: dict
    missing: dict
    sender: Optional[int] = None
    late: bool = False


@dataclasses.dataclass(frozen=True)
class RanksFound:
    """Job ``jobid``'s ranks, from its R (empty: no R, or it could not be read), this
    broker's subtree (``overlay.topology``), and when the job started (R's
    ``execution.starttime``, seconds since the epoch; None: unknown)."""

    jobid: int
    ranks: frozenset
    topology: dict
    started: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class RecordRead:
    """Rank 0: what job ``jobid``'s record held when read back (``{rank: entry}``, a row
    or a missing mark each)."""

    jobid: int
    entries: dict


@dataclasses.dataclass(frozen=True)
class ReadRecord:
    """Action (rank 0): read job ``jobid``'s record back, an entry per rank of ``ranks``;
    answer with RecordRead."""

    jobid: int
    ranks: frozenset


@dataclasses.dataclass(frozen=True)
class CheckDue:
    """CHECK_S passed with job ``jobid``'s ranks awaited."""

    jobid: int


@dataclasses.dataclass(frozen=True)
class HealthFound:
    """``overlay.health``'s status of each child (``{rank: word}``) for job ``jobid``'s
    check, and whether a shell of the job still runs on this rank."""

    jobid: int
    status: dict
    runs_here: bool


@dataclasses.dataclass(frozen=True)
class LookUpRanks:
    """Action: look up job ``jobid``'s R and the topology; answer with RanksFound."""

    jobid: int


@dataclasses.dataclass(frozen=True)
class ArmCheck:
    """Action: (re)arm job ``jobid``'s one check timer; it fires CheckDue."""

    jobid: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class CancelCheck:
    """Action: stop job ``jobid``'s check timer, if armed."""

    jobid: int


@dataclasses.dataclass(frozen=True)
class AskHealth:
    """Action: ask ``overlay.health``; answer with HealthFound."""

    jobid: int


@dataclasses.dataclass(frozen=True)
class SendUp:
    """Action: send ``payload`` (``sdexec.usage-gather``'s) to the parent broker's sdexec."""

    jobid: int
    payload: dict


@dataclasses.dataclass(frozen=True)
class WriteRecord:
    """Action (rank 0): put ``entries`` ({key: JSON}) in KVS directory ``directory`` in
    one commit, then post ``memo`` on job ``jobid`` (None: no memo)."""

    jobid: int
    directory: str
    entries: dict
    memo: Optional[dict]


@dataclasses.dataclass(frozen=True)
class RaiseOom:
    """Action: raise a non-fatal exception of type OOM_TYPE on job ``jobid``, ``note``
    saying where and how many tasks the OOM killer took."""

    jobid: int
    note: str


def gather_payload(jobid, rank, rows, missing, late):
    """``sdexec.usage-gather``'s payload: job ``jobid``'s ``rows`` and ``missing`` marks
    from broker ``rank`` (``late``: a correction)."""
    return {
        "id": jobid,
        "rank": rank,
        "rows": {str(r): row for r, row in rows.items()},
        "missing": {str(r): why for r, why in missing.items()},
        "late": late,
    }


def parse_gather(body):
    """The RowsCame of an ``sdexec.usage-gather`` payload.

    Raises:
        RequestError: EPROTO, a malformed payload.
    """
    try:
        return RowsCame(
            int(body["id"]),
            {int(r): dict(row) for r, row in body.get("rows", {}).items()},
            {int(r): str(why) for r, why in body.get("missing", {}).items()},
            int(body["rank"]),
            bool(body.get("late", False)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RequestError(errno.EPROTO, f"usage-gather: malformed payload ({exc!r})")


def dothex(jobid):
    """Job id ``jobid`` in the KVS's dotted-hex form (``0000.0012.3400.0000``)."""
    h = f"{jobid:016x}"
    return ".".join(h[i : i + 4] for i in range(0, 16, 4))


class _Job:
    """One job's gathering here: its ranks once found, the messages that came before
    it could gather them, its JobGather once the ranks are known, and what its checks go
    by."""

    __slots__ = (
        "ranks",
        "early",
        "gather",
        "armed",
        "shell_seen",
        "checks",
        "ended",
        "passing",
        "reading",
    )

    def __init__(self):
        self.ranks, self.early, self.gather, self.armed = None, [], None, False
        self.shell_seen = False  # a shell of the job started here (under this sdexec)
        self.checks = 0  # health checks made while ranks were awaited
        self.ended = False  # its gathering is complete (counted in Gatherings.ended)
        self.passing = False  # begun by the sdexec before, not at rank 0: each message goes on
        self.reading = False  # rank 0: its record is being read back


class Gatherings:
    """Every job's gathering at broker ``rank`` of host ``host``: ``handle(event, now)``
    returns the actions (the module docstring); ``now`` is the adapter's monotonic clock,
    in seconds; ``loaded``: when this sdexec loaded (seconds since the epoch; None: every
    job is taken as started under it)."""

    def __init__(self, rank, host, loaded=None):
        self.rank, self.host, self.loaded = rank, host, loaded
        self.jobs = OrderedDict()  # job id -> _Job, oldest first
        self.ended = 0  # how many of them have a complete gathering
        self.counts = {"messages-in": 0, "messages-out": 0, "records-written": 0}

    def handle(self, event, now):
        """The actions that ``event`` calls for, in order."""
        out = []
        if isinstance(event, ShellEnded):
            self._shell_ended(event, now, out)
        elif isinstance(event, ShellStarted):
            self._job(event.jobid, out).shell_seen = True
        elif isinstance(event, RowsCame):
            if event.sender is not None:
                self.counts["messages-in"] += 1
            if event.late and event.jobid not in self.jobs:  # a gathering ended long ago
                self._pass_on(event.jobid, None, event.rows, event.missing, True, out)
            else:
                self._offer(event, now, out)
        elif isinstance(event, RanksFound):
            job = self.jobs.get(event.jobid)
            if job is not None and job.ranks is None:
                self._begin(event, job, now, out)
        elif isinstance(event, RecordRead):
            job = self.jobs.get(event.jobid)
            if job is not None and job.reading:
                self._recalled(event, job, now, out)
        elif isinstance(event, CheckDue):
            if event.jobid in self.jobs:
                self.jobs[event.jobid].armed = False
                out.append(AskHealth(event.jobid))
        elif isinstance(event, HealthFound):
            job = self.jobs.get(event.jobid)
            if job is not None and job.gather is not None:
                self._checked(event, job, now, out)
        else:
            raise TypeError(f"not a gathering event: {event!r}")
        return out

    def unloading(self):
        """Unload: what each gathering holds goes on now (the rest follows to whoever
        comes next; rank 0's memo names the ranks still awaited missing); every check timer
        is cancelled."""
        out = []
        for jobid, job in self.jobs.items():
            if job.armed:
                out.append(CancelCheck(jobid))
            if job.gather is not None and not job.reading and not job.gather.sent:
                rows, missing = job.gather.rows, job.gather.missing
            elif job.gather is None or job.reading:
                rows, missing = {}, {}
                for early in job.early:
                    rows.update(early.rows)
                    missing.update(early.missing)
            else:
                continue
            if rows or missing:
                self._pass_on(jobid, job.gather, rows, missing, False, out)
        return out

    def settling(self, jobid):
        """Rows of job ``jobid`` are kept here until its gathering can begin (its ranks
        being looked up, or at rank 0 its record read back): not merged or passed on yet."""
        job = self.jobs.get(jobid)
        return job is not None and bool(job.early)

    def ranks_of(self, jobid):
        """Job ``jobid``'s ranks if found here, else None."""
        job = self.jobs.get(jobid)
        return job.ranks if job is not None and job.ranks else None

    def stats(self):
        """Messages in and out, records written, gatherings waiting, and the most
        messages one child sent for one job."""
        gathers = [job.gather for job in self.jobs.values() if job.gather is not None]
        most = max((max(g.received_from.values(), default=0) for g in gathers), default=0)
        waiting = sum(1 for job in self.jobs.values() if not job.ended)
        return dict(self.counts, waiting=waiting, **{"most-from-one-child": most})

    def _shell_ended(self, ended, now, out):
        """This rank's row into the job's gathering; an OOM exception if it counts kills."""
        jobid, record = job_number(ended.plain), ended.record
        row = record.placed(self.rank, self.host, ended.unit)
        self._offer(RowsCame(jobid, {self.rank: row}, {}), now, out)
        if record.oom_kills:
            limit = f"MemoryMax={ended.memory_max}" if ended.memory_max else "no MemoryMax set"
            note = (
                f"rank {self.rank} ({self.host}): {record.oom_kills} task(s) killed by the OOM "
                f"killer, {limit}"
            )
            out.append(RaiseOom(jobid, note))

    def _offer(self, came, now, out):
        """Rows into the job's gathering (its wait begins with the first), on at once for
        a gathering begun before, or kept until it can gather."""
        job = self._job(came.jobid, out)
        if job.passing:
            self._pass_on(came.jobid, None, came.rows, came.missing, False, out)
        elif job.gather is None or job.reading:
            job.early.append(came)
        else:
            self._merge(job, came, now)
            self._advance(came.jobid, job, now, out)

    @staticmethod
    def _merge(job, came, now):
        """``came`` into the job's gathering; a row or a mark begins its wait."""
        if came.rows or came.missing:
            job.gather.start(now)
        job.gather.add(came.rows, came.missing, came.sender)

    def _job(self, jobid, out):
        """Job ``jobid``'s gathering, begun (its ranks asked for) if new."""
        job = self.jobs.get(jobid)
        if job is None:
            job = self.jobs[jobid] = _Job()
            self._forget_old()
            out.append(LookUpRanks(jobid))
        return job

    def _begin(self, found, job, now, out):
        """The ranks are known: gather what they say (none, no R: each message goes on as
        it comes). A job begun under the sdexec before: passed on as it comes, or at rank
        0, its record read back first."""
        jobid = found.jobid
        job.ranks = set(found.ranks)
        begun_before = None not in (self.loaded, found.started) and found.started < self.loaded
        if begun_before and self.rank != 0:
            job.passing = True
            self._end(job)
            early, job.early = job.early, []
            for came in early:
                self._pass_on(jobid, None, came.rows, came.missing, False, out)
            return
        want = expected_ranks(job.ranks, self.rank, found.topology)
        job.gather = JobGather(
            jobid, want["own"], want["children"], None, WAIT_MAX_S, rank=self.rank
        )
        if begun_before and job.ranks:
            job.reading = True
            out.append(ReadRecord(jobid, frozenset(job.ranks)))
            return
        self._gather_early(jobid, job, now, out)

    def _recalled(self, read, job, now, out):
        """Rank 0: the job's record as read back is what was given before; then gather."""
        job.reading = False
        rows, missing = {}, {}
        for rank, entry in read.entries.items():
            if "missing" in entry:
                missing[rank] = str(entry["missing"])
            else:
                rows[rank] = entry
        job.gather.recall(rows, missing)
        self._gather_early(read.jobid, job, now, out)

    def _gather_early(self, jobid, job, now, out):
        """What came before the gathering could begin, into it."""
        early, job.early = job.early, []
        for came in early:
            self._merge(job, came, now)
        if job.gather.started is not None:
            self._advance(jobid, job, now, out)

    def _checked(self, health, job, now, out):
        """Mark the ranks of children that are down, and this rank's own if no shell of
        the job runs here (one ran, or none came for OWN_WAIT_S), missing."""
        own, children = job.gather.awaited()
        for child in children:
            word = health.status.get(child)
            if word in DOWN:
                why = f"rank {child} {word}"
                job.gather.add({}, {r: why for r in job.gather.children[child]}, child)
        job.checks += 1
        slow = job.checks * CHECK_S >= OWN_WAIT_S  # its shell may never start here
        if own and not health.runs_here and (job.shell_seen or slow):
            job.gather.add({}, {self.rank: "no job shell ended on this rank"}, None)
        self._advance(health.jobid, job, now, out)

    def _advance(self, jobid, job, now, out):
        """Pass on what is due (the gathering ends: complete, or marked at the wait's
        end); else check the children's health in CHECK_S."""
        if job.gather.due(now):
            late = job.gather.sent
            rows, missing = job.gather.take(now)
            if rows or missing:
                self._pass_on(jobid, job.gather, rows, missing, late, out)
            if job.armed:
                job.armed = False
                out.append(CancelCheck(jobid))
            self._end(job)
        else:
            job.armed = True
            out.append(ArmCheck(jobid, CHECK_S))

    def _end(self, job):
        """Count ``job``'s gathering as ended, once."""
        if not job.ended:
            job.ended = True
            self.ended += 1

    def _pass_on(self, jobid, gather, rows, missing, late, out):
        """Up to the parent's sdexec, or written at rank 0: the rows and marks new since
        the last write, then the job's totals as its memo, the ranks still awaited counted
        missing (a memo's null deletes a key: ``missing`` once none is); a correction of a
        gathering forgotten here has none."""
        if self.rank != 0:
            self.counts["messages-out"] += 1
            out.append(SendUp(jobid, gather_payload(jobid, self.rank, rows, missing, late)))
            return
        entries = {str(rank): row for rank, row in rows.items()}
        entries.update({str(rank): {"rank": rank, "missing": why} for rank, why in missing.items()})
        memo = None
        if gather is not None:
            awaited = dict.fromkeys(gather.unreported(), "awaited")
            totals = dict(job_totals(gather.rows, {**gather.missing, **awaited}))
            totals.setdefault("missing", None)
            memo = {"sdexec": totals}
        self.counts["records-written"] += 1
        out.append(WriteRecord(jobid, kvs_dir(dothex(jobid)), entries, memo))

    def _forget_old(self):
        """Keep at most REMEMBERED gatherings that ended (the oldest go first): counted,
        not looked for, so a new job does not walk the REMEMBERED kept."""
        excess = self.ended - REMEMBERED
        if excess > 0:
            old = list(islice((j for j, job in self.jobs.items() if job.ended), excess))
            for jobid in old:
                del self.jobs[jobid]
            self.ended -= len(old)
