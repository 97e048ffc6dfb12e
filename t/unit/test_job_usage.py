"""The flux side of a job's usage (usage/job_usage.py): live gatherings, check timers and
futures, R and read-back lookups, and the hand-on of a shell's end.

Rows handed in are answered once handed on, so a job's memo comes before its end.

job-exec hears that a job's last shell ended from that shell's answer (bgexec's wait,
bulk-exec's last responses); the job goes inactive soon after, and a memo posted then is
refused. So a broker answers the rows handed in to it (its own shell's, a child's
``sdexec.usage-gather``) only once they are handed on: merged into a gathering that awaits
other ranks, sent up and answered, or, at rank 0, committed with the memo posted before.
The site tier's t0114 (a job's memo lost across an upgrade, 2 runs of 3) is what this
fixed. The real ``JobUsage``; its flux handle, KVS and memos are the test's.
"""

import logging
from types import SimpleNamespace

import fluxpath
import pytest
from stubs import StubWatchers
from usage_fixtures import ROW, Future

from flux_sdexec.core.shelljobs import job_number
from flux_sdexec.usage import job_usage
from flux_sdexec.usage.job_usage import HAND_ON_S, JobUsage
from flux_sdexec.usage.record import UsageRecord, dothex, kvs_key

fluxpath.add()
import flux.kvs  # noqa: E402


class LiveTree(JobUsage):
    """The real ``JobUsage`` of rank 0 over children 1 (with 2 below it) and 3: the job
    runs on ranks 0-2, its R found at once; what it asks of its children is kept
    (``asked``), what it answers too (``answers``)."""

    TOPOLOGY = {
        "rank": 0,
        "children": [{"rank": 1, "children": [{"rank": 2, "children": []}]}, {"rank": 3}],
    }

    def __init__(self):
        super().__init__(self, logging.getLogger("t"), 0, "node0", StubWatchers(), None, ())
        self.topology = self.TOPOLOGY
        self.asked, self.answers = [], []

    def rpc(self, topic, payload, nodeid):  # the flux handle's
        future = Future(topic, payload, nodeid)
        self.asked.append(future)
        return future

    def _look_up(self, key, on_reply):
        on_reply(None, {"execution": {"R_lite": [{"rank": "0-2"}]}})

    def gather(self, own):
        self.gather_live("f2", own, 2.0, lambda rows, missing: self.answers.append((rows, missing)))


def ignored(*args):
    """What waits for rows to be handed on, where a test does not look at it."""


def test_a_live_gathering_asks_each_child_with_job_ranks_once_and_answers_once():
    """Only the child whose subtree holds job ranks is asked, with less time to wait; its
    answer and this rank's row are the one answer."""
    tree = LiveTree()
    tree.gather({0: dict(ROW, rank=0)})
    assert [(f.topic, f.payload, f.nodeid) for f in tree.asked] == [
        ("sdexec.usage-live", {"jobid": "f2", "wait": 1.75}, 1)
    ]
    assert tree.answers == []
    tree.asked[0].answer({"rows": {"1": dict(ROW, rank=1), "2": dict(ROW, rank=2)}})
    assert tree.answers == [({r: dict(ROW, rank=r) for r in (0, 1, 2)}, {})]
    assert tree.watchers.armed() == [] and tree.live == set()


def test_a_child_that_fails_or_stays_silent_has_its_ranks_missing_and_one_answer_goes():
    """A child's error marks its subtree's job ranks missing with the error; a silent one
    is marked at the wait's end, and its later answer is not sent again."""
    tree = LiveTree()
    tree.gather({0: dict(ROW, rank=0)})
    tree.asked[0].answer(error=OSError(38, "Function not implemented"))
    why = "rank 1: Function not implemented"
    assert tree.answers == [({0: dict(ROW, rank=0)}, {1: why, 2: why})]

    silent = LiveTree()
    silent.gather({})
    (timer,) = silent.watchers.armed()
    assert timer.after == 2.0
    timer.fire()
    expired = "no record within 2 s"
    assert silent.answers == [({}, {0: "no job shell runs here", 1: expired, 2: expired})]
    silent.asked[0].answer({"rows": {"1": dict(ROW, rank=1)}})
    assert len(silent.answers) == 1


