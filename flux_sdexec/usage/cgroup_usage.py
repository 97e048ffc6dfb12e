"""A unit's accounting slice, and what the unit used from the text of the slice's cgroup files.

A unit's own cgroup is gone the moment its last process exits, before sdexec hears of
the exit, and systemd 252 keeps no figures for it on the hybrid layout. So every unit sdexec
starts runs in a slice of its own (``accounting_slice``), which outlives it until sdexec
stops it: a parent cgroup keeps what its removed children used (unified ``cpu.stat``,
v2 ``memory.peak``, ``memory.events``, ``pids.peak``; v1 ``cpuacct.usage*``,
``memory.max_usage_in_bytes``, ``pids.peak``). Where systemd keeps an exited unit's own
figures instead (systemd 257), job shells need no slice: ``usage/unit_usage.py``. v1
counts an OOM kill only in the victim's own memory cgroup (``memory.oom_control``), which
is removed with the unit; there, the kills are counted from
the kernel's one ``oom-kill:`` log line per kill, whose ``task_memcg=`` names the victim's
cgroup (``oom_kill_slice``), or are ``null`` with the reason, never a made-up number.

``read(hierarchy, name)`` gives the text of file ``name`` in the slice's cgroup on
``hierarchy`` (``"v2"`` or a v1 controller, as in ``cgroups``), None when unreadable.
Pure: the slice files' reads are the caller's (``usage.accounting``), as is where the
slices are and stopping them.
"""

import re

from flux_sdexec.containment.cgroups import LEGACY, V2
from flux_sdexec.core.naming import slice_escape, slice_unescape
from flux_sdexec.usage.record import FIGURES, UsageRecord

PARENT_SLICE = "app-sdexec.slice"  # every accounting slice's parent, in app.slice
SLICE_PREFIX = "app-sdexec-"
UNIT_NAME_MAX = 255  # systemd's longest unit name


def accounting_slice(unit, token):
    """The slice of one start of unit ``unit``: ``app-sdexec-<unit, escaped>_<token>.slice``,
    or None when that name would be longer than systemd allows (no slice then).

    A ``-`` in a slice name means nesting, so the unit's name is escaped as systemd
    escapes it (``\\x2d``); the slice sits in ``app-sdexec.slice``, in ``app.slice``. The
    token tells two starts of one unit name apart: a label is free for a new exec while
    the old unit's slice may still be stopping.
    """
    base = unit[: -len(".service")] if unit.endswith(".service") else unit
    name = f"{SLICE_PREFIX}{slice_escape(base)}_{token}.slice"
    return name if len(name) <= UNIT_NAME_MAX else None


def is_accounting_slice(name):
    """Whether ``name`` (a unit's ``Slice``) is an accounting slice."""
    return bool(name) and name.startswith(SLICE_PREFIX) and name.endswith(".slice")


def slice_unit(name):
    """The unit accounting slice ``name`` was made for (``accounting_slice``'s inverse), or
    None when ``name`` is no accounting slice."""
    if not is_accounting_slice(name):
        return None
    base, sep, token = name[len(SLICE_PREFIX) : -len(".slice")].rpartition("_")
    unit = slice_unescape(base) + ".service"
    return unit if sep and accounting_slice(unit, token) == name else None


