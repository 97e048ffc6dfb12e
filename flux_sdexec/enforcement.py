"""Which containment constraints does the kernel really enforce for a unit? Pure: stdlib only.

systemd accepting a property is not the kernel enforcing it. After a unit's main process
exists, sdexec reads the files the kernel keeps each limit in, in the unit's own cgroup of
the hierarchy that holds the controller, and gives each constraint it asked for a verdict:
ENFORCED, NOT_ENFORCED or NOT_CHECKABLE, with a reason that names the layout and the file
read (or why none was), and the hierarchy that decided (``v2``, ``v1:<controller>``,
``none``).

A controller is read on cgroup v2 when it is in the unit's ``cgroup.controllers``, else on
its v1 hierarchy when one is mounted (hybrid and legacy layouts), else nowhere:

- AllowedCPUs / AllowedMemoryNodes: v2 ``cpuset.cpus.effective`` / ``cpuset.mems.effective``;
  v1 ``cpuset.cpus`` / ``cpuset.mems`` when the unit has a cpuset cgroup of its own (systemd
  makes one only on v2). The idset must be the one asked for.
- MemoryMax / MemoryHigh / MemorySwapMax: v2 ``memory.max`` / ``memory.high`` /
  ``memory.swap.max`` must hold the limit (bytes rounded down to a page, ``N%`` of physical
  memory within two pages, ``infinity`` as no limit). v1: MemoryMax is
  ``memory.limit_in_bytes``; MemorySwapMax is ``memory.memsw.limit_in_bytes``, a cap on memory
  *plus* swap, so it must exceed ``memory.limit_in_bytes`` by the swap asked for; MemoryHigh
  has no v1 equivalent (systemd writes it only to v2; ``memory.soft_limit_in_bytes`` is a
  reclaim order under global pressure, not a throttle), so a finite MemoryHigh is
  NOT_ENFORCED there.
- TasksMax: ``pids.max`` (v1 and v2); ``N%`` of the system's task limit within 1%.
- CPUQuota: v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``: the quota
  systemd derives from N% and the period (at least 1 ms).
- DeviceAllow / DevicePolicy: v1 ``devices.list`` of the unit's own devices cgroup must not
  allow everything (``a *:* rwm``), and must hold each DeviceAllow node the adapter resolved.
  On v2 systemd's *user* manager attaches no device program (systemd issue #23198): not
  enforced. A multi-user job's shell runs under flux-security's IMP, which applies the device
  policy itself; job-exec names such units ``imp-shell-…``, and for them a device policy sdexec
  cannot see is NOT_CHECKABLE rather than failed.
"""

from collections import namedtuple
from dataclasses import dataclass, field
from typing import Callable

from flux_sdexec.cgroups import LEGACY, V2, unit_dir
from flux_sdexec.properties import PREFIX
from flux_sdexec.values import parse_idset, parse_size

ENFORCED = "enforced"
NOT_ENFORCED = "not-enforced"
NOT_CHECKABLE = "not-checkable"
OUTCOMES = (ENFORCED, NOT_ENFORCED, NOT_CHECKABLE)
NOWHERE = "none"

Verdict = namedtuple("Verdict", "constraint outcome reason hierarchy", defaults=(NOWHERE,))

# constraint -> (controller, cgroup v2 file, cgroup v1 file)
_FILES = {
    "AllowedCPUs": ("cpuset", "cpuset.cpus.effective", "cpuset.cpus"),
    "AllowedMemoryNodes": ("cpuset", "cpuset.mems.effective", "cpuset.mems"),
    "MemoryMax": ("memory", "memory.max", "memory.limit_in_bytes"),
    "MemoryHigh": ("memory", "memory.high", None),
    "MemorySwapMax": ("memory", "memory.swap.max", "memory.memsw.limit_in_bytes"),
    "TasksMax": ("pids", "pids.max", "pids.max"),
    "CPUQuota": ("cpu", "cpu.max", "cpu.cfs_quota_us"),
}
DEVICE_CONSTRAINTS = ("DeviceAllow", "DevicePolicy")
CONSTRAINTS = (*_FILES, *DEVICE_CONSTRAINTS)

