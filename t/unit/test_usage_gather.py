"""Gathering a job's usage rows up the TBON (usage/job_gather.py, usage/gatherings.py,
usage/gather_events.py): who waits for whom, one
message per child per job, duplicates, the wait, late corrections and the job's memo; one
broker's Gatherings as events in, actions out.

Topologies are flux's ``kary:k`` trees (rank r's children are k*r+1 .. k*r+k) in the
``overlay.topology`` shape; rows are placed ``UsageRecord`` JSON. No clock: times are passed in.
"""

import errno

import pytest

from flux_sdexec.core.errors import RequestError
from flux_sdexec.core.shelljobs import job_number
from flux_sdexec.usage.gather_events import (
    ArmCheck,
    AskHealth,
    CancelCheck,
    CheckDue,
    HealthFound,
    LookUpRanks,
    RaiseOom,
    RanksFound,
    ReadRecord,
    RecordRead,
    SendUp,
    ShellEnded,
    ShellStarted,
    WriteRecord,
    parse_gather,
)
from flux_sdexec.usage.gatherings import CHECK_S, WAIT_MAX_S, Gatherings
from flux_sdexec.usage.job_gather import (
    WAIT_S,
    JobGather,
    expected_ranks,
    job_totals,
    subtree_ranks,
)
from flux_sdexec.usage.record import dothex
from flux_sdexec.usage.record import UsageRecord


def kary(size, k, rank=0):
    """The ``overlay.topology`` of a ``kary:k`` tree of ``size`` ranks, rooted at ``rank``."""
    children = [kary(size, k, c) for c in range(k * rank + 1, min(k * rank + k + 1, size))]
    return {"rank": rank, "size": 1 + sum(c["size"] for c in children), "children": children}


def nodes(topology):
    """{rank: its subtree} of every rank of ``topology``."""
    out, todo = {}, [topology]
    while todo:
        node = todo.pop()
        out[node["rank"]] = node
        todo.extend(node["children"])
    return out


def row(rank, cpu=1.0, memory=100, tasks=2, oom=0):
    """Rank ``rank``'s placed record."""
    rec = UsageRecord(cpu, cpu / 4, memory, tasks, oom, 3.0, "success", 0)
    return rec.placed(rank, f"n{rank}", f"shell-{rank}-fA1.service")


def blank(rank):
    """A record of rank ``rank`` with every figure null (read after the slice was gone)."""
    return UsageRecord(None, None, None, None, None, None, "success", 0).placed(rank, "n", "u")


def gather_at(rank, job_ranks, topology, started=0.0, wait_s=WAIT_S):
    """Broker ``rank``'s JobGather of job 42 in ``topology`` (rooted at rank 0)."""
    e = expected_ranks(job_ranks, rank, nodes(topology)[rank])
    return JobGather(42, e["own"], e["children"], started, wait_s, rank=rank)


def run_tree(topology, job_ranks, now, absent=()):
    """Every broker's gathering of one job, leaves first, at time ``now``: each adds its own
    row (but ranks in ``absent``), then sends its take to its parent when due. Returns
    ({rank: JobGather}, [(rows, missing) rank 0 took])."""
    tree = nodes(topology)
    parent = {c["rank"]: r for r, n in tree.items() for c in n["children"]}
    gathers = {}
    for r in tree:
        e = expected_ranks(job_ranks, r, tree[r])
        if e["own"] or e["children"]:
            gathers[r] = JobGather(42, e["own"], e["children"], 0.0, rank=r)
    written = []
    for r in sorted(gathers, reverse=True):  # kary: every child's rank is above its parent's
        g = gathers[r]
        if g.own_expected and r not in absent:
            g.add({r: row(r)}, {}, None)
        if g.due(now):
            forward(gathers, parent, r, g.take(now), now, written)
    return gathers, written


def forward(gathers, parent, r, message, now, written):
    """``message`` taken at ``r`` goes to its parent, or is written at rank 0; a parent
    that already sent passes it on at once (a correction)."""
    if r == 0:
        written.append(message)
        return
    g = gathers[parent[r]]
    g.add(*message, r)
    if g.sent:
        forward(gathers, parent, parent[r], g.take(now), now, written)