def test_an_unload_answers_the_live_gatherings_with_what_they_have():
    """close() sends each live gathering's answer once; nothing waits on after it."""
    tree = LiveTree()
    tree.gather({0: dict(ROW, rank=0)})
    tree.close()
    assert tree.answers == [({0: dict(ROW, rank=0)}, {})]
    assert tree.watchers.armed() == [] and tree.live == set()


class Checked(JobUsage):
    """The real ``JobUsage`` of rank 0 over child 1, a job on ranks 0-1 whose R says it
    started at ``started`` (the sdexec loaded now); what it asks of the flux handle is kept
    (``asked``), what it writes too (``written``, ReadRecord-free gatherings only)."""

    def __init__(self, R=None):
        super().__init__(self, logging.getLogger("t"), 0, "node0", StubWatchers(), None, ())
        self.topology = {"rank": 0, "children": [{"rank": 1, "children": []}]}
        self.R = R or {"execution": {"R_lite": [{"rank": "0-1"}], "starttime": 1.0}}
        self.asked, self.written, self.looked_up = [], [], []

    def rpc(self, topic, payload=None, nodeid=0):  # the flux handle's
        future = Future(topic, payload, nodeid)
        self.asked.append(future)
        return future

    def _look_up(self, key, on_reply):
        self.looked_up.append(key)
        on_reply(None, self.R if key.endswith(".R") else None)

    def _write(self, action):
        self.written.append(action)


def test_every_check_timer_is_destroyed_once_done_with():
    """A gathering through three checks to its record: each timer that fired or was
    cancelled is destroyed, none is left in the flux handle."""
    jobs = Checked()
    jobs.received({"id": job_number("f2"), "rank": 1, "rows": {"1": dict(ROW, rank=1)}}, ignored)
    for _ in range(3):
        (timer,) = jobs.watchers.armed()
        timer.fire()
        (health,) = [f for f in jobs.asked if f.callback and f.topic == "overlay.health"]
        health.answer({"children": [{"rank": 1, "status": "full"}]})
        health.callback = None
    jobs.shell_ended(
        "f2",
        "shell-0-f2.service",
        UsageRecord(1.0, 0.25, 100, 2, 0, 3.0, "success", 0),
        None,
        ignored,
    )
    (write,) = jobs.written
    assert sorted(write.entries) == ["0", "1"]
    assert jobs.watchers.timers and all(t.destroyed for t in jobs.watchers.timers)


def test_a_live_gathering_s_timer_is_destroyed_whether_answered_or_expired():
    tree = LiveTree()
    tree.gather({0: dict(ROW, rank=0)})
    tree.asked[0].answer({"rows": {"1": dict(ROW, rank=1), "2": dict(ROW, rank=2)}})
    silent = LiveTree()
    silent.gather({})
    silent.watchers.armed()[0].fire()
    for done in (tree, silent):
        assert [t.destroyed for t in done.watchers.timers] == [True]


def test_an_r_without_ranks_is_logged_and_its_rows_go_on_as_they_come():
    """Finding 9: an R the gathering cannot read raises nothing into the reactor: the job
    is gathered as one with no R."""
    jobs = Checked(R={"execution": {"R_lite": [{}]}})
    jobs.shell_ended(
        "f2",
        "shell-0-f2.service",
        UsageRecord(1.0, 0.25, 100, 2, 0, 3.0, "success", 0),
        None,
        ignored,
    )
    (write,) = jobs.written
    assert list(write.entries) == ["0"]


