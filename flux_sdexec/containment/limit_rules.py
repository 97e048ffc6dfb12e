"""The verdict rules for limits kept in a cgroup file: cpusets, memory, tasks, CPU quota. Pure.

Each rule is ``rule(name, want, read, host) -> (outcome, text)``: ``want`` is the value
sdexec asked systemd for, ``read(file)`` the text of that file in the unit's cgroup of the
hierarchy that holds the controller (None when unreadable), ``host`` the
``enforcement.Host`` relative values refer to. ``V2_RULES`` and ``V1_RULES`` give the rule
of each constraint per cgroup version; ``FILES`` names the files.
"""

from flux_sdexec.core.values import parse_idset, parse_size
from flux_sdexec.containment.verdicts import ENFORCED, NOT_CHECKABLE, NOT_ENFORCED

# constraint -> (controller, cgroup v2 file, cgroup v1 file)
FILES = {
    "AllowedCPUs": ("cpuset", "cpuset.cpus.effective", "cpuset.cpus"),
    "AllowedMemoryNodes": ("cpuset", "cpuset.mems.effective", "cpuset.mems"),
    "MemoryMax": ("memory", "memory.max", "memory.limit_in_bytes"),
    "MemoryHigh": ("memory", "memory.high", None),
    "MemorySwapMax": ("memory", "memory.swap.max", "memory.memsw.limit_in_bytes"),
    "TasksMax": ("pids", "pids.max", "pids.max"),
    "CPUQuota": ("cpu", "cpu.max", "cpu.cfs_quota_us"),
}
V1_NO_LIMIT = 1 << 62  # v1 shows "no limit" as the largest page multiple of LONG_MAX
TASKS_SCALE = 2**32 - 1  # systemd's TasksMaxScale for 100%


def _stripped(text):
    return None if text is None else text.strip()


def _unreadable(version, path):
    return NOT_ENFORCED, f"{version} {path} unavailable"


# --- idsets -------------------------------------------------------------------------------


def _cpuset(version):
    def rule(name, want, read, host):
        path = FILES[name][1 if version == "v2" else 2]
        have = _stripped(read(path))
        if have is None:
            return _unreadable(version, path)
        try:
            ok = parse_idset(have) == parse_idset(want)
        except ValueError:
            return NOT_CHECKABLE, f"{version} {path}: cannot parse {have!r}"
        if ok:
            return ENFORCED, f"{version} {path} is {have}"
        return NOT_ENFORCED, f"{version} {path} is {have or '(empty)'}, expected {want}"

    return rule


# --- memory -------------------------------------------------------------------------------


def _memory_limit(want, host):
    """(expected bytes or None for no limit, tolerance in bytes) for a systemd memory value."""
    if want in ("infinity", "max"):
        return None, 0
    if want.endswith("%"):
        return int(host.mem_total * float(want[:-1]) / 100) // host.page * host.page, 2 * host.page
    return parse_size(want) // host.page * host.page, 0


def _bytes(have, version):
    """The limit in a memory file: None for no limit, else bytes (ValueError if junk)."""
    if version == "v2" and have == "max":
        return None
    if not have.isdigit():
        raise ValueError(have)
    value = int(have)
    return None if version == "v1" and value >= V1_NO_LIMIT else value


def _shown(have, version):
    return (
        f"{have} (no limit)"
        if version == "v1" and have.isdigit() and int(have) >= V1_NO_LIMIT
        else have
    )


def _compare_memory(want, path, have, version, host):
    try:
        limit, slack = _memory_limit(want, host)
    except ValueError:
        return NOT_CHECKABLE, f"cannot interpret the requested {want!r}"
    try:
        value = _bytes(have, version)
    except ValueError:
        return NOT_CHECKABLE, f"{version} {path}: cannot parse {have!r}"
    seen = f"{version} {path} is {_shown(have, version)}"
    if limit is None or value is None:
        ok = limit is None and value is None
    else:
        ok = abs(value - limit) <= slack
    if ok:
        return ENFORCED, seen
    expected = want if limit is None else f"{want} ({limit} bytes)"
    return NOT_ENFORCED, f"{seen}, expected {expected}"


def _v2_memory(name, want, read, host):
    path = FILES[name][1]
    have = _stripped(read(path))
    if have is None:
        return _unreadable("v2", path)
    return _compare_memory(want, path, have, "v2", host)


def _v1_memory_max(name, want, read, host):
    path = "memory.limit_in_bytes"
    have = _stripped(read(path))
    if have is None:
        return _unreadable("v1", path)
    return _compare_memory(want, path, have, "v1", host)


def v1_memory_high(want):
    if want in ("infinity", "max"):
        return ENFORCED, "no v1 file: v1 has no high limit, and none was asked for"
    return NOT_ENFORCED, (
        "MemoryHigh has no v1 equivalent (memory.high is v2 only;"
        " memory.soft_limit_in_bytes does not throttle)"
    )


