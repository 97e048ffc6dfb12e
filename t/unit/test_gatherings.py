"""Every job's gathering at one broker (usage/gatherings.py), events in and actions out:
lookups, checks, the write at rank 0, unloads, long jobs and reloads.
"""

import tracemalloc

from test_job_gather import kary, nodes, row

from flux_sdexec.core.shelljobs import job_number
from flux_sdexec.usage import gatherings
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
    SubtreeFound,
    WriteRecord,
    parse_gather,
)
from flux_sdexec.usage.gatherings import CHECK_S, WAIT_MAX_S, Gatherings
from flux_sdexec.usage.record import UsageRecord, dothex

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


def test_only_the_last_remembered_ended_gatherings_are_kept(monkeypatch):
    """A new job lets the oldest ended gatherings go past REMEMBERED; one still waiting
    for its record stays, however old. The one broker of an instance writes each job's
    record as it is complete."""
    monkeypatch.setattr(gatherings, "REMEMBERED", 3)
    kept = gatherings.Gatherings(0, "node0")
    alone = {"rank": 0, "size": 1, "children": []}
    usage = UsageRecord(1.0, 0.25, 100, 2, 0, 3.0, "success", 0)
    written = []
    for n, plain in enumerate(("f2", "f3", "f4", "f5", "f6", "f7"), start=1):
        kept.handle(ShellStarted(n), 0.0)
        kept.handle(RanksFound(n, frozenset({0}), alone), 0.0)
        if n > 1:  # jobs 2-6: each shell ends; job 1's runs on
            ended = ShellEnded(plain, f"shell-0-{plain}.service", usage)
            actions = kept.handle(ended, 0.0)
            written += [a.jobid for a in actions if isinstance(a, WriteRecord)]
    assert written == [2, 3, 4, 5, 6]
    assert list(kept.jobs) == [1, 3, 4, 5, 6] and kept.ended == 4


# an ended gathering lets its rows go (review 3: finding 8, its memory half)


def ended_at_0(job_ranks, jobid):
    """Rank 0's Gatherings of a 1-broker instance with job ``jobid`` on ``job_ranks`` ended:
    every rank's row came in one message (as from one child)."""
    g = Gatherings(0, "n0")
    alone = {"rank": 0, "size": 1, "children": [{"rank": 1, "children": []}]}
    g.handle(ShellStarted(jobid), 0.0)
    g.handle(RanksFound(jobid, frozenset(job_ranks), alone), 0.0)
    rows = {str(r): row(r) for r in job_ranks}
    actions = g.handle(parse_gather({"id": jobid, "rank": 1, "rows": rows}), 1.0)
    assert len(of(WriteRecord, actions)) == 1
    return g


def test_ended_gatherings_keep_no_rows_at_rank_0():
    """Rank 0 remembers its last REMEMBERED ended gatherings for late corrections. Each
    kept every rank's row: 1,024 jobs of 64 ranks held about 100 MB."""
    tracemalloc.start()
    g = Gatherings(0, "n0")
    alone = {"rank": 0, "size": 1, "children": [{"rank": 1, "children": []}]}
    ranks = range(1, 65)
    before = tracemalloc.take_snapshot()
    for jobid in range(1, 101):
        g.handle(ShellStarted(jobid), 0.0)
        g.handle(RanksFound(jobid, frozenset(ranks), alone), 0.0)
        rows = {str(r): row(r) for r in ranks}
        g.handle(parse_gather({"id": jobid, "rank": 1, "rows": rows}), 1.0)
    kept = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    assert g.ended == 100
    assert kept / 100 < 12 * 1024  # bytes per ended 64-rank job (rows: over 60 KiB)


def test_a_late_correction_at_rank_0_reads_the_record_back_then_writes_with_the_memo():
    """The rows let go, a correction is merged into the record as written: read back, the
    better row kept, the memo over every rank."""
    jobid = job_number("fA1")
    g = ended_at_0({1, 2}, jobid)
    better = dict(row(2), cpu_user_s=5.0)
    late = parse_gather({"id": jobid, "rank": 1, "rows": {"2": better}, "late": True})
    assert g.handle(late, 2.0) == [ReadRecord(jobid, frozenset({1, 2}))]
    actions = g.handle(RecordRead(jobid, {1: row(1), 2: dict(row(2), cpu_user_s=None)}), 3.0)
    (write,) = of(WriteRecord, actions)
    assert write.entries == {"2": better}
    assert write.memo["sdexec"]["ranks"] == 2 and write.memo["sdexec"]["cpu_user"] == 6.0


def test_a_late_correction_no_better_than_the_record_writes_nothing():
    jobid = job_number("fA1")
    g = ended_at_0({1, 2}, jobid)
    late = parse_gather({"id": jobid, "rank": 1, "rows": {"2": row(2)}, "late": True})
    g.handle(late, 2.0)
    assert of(WriteRecord, g.handle(RecordRead(jobid, {1: row(1), 2: row(2)}), 3.0)) == []


def test_a_late_correction_below_rank_0_goes_up_alone():
    """A broker whose gathering ended passes a correction on as it comes."""
    g, jobid, _ = started_at(1, {1, 3})
    g.handle(ShellEnded("fA1", UNIT1, record()), 1.0)
    g.handle(parse_gather({"id": jobid, "rank": 3, "rows": {"3": row(3)}}), 2.0)
    late = parse_gather({"id": jobid, "rank": 3, "rows": {"3": row(3, cpu=9.0)}, "late": True})
    (sent,) = of(SendUp, g.handle(late, 3.0))
    assert sent.payload["rows"] == {"3": row(3, cpu=9.0)} and sent.payload["late"] is True


def test_a_leaf_looks_up_no_ranks_and_sends_its_row_up_at_its_shell_s_end():
    """Rank 6 of a 7-rank tree has no children: once its subtree is known, a job's start
    asks for nothing, its shell's end goes up at once as the job's message, and a second
    row of the job goes up as a correction."""
    g = Gatherings(6, "n6")
    g.handle(SubtreeFound(nodes(TREE7)[6]), 0.0)
    jobid = job_number("fA1")
    assert g.handle(ShellStarted(jobid), 0.0) == []
    unit = "shell-6-fA1.service"
    (sent,) = g.handle(ShellEnded("fA1", unit, record()), 1.0)
    assert sent.payload == {
        "id": jobid,
        "rank": 6,
        "rows": {"6": record().placed(6, "n6", unit)},
        "missing": {},
        "late": False,
    }
    (again,) = g.handle(ShellEnded("fA1", unit, record(cpu=2.0)), 2.0)
    assert again.payload["late"] is True
    assert g.stats()["waiting"] == 0 and g.unloading() == []


def test_a_broker_with_children_or_rank_0_alone_still_looks_up_the_ranks():
    """Rank 1 (children 3, 4) waits for its subtree, and rank 0 of a one-broker instance
    writes the record (a job begun before it loaded is read back first): both need R. So
    does a leaf whose subtree is not known yet."""
    alone = {"rank": 0, "size": 1, "children": []}
    for rank, topology in ((1, nodes(TREE7)[1]), (0, alone), (6, None)):
        g = Gatherings(rank, f"n{rank}")
        if topology is not None:
            g.handle(SubtreeFound(topology), 0.0)
        assert g.handle(ShellStarted(5), 0.0) == [LookUpRanks(5)]
