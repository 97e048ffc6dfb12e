"""The post-start checks: what do the unit's cgroups say is in force?

Reads /proc and the cgroup filesystems (every v1 hierarchy and the v2 one) of the running
process, nothing else (the ``proc`` root is a parameter and mount points come from its
mountinfo, so tests run over a fake tree). ``check_allowed_cpus`` is flux-core's
AllowedCPUs check (cgroup v2 only, its texts); ``check_containment`` hands the files of a
unit's cgroups to the pure ``flux_sdexec.containment.enforcement`` checker;
``host_unenforceable`` reads this host's cgroup mounts for what its user manager can never
enforce (``flux_sdexec.containment.unenforceable``). Problems come back as text or verdicts,
never raised; the AllowedCPUs texts are flux-core's, so job-exec's drain reasons read the same.
"""

import os
import stat

from flux_sdexec.containment import cgroups, enforcement, unenforceable
from flux_sdexec.broker import device_programs
from flux_sdexec.containment import host
from flux_sdexec.core.values import parse_idset

HINT = "(is cpuset controller delegated to the user instance?)"
UNAVAILABLE = f"AllowedCPUs not enforced: cpuset.cpus unavailable {HINT}"
_RELATIVE = ("MemoryMax", "MemoryHigh", "MemorySwapMax", "TasksMax")  # N% needs the Host


