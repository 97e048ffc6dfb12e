"""One job's gathering at one broker: what it waits for, how rows merge, and the job's totals.

Each broker with a job rank in its subtree keeps one ``JobGather`` per job. It holds this
broker's own row (if its rank is in the job) and what each child whose subtree holds a job
rank sends. The tree decides who waits for whom (``expected_ranks``). The rows are merged and
given as ONE message once every job rank below has a row or a missing mark, or once the wait
is over. What arrives later is given alone, as a correction. At rank 0 the rows and marks
make the job's record, and ``job_totals`` makes its memo.

Pure: stdlib only.
"""

from flux_sdexec.core.values import encode_idset
from flux_sdexec.usage.record import FIGURE_TABLE, FIGURES, summed, total

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

    def expired(self, now):
        """The wait began and is over."""
        return self.started is not None and now >= self.deadline()

    def due(self, now):
        """Complete, or the wait is over."""
        return self.complete or self.expired(now)

    def take(self, now):
        """What to send up (or write, at rank 0) now: ``(rows, missing)``, each row or mark
        given once (nothing new: two empty dicts). Once the wait is over, a job rank
        expected but not reported is marked missing ("no record within 30 s"); a row that
        comes later, or a better duplicate, is given alone by the next take."""
        if self.expired(now):
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
    accumulated), built on ``record.total``; a figure no rank gave is None:

    - each figure's total under its memo key (FIGURE_TABLE: ``cpu``, ``cpu_user``,
      ``cpu_sys``, ``maxmem``, ``tasks``, ``oom``), and ``<memo>_rank`` where the table
      asks (``maxmem_rank``: the rank of the largest memory peak); ``cpu`` over records of
      an older sdexec (no ``cpu_s``): user and system CPU seconds, summed
    - ``mem_sum``: ``memory_peak`` summed (bytes)
    - ``ranks``: how many ranks gave a row
    - ``missing``: the ranks of ``missing`` without a row, an RFC 22 idset (``"3,5-7"``);
      absent when none
    """
    records = [rows[rank] for rank in sorted(rows)]
    t = total(records)
    memo = {}
    for figure in FIGURE_TABLE:
        memo[figure.memo] = t[figure.name]
        if figure.with_rank:
            memo[f"{figure.memo}_rank"] = t[f"{figure.name}_rank"]
    if memo["cpu"] is None:  # records of an older sdexec: no cpu_s
        cpu = [t[key] for key in ("cpu_user_s", "cpu_sys_s") if t[key] is not None]
        memo["cpu"] = round(sum(cpu), 6) if cpu else None
    memo["mem_sum"] = summed(records, "memory_peak")
    memo["ranks"] = t["ranks"]
    absent = missing.keys() - rows.keys()
    if absent:
        memo["missing"] = encode_idset(absent)
    return memo
