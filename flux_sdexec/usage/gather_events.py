"""The words of a gathering: the events ``Gatherings`` takes, the actions it asks for,
and the ``sdexec.usage-gather`` payload that carries rows from a child to its parent.

Events are facts (a shell started or ended, rows came, the job's ranks found, this
broker's subtree found, a record read back, a check due, the children's health found).
Actions are orders for the adapter (``usage/job_usage.py``): look the ranks up, read a
record back, arm or cancel a check, ask the health, send up, write the record and memo,
raise an ``oom`` exception.

Pure: stdlib only.
"""

import dataclasses
import errno
from typing import Optional

from flux_sdexec.core.errors import RequestError

OOM_TYPE = "oom"  # the type of the job exception raised for OOM kills


@dataclasses.dataclass(frozen=True)
class ShellStarted:
    """A shell of job ``jobid`` starts on this rank (under this sdexec)."""

    jobid: int


@dataclasses.dataclass(frozen=True)
class ShellEnded:
    """Job ``plain``'s (f58plain) shell ``unit`` ended on this rank having used ``record``
    (a UsageRecord); ``memory_max``: the unit's MemoryMax, or None."""

    plain: str
    unit: str
    record: object
    memory_max: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class RowsCame:
    """Rows and missing marks of job ``jobid``: this rank's own (``sender`` None) or a
    child's message (``late``: a correction sent after the child's message went)."""

    jobid: int
    rows: dict
    missing: dict
    sender: Optional[int] = None
    late: bool = False


@dataclasses.dataclass(frozen=True)
class RanksFound:
    """Job ``jobid``'s ranks, from its R (empty: no R, or it could not be read), this
    broker's subtree (``overlay.topology``), and when the job started (R's
    ``execution.starttime``, seconds since the epoch; None: unknown)."""

    jobid: int
    ranks: frozenset
    topology: dict
    started: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class SubtreeFound:
    """This broker's subtree (``overlay.topology``) is known: a broker with no children
    (a leaf) gathers without the jobs' R from then on."""

    topology: dict


@dataclasses.dataclass(frozen=True)
class RecordRead:
    """Rank 0: what job ``jobid``'s record held when read back (``{rank: entry}``, a row
    or a missing mark each)."""

    jobid: int
    entries: dict


@dataclasses.dataclass(frozen=True)
class ReadRecord:
    """Action (rank 0): read job ``jobid``'s record back, an entry per rank of ``ranks``;
    answer with RecordRead."""

    jobid: int
    ranks: frozenset


@dataclasses.dataclass(frozen=True)
class CheckDue:
    """CHECK_S passed with job ``jobid``'s ranks awaited."""

    jobid: int


@dataclasses.dataclass(frozen=True)
class HealthFound:
    """``overlay.health``'s status of each child (``{rank: word}``) for job ``jobid``'s
    check, and whether a shell of the job still runs on this rank."""

    jobid: int
    status: dict
    runs_here: bool


@dataclasses.dataclass(frozen=True)
class LookUpRanks:
    """Action: look up job ``jobid``'s R and the topology; answer with RanksFound."""

    jobid: int


@dataclasses.dataclass(frozen=True)
class ArmCheck:
    """Action: (re)arm job ``jobid``'s one check timer; it fires CheckDue."""

    jobid: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class CancelCheck:
    """Action: stop job ``jobid``'s check timer, if armed."""

    jobid: int


@dataclasses.dataclass(frozen=True)
class AskHealth:
    """Action: ask ``overlay.health``; answer with HealthFound."""

    jobid: int


@dataclasses.dataclass(frozen=True)
class SendUp:
    """Action: send ``payload`` (``sdexec.usage-gather``'s) to the parent broker's sdexec."""

    jobid: int
    payload: dict


@dataclasses.dataclass(frozen=True)
class WriteRecord:
    """Action (rank 0): put ``entries`` ({key: JSON}) in KVS directory ``directory`` in
    one commit, then post ``memo`` on job ``jobid`` (None: no memo)."""

    jobid: int
    directory: str
    entries: dict
    memo: Optional[dict]


@dataclasses.dataclass(frozen=True)
class RaiseOom:
    """Action: raise a non-fatal exception of type OOM_TYPE on job ``jobid``, ``note``
    saying where and how many tasks the OOM killer took."""

    jobid: int
    note: str


def gather_payload(jobid, rank, rows, missing, late):
    """``sdexec.usage-gather``'s payload: job ``jobid``'s ``rows`` and ``missing`` marks
    from broker ``rank`` (``late``: a correction)."""
    return {
        "id": jobid,
        "rank": rank,
        "rows": {str(r): row for r, row in rows.items()},
        "missing": {str(r): why for r, why in missing.items()},
        "late": late,
    }


def parse_gather(body):
    """The RowsCame of an ``sdexec.usage-gather`` payload.

    Raises:
        RequestError: EPROTO, a malformed payload.
    """
    try:
        return RowsCame(
            int(body["id"]),
            {int(r): dict(row) for r, row in body.get("rows", {}).items()},
            {int(r): str(why) for r, why in body.get("missing", {}).items()},
            int(body["rank"]),
            bool(body.get("late", False)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RequestError(errno.EPROTO, f"usage-gather: malformed payload ({exc!r})")