def _cgroup2_mount(proc="/proc"):
    with open(f"{proc}/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] == "cgroup2":
                return fields[4]
    return None


def _cgroup2_path(pid, proc="/proc"):
    with open(f"{proc}/{pid}/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                return line[3:].strip()
    return None


def pid_in_unit(pid, unit, proc="/proc"):
    """Whether process ``pid`` is now in a cgroup of ``unit`` (so a signal reaches it, not a
    process that reused the pid)."""
    try:
        with open(f"{proc}/{pid}/cgroup") as f:
            return any(line.rstrip("\n").endswith(f"/{unit}") for line in f)
    except OSError:
        return False


def check_allowed_cpus(pid, expected):
    """Compare the cpuset of ``pid``'s cgroup with ``expected`` (an idset string).

    Returns:
        None when they match, else the reason as text.
    """
    try:
        mount, path = _cgroup2_mount(), _cgroup2_path(pid)
    except OSError as exc:
        return f"AllowedCPUs: cannot read cgroup for pid {pid}: {exc.strerror}"
    if mount is None or path is None:
        return UNAVAILABLE
    try:
        with open(f"{mount}{path}/cpuset.cpus") as f:
            text = f.read().strip()
    except FileNotFoundError:
        return UNAVAILABLE
    except OSError as exc:
        return f"AllowedCPUs: failed to read cpuset.cpus: {exc.strerror}"
    try:
        actual = parse_idset(text)
    except ValueError:
        return "AllowedCPUs: failed to parse cpuset"
    if actual != parse_idset(expected):
        return f"AllowedCPUs not enforced: expected {expected} got {text or '(empty)'} {HINT}"
    return None


def _host(proc, wanted):
    """What relative limits are relative to: systemd's values, container limits included.

    Read only when a memory or task limit in ``wanted`` is ``N%`` (a few hundred µs).
    """
    page = os.sysconf("SC_PAGE_SIZE")
    if not any(str(wanted.get(name, "")).strip().endswith("%") for name in _RELATIVE):
        return enforcement.Host(0, page, 0)
    try:
        memory, page = host.physical_memory(proc)
    except (OSError, ValueError):
        memory = 0
    return enforcement.Host(memory, page, host.tasks_limit(proc))


def _device_numbers(device_allow):
    """``{path: "c 7:0"}`` for the device nodes DeviceAllow names by path."""
    numbers = {}
    for entry in str(device_allow or "").split(","):
        spec = entry.strip().partition(" ")[0]
        if not spec.startswith("/dev/"):
            continue
        try:
            st = os.stat(spec)
        except OSError:
            continue
        kind = "c" if stat.S_ISCHR(st.st_mode) else "b" if stat.S_ISBLK(st.st_mode) else None
        if kind:
            numbers[spec] = f"{kind} {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    return numbers


def cgroup_mounts(proc="/proc"):
    """``{hierarchy: (mount point, root)}`` of this process's mount namespace."""
    return cgroups.parse_mounts(host.read_text(f"{proc}/self/mountinfo"))


def detect_layout(proc="/proc"):
    """``unified``, ``hybrid``, ``legacy``, or ``unknown`` when mountinfo is unreadable."""
    try:
        return cgroups.layout(cgroup_mounts(proc))
    except OSError:
        return "unknown"


def host_unenforceable(proc="/proc", privileged=None):
    """``{constraint: reason}`` this host's systemd user manager can never apply, from its
    cgroup mounts (``unenforceable.unenforceable``); empty when mountinfo cannot be read.
    ``privileged``: the manager runs as root (sdexec runs as its manager's user: by default,
    whether this process is root)."""
    try:
        mounts = cgroup_mounts(proc)
    except OSError:
        return {}
    if privileged is None:
        privileged = os.geteuid() == 0
    return unenforceable.unenforceable(
        cgroups.layout(mounts), "devices" in mounts, privileged=privileged
    )


def unit_cgroups(
    pid, proc="/proc", device_allow=None, programs=device_programs.attached, privileged=False
):
    """The ``enforcement.UnitCgroups`` of ``pid`` (OSError when /proc cannot say).
    ``programs(path)``: the BPF device programs attached to a cgroup directory (OSError when
    the kernel does not say); ``privileged``: the manager runs as root."""
    mounts = cgroup_mounts(proc)
    paths = cgroups.parse_proc_cgroup(host.read_text(f"{proc}/{pid}/cgroup"))

    def where(hierarchy, directory):
        mount, root = mounts[hierarchy]
        return cgroups.fs_path(mount, root, directory)

    def read(hierarchy, directory, name):
        try:
            return host.read_text(os.path.join(where(hierarchy, directory), name))
        except OSError:
            return None

    return enforcement.UnitCgroups(
        cgroups.layout(mounts),
        {h: path for h, path in paths.items() if h in mounts},
        read,
        _device_numbers(device_allow),
        lambda hierarchy, directory: programs(where(hierarchy, directory)),
        privileged,
    )


def check_containment(
    pid, wanted, unit_name, proc="/proc", programs=device_programs.attached, privileged=False
):
    """Verdicts (``enforcement.check``) for ``wanted`` against the cgroups of ``pid``."""
    try:
        cg = unit_cgroups(pid, proc, wanted.get("DeviceAllow"), programs, privileged)
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        return [
            enforcement.Verdict(name, enforcement.NOT_CHECKABLE, f"no cgroups for pid {pid}: {why}")
            for name in enforcement.CONSTRAINTS
            if name in wanted
        ]
    return enforcement.check(wanted, cg, unit_name, _host(proc, wanted))


class ContainmentChecker:
    """Carries out post-start checks under the site's ``sdexec.containment-check`` policy.

    ``enforce``: a constraint that a constrained exec (SDEXEC_R_LOCAL) asked for and the
    kernel does not enforce fails the exec, unless this host's manager never applies it
    (``host_unenforceable``, read at load and at each reload) and the site does not list it
    in ``sdexec.containment-required``: then its verdict is UNENFORCEABLE, the exec runs and
    ``memo(unit, {constraint: reason})`` tells the job. ``warn``: it is logged and the exec
    runs; ``off``: nothing is read. Constraints a client set itself are checked and counted
    but never fail an exec. Each kind of reason (``verdicts.reason_class``: without pids or
    values) a constraint was not enforced is logged once, up to ``LOGGED_MAX`` kinds.

    Args:
        log: the module's logger.
        policy: ``sdexec.containment-check``.
        required: ``sdexec.containment-required``.
        proc: the /proc the host is read from (tests).
        memo: called for a constrained exec that runs with UNENFORCEABLE verdicts.
        privileged: the manager runs as root (default: whether this process is root).
        programs: the BPF device program query (``device_programs.attached``; tests).
    """

    def __init__(
        self,
        log,
        policy,
        required=(),
        proc="/proc",
        memo=None,
        privileged=None,
        programs=device_programs.attached,
    ):
        self.log = log
        self.proc = proc
        self.programs = programs
        self.privileged = os.geteuid() == 0 if privileged is None else privileged
        self.memo = memo
        self.tally = enforcement.Tally()
        self.configure(policy, required)

    def configure(self, policy, required):
        """Apply the policy and the required constraints (at load and at each reload), with
        this host's unenforceable constraints read again; under ``enforce`` a required one
        that this host never enforces is logged as an error: every job asking for it fails."""
        self.policy, self.required = policy, tuple(required)
        self.unenforceable = host_unenforceable(self.proc, self.privileged)
        if policy != "enforce":
            return
        for name, reason in unenforceable.required_conflicts(
            self.required, self.unenforceable
        ).items():
            self.log.error(
                f"containment: {name} is required (sdexec.containment-required) but never"
                f" enforced on this host ({reason}): every constrained job asking for it will"
                " fail (the default mapper asks for DevicePolicy whenever it maps a job)"
            )

    def check(self, pid, spec, unit):
        """The problem that fails the exec, or None."""
        if spec.test_cpus is not None:
            problem = check_allowed_cpus(pid, spec.test_cpus)
            if problem is not None:
                return problem
        if self.policy == "off" or not spec.wanted:
            return None
        verdicts = unenforceable.classify(
            check_containment(pid, spec.wanted, unit, self.proc, self.programs, self.privileged),
            self.unenforceable,
            self.required,
        )
        overflowed = self.tally.overflowed
        for v in self.tally.add(verdicts):
            self.log.warning(f"{unit}: {v.constraint} {v.outcome}: {v.reason} (first seen)")
        if self.tally.overflowed and not overflowed:
            self.log.warning(
                f"{unit}: containment: {enforcement.LOGGED_MAX} kinds of reasons logged,"
                " no more will be (flux module stats sdexec shows the last of each constraint)"
            )
        if not spec.constrained:
            return None
        if self.policy == "enforce":
            problem = enforcement.failure(verdicts)
            if problem is not None:
                return problem
        missing = unenforceable.not_applied(verdicts)
        if missing and self.memo is not None:
            self.memo(unit, missing)
        return None

    def stats(self):
        """``containment`` in ``flux module stats sdexec``."""
        return {
            "policy": self.policy,
            "layout": detect_layout(self.proc),
            "constraints": self.tally.stats(),
            "unenforceable": dict(self.unenforceable),
            "required": list(self.required),
        }