# topology


def test_subtree_ranks_of_a_kary_2_tree_of_7():
    """0 -> 1, 2; 1 -> 3, 4; 2 -> 5, 6."""
    t = kary(7, 2)
    assert subtree_ranks(t) == set(range(7))
    assert subtree_ranks(nodes(t)[1]) == {1, 3, 4}
    assert subtree_ranks(nodes(t)[2]) == {2, 5, 6}
    assert subtree_ranks(nodes(t)[5]) == {5}


def test_expected_ranks_on_a_kary_2_tree_of_7():
    """A job on 3, 4 and 6: every broker above them waits for the children holding them;
    a child whose subtree holds no job rank (5 under 2) is not expected."""
    t, job = kary(7, 2), {3, 4, 6}
    assert {r: expected_ranks(job, r, n) for r, n in nodes(t).items()} == {
        0: {"own": False, "children": {1: {3, 4}, 2: {6}}},
        1: {"own": False, "children": {3: {3}, 4: {4}}},
        2: {"own": False, "children": {6: {6}}},
        3: {"own": True, "children": {}},
        4: {"own": True, "children": {}},
        5: {"own": False, "children": {}},
        6: {"own": True, "children": {}},
    }


def test_expected_ranks_needs_the_topology_rooted_at_the_broker():
    """Rank 1 given the whole tree (rooted at 0) is refused, not misread."""
    with pytest.raises(ValueError, match="rooted at 0, not at rank 1"):
        expected_ranks({1}, 1, kary(7, 2))


@pytest.mark.parametrize("k", [2, 32])
def test_a_64_rank_tree_splits_the_job_among_the_children(k):
    """kary:2 and flux's default kary:32: at every broker the own rank and the children's
    job ranks are the job ranks of its subtree, each held once."""
    t, job = kary(64, k), set(range(1, 64, 3))
    assert t["size"] == 64 and subtree_ranks(t) == set(range(64))
    for r, node in nodes(t).items():
        e = expected_ranks(job, r, node)
        held = [rank for ranks in e["children"].values() for rank in ranks]
        held += [r] if e["own"] else []
        assert sorted(held) == sorted(subtree_ranks(node) & job)
        assert all(e["children"].values())


# one broker's gathering


def test_own_row_and_children_merge_into_one_message():
    """Rank 1 of the kary-2 tree in a job on 1, 3, 4: complete with its own row and both
    children's messages, then one take gives all three."""
    g = gather_at(1, {1, 3, 4}, kary(7, 2))
    g.add({3: row(3)}, {}, 3)
    g.add({1: row(1)}, {}, None)
    assert (g.complete, g.due(1.0), g.sent) == (False, False, False)
    g.add({4: row(4)}, {}, 4)
    assert (g.complete, g.due(1.0)) == (True, True)
    assert g.take(1.0) == ({1: row(1), 3: row(3), 4: row(4)}, {})
    assert g.sent and g.received_from == {3: 1, 4: 1}
    assert g.take(2.0) == ({}, {})


def test_a_broker_not_in_the_job_forwards_its_children_s_rows():
    """Rank 2 in a job on 5 and 6: no own row to wait for; a child's missing mark goes up
    with the other child's row."""
    g = gather_at(2, {5, 6}, kary(7, 2))
    assert (g.own_expected, g.children) == (False, {5: {5}, 6: {6}})
    g.add({6: row(6)}, {}, 6)
    assert not g.complete
    g.add({}, {5: "slice not readable"}, 5)
    assert g.complete
    assert g.take(0.5) == ({6: row(6)}, {5: "slice not readable"})


def test_a_child_whose_subtree_holds_no_job_rank_is_not_waited_for():
    """Rank 0 in a job on 0 and 3: child 2's subtree has no job rank."""
    g = gather_at(0, {0, 3}, kary(7, 2))
    assert g.children == {1: {3}}
    g.add({0: row(0)}, {}, None)
    g.add({3: row(3)}, {}, 1)
    assert g.complete and g.take(0.1) == ({0: row(0), 3: row(3)}, {})


