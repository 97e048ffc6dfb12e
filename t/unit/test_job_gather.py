"""One job's gathering at one broker (usage/job_gather.py): who waits for whom, one message
per child per job, duplicates, the wait, late corrections and the job's memo.

Topologies are flux's ``kary:k`` trees (rank r's children are k*r+1 .. k*r+k) in the
``overlay.topology`` shape; rows are placed ``UsageRecord`` JSON. No clock: times are passed in.
"""

import pytest

from flux_sdexec.usage.job_gather import (
    WAIT_S,
    JobGather,
    expected_ranks,
    job_totals,
    subtree_ranks,
)
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