def test_a_job_begun_under_the_sdexec_before_has_its_record_read_back_per_rank():
    """Rank 0 loaded after the job started: each rank's entry is looked up before the
    rows are gathered; rank 1's found is not written again."""
    jobs = Checked(R={"execution": {"R_lite": [{"rank": "0-1"}], "starttime": 1.0}})
    jobs.gatherings.loaded = 2.0
    answers = {}

    def look_up(key, on_reply):
        jobs.looked_up.append(key)
        if key.endswith(".R"):
            on_reply(None, jobs.R)
        else:
            answers[key] = on_reply

    jobs._look_up = look_up
    jobs.shell_ended(
        "f2",
        "shell-0-f2.service",
        UsageRecord(1.0, 0.25, 100, 2, 0, 3.0, "success", 0),
        None,
        ignored,
    )
    assert sorted(answers) == [f"job.{dothex(job_number('f2'))}.sdexec-usage.{r}" for r in (0, 1)]
    assert jobs.written == []
    for key, on_reply in sorted(answers.items()):
        on_reply(None, dict(ROW, rank=1) if key.endswith(".1") else None)
    (write,) = jobs.written
    assert list(write.entries) == ["0"] and write.memo["sdexec"]["ranks"] == 2


JOB = "f2"


USAGE = UsageRecord(1.0, 0.25, 100, 2, 0, 3.0, "success", 0)


class Broker(JobUsage):
    """The real ``JobUsage`` of ``rank`` for a job on ranks 0-1 (rank 0 the parent of
    rank 1) that started at ``started`` (the sdexec loaded at 2.0); lookups answered at
    once (the job's record: ``record``, none) unless ``held`` (then kept in ``lookups``),
    RPCs and commits kept as Futures the test answers; ``events`` the order of memos
    posted and answers given."""

    def __init__(self, rank, started=3.0, held=False, record=None):
        topology = {"rank": 0, "children": [{"rank": 1, "children": []}]}
        super().__init__(
            self, logging.getLogger("t"), rank, f"node{rank}", StubWatchers(), self, ()
        )
        self.gatherings.loaded = 2.0
        self.topology = topology if rank == 0 else {"rank": 1, "children": []}
        self.R = {"execution": {"R_lite": [{"rank": "0-1"}], "starttime": started}}
        self.held, self.record = held, record or {}
        self.asked, self.lookups, self.events, self.keys = [], [], [], []

    def rpc(self, topic, payload=None, nodeid=0):  # the flux handle's
        future = Future(topic, payload, nodeid)
        self.asked.append(future)
        return future

    def post(self, jobid, memo, what):  # the memos'
        self.events.append("memo")

    def _look_up(self, key, on_reply):
        self.keys.append(key)
        value = self.R if key.endswith(".R") else self.record.get(key.rsplit(".", 1)[1])
        if self.held and not key.endswith(".R"):
            self.lookups.append(lambda: on_reply(None, value))
        else:
            on_reply(None, value)

    def answered(self, what):
        """What waits for rows handed on, recorded in ``events`` as ``what``."""
        return lambda *args: self.events.append(what)

    def end_shell(self):
        self.shell_ended(
            JOB, f"shell-{self.rank}-{JOB}.service", USAGE, None, self.answered("settled")
        )

    def child_sends(self):
        body = {"id": job_number(JOB), "rank": 1, "rows": {"1": dict(ROW, rank=1)}}
        self.received(body, self.answered("child answered"))

    def sent(self, topic):
        return [f for f in self.asked if f.topic == topic]


@pytest.fixture(autouse=True)
def kvs(monkeypatch):
    """flux.kvs's transaction and commit, without a broker: each commit is a Future."""

    class Txn:
        def __init__(self, handle):
            self.h, self.entries = handle, {}

        def put(self, key, value):
            self.entries[key] = value

    def commit_async(handle, _kvstxn):
        return handle.rpc("kvs.commit", _kvstxn.entries)

    monkeypatch.setattr(flux.kvs, "KVSTxn", Txn)
    monkeypatch.setattr(flux.kvs, "commit_async", commit_async)


def test_rows_merged_while_other_ranks_are_awaited_are_answered_at_once():
    rank0 = Broker(0)
    rank0.child_sends()
    assert rank0.events == ["child answered"] and rank0.sent("kvs.commit") == []