def test_a_duplicate_row_with_fewer_nulls_wins_a_tie_keeps_the_first():
    """After an adopt the sdexec that ran before already sent the rank's row."""
    g = gather_at(0, {0, 1}, kary(2, 1))
    g.add({1: blank(1)}, {}, 1)
    g.add({1: row(1)}, {}, 1)  # fewer nulls: replaces
    g.add({1: dict(blank(1), cpu_user_s=9.0)}, {}, 1)  # more nulls: ignored
    g.add({0: row(0, cpu=1.0)}, {}, None)
    g.add({0: row(0, cpu=5.0)}, {}, None)  # a tie: the first stays
    assert g.take(0.0) == ({0: row(0, cpu=1.0), 1: row(1)}, {})
    assert g.received_from == {1: 3}


def test_a_row_replaces_a_missing_mark_and_a_mark_never_replaces_a_row():
    """Whichever comes first, the row is what the take gives."""
    g = gather_at(0, {1, 2}, kary(3, 2))
    g.add({}, {1: "slice gone"}, 1)
    g.add({1: row(1)}, {}, 1)
    g.add({2: row(2)}, {}, 2)
    g.add({}, {2: "slice gone"}, 2)
    assert g.take(0.0) == ({1: row(1), 2: row(2)}, {})


def test_once_the_wait_is_over_unreported_ranks_are_missing():
    """Rank 1 in a job on 1, 3, 4, 5: its own row and child 4 never come; child 3 did."""
    g = gather_at(1, {1, 3, 4}, kary(7, 2), started=100.0)
    g.add({3: row(3)}, {}, 3)
    assert g.deadline() == 130.0
    assert not g.due(129.9) and g.due(130.0)
    assert g.take(130.0) == (
        {3: row(3)},
        {1: "no record within 30 s", 4: "no record within 30 s"},
    )


def test_the_reason_names_the_wait_given():
    """A wait of 2.5 s says so."""
    g = JobGather(42, False, {1: {1}}, 0.0, wait_s=2.5)
    assert g.take(2.5) == ({}, {1: "no record within 2.5 s"})


def test_a_take_before_the_wait_is_over_marks_nothing():
    """A take is the adapter's call; before the deadline an unreported rank is not
    marked, and it is when a later take comes after the deadline."""
    g = gather_at(0, {1, 2}, kary(3, 2))
    g.add({1: row(1)}, {}, 1)
    assert g.take(10.0) == ({1: row(1)}, {})
    assert g.take(30.0) == ({}, {2: "no record within 30 s"})


def test_a_late_row_after_the_take_is_given_alone():
    """The correction carries only the late row: neither the rows nor the marks already
    taken go again; a worse duplicate after that gives nothing, a better one goes."""
    g = gather_at(0, {0, 1, 2}, kary(3, 2))
    g.add({0: row(0)}, {}, None)
    g.add({1: blank(1)}, {}, 1)
    assert g.take(30.0) == ({0: row(0), 1: blank(1)}, {2: "no record within 30 s"})
    g.add({2: row(2)}, {}, 2)
    assert g.take(31.0) == ({2: row(2)}, {})
    g.add({2: blank(2)}, {}, 2)
    assert g.take(32.0) == ({}, {})
    g.add({1: row(1)}, {}, 1)
    assert g.take(33.0) == ({1: row(1)}, {})
    assert g.received_from == {1: 2, 2: 2}


def test_own_expected_needs_the_broker_s_rank():
    """Without it the own row could not be marked missing."""
    with pytest.raises(ValueError, match="rank"):
        JobGather(42, True, {}, 0.0)


# the whole tree