USER_MANAGER_DEVICES = "systemd's user manager does not apply device policies (systemd#23198)"
IMP_DEVICES = "applied by the IMP (multi-user job), not visible to sdexec"
V1_NO_LIMIT = 1 << 62  # v1 shows "no limit" as the largest page multiple of LONG_MAX
TASKS_SCALE = 2**32 - 1  # systemd's TasksMaxScale for 100%


def _hint(controller):
    return f"(is {controller} controller delegated to the user instance?)"


def is_multiuser_unit(unit_name):
    """A job shell that job-exec runs under flux-security's IMP (``imp-shell-…``)."""
    return unit_name.startswith("imp-shell-")


@dataclass(frozen=True)
class PostStartCheck:
    """What to verify once a unit's main pid is known."""

    wanted: dict  # containment properties asked of systemd: {name: value}
    constrained: bool  # the site asked for it (SDEXEC_R_LOCAL): the policy may fail the exec
    test_cpus: str = None  # SDEXEC_TEST_EXPECTED_CPUS (debug mode): flux-core's cpuset test


def post_start_check(req, debug):
    """The PostStartCheck for an exec request whose mapper properties are merged, or None.

    flux-core honours SDEXEC_TEST_EXPECTED_CPUS only in debug mode; we do the same.
    """
    wanted = {
        key[len(PREFIX) :]: value
        for key, value in req.opts.items()
        if key.startswith(PREFIX) and key[len(PREFIX) :] in CONSTRAINTS
    }
    test_cpus = req.expected_cpus if debug else None
    if not wanted and test_cpus is None:
        return None
    return PostStartCheck(wanted, req.r_local is not None, test_cpus)


@dataclass(frozen=True)
class Host:
    """What relative values are relative to."""

    mem_total: int  # bytes of physical memory (``N%`` memory limits)
    page: int = 4096
    tasks_total: int = 0  # the system's task limit (``N%`` TasksMax)


@dataclass(frozen=True)
class UnitCgroups:
    """A unit's main process's cgroups, as the adapter found them.

    ``paths``: ``{hierarchy: path}`` of /proc/<pid>/cgroup, mounted hierarchies only;
    ``read(hierarchy, directory, name)``: the text of that file, None when unreadable;
    ``devices``: ``{DeviceAllow path: "c 7:0"}`` for the device nodes the adapter resolved.
    """

    layout: str
    paths: dict
    read: Callable
    devices: dict = field(default_factory=dict)


class _Unit:
    """One unit's own cgroup in each hierarchy, read through ``UnitCgroups.read``.

    The unit's cgroup path is found on the hierarchy systemd tracks processes in (v2, or
    ``name=systemd`` on legacy), where systemd's manager attaches the main process before
    its pid is known. The child attaches itself to the v1 controller hierarchies a moment
    later, so those are looked up by that same path (systemd uses one path in every
    hierarchy), not by where the process happens to be yet.
    """

    def __init__(self, cg, name):
        self.cg, self.name, self.layout = cg, name, cg.layout
        self.path = self.tracker = None
        for hierarchy in (V2, "name=systemd"):
            path = unit_dir(cg.paths.get(hierarchy), name)
            if path is not None:
                self.path, self.tracker = path, hierarchy
                break
        self._own = {}
        self._v2 = None

    def own(self, hierarchy):
        """The unit's cgroup path when it has a cgroup of its own in ``hierarchy``, else None."""
        if hierarchy not in self._own:
            there = self.path is not None and hierarchy in self.cg.paths
            if there and self.cg.read(hierarchy, self.path, "cgroup.procs") is None:
                there = False
            self._own[hierarchy] = self.path if there else None
        return self._own[hierarchy]

    def read(self, hierarchy, name):
        directory = self.own(hierarchy)
        return None if directory is None else self.cg.read(hierarchy, directory, name)

    def gone(self):
        """Why nothing can be read (the unit's cgroup is not there), or None."""
        if self.path is None:
            where = ", ".join(
                f"{h}:{self.cg.paths[h]}" for h in (V2, "name=systemd") if h in self.cg.paths
            )
            return f"{self.layout}: the process is in no cgroup of the unit ({where or 'none'})"
        if self.own(self.tracker) is None:
            return f"{self.layout}: the unit's cgroup is gone"
        return None

    def hierarchy(self, controller):
        """Where ``controller`` is: V2, its v1 hierarchy's name, or None."""
        if self._v2 is None:
            text = self.read(V2, "cgroup.controllers") if self.layout != LEGACY else None
            self._v2 = (text or "").split()
        if controller in self._v2:
            return V2
        return controller if controller in self.cg.paths else None

    def reason(self, text):
        return f"{self.layout}: {text}"