def _keyed(text):
    """``{key: int}`` from ``key value`` lines (cpu.stat, memory.events, oom_control)."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _number(text):
    text = (text or "").strip()
    return int(text) if text.isdigit() else None


def _cpu(read, layout, figures, why):
    if layout != LEGACY:
        stat = _keyed(read(V2, "cpu.stat"))
        if "user_usec" in stat and "system_usec" in stat:
            figures["cpu_user_s"] = stat["user_usec"] / 1e6
            figures["cpu_sys_s"] = stat["system_usec"] / 1e6
            total = stat.get("usage_usec")
            figures["cpu_s"] = total / 1e6 if total is not None else None
            if total is None:
                why["cpu_s"] = f"{layout}: no usage_usec in the slice's cpu.stat"
            return
    user, system = (_number(read("cpuacct", f"cpuacct.usage_{k}")) for k in ("user", "sys"))
    total = _number(read("cpuacct", "cpuacct.usage"))
    if user is not None and system is not None:
        figures["cpu_user_s"], figures["cpu_sys_s"] = user / 1e9, system / 1e9
        figures["cpu_s"] = total / 1e9 if total is not None else None
        if total is None:
            why["cpu_s"] = f"{layout}: no cpuacct.usage for the slice"
        return
    why["cpu_s"] = why["cpu_user_s"] = why["cpu_sys_s"] = f"{layout}: no cpu.stat for the slice"


def oom_kill_slice(record):
    """The accounting slice a /dev/kmsg ``oom-kill:`` record names as the victim's cgroup's
    (``task_memcg=``), or None for any other record. /dev/kmsg writes ``\\`` and
    unprintable bytes as ``\\xNN``."""
    _, _, text = record.partition(";")
    if not text.startswith("oom-kill:"):
        return None
    text = re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), text.split("\n")[0])
    for field in text.split(","):
        if field.startswith("task_memcg="):
            for part in field[len("task_memcg=") :].strip().split("/"):
                if is_accounting_slice(part):
                    return part
    return None


def _memory(read, layout, controllers, v1_oom_kills, figures, why):
    if "memory" in controllers:
        figures["memory_peak"] = _number(read(V2, "memory.peak"))
        events = _keyed(read(V2, "memory.events"))
        figures["oom_kills"] = events.get("oom_kill")
        if figures["memory_peak"] is None:
            why["memory_peak"] = f"{layout}: v2 memory.peak unreadable (kernel older than 5.19?)"
        if figures["oom_kills"] is None:
            why["oom_kills"] = f"{layout}: v2 memory.events unreadable"
        return
    peak = _number(read("memory", "memory.max_usage_in_bytes"))
    if peak is None:
        why["memory_peak"] = why["oom_kills"] = (
            f"{layout}: the unit has no memory cgroup of its own "
            "(no memory controller for this manager's units)"
        )
        return
    figures["memory_peak"] = peak
    figures["oom_kills"] = v1_oom_kills
    if v1_oom_kills is None:
        why["oom_kills"] = (
            f"{layout}: cgroup v1 counts OOM kills only in the unit's own memory cgroup, "
            "removed with the unit, and the kernel log (/dev/kmsg) is not readable"
        )


def _tasks(read, controllers, layout, figures, why):
    where = V2 if "pids" in controllers else "pids"
    figures["tasks_peak"] = _number(read(where, "pids.peak"))
    if figures["tasks_peak"] is None:
        why["tasks_peak"] = f"{layout}: no pids.peak (pids controller absent or kernel < 6.1)"


def figures(layout, read, v1_oom_kills=None):
    """``(figures, reasons)``: FIGURES from the slice's files; each None one has a reason.

    ``v1_oom_kills``: the kernel log's count of the unit's OOM kills (v1 memory), or None.

    CPU in seconds (all, user, system), memory in bytes (what the kernel charged: anonymous
    memory and the page cache the unit's processes touched), tasks a count.
    """
    out = dict.fromkeys(FIGURES)
    why = {}
    controllers = set() if layout == LEGACY else set((read(V2, "cgroup.controllers") or "").split())
    _cpu(read, layout, out, why)
    _memory(read, layout, controllers, v1_oom_kills, out, why)
    _tasks(read, controllers, layout, out, why)
    return out, why


def record(layout, read, v1_oom_kills, wall_s, result, status, missing=None):
    """The UsageRecord of one unit: figures, wall time, systemd's Result, wait status.

    ``missing``: why the slice could not be read at all (every figure null for it).
    """
    if missing is not None:
        out, why = dict.fromkeys(FIGURES), dict.fromkeys(FIGURES, missing)
    else:
        out, why = figures(layout, read, v1_oom_kills)
    wall_s = round(wall_s, 3) if wall_s is not None else None
    return UsageRecord(**out, wall_s=wall_s, result=result, status=status, null_reasons=why or None)