@pytest.mark.parametrize("k", [2, 32])
def test_64_brokers_send_one_message_per_child_and_rank_0_has_every_row(k):
    """A job on every other rank of 64: every broker sends once, and rank 0 writes one
    record holding every job rank's row."""
    job = set(range(0, 64, 2)) | {63}
    gathers, written = run_tree(kary(64, k), job, now=1.0)
    assert written == [({r: row(r) for r in sorted(job)}, {})]
    assert all(g.sent for g in gathers.values())
    for r, g in gathers.items():
        assert g.received_from == dict.fromkeys(g.children, 1), r


def test_a_rank_that_never_reports_is_missing_then_its_late_row_goes_up_alone():
    """In the kary-2 tree of 64, rank 37's row comes after the wait: rank 0 writes the rest
    with 37 missing, then the row alone, through 18, 8, 3 and 1."""
    t, job = kary(64, 2), set(range(64))
    gathers, written = run_tree(t, job, now=30.0, absent={37})
    rows = {r: row(r) for r in range(64) if r != 37}
    assert written == [(rows, {37: "no record within 30 s"})]
    tree = nodes(t)
    parent = {c["rank"]: r for r, n in tree.items() for c in n["children"]}
    gathers[37].add({37: row(37)}, {}, None)
    forward(gathers, parent, 37, gathers[37].take(40.0), 40.0, written)
    assert written[1:] == [({37: row(37)}, {})]
    assert [gathers[r].received_from[c] for r, c in ((18, 37), (8, 18), (3, 8), (1, 3))] == [
        2,
        2,
        2,
        2,
    ]


# the job's memo


def test_job_totals_over_the_rows_with_missing_ranks_as_an_idset():
    """Null figures are skipped, the peak's tie goes to the lower rank, and a rank both
    missing and with a row (a late correction) is not missing."""
    rows = {
        0: row(0, cpu=2.0, memory=300, tasks=7, oom=0),
        1: row(1, cpu=1.0, memory=500, tasks=3, oom=1),
        2: dict(row(2, cpu=0.5, memory=500, tasks=9), oom_kills=None),
        4: blank(4),
    }
    missing = {3: "no record within 30 s", 5: "x", 6: "x", 7: "x", 1: "superseded"}
    assert job_totals(rows, missing) == {
        "cpu": 4.375,
        "cpu_user": 3.5,
        "cpu_sys": 0.875,
        "maxmem": 500,
        "mem_sum": 1300,
        "maxmem_rank": 1,
        "tasks": 9,
        "oom": 1,
        "ranks": 4,
        "missing": "3,5-7",
    }


# the memo's figures when no rank gave any
NO_FIGURES = dict.fromkeys(
    ("cpu", "cpu_user", "cpu_sys", "maxmem", "mem_sum", "maxmem_rank", "tasks", "oom")
)


def test_job_totals_without_missing_ranks_has_no_missing_key_and_null_figures():
    """A figure no rank gave is None."""
    assert job_totals({0: blank(0), 1: blank(1)}, {}) == dict(NO_FIGURES, ranks=2)


def test_job_totals_of_no_rows_at_all():
    """Every rank missing: no figure, the idset of them all."""
    assert job_totals({}, {0: "x", 1: "x"}) == dict(NO_FIGURES, ranks=0, missing="0-1")


# one broker's gatherings: events in, actions out

TREE7 = kary(7, 2)
UNIT1 = "shell-1-fA1.service"


def record(cpu=1.0, oom=0):
    return UsageRecord(cpu, cpu / 4, 100, 2, oom, 3.0, "success", 0)


def started_at(rank, job_ranks, now=0.0):
    """Broker ``rank``'s Gatherings with job ``fA1``'s shell started and its ranks found;
    the actions of both steps."""
    g = Gatherings(rank, f"n{rank}")
    jobid = job_number("fA1")
    actions = g.handle(ShellStarted(jobid), now)
    actions += g.handle(RanksFound(jobid, frozenset(job_ranks), nodes(TREE7)[rank]), now)
    return g, jobid, actions


def of(kind, actions):
    return [a for a in actions if isinstance(a, kind)]