def _label(hierarchy):
    return NOWHERE if hierarchy is None else V2 if hierarchy == V2 else f"v1:{hierarchy}"


def check(wanted, cg, unit_name, host):
    """A Verdict for each constraint in ``wanted`` (``{property: value}``), in CONSTRAINTS order.

    Args:
        wanted: the containment properties sdexec asked systemd for.
        cg: the UnitCgroups of the unit's main process.
        unit_name: the unit's name (its cgroup's name; tells a multi-user job).
        host: the Host the relative values refer to.
    """
    names = [name for name in CONSTRAINTS if name in wanted]
    if not names:
        return []
    unit = _Unit(cg, unit_name)
    gone = unit.gone()
    if gone is not None:
        return [Verdict(name, NOT_CHECKABLE, gone) for name in names]
    return [_verdict(name, str(wanted[name]).strip(), wanted, unit, host) for name in names]


def _verdict(name, want, wanted, unit, host):
    if name in DEVICE_CONSTRAINTS:
        return _devices(name, want, wanted, unit)
    controller, v2_file, v1_file = _FILES[name]
    where = unit.hierarchy(controller)
    label = _label(where)
    if where is None:
        if unit.layout == LEGACY:
            text = f"no v1 {controller} hierarchy is mounted ({v1_file or v2_file} not read)"
        else:
            text = f"v2 {v2_file} unavailable {_hint(controller)}"
        return Verdict(name, NOT_ENFORCED, unit.reason(text), label)
    if where == V2:
        outcome, text = _V2_RULES[name](name, want, lambda f: unit.read(V2, f), host)
        return Verdict(name, outcome, unit.reason(text), label)
    if name == "MemoryHigh":
        outcome, text = _v1_memory_high(want)
        return Verdict(name, outcome, unit.reason(text), label)
    if unit.own(where) is None:
        text = f"v1 {v1_file} not read: the unit has no v1 {where} cgroup"
        if controller == "cpuset":
            text += f" (systemd sets {name} only on cgroup v2)"
        return Verdict(name, NOT_ENFORCED, unit.reason(text), label)
    outcome, text = _V1_RULES[name](name, want, lambda f: unit.read(where, f), host)
    return Verdict(name, outcome, unit.reason(text), label)


def _stripped(text):
    return None if text is None else text.strip()


def _unreadable(version, path):
    return NOT_ENFORCED, f"{version} {path} unavailable"


# --- idsets -------------------------------------------------------------------------------


def _cpuset(version):
    def rule(name, want, read, host):
        path = _FILES[name][1 if version == "v2" else 2]
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
    path = _FILES[name][1]
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


def _v1_memory_high(want):
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


_V2_RULES = {
    "AllowedCPUs": _cpuset("v2"),
    "AllowedMemoryNodes": _cpuset("v2"),
    "MemoryMax": _v2_memory,
    "MemoryHigh": _v2_memory,
    "MemorySwapMax": _v2_memory,
    "TasksMax": _tasks("v2"),
    "CPUQuota": _v2_cpu_quota,
}
_V1_RULES = {
    "AllowedCPUs": _cpuset("v1"),
    "AllowedMemoryNodes": _cpuset("v1"),
    "MemoryMax": _v1_memory_max,
    "MemorySwapMax": _v1_memory_swap,
    "TasksMax": _tasks("v1"),
    "CPUQuota": _v1_cpu_quota,
}


