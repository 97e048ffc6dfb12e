"""Rank 0's record writes batched without a timer (usage/record_commits.py): one commit
out at a time, the writes that came meanwhile all in the next, none waiting longer than
alone.
"""

from flux_sdexec.usage.record_commits import LEAST_TIMEOUT, RecordCommits


def test_a_write_on_an_idle_instance_is_committed_at_once_with_the_whole_bound():
    """The bound exactly, whatever the clock reads: a clock just under 2**14 seconds (a
    machine up four and a half hours) once gave a timeout of 60 s and 3.6 ps."""
    commits = RecordCommits(60.0)
    assert commits.add("a", 16383.9) == (["a"], 60.0)
    assert commits.answered(16384.0) == ([], None)
    assert commits.add("b", 7.0) == (["b"], 60.0)


def test_writes_that_come_while_a_commit_is_out_go_together_when_it_is_answered():
    """Their timeout is what is left of the oldest's bound: a write waits no longer than
    it would alone."""
    commits = RecordCommits(60.0)
    commits.add("a", 0.0)
    assert commits.add("b", 1.0) == ([], None)
    assert commits.add("c", 2.0) == ([], None)
    assert commits.answered(5.0) == (["b", "c"], 56.0)
    assert commits.add("d", 6.0) == ([], None)  # that commit is out now
    assert commits.answered(10.0) == (["d"], 56.0)
    assert commits.answered(11.0) == ([], None)


def test_a_batch_whose_bound_is_spent_still_gets_a_moment():
    """A batch whose bound is spent still gets the least timeout (none of 0 or less)."""
    commits = RecordCommits(60.0)
    commits.add("a", 0.0)
    commits.add("b", 1.0)
    assert commits.answered(100.0) == (["b"], LEAST_TIMEOUT)


def test_a_batch_holds_at_most_most_writes_the_rest_go_next():
    commits = RecordCommits(60.0, most=2)
    commits.add("a", 0.0)
    for i, write in enumerate("bcde"):
        commits.add(write, float(i))
    assert commits.answered(4.0)[0] == ["b", "c"]
    assert commits.answered(5.0)[0] == ["d", "e"]
    assert commits.answered(6.0) == ([], None)


def test_an_unload_drains_every_waiting_write_once():
    commits = RecordCommits(60.0)
    commits.add("a", 0.0)
    commits.add("b", 0.0)
    commits.add("c", 0.0)
    assert commits.drain() == ["b", "c"]
    assert commits.drain() == []