def test_the_last_rows_at_rank_0_are_answered_after_the_memo_and_the_commit(monkeypatch):
    """The child's rows complete the job: committed (within the whole bound, on a clock just
    under 2**14 s too), the memo posted, and only once the commit is answered is the child
    answered (then its shell's end reaches job-exec)."""
    monkeypatch.setattr(
        job_usage, "time", SimpleNamespace(monotonic=lambda: 16383.9, time=lambda: 1.8e9)
    )
    rank0 = Broker(0)
    rank0.end_shell()
    assert rank0.events == ["settled"]  # awaiting rank 1
    rank0.child_sends()
    (commit,) = rank0.sent("kvs.commit")
    assert rank0.events == ["settled", "memo"] and commit.timeout == HAND_ON_S
    commit.answer({})
    assert rank0.events == ["settled", "memo", "child answered"]


def test_a_failed_commit_still_answers():
    rank0 = Broker(0)
    rank0.child_sends()
    rank0.end_shell()
    rank0.sent("kvs.commit")[0].answer(error=OSError(110, "Connection timed out"))
    assert rank0.events == ["child answered", "memo", "settled"]


def test_a_rank_s_end_is_settled_once_its_parent_answers():
    rank1 = Broker(1)
    rank1.end_shell()
    (up,) = rank1.sent(job_usage.GATHER_TOPIC)
    assert up.nodeid != 1 and up.timeout == HAND_ON_S and rank1.events == []
    up.answer({})
    assert rank1.events == ["settled"]


def test_rows_held_while_rank_0_reads_the_record_back_wait_for_the_write():
    """A job begun under the sdexec before: rank 0 reads the record back before it
    gathers; the rows that came meanwhile are answered once written, not before."""
    rank0 = Broker(0, started=1.0, held=True, record={"0": dict(ROW, rank=0)})
    rank0.child_sends()
    assert rank0.events == [] and len(rank0.lookups) == 2
    for answer in rank0.lookups:
        answer()
    (commit,) = rank0.sent("kvs.commit")
    assert commit.payload == {kvs_key(dothex(job_number(JOB)), 1): dict(ROW, rank=1)}
    assert rank0.events == ["memo"]
    commit.answer({})
    assert rank0.events == ["memo", "child answered"]


def test_an_unload_answers_what_waits_once():
    rank0 = Broker(0, started=1.0, held=True)
    rank0.child_sends()  # held: the record is being read back
    rank1 = Broker(1)
    rank1.end_shell()  # sent up, not answered
    for broker in (rank0, rank1):
        broker.close()
    assert rank0.events == ["memo", "child answered"] and rank1.events == ["settled"]
    rank1.sent(job_usage.GATHER_TOPIC)[0].answer({})
    assert rank1.events == ["settled"]


def test_each_gathering_event_leaves_nothing_waiting_that_could_go():
    """A broker's waiting list holds only jobs whose gathering cannot begin yet."""
    rank0 = Broker(0)
    rank0.child_sends()
    rank0.end_shell()
    rank0.sent("kvs.commit")[0].answer({})
    assert rank0.handing == {} and rank0.holding == {}


def complete(rank0, plain, late=False):
    """Job ``plain``'s rows of ranks 0 and 1 to rank 0 (``late``: rank 1's as a
    correction); what waits is recorded in ``events`` as "<plain> 0" and "<plain> 1"."""
    if not late:
        settle = rank0.answered(f"{plain} 0")
        rank0.shell_ended(plain, f"shell-0-{plain}.service", USAGE, None, settle)
    body = {"id": job_number(plain), "rank": 1, "rows": {"1": dict(ROW, rank=1)}, "late": late}
    rank0.received(body, rank0.answered(f"{plain} 1"))