def _v1_memory_swap(name, want, read, host):
    """v1 caps memory plus swap: memsw minus the memory limit is the swap allowed."""
    memsw, mem = "memory.memsw.limit_in_bytes", "memory.limit_in_bytes"
    both, have_mem = _stripped(read(memsw)), _stripped(read(mem))
    if both is None:
        return (
            NOT_ENFORCED,
            f"v1 {memsw} unavailable (swap accounting off: boot with swapaccount=1)",
        )
    if have_mem is None:
        return _unreadable("v1", mem)
    try:
        swap, slack = _memory_limit(want, host)
        both_v, mem_v = _bytes(both, "v1"), _bytes(have_mem, "v1")
    except ValueError:
        return (
            NOT_CHECKABLE,
            f"v1 {memsw}, {mem}: cannot interpret {both!r}, {have_mem!r}, {want!r}",
        )
    if both_v is None:
        if swap is None:
            return ENFORCED, f"v1 {memsw} has no limit"
        return NOT_ENFORCED, f"v1 {memsw} has no limit (systemd sets MemorySwapMax only on v2)"
    if mem_v is None:
        return NOT_ENFORCED, f"v1 {memsw} is {both} but {mem} has no limit: swap is not capped"
    seen = f"v1 {memsw} - {mem} is {both_v - mem_v}"
    if swap is not None and abs(both_v - mem_v - swap) <= slack + host.page:
        return ENFORCED, seen
    expected = want if swap is None else f"{want} ({swap} bytes)"
    return NOT_ENFORCED, f"{seen}, expected {expected}"


# --- tasks and CPU ------------------------------------------------------------------------


def _tasks(version):
    def rule(name, want, read, host):
        have = _stripped(read("pids.max"))
        if have is None:
            return _unreadable(version, "pids.max")
        seen = f"{version} pids.max is {have}"
        if want == "infinity":
            ok = have == "max"
        elif not have.isdigit():
            ok = False
        elif want.endswith("%"):
            try:
                scale = int(float(want[:-1]) / 100 * TASKS_SCALE)
            except ValueError:
                return NOT_CHECKABLE, f"cannot interpret the requested {want!r}"
            expected = host.tasks_total * scale // TASKS_SCALE
            ok = host.tasks_total > 0 and abs(int(have) - expected) <= max(1, expected // 100)
        elif want.isdigit():
            ok = int(have) == int(want)
        else:
            return NOT_CHECKABLE, f"cannot interpret the requested {want!r}"
        return (ENFORCED, seen) if ok else (NOT_ENFORCED, f"{seen}, expected {want}")

    return rule


def _expected_quota(want, period):
    """The quota systemd writes for CPUQuota ``want`` and ``period`` (None: no limit)."""
    if want == "infinity":
        return None
    if not want.endswith("%"):
        raise ValueError(want)
    per_sec = int(float(want[:-1]) * 10000)
    return max(per_sec * period // 1_000_000, 1000)


def _compare_quota(want, seen, quota, period):
    try:
        expected = _expected_quota(want, period)
    except ValueError:
        return NOT_CHECKABLE, f"cannot interpret the requested {want!r}"
    if expected == quota:
        return ENFORCED, seen
    shown = "no limit" if expected is None else f"{expected} per {period} µs"
    return NOT_ENFORCED, f"{seen}, expected {want} ({shown})"


def _v2_cpu_quota(name, want, read, host):
    have = _stripped(read("cpu.max"))
    if have is None:
        return _unreadable("v2", "cpu.max")
    quota, _, period = have.partition(" ")
    if not period.isdigit() or not (quota == "max" or quota.isdigit()):
        return NOT_CHECKABLE, f"v2 cpu.max: cannot parse {have!r}"
    quota = None if quota == "max" else int(quota)
    return _compare_quota(want, f"v2 cpu.max is {have}", quota, int(period))


def _v1_cpu_quota(name, want, read, host):
    quota, period = _stripped(read("cpu.cfs_quota_us")), _stripped(read("cpu.cfs_period_us"))
    if quota is None or period is None:
        return _unreadable("v1", "cpu.cfs_quota_us/cpu.cfs_period_us")
    seen = f"v1 cpu.cfs_quota_us is {quota}, cpu.cfs_period_us is {period}"
    try:
        value, per = int(quota), int(period)
    except ValueError:
        return NOT_CHECKABLE, f"{seen}: cannot parse"
    return _compare_quota(want, seen, None if value < 0 else value, per)


V2_RULES = {
    "AllowedCPUs": _cpuset("v2"),
    "AllowedMemoryNodes": _cpuset("v2"),
    "MemoryMax": _v2_memory,
    "MemoryHigh": _v2_memory,
    "MemorySwapMax": _v2_memory,
    "TasksMax": _tasks("v2"),
    "CPUQuota": _v2_cpu_quota,
}
V1_RULES = {
    "AllowedCPUs": _cpuset("v1"),
    "AllowedMemoryNodes": _cpuset("v1"),
    "MemoryMax": _v1_memory_max,
    "MemorySwapMax": _v1_memory_swap,
    "TasksMax": _tasks("v1"),
    "CPUQuota": _v1_cpu_quota,
}
