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
  ``memory.swap.max`` must hold the limit (bytes rounded down to a page, ``N%`` of the memory
  systemd scales by within two pages, ``infinity`` as no limit). v1: MemoryMax is
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
  On v2 the policy is a BPF device program attached to the unit's cgroup: enforced when one
  is (root's manager attaches it; only root may ask the kernel), else an unprivileged *user*
  manager attaches none (systemd issue #23198): not enforced. A multi-user job's shell runs
  under flux-security's IMP, which attaches its own program to its own cgroup (the unit's,
  or one below it); job-exec names such units ``imp-shell-…``, and for them the programs on
  both decide, and only a device policy sdexec cannot see (the query not answered) is
  NOT_CHECKABLE rather than failed.

This module finds the unit's cgroups and picks the rule; the rules are in
``limit_rules`` and ``device_rules``, the Verdict and its tally in ``verdicts``. The names
other modules use are re-exported here.
"""

from dataclasses import dataclass, field
from typing import Callable

from flux_sdexec.containment.cgroups import LEGACY, V2, unit_dir
from flux_sdexec.containment.device_rules import (
    DEVICE_CONSTRAINTS,
    IMP_DEVICES,
    USER_MANAGER_DEVICES,
    devices,
    is_multiuser_unit,
)
from flux_sdexec.containment.limit_rules import FILES, V1_RULES, V2_RULES, v1_memory_high
from flux_sdexec.core.properties import PREFIX
from flux_sdexec.containment.verdicts import (
    ENFORCED,
    LOGGED_MAX,
    NOT_CHECKABLE,
    NOT_ENFORCED,
    NOWHERE,
    OUTCOMES,
    UNENFORCEABLE,
    Tally,
    Verdict,
    failure,
    hierarchy_label,
)

__all__ = [
    "CONSTRAINTS",
    "DEVICE_CONSTRAINTS",
    "ENFORCED",
    "Host",
    "IMP_DEVICES",
    "LOGGED_MAX",
    "NOT_CHECKABLE",
    "NOT_ENFORCED",
    "NOWHERE",
    "OUTCOMES",
    "PostStartCheck",
    "Tally",
    "UNENFORCEABLE",
    "USER_MANAGER_DEVICES",
    "UnitCgroups",
    "Verdict",
    "check",
    "failure",
    "is_multiuser_unit",
    "post_start_check",
]

CONSTRAINTS = (*FILES, *DEVICE_CONSTRAINTS)


def _hint(controller):
    return f"(is {controller} controller delegated to the user instance?)"


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

    mem_total: int  # bytes systemd scales ``N%`` memory limits by (hostlimits.physical_memory)
    page: int = 4096
    tasks_total: int = 0  # the task count systemd scales ``N%`` TasksMax by (0: unknown)


@dataclass(frozen=True)
class UnitCgroups:
    """A unit's main process's cgroups, as the adapter found them.

    ``paths``: ``{hierarchy: path}`` of /proc/<pid>/cgroup, mounted hierarchies only;
    ``read(hierarchy, directory, name)``: the text of that file, None when unreadable;
    ``devices``: ``{DeviceAllow path: "c 7:0"}`` for the device nodes the adapter resolved;
    ``programs(hierarchy, directory)``: how many BPF device programs are attached to that
    cgroup v2 directory, raising OSError when the kernel does not say (only root may ask);
    ``privileged``: the manager runs as root, so a query not answered is not a user
    manager's missing program but a refused query (no CAP_NET_ADMIN, seccomp).
    """

    layout: str
    paths: dict
    read: Callable
    devices: dict = field(default_factory=dict)
    programs: Callable = None
    privileged: bool = False


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
        return devices(name, want, wanted, unit)
    controller, v2_file, v1_file = FILES[name]
    where = unit.hierarchy(controller)
    label = hierarchy_label(where)
    if where is None:
        if unit.layout == LEGACY:
            text = f"no v1 {controller} hierarchy is mounted ({v1_file or v2_file} not read)"
        else:
            text = f"v2 {v2_file} unavailable {_hint(controller)}"
        return Verdict(name, NOT_ENFORCED, unit.reason(text), label)
    if where == V2:
        outcome, text = V2_RULES[name](name, want, lambda f: unit.read(V2, f), host)
        return Verdict(name, outcome, unit.reason(text), label)
    if name == "MemoryHigh":
        outcome, text = v1_memory_high(want)
        return Verdict(name, outcome, unit.reason(text), label)
    if unit.own(where) is None:
        text = f"v1 {v1_file} not read: the unit has no v1 {where} cgroup"
        if controller == "cpuset":
            text += f" (systemd sets {name} only on cgroup v2)"
        return Verdict(name, NOT_ENFORCED, unit.reason(text), label)
    outcome, text = V1_RULES[name](name, want, lambda f: unit.read(where, f), host)
    return Verdict(name, outcome, unit.reason(text), label)