# --- devices ------------------------------------------------------------------------------


def _device_entries(text):
    """``[(type, major, minor, perms)]`` of a v1 devices.list."""
    entries = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and ":" in parts[1]:
            major, _, minor = parts[1].partition(":")
            entries.append((parts[0], major, minor, parts[2]))
    return entries


def _allows(entries, node, perms):
    kind, _, numbers = node.partition(" ")
    major, _, minor = numbers.partition(":")
    return any(
        t in ("a", kind) and ma in ("*", major) and mi in ("*", minor) and set(perms) <= set(p)
        for t, ma, mi, p in entries
    )


def _devices(name, want, wanted, unit):
    multiuser = is_multiuser_unit(unit.name)
    if "devices" not in unit.cg.paths:
        if multiuser:
            return Verdict(name, NOT_CHECKABLE, unit.reason(IMP_DEVICES), _label(V2))
        where = V2 if unit.layout != LEGACY else None
        return Verdict(name, NOT_ENFORCED, unit.reason(USER_MANAGER_DEVICES), _label(where))
    label = _label("devices")
    if unit.own("devices") is None:
        if multiuser:
            return Verdict(name, NOT_CHECKABLE, unit.reason(IMP_DEVICES), label)
        text = "v1 devices.list not read: the unit has no v1 devices cgroup"
        return Verdict(name, NOT_ENFORCED, unit.reason(text), label)
    text = unit.read("devices", "devices.list")
    if text is None:
        return Verdict(name, NOT_ENFORCED, unit.reason("v1 devices.list unavailable"), label)
    entries = _device_entries(text)
    if name == "DevicePolicy" and want == "auto" and "DeviceAllow" not in wanted:
        text = "v1 devices.list read: DevicePolicy=auto restricts nothing"
        return Verdict(name, ENFORCED, unit.reason(text), label)
    if _allows(entries, "c *:*", "rwm") and _allows(entries, "b *:*", "rwm"):
        outcome = NOT_CHECKABLE if multiuser else NOT_ENFORCED
        why = IMP_DEVICES if multiuser else "v1 devices.list allows every device (a *:* rwm)"
        return Verdict(name, outcome, unit.reason(why), label)
    if name == "DeviceAllow":
        for entry in want.split(","):
            spec, _, perms = entry.strip().partition(" ")
            node = unit.cg.devices.get(spec)
            if node is not None and not _allows(entries, node, perms.strip() or "rwm"):
                text = f"v1 devices.list does not allow {node} {perms.strip()} ({spec})"
                return Verdict(name, NOT_ENFORCED, unit.reason(text), label)
    text = f"v1 devices.list allows {len(entries)} entries, not every device"
    return Verdict(name, ENFORCED, unit.reason(text), label)


def failure(verdicts):
    """The text to fail an exec with under ``enforce``: its first constraint not enforced."""
    for v in verdicts:
        if v.outcome == NOT_ENFORCED:
            return f"{v.constraint} not enforced: {v.reason}"
    return None


class Tally:
    """Per constraint, how many starts had it enforced / not enforced / not checkable."""

    def __init__(self):
        self._counts = {}
        self._said = set()

    def add(self, verdicts):
        """Count one start's verdicts; return those whose (constraint, reason) is new."""
        new = []
        for v in verdicts:
            entry = self._counts.setdefault(
                v.constraint, {**{o: 0 for o in OUTCOMES}, "last_reason": ""}
            )
            entry[v.outcome] += 1
            entry["hierarchy"] = v.hierarchy
            entry["last_read"] = v.reason
            if v.outcome != ENFORCED:
                entry["last_reason"] = v.reason
                if (v.constraint, v.reason) not in self._said:
                    self._said.add((v.constraint, v.reason))
                    new.append(v)
        return new

    def stats(self):
        """``{constraint: {<outcome>: count, "last_reason", "hierarchy", "last_read"}}``.

        ``hierarchy`` decided the last start's verdict; ``last_read`` is what it said.
        """
        return {name: dict(entry) for name, entry in self._counts.items()}