def test_a_new_job_s_ranks_are_looked_up_once_and_rows_before_them_wait():
    """The first event of a job asks for its ranks; a row that comes before they are
    found is merged once they are."""
    g = Gatherings(1, "n1")
    jobid = job_number("fA1")
    assert g.handle(ShellStarted(jobid), 0.0) == [LookUpRanks(jobid)]
    assert g.handle(ShellEnded("fA1", UNIT1, record()), 0.0) == []
    actions = g.handle(RanksFound(jobid, frozenset({1}), nodes(TREE7)[1]), 0.0)
    (sent,) = of(SendUp, actions)
    assert sent.payload == {
        "id": jobid,
        "rank": 1,
        "rows": {"1": record().placed(1, "n1", UNIT1)},
        "missing": {},
        "late": False,
    }
    assert g.stats()["messages-out"] == 1


def test_a_broker_waits_for_its_children_then_sends_one_message():
    """Rank 1 of a job on ranks 1, 3, 4 sends up once its row and both children's came;
    until then each event re-arms the job's check."""
    g, jobid, _ = started_at(1, {1, 3, 4})
    assert g.handle(ShellEnded("fA1", UNIT1, record()), 1.0) == [ArmCheck(jobid, CHECK_S)]
    assert g.handle(parse_gather({"id": jobid, "rank": 3, "rows": {"3": row(3)}}), 2.0) == [
        ArmCheck(jobid, CHECK_S)
    ]
    actions = g.handle(parse_gather({"id": jobid, "rank": 4, "rows": {"4": row(4)}}), 3.0)
    assert [type(a) for a in actions] == [SendUp, CancelCheck]
    assert sorted(actions[0].payload["rows"]) == ["1", "3", "4"]
    assert g.stats()["most-from-one-child"] == 1 and g.stats()["waiting"] == 0


def test_rank_0_writes_the_record_in_one_directory_and_the_job_s_totals_as_memo():
    g, jobid, _ = started_at(0, {0})
    unit = "shell-0-fA1.service"
    (write,) = g.handle(ShellEnded("fA1", unit, record(cpu=2.0)), 0.0)
    assert write.directory == f"job.{dothex(jobid)}.sdexec-usage"
    assert write.entries == {"0": record(cpu=2.0).placed(0, "n0", unit)}
    assert write.memo["sdexec"]["cpu"] == 2.5 and write.memo["sdexec"]["missing"] is None


def test_oom_kills_raise_an_exception_naming_the_rank_and_the_limit():
    g, jobid, _ = started_at(1, {1})
    actions = g.handle(ShellEnded("fA1", UNIT1, record(oom=2), "1G"), 0.0)
    (oom,) = of(RaiseOom, actions)
    assert oom == RaiseOom(jobid, "rank 1 (n1): 2 task(s) killed by the OOM killer, MemoryMax=1G")


def test_a_check_marks_a_lost_child_s_ranks_and_an_ended_shell_s_own_row_missing():
    """At a check, child 3 lost: its job rank is missing; child 4 up is waited for. This
    rank's shell ran and runs no more without a record (its sdexec was reloaded): its own
    row is missing too."""
    g, jobid, _ = started_at(1, {1, 3, 4})
    g.handle(parse_gather({"id": jobid, "rank": 4, "rows": {"4": row(4)}}), 0.0)
    assert g.handle(CheckDue(jobid), CHECK_S) == [AskHealth(jobid)]
    actions = g.handle(HealthFound(jobid, {3: "lost", 4: "full"}, False), CHECK_S)
    (sent,) = of(SendUp, actions)
    assert sent.payload["missing"] == {"1": "no job shell ended on this rank", "3": "rank 3 lost"}
    assert sent.payload["rows"] == {"4": row(4)}


def test_a_shell_still_running_here_is_waited_for_at_a_check():
    g, jobid, _ = started_at(1, {1})
    g.handle(CheckDue(jobid), CHECK_S)
    assert g.handle(HealthFound(jobid, {}, True), CHECK_S) == [ArmCheck(jobid, CHECK_S)]


