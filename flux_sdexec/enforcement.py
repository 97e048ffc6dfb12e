"""Which containment constraints does the kernel really enforce for a unit? Pure: stdlib only.

systemd accepting a property is not the kernel enforcing it. After a unit's main process
exists, sdexec reads the unit's cgroup v2 files and gives each constraint it asked for a
verdict: ENFORCED, NOT_ENFORCED (with the reason) or NOT_CHECKABLE.

- AllowedCPUs / AllowedMemoryNodes: ``cpuset.cpus.effective`` / ``cpuset.mems.effective``
  must equal the requested idset; without the cpuset controller in the unit's
  ``cgroup.controllers`` they cannot be in force.
- MemoryMax / MemoryHigh / MemorySwapMax: ``memory.max`` / ``memory.high`` /
  ``memory.swap.max`` must hold the requested limit (bytes rounded down to a page, ``N%`` of
  physical memory within two pages, ``infinity`` as ``max``); likewise needs the memory
  controller.
- DeviceAllow / DevicePolicy: systemd's *user* manager, the one sdexec talks to, never
  attaches a device program (systemd issue #23198), so on a single-user job they are not
  enforced. A multi-user job's shell runs under flux-security's IMP, which applies the device
  policy itself; job-exec names such units ``imp-shell-…``, and for them the device
  constraints are NOT_CHECKABLE here rather than failed.

The ``files`` argument reads one file of the unit's cgroup directory (None when it does not
exist), so tests drive this over temporary trees and the adapter owns the I/O.
"""

from collections import namedtuple
from dataclasses import dataclass

from flux_sdexec.properties import PREFIX
from flux_sdexec.values import parse_idset, parse_size

ENFORCED = "enforced"
NOT_ENFORCED = "not-enforced"
NOT_CHECKABLE = "not-checkable"
OUTCOMES = (ENFORCED, NOT_ENFORCED, NOT_CHECKABLE)

Verdict = namedtuple("Verdict", "constraint outcome reason")

# constraint -> (cgroup v2 file that shows it in force, controller that provides the file)
_CPUSET = {
    "AllowedCPUs": ("cpuset.cpus.effective", "cpuset"),
    "AllowedMemoryNodes": ("cpuset.mems.effective", "cpuset"),
}
_MEMORY = {
    "MemoryMax": ("memory.max", "memory"),
    "MemoryHigh": ("memory.high", "memory"),
    "MemorySwapMax": ("memory.swap.max", "memory"),
}
_FILES = _CPUSET | _MEMORY
DEVICE_CONSTRAINTS = ("DeviceAllow", "DevicePolicy")
CONSTRAINTS = (*_FILES, *DEVICE_CONSTRAINTS)

USER_MANAGER_DEVICES = "systemd's user manager does not apply device policies (systemd#23198)"
IMP_DEVICES = "applied by the IMP (multi-user job), not visible to sdexec"


def _hint(controller):
    return f"(is {controller} controller delegated to the user instance?)"


def _unavailable(name):
    """flux-core's words for AllowedCPUs, and the same form for the others."""
    path, controller = _FILES[name]
    return f"{path.removesuffix('.effective')} unavailable {_hint(controller)}"


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


def _cpuset_verdict(name, want, have):
    try:
        ok = parse_idset(have) == parse_idset(want)
    except ValueError:
        return Verdict(name, NOT_CHECKABLE, f"cannot parse {have!r}")
    if ok:
        return Verdict(name, ENFORCED, "")
    return Verdict(name, NOT_ENFORCED, f"expected {want} got {have or '(empty)'} {_hint('cpuset')}")


def _memory_limit(want, mem_total, page):
    """(expected bytes or None for unlimited, tolerance in bytes) for a systemd memory value."""
    if want in ("infinity", "max"):
        return None, 0
    if want.endswith("%"):
        return int(mem_total * float(want[:-1]) / 100) // page * page, 2 * page
    return parse_size(want) // page * page, 0


def _memory_verdict(name, want, have, mem_total, page):
    try:
        limit, slack = _memory_limit(want, mem_total, page)
    except ValueError:
        return Verdict(name, NOT_CHECKABLE, f"cannot interpret the requested {want!r}")
    if have == "max" or limit is None:
        if have == "max" and limit is None:
            return Verdict(name, ENFORCED, "")
        return Verdict(name, NOT_ENFORCED, f"expected {want}, the kernel has {have}")
    if not have.isdigit():
        return Verdict(name, NOT_CHECKABLE, f"cannot parse {have!r}")
    if abs(int(have) - limit) <= slack:
        return Verdict(name, ENFORCED, "")
    return Verdict(name, NOT_ENFORCED, f"expected {want} ({limit} bytes), the kernel has {have}")


def check(wanted, files, unit_name, mem_total, page=4096):
    """A Verdict for each constraint in ``wanted`` (``{property: value}``), in CONSTRAINTS order.

    Args:
        wanted: the containment properties sdexec asked systemd for.
        files: ``files(name)`` -> text of that file of the unit's cgroup, or None.
        unit_name: the unit's name (tells a multi-user job, see the module docstring).
        mem_total: bytes of physical memory, for ``N%`` memory limits.
    """
    names = [name for name in CONSTRAINTS if name in wanted]
    controllers = None
    if any(name in _FILES for name in names):
        text = files("cgroup.controllers")
        controllers = text.split() if text is not None else None
    return [
        _verdict(name, str(wanted[name]).strip(), files, controllers, unit_name, mem_total, page)
        for name in names
    ]


def _verdict(name, want, files, controllers, unit_name, mem_total, page):
    if name in DEVICE_CONSTRAINTS:
        if is_multiuser_unit(unit_name):
            return Verdict(name, NOT_CHECKABLE, IMP_DEVICES)
        return Verdict(name, NOT_ENFORCED, USER_MANAGER_DEVICES)
    if controllers is None:
        return Verdict(name, NOT_CHECKABLE, "the unit's cgroup is gone")
    path, controller = _FILES[name]
    have = files(path) if controller in controllers else None
    if have is None:
        return Verdict(name, NOT_ENFORCED, _unavailable(name))
    if name in _CPUSET:
        return _cpuset_verdict(name, want, have.strip())
    return _memory_verdict(name, want, have.strip(), mem_total, page)


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
            if v.outcome != ENFORCED:
                entry["last_reason"] = v.reason
                if (v.constraint, v.reason) not in self._said:
                    self._said.add((v.constraint, v.reason))
                    new.append(v)
        return new

    def stats(self):
        """``{constraint: {<outcome>: count for each outcome, "last_reason": text}}``."""
        return {name: dict(entry) for name, entry in self._counts.items()}
