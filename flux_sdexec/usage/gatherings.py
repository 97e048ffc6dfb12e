"""Every job's gathering at one broker: events in, actions out.

``Gatherings`` keeps one job's gathering (a ``JobGather``) per job with a rank in this
broker's subtree. The wait begins with the job's first row or mark here, not with its start:
a job may run for days. While some rank has not reported, the children's health is looked
at every CHECK_S. A child lost or offline has its subtree's job ranks marked missing. So has
this rank's own row, when no shell of the job runs here and one ran (under this sdexec), or
none came for OWN_WAIT_S. A rank still up is waited for (a job's ranks may end far apart),
at most WAIT_MAX_S.

A gathering that ended lets its rows go; the last REMEMBERED of them are remembered by
their ranks alone. A correction that comes later goes on as it comes; at rank 0 it is
merged into the job's record as read back, and the memo is posted again over every rank.

A broker other than rank 0 with no children (a leaf, once its subtree is found) has no
subtree to wait for: it needs no R. Each job's rows go up as they come, the first message
as the job's, any later one as a correction; the parent's gathering does the rest.

A job that started before this sdexec loaded (an upgrade, a restart with the jobs kept) had
its gathering begun by the sdexec before, which may have sent or written part of it. Here a
broker other than rank 0 passes each of its messages on as it comes. Rank 0 reads back what
the job's record already holds before it gathers the rest.

The adapter (``usage/job_usage.py``) owns RPCs, timers and the KVS. Pure: stdlib only.
"""

from collections import OrderedDict
from itertools import islice

from flux_sdexec.core.shelljobs import job_number
from flux_sdexec.usage.gather_events import (
    AskHealth,
    ArmCheck,
    CancelCheck,
    CheckDue,
    HealthFound,
    LookUpRanks,
    RaiseOom,
    RanksFound,
    ReadRecord,
    RecordRead,
    RowsCame,
    SendUp,
    ShellEnded,
    ShellStarted,
    SubtreeFound,
    WriteRecord,
    gather_payload,
)
from flux_sdexec.usage.job_gather import JobGather, expected_ranks, job_totals
from flux_sdexec.usage.record import dothex, kvs_dir

CHECK_S = 5.0  # while a job's gathering waits: how often its children's health is looked at
OWN_WAIT_S = 60.0  # how long this rank's own record is awaited when no shell of it ran here
WAIT_MAX_S = 3600.0  # the longest a rank still up is waited for
REMEMBERED = 1024  # gatherings ended whose ranks are kept for late corrections
DOWN = ("lost", "offline")  # overlay.health's words for a child that is gone


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
        "want",
        "leaf",
    )

    def __init__(self):
        self.ranks, self.early, self.gather, self.armed = None, [], None, False
        self.shell_seen = False  # a shell of the job started here (under this sdexec)
        self.checks = 0  # health checks made while ranks were awaited
        self.ended = False  # its gathering is complete (counted in Gatherings.ended)
        self.passing = False  # begun by the sdexec before, not at rank 0: each message goes on
        self.reading = False  # rank 0: its record is being read back
        self.want = None  # what it gathers: (own rank expected, {child: job ranks below})
        self.leaf = False  # begun at a leaf: no R, each message goes up as it comes


class Gatherings:
    """Every job's gathering at broker ``rank`` of host ``host``: ``handle(event, now)``
    returns the actions (the module docstring); ``now`` is the adapter's monotonic clock,
    in seconds; ``loaded``: when this sdexec loaded (seconds since the epoch; None: every
    job is taken as started under it)."""

    def __init__(self, rank, host, loaded=None):
        self.rank, self.host, self.loaded = rank, host, loaded
        self.leaf = None  # not rank 0 and no child in the overlay (None: not known yet)
        self.jobs = OrderedDict()  # job id -> _Job, oldest first
        self.ended = 0  # how many of them have a complete gathering
        self.most = 0  # the most messages one child sent for a gathering that let its rows go
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
        elif isinstance(event, SubtreeFound):
            self.leaf = self.rank != 0 and not event.topology.get("children")
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

    def waiting_to_begin(self, jobid):
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
        messages one child sent for one job since load."""
        gathers = [job.gather for job in self.jobs.values() if job.gather is not None]
        most = max([self.most, *(_most_from_one_child(g) for g in gathers)])
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
        if job.leaf:
            self._pass_on(came.jobid, None, came.rows, came.missing, job.ended, out)
            self._end(job)
        elif job.passing:
            self._pass_on(came.jobid, None, came.rows, came.missing, False, out)
        elif job.ended and job.gather is None:
            self._correct(came, job, out)
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
        """Job ``jobid``'s gathering, begun if new: its ranks asked for, but at a leaf."""
        job = self.jobs.get(jobid)
        if job is None:
            job = self.jobs[jobid] = _Job()
            self._drop_old()
            if self.leaf:
                job.leaf = True
            else:
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
        job.want = (want["own"], want["children"])
        job.gather = JobGather(jobid, *job.want, None, WAIT_MAX_S, rank=self.rank)
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
            if job.ranks:  # its rows go: a correction reads the record back
                self.most = max(self.most, _most_from_one_child(job.gather))
                job.gather = None
        else:
            job.armed = True
            out.append(ArmCheck(jobid, CHECK_S))

    def _correct(self, came, job, out):
        """A correction of a gathering that ended and let its rows go: on as it comes, or
        at rank 0 merged into the job's record as read back (the better row of a rank
        stays, the memo is over every rank)."""
        if self.rank != 0:
            self._pass_on(came.jobid, None, came.rows, came.missing, True, out)
            return
        job.gather = JobGather(came.jobid, *job.want, None, WAIT_MAX_S, rank=self.rank)
        job.reading = True
        job.early.append(came)
        out.append(ReadRecord(came.jobid, frozenset(job.ranks)))

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

    def _drop_old(self):
        """Keep at most REMEMBERED gatherings that ended (the oldest go first): counted,
        not looked for, so a new job does not walk the REMEMBERED kept."""
        excess = self.ended - REMEMBERED
        if excess > 0:
            old = list(islice((j for j, job in self.jobs.items() if job.ended), excess))
            for jobid in old:
                del self.jobs[jobid]
            self.ended -= len(old)


def _most_from_one_child(gather):
    """The most messages one child sent for ``gather``."""
    return max(gather.received_from.values(), default=0)