def test_a_late_correction_of_a_job_forgotten_at_rank_0_is_written_without_memo():
    g = Gatherings(0, "n0")
    came = parse_gather({"id": 7, "rank": 1, "rows": {"3": row(3)}, "late": True})
    (write,) = g.handle(came, 0.0)
    assert write.entries == {"3": row(3)} and write.memo is None


def test_an_unload_passes_on_what_each_gathering_holds_and_cancels_its_check():
    g, jobid, _ = started_at(1, {1, 3})
    g.handle(ShellEnded("fA1", UNIT1, record()), 0.0)
    actions = g.unloading()
    assert [type(a) for a in actions] == [CancelCheck, SendUp]
    assert actions[1].payload["rows"] == {"1": record().placed(1, "n1", UNIT1)}


@pytest.mark.parametrize(
    "body",
    [{}, {"id": "x", "rank": 1}, {"id": 1, "rank": 2, "rows": {"a": {}}}, {"id": 1, "rank": None}],
)
def test_a_malformed_gather_payload_is_eproto(body):
    with pytest.raises(RequestError) as info:
        parse_gather(body)
    assert info.value.errno == errno.EPROTO


# a long job, a reload (review 3: findings 1, 2 and 8)


def test_a_running_job_is_not_polled_and_its_wait_begins_with_its_first_row():
    """A job's start arms no check and asks no health, however long it runs; two hours
    on, its shell's end sends one message, not late, with the row."""
    g, jobid, actions = started_at(1, {1})
    assert actions == [LookUpRanks(jobid)]
    (sent,) = g.handle(ShellEnded("fA1", UNIT1, record()), 7200.0)
    assert sent == SendUp(
        jobid,
        {
            "id": jobid,
            "rank": 1,
            "rows": {"1": record().placed(1, "n1", UNIT1)},
            "missing": {},
            "late": False,
        },
    )


def test_a_two_hour_job_on_two_ranks_gets_one_record_and_one_memo_at_rank_0():
    """Rank 1's row comes two hours after the start, rank 0's a minute later: rank 0
    waits (its shell runs, child 1 is up) and writes once, every rank a row."""
    g, jobid, _ = started_at(0, {0, 1})
    came = parse_gather({"id": jobid, "rank": 1, "rows": {"1": row(1)}})
    assert g.handle(came, 7200.0) == [ArmCheck(jobid, CHECK_S)]
    t = 7200.0
    for _ in range(12):
        t += CHECK_S
        assert g.handle(CheckDue(jobid), t) == [AskHealth(jobid)]
        assert g.handle(HealthFound(jobid, {1: "full"}, True), t) == [ArmCheck(jobid, CHECK_S)]
    actions = g.handle(ShellEnded("fA1", "shell-0-fA1.service", record()), t)
    (write,) = of(WriteRecord, actions)
    assert sorted(write.entries) == ["0", "1"]
    assert write.memo["sdexec"]["ranks"] == 2 and write.memo["sdexec"]["missing"] is None


def test_a_rank_silent_an_hour_after_the_first_row_is_marked_and_the_gathering_ends(monkeypatch):
    """The wait's end marks the silent child's ranks missing; the gathering then counts as
    ended, so that it is forgotten in its turn."""
    g, jobid, _ = started_at(1, {1, 3})
    g.handle(ShellEnded("fA1", UNIT1, record()), 100.0)
    g.handle(CheckDue(jobid), 100.0 + WAIT_MAX_S)
    (sent,) = of(SendUp, g.handle(HealthFound(jobid, {3: "full"}, False), 100.0 + WAIT_MAX_S))
    assert sent.payload["missing"] == {"3": "no record within 3600 s"}
    assert g.ended == 1 and g.stats()["waiting"] == 0


def test_an_unload_memo_names_the_ranks_still_awaited_missing():
    """Rank 0 of a job on 0-2 unloads with rank 1's row only: the row is written and the
    memo's totals say ranks 0 and 2 are not in yet."""
    g, jobid, _ = started_at(0, {0, 1, 2})
    g.handle(parse_gather({"id": jobid, "rank": 1, "rows": {"1": row(1)}}), 10.0)
    write = of(WriteRecord, g.unloading())[0]
    assert write.entries == {"1": row(1)}
    assert write.memo["sdexec"]["ranks"] == 1 and write.memo["sdexec"]["missing"] == "0,2"


