"""Rows handed in are answered once handed on, so a job's memo comes before its end.

job-exec hears that a job's last shell ended from that shell's answer (bgexec's wait,
bulk-exec's last responses); the job goes inactive soon after, and a memo posted then is
refused. So a broker answers the rows handed in to it (its own shell's, a child's
``sdexec.usage-gather``) only once they are handed on: merged into a gathering that awaits
other ranks, sent up and answered, or, at rank 0, committed with the memo posted before.
The site tier's t0114 (a job's memo lost across an upgrade, 2 runs of 3) is what this
fixed. The real ``JobUsage``; its flux handle, KVS and memos are the test's.
"""

import logging

import pytest

import fluxpath

from stubs import StubWatchers
from test_usage import ROW, Future

from flux_sdexec.core.shelljobs import job_number
from flux_sdexec.usage.record import UsageRecord
from flux_sdexec.usage import job_usage
from flux_sdexec.usage.job_usage import HAND_ON_S, JobUsage

fluxpath.add()
import flux.kvs  # noqa: E402

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
        self.asked, self.lookups, self.events = [], [], []

    def rpc(self, topic, payload=None, nodeid=0):  # the flux handle's
        future = Future(topic, payload, nodeid)
        self.asked.append(future)
        return future

    def post(self, jobid, memo, what):  # the memos'
        self.events.append("memo")

    def _look_up(self, key, on_reply):
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
        def __init__(self, handle, directory):
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


def test_the_last_rows_at_rank_0_are_answered_after_the_memo_and_the_commit():
    """The child's rows complete the job: committed, the memo posted, and only once the
    commit is answered is the child answered (then its shell's end reaches job-exec)."""
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
    assert commit.payload == {"1": dict(ROW, rank=1)}
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
