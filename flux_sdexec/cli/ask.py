"""One RPC to many ranks at once, collected on the reactor until a deadline.

Every request is sent before any answer is awaited: the whole round takes about
the slowest rank's answer, at most ``timeout`` seconds, whatever the number of ranks.
"""

import errno

import flux
from flux.hostlist import Hostlist
from flux.idset import IDset


class Answer:
    """One rank's reply: ``payload`` (a dict) or ``error`` (errno, text); neither if silent."""

    __slots__ = ("rank", "payload", "error")

    def __init__(self, rank):
        self.rank = rank
        self.payload = None
        self.error = None


def add_output_options(sub):
    """``-o text|json`` and ``-t SECONDS`` (how long to wait for the ranks), as every query has."""
    sub.add_argument("-o", "--output", choices=("text", "json"), default="text")
    sub.add_argument(
        "-t",
        "--timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long to wait for the ranks' answers (default 5)",
    )


def ask_all(h, topic, ranks, payload=None, timeout=5.0):
    """Send ``topic`` to every rank in ``ranks`` now; wait for the answers until ``timeout``.

    Returns:
        ``{rank: Answer}`` for every rank asked.
    """
    answers = {rank: Answer(rank) for rank in ranks}
    waiting = set(answers)

    def done(future, rank):
        try:
            answers[rank].payload = future.get()
        except OSError as exc:
            answers[rank].error = (exc.errno, exc.strerror or str(exc))
        waiting.discard(rank)
        if not waiting:
            h.reactor_stop()

    for rank in ranks:
        h.rpc(topic, payload, nodeid=rank).then(done, rank)  # flux keeps the futures
    if waiting:
        timer = h.timer_watcher_create(timeout, lambda *args: h.reactor_stop())
        timer.start()
        h.reactor_run()
        timer.stop()
    return answers


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