def reloaded(rank, job_ranks, early=()):
    """Broker ``rank``'s Gatherings loaded at 1000 (wall clock) and job fA1, started at 900
    under the sdexec before: the ``early`` events come first, then its ranks are found."""
    g = Gatherings(rank, f"n{rank}", loaded=1000.0)
    jobid = job_number("fA1")
    actions = []
    for came in early:
        actions += g.handle(came, 0.0)
    actions += g.handle(RanksFound(jobid, frozenset(job_ranks), nodes(TREE7)[rank], 900.0), 0.0)
    return g, jobid, actions


def test_after_a_reload_rank_0_reads_the_record_back_and_ends_it_complete_and_exact():
    """Rank 1's row was written by the sdexec before; the new rank 0 hears from rank 2,
    then its own shell ends: it reads the record back before it gathers, never marks rank
    1, and writes ranks 0 and 2 with a memo over all three."""
    came = parse_gather({"id": job_number("fA1"), "rank": 2, "rows": {"2": row(2)}})
    g, jobid, actions = reloaded(0, {0, 1, 2}, [came])
    assert of(ReadRecord, actions) == [ReadRecord(jobid, frozenset({0, 1, 2}))]
    assert of(WriteRecord, actions) == []
    actions = g.handle(RecordRead(jobid, {1: row(1)}), 1.0)
    assert actions == [ArmCheck(jobid, CHECK_S)]
    (write,) = of(WriteRecord, g.handle(ShellEnded("fA1", "shell-0-fA1.service", record()), 2.0))
    assert sorted(write.entries) == ["0", "2"]
    assert write.memo["sdexec"]["ranks"] == 3 and write.memo["sdexec"]["missing"] is None


def test_after_a_reload_a_mark_read_back_gives_way_to_the_row_that_comes():
    """Rank 0 was marked lost by the sdexec before; its adopted shell's row replaces the
    mark."""
    g, jobid, _ = reloaded(0, {0}, [ShellEnded("fA1", "shell-0-fA1.service", record())])
    actions = g.handle(RecordRead(jobid, {0: {"rank": 0, "missing": "rank 0 lost"}}), 1.0)
    (write,) = of(WriteRecord, actions)
    assert list(write.entries) == ["0"] and write.memo["sdexec"]["missing"] is None


def test_after_a_reload_a_broker_passes_each_message_on_as_it_comes():
    """Rank 1 of a job on 1, 3, 4 begun before: child 3's row goes up at once, not late
    (rank 0 gathers it), with no wait for 4, whose message went to the sdexec before."""
    came = parse_gather({"id": job_number("fA1"), "rank": 3, "rows": {"3": row(3)}})
    g, jobid, actions = reloaded(1, {1, 3, 4}, [came])
    (sent,) = of(SendUp, actions)
    assert sent.payload["rows"] == {"3": row(3)} and sent.payload["late"] is False
    (own,) = g.handle(ShellEnded("fA1", UNIT1, record()), 1.0)
    assert own.payload["rows"] == {"1": record().placed(1, "n1", UNIT1)}
    assert of(ArmCheck, actions) == [] and g.stats()["waiting"] == 0


def test_a_child_s_unload_message_leaves_its_parent_waiting_for_the_rest():
    """Child 1 unloads with rank 3's row of a job on 3 and 4: rank 0 keeps waiting for
    rank 4 and writes nothing marked."""
    g, jobid, _ = started_at(0, {3, 4})
    assert g.handle(parse_gather({"id": jobid, "rank": 1, "rows": {"3": row(3)}}), 0.0) == [
        ArmCheck(jobid, CHECK_S)
    ]
    (write,) = of(
        WriteRecord, g.handle(parse_gather({"id": jobid, "rank": 1, "rows": {"4": row(4)}}), 1.0)
    )
    assert sorted(write.entries) == ["3", "4"] and write.memo["sdexec"]["missing"] is None
