"""What the usage tests share: fake cgroup trees of each layout (unified, hybrid, legacy), a
process as Accounting reads it, the real JobUsage with a recording flux side, and a future.

A tree holds what the kernel leaves in a unit's accounting slice once the unit's own cgroup
is gone (the files and formats of Linux 6.x); the adapter's reader finds them through a
mountinfo naming the mounts, as on a real host. The hybrid tree is this test machine.
"""

import logging
import types

from flux_sdexec.config import Settings
from flux_sdexec.containment import cgroups
from flux_sdexec.core.registry import Registry
from flux_sdexec.usage import cgroup_usage
from flux_sdexec.usage.accounting import Accounting
from flux_sdexec.usage.job_usage import JobUsage
from flux_sdexec.usage.unit_usage import SLICE as SLICE_SOURCE

UNIT = "shell-0-fA1:tb.service"


SLICE = cgroup_usage.accounting_slice(UNIT, "0a1b2c3d")


PARENT = f"/app.slice/{cgroup_usage.PARENT_SLICE}"


CPU_STAT = "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnice_usec 0\n"


def mountinfo(cg, layout):
    if layout == cgroups.UNIFIED:
        return f"30 1 0:27 / {cg} rw - cgroup2 cgroup2 rw\n"
    lines = [
        f"{40 + n} 1 0:{40 + n} / {cg / c} rw - cgroup cgroup rw,{c}"
        for n, c in enumerate(("memory", "pids", "cpuacct"))
    ]
    if layout == cgroups.HYBRID:
        lines.append(f"30 1 0:27 / {cg / 'unified'} rw - cgroup2 cgroup2 rw")
    return "\n".join(lines) + "\n"


def tree(root, layout, **hierarchies):
    """A /proc and cgroup mounts under ``root``; ``hierarchies``: {name: {file: text}} of the
    slice's directory there (``v2`` is the cgroup2 mount)."""
    cg = root / "cgroup"
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "mountinfo").write_text(mountinfo(cg, layout))
    for hierarchy, files in hierarchies.items():
        base = (
            cg
            if layout == cgroups.UNIFIED
            else cg / ("unified" if hierarchy == "v2" else hierarchy)
        )
        directory = base / PARENT.lstrip("/") / SLICE
        directory.mkdir(parents=True)
        for name, text in files.items():
            (directory / name).write_text(text)
    return str(root / "proc")


class Proc:
    """An SdProc as Accounting reads it: ``fields``; compared by identity, weakly
    referable (Accounting keeps its accounts weakly, keyed by the process)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


class Jobs(JobUsage):
    """The real ``JobUsage`` with the flux side of its own: it records the records handed
    to the job's gathering (JSON, from each ShellEnded), holds its lookups until answered,
    as a KVS future would be, and what waits for the records to be handed on until
    ``hand_on`` (the parent broker's answer)."""

    def __init__(self):
        super().__init__(None, logging.getLogger("t"), 0, "node0", None, None, ())
        self.commits = []  # the usage JSON handed on
        self.sent = []  # (key, on_reply)
        self.started = []  # the jobs whose shells started

    def shell_started(self, plain):
        self.started.append(plain)

    def _handle(self, event):
        self.commits.append(event.record.to_json())

    def _look_up(self, key, on_reply):
        self.sent.append((key, on_reply))

    def answer(self, exc=None, record=None):
        key, on_reply = self.sent.pop(0)
        on_reply(exc, record)

    def hand_on(self):
        waiting, self.handing = self.handing, {}
        for then in waiting.values():
            self._call(then)


def accounting(
    proc, kmsg="", bridge=None, sweeper=frozenset(), jobs=None, usage="all", source=SLICE_SOURCE
):
    """An Accounting over the tree at ``proc``, on rank 0 of host ``node0``, with an empty
    registry; slices stopped (and units' figures asked) through ``bridge``, units let go in
    ``sweeper``, job shells' records to ``jobs``; ``usage``: ``[sdexec] usage``; ``source``:
    where it has learnt usage is read (None: not yet)."""
    log = logging.getLogger("t")
    jobs = jobs or Jobs()
    settings = Settings(usage=usage)
    acc = Accounting(
        log, 0, "node0", settings, Registry(), bridge, sweeper, jobs, proc=proc, kmsg=kmsg
    )
    acc.source.source = source
    acc.source.reason = "systemd reports no CPUUsageNSec of an exited unit" if source else None
    return acc


def record(proc, opts=None, kmsg=""):
    """The adapter's record (JSON) of a finished UNIT over the tree at ``proc``."""
    acc = accounting(proc, kmsg=kmsg)
    acc.parent = PARENT
    unit = types.SimpleNamespace(name=UNIT, finished=True, result=None, wait_status=0, started_at=0)
    p = Proc(unit=unit, cmd=types.SimpleNamespace(opts=opts or {}))
    return acc._record(p, types.SimpleNamespace(slice=SLICE, cgroup=None)).to_json()


def proc(name=UNIT, opts=None):
    """An SdProc as place() sees it."""
    unit = types.SimpleNamespace(name=name)
    return Proc(unit=unit, cmd=types.SimpleNamespace(opts=opts or {}, label=None))


class Future:
    """A child's answer to ``sdexec.usage-live``, given by the test (``answer``)."""

    def __init__(self, topic, payload, nodeid):
        self.topic, self.payload, self.nodeid = topic, payload, nodeid
        self.callback = self.body = self.error = None

    def then(self, callback, timeout=-1.0):
        self.callback, self.timeout = callback, timeout

    def get(self):
        if self.error is not None:
            raise self.error
        return self.body

    def answer(self, body=None, error=None):
        self.body, self.error = body, error
        self.callback(self)


ROW = {"cpu_user_s": 1.0, "running": True}