def test_records_that_come_while_a_commit_is_out_go_in_one_commit_when_it_is_answered():
    """Jobs f3 and f4 complete while f2's commit is out: one transaction carries both
    (keys in full), their memos go as it is sent, and their waiters when it is answered."""
    rank0 = Broker(0)
    complete(rank0, "f2")
    complete(rank0, "f3")
    complete(rank0, "f4")
    (first,) = rank0.sent("kvs.commit")
    assert rank0.events == ["f2 0", "memo", "f3 0", "f4 0"]
    first.answer({})
    second = rank0.sent("kvs.commit")[1]
    assert sorted(second.payload) == sorted(
        kvs_key(dothex(job_number(p)), r) for p in ("f3", "f4") for r in (0, 1)
    )
    assert rank0.events[4:] == ["f2 1", "memo", "memo"]
    second.answer({})
    assert rank0.events[7:] == ["f3 1", "f4 1"] and len(rank0.sent("kvs.commit")) == 2


def test_a_record_read_back_waits_for_the_job_s_commit_out():
    """A late correction of f2 while f2's record is being committed: it is read back
    only once that commit is answered (else the memo would lack what it carries)."""
    rank0 = Broker(0, held=True)
    complete(rank0, "f2")
    complete(rank0, "f2", late=True)
    assert rank0.lookups == []
    rank0.sent("kvs.commit")[0].answer({})
    assert len(rank0.lookups) == 2


def test_an_unload_commits_the_records_waiting_and_answers_every_waiter_once():
    rank0 = Broker(0)
    complete(rank0, "f2")
    complete(rank0, "f3")
    rank0.close()
    first, second = rank0.sent("kvs.commit")
    assert sorted(second.payload) == [kvs_key(dothex(job_number("f3")), r) for r in (0, 1)]
    assert sorted(rank0.events) == sorted(["f2 0", "f2 1", "f3 0", "f3 1", "memo", "memo"])
    first.answer({})
    second.answer({})
    assert len(rank0.events) == 6


def test_a_leaf_looks_up_no_r_and_sends_its_row_up_at_its_shell_s_end():
    rank1 = Broker(1)
    rank1.end_shell()
    (up,) = rank1.sent(job_usage.GATHER_TOPIC)
    assert up.payload["rows"] == {"1": USAGE.placed(1, "node1", f"shell-1-{JOB}.service")}
    assert rank1.keys == []


def test_a_commit_that_cannot_be_sent_answers_its_waiters_and_the_next_goes(monkeypatch):
    rank0 = Broker(0)
    complete(rank0, "f2")
    complete(rank0, "f3")

    def refused(handle, _kvstxn):
        raise OSError(12, "Cannot allocate memory")

    commit_async = flux.kvs.commit_async
    monkeypatch.setattr(flux.kvs, "commit_async", refused)
    rank0.sent("kvs.commit")[0].answer({})
    assert rank0.events[-2:] == ["memo", "f3 1"]
    monkeypatch.setattr(flux.kvs, "commit_async", commit_async)
    complete(rank0, "f4")
    assert len(rank0.sent("kvs.commit")) == 2


def test_a_shell_s_oom_exception_is_answered_before_its_end_is():
    """A rank's record with an OOM kill: the ``oom`` exception is raised on the job and its
    end answered only once both the raise and the send up are answered, in either order (an
    exception raised after job-exec hears of the end can come after the job's finish)."""
    for order in ((0, 1), (1, 0)):
        rank1 = Broker(1)
        oom = UsageRecord(1.0, 0.25, 100, 2, 1, 3.0, "oom-kill", 36608)
        rank1.shell_ended(JOB, f"shell-1-{JOB}.service", oom, "50M", rank1.answered("settled"))
        (raised,) = rank1.sent(job_usage.RAISE_TOPIC)
        assert raised.payload["type"] == "oom" and raised.payload["severity"] == 1
        assert "MemoryMax=50M" in raised.payload["note"]
        answers = [raised, rank1.sent(job_usage.GATHER_TOPIC)[0]]
        answers[order[0]].answer({})
        assert rank1.events == []
        answers[order[1]].answer({})
        assert rank1.events == ["settled"]
