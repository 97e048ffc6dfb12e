"""One RPC to many ranks at once, collected on the reactor until a deadline.

Every request is sent before any answer is awaited: the whole round takes about
the slowest rank's answer, at most ``timeout`` seconds, whatever the number of ranks.
"""

import errno
import time

import flux
from flux.hostlist import Hostlist
from flux.idset import IDset


class Answer:
    """One rank's reply: ``payload`` (a dict, {} for an empty one) or ``error`` (errno,
    text); neither if silent."""

    __slots__ = ("rank", "payload", "error")

    def __init__(self, rank):
        self.rank = rank
        self.payload = None
        self.error = None


def add_output_options(sub, timeout_type=float):
    """``-o text|json`` and ``-t SECONDS`` (how long to wait for the ranks), as every query
    has; ``timeout_type`` parses the seconds (argparse's ``type``)."""
    sub.add_argument("-o", "--output", choices=("text", "json"), default="text")
    sub.add_argument(
        "-t",
        "--timeout",
        type=timeout_type,
        default=5.0,
        metavar="SECONDS",
        help="how long to wait for the ranks' answers (default 5)",
    )


class Round:
    """Requests sent at once, their answers collected as they come (on the reactor).

    ``answers`` maps each key to an Answer; ``waiting`` holds the keys not answered yet.
    The last answer stops the reactor; one that comes after ``close()`` is dropped.
    """

    def __init__(self, h):
        self.h = h
        self.answers = {}
        self.waiting = set()
        self.closed = False

    def send(self, key, topic, payload, rank):
        """Send ``topic`` to ``rank``; its answer goes under ``key``."""
        self.answers[key] = Answer(rank)
        self.waiting.add(key)
        self.h.rpc(topic, payload, nodeid=rank).then(self._answered, key)  # flux keeps it

    def _answered(self, future, key):
        if self.closed:
            return
        try:
            self.answers[key].payload = future.get() or {}
        except OSError as exc:
            text = future.error_string() or exc.strerror or str(exc)
            self.answers[key].error = (exc.errno, text)
        self.waiting.discard(key)
        if not self.waiting:
            self.h.reactor_stop()

    def close(self):
        self.closed = True


def run_reactor(h, seconds, done):
    """Run ``h``'s reactor until ``done()`` or ``seconds`` pass. A stop that comes
    earlier (from anything else) only makes it look at ``done()`` again."""
    deadline = time.monotonic() + seconds
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        timer = h.timer_watcher_create(left, lambda *args: h.reactor_stop()).start()
        try:
            h.reactor_run()
        finally:
            timer.stop()


def ask_all(h, topic, ranks, payload=None, timeout=5.0):
    """Send ``topic`` to every rank in ``ranks`` now; wait for the answers until ``timeout``.

    Returns:
        ``{rank: Answer}`` for every rank asked.
    """
    round_ = Round(h)
    for rank in ranks:
        round_.send(rank, topic, payload, rank)
    run_reactor(h, timeout, lambda: not round_.waiting)
    round_.close()
    return round_.answers


def instance_ranks(h, idset=None):
    """The ranks named by ``idset`` ("all" or None: every rank), checked against the size.

    Raises:
        ValueError: an idset that does not parse or names a rank beyond the instance.
    """
    size = int(h.attr_get("size"))
    if idset in (None, "all"):
        return list(range(size))
    try:
        ranks = list(IDset(idset))
    except (OSError, ValueError) as exc:
        raise ValueError(f"invalid idset {idset!r}") from exc
    beyond = [r for r in ranks if r >= size]
    if beyond:
        raise ValueError(f"rank {beyond[0]} is not in this instance (size {size})")
    return ranks


def hostnames(h):
    """Each rank's hostname, from the instance's ``hostlist`` attribute."""
    try:
        return list(Hostlist(h.attr_get("hostlist")))
    except OSError:
        return []


def compress(hosts):
    """Hostnames as a hostlist (``node[0-3]``); unknown ones left out."""
    hosts = [host for host in hosts if host]
    return str(Hostlist(hosts).uniq()) if hosts else "-"


def connect():
    """A handle to the enclosing instance, or OSError saying there is none."""
    try:
        return flux.Flux()
    except OSError as exc:
        text = exc.strerror or str(exc)
        raise OSError(exc.errno or errno.ENOENT, f"cannot connect to flux: {text}") from None
