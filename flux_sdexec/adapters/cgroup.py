"""The post-start checks: what does the unit's cgroup v2 directory say is in force?

Reads /proc and the cgroup v2 filesystem of the running process, nothing else (the
``proc`` root is a parameter, for tests). ``check_allowed_cpus`` is flux-core's
AllowedCPUs check; ``check_containment`` hands the files of a unit's cgroup to the pure
``flux_sdexec.enforcement`` checker. Problems come back as text or verdicts, never raised;
the AllowedCPUs texts are flux-core's, so job-exec's drain reasons read the same.
"""

import os

from flux_sdexec import enforcement
from flux_sdexec.values import parse_idset

HINT = "(is cpuset controller delegated to the user instance?)"
UNAVAILABLE = f"AllowedCPUs not enforced: cpuset.cpus unavailable {HINT}"


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


def _mem_total(proc):
    with open(f"{proc}/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise OSError("no MemTotal in meminfo")


def check_containment(pid, wanted, unit_name, proc="/proc"):
    """Verdicts (``enforcement.check``) for ``wanted`` against ``pid``'s cgroup v2 directory."""
    try:
        mount, path = _cgroup2_mount(proc), _cgroup2_path(pid, proc)
        mem_total = _mem_total(proc)
    except (OSError, ValueError):
        mount = path = None
        mem_total = 0
    if mount is None or path is None:
        return [
            enforcement.Verdict(name, enforcement.NOT_CHECKABLE, f"no cgroup v2 path for pid {pid}")
            for name in wanted
        ]
    directory = f"{mount}{path}"

    def files(name):
        try:
            with open(os.path.join(directory, name)) as f:
                return f.read()
        except OSError:
            return None

    return enforcement.check(wanted, files, unit_name, mem_total, os.sysconf("SC_PAGE_SIZE"))


class ContainmentChecker:
    """Carries out post-start checks under the site's ``sdexec.containment-check`` policy.

    ``enforce``: a constraint that a constrained exec (SDEXEC_R_LOCAL) asked for and the
    kernel does not enforce fails the exec; ``warn``: it is logged and the exec runs;
    ``off``: nothing is read. Constraints a client set itself are checked and counted but
    never fail an exec. Each (constraint, reason) not enforced is logged once.
    """

    def __init__(self, log, policy):
        self.log = log
        self.policy = policy
        self.tally = enforcement.Tally()

    def check(self, pid, spec, unit):
        """The problem that fails the exec, or None."""
        if spec.test_cpus is not None:
            problem = check_allowed_cpus(pid, spec.test_cpus)
            if problem is not None:
                return problem
        if self.policy == "off" or not spec.wanted:
            return None
        verdicts = check_containment(pid, spec.wanted, unit)
        for v in self.tally.add(verdicts):
            self.log.warning(f"{unit}: {v.constraint} {v.outcome}: {v.reason} (first seen)")
        if self.policy == "enforce" and spec.constrained:
            return enforcement.failure(verdicts)
        return None

    def stats(self):
        """``containment`` in ``flux module stats sdexec``."""
        return {"policy": self.policy, "constraints": self.tally.stats()}
