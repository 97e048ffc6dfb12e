"""Rank 0's record writes, batched without a timer: one KVS commit out at a time.

A write that comes while no commit is out goes at once (an idle instance's job waits for
no one); one that comes while a commit is out waits, and when that commit is answered every
write that waited goes in the next one, at most MOST of them (the rest in the one after).
Each batch's timeout is what is left of its oldest write's bound (the adapter gives the
bound), so a write waits no longer for its answer than it would alone; a write that goes at
once gets the bound itself, not a deadline less the clock (that rounds).

The adapter (``usage/job_usage.py``) makes each batch one transaction and answers its
writes' waiters when the commit is answered. Pure: stdlib only.
"""

from collections import deque

MOST = 64  # the most record writes in one commit
LEAST_TIMEOUT = 0.001  # a batch whose bound is spent is still waited for this long (s)


class RecordCommits:
    """The writes waiting for a commit, and whether one is out.

    Args:
        bound: the longest a write waits for its commit's answer (seconds).
        most: the most writes in one commit.
    """

    def __init__(self, bound, most=MOST):
        self.bound, self.most = bound, most
        self.waiting = deque()  # (write, when it came), oldest first
        self.out = False  # a commit is out, not answered yet

    def add(self, write, now):
        """``write`` came at ``now``: the batch to commit now (``[write]``) with its
        timeout (the bound), or ``([], None)`` when it waits for the commit out."""
        if self.out:
            self.waiting.append((write, now))
            return [], None
        self.out = True
        return [write], self.bound

    def answered(self, now):
        """The commit out was answered (or failed) at ``now``: the next batch and its
        timeout in seconds, or ``([], None)`` (none waits: no commit is out)."""
        if not self.waiting:
            self.out = False
            return [], None
        timeout = max(self.waiting[0][1] + self.bound - now, LEAST_TIMEOUT)
        batch = [self.waiting.popleft()[0] for _ in range(min(self.most, len(self.waiting)))]
        return batch, timeout

    def drain(self):
        """Unload: every write still waiting, oldest first (none waits after)."""
        batch = [write for write, _ in self.waiting]
        self.waiting.clear()
        return batch
