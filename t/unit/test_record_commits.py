"""Rank 0's record writes batched without a timer (usage/record_commits.py): one commit
out at a time, the writes that came meanwhile all in the next, none waiting longer than
alone.
"""

from flux_sdexec.usage.record_commits import RecordCommits


def test_a_write_on_an_idle_instance_is_committed_at_once():
    commits = RecordCommits(60.0)
    assert commits.add("a", 5.0) == (["a"], 65.0)
    assert commits.answered() == ([], None)
    assert commits.add("b", 7.0) == (["b"], 67.0)


def test_writes_that_come_while_a_commit_is_out_go_together_when_it_is_answered():
    """Their deadline is the oldest's arrival plus the bound: a write waits no longer
    than it would alone."""
    commits = RecordCommits(60.0)
    commits.add("a", 0.0)
    assert commits.add("b", 1.0) == ([], None)
    assert commits.add("c", 2.0) == ([], None)
    assert commits.answered() == (["b", "c"], 61.0)
    assert commits.add("d", 3.0) == ([], None)  # that commit is out now
    assert commits.answered() == (["d"], 63.0)
    assert commits.answered() == ([], None)


def test_a_batch_holds_at_most_most_writes_the_rest_go_next():
    commits = RecordCommits(60.0, most=2)
    commits.add("a", 0.0)
    for i, write in enumerate("bcde"):
        commits.add(write, float(i))
    assert commits.answered()[0] == ["b", "c"]
    assert commits.answered()[0] == ["d", "e"]
    assert commits.answered() == ([], None)


def test_an_unload_drains_every_waiting_write_once():
    commits = RecordCommits(60.0)
    commits.add("a", 0.0)
    commits.add("b", 0.0)
    commits.add("c", 0.0)
    assert commits.drain() == ["b", "c"]
    assert commits.drain() == []
