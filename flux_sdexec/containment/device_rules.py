"""The verdict rules for DeviceAllow and DevicePolicy. Pure: stdlib only.

v1: the ``devices.list`` of the unit's own devices cgroup must not allow everything
(``a *:* rwm``) and must hold each DeviceAllow node the adapter resolved. v2: enforced when a
BPF device program is attached to the unit's cgroup (root's manager attaches one; only root
may ask the kernel); an unprivileged *user* manager attaches none (systemd issue #23198), so
not enforced. A
multi-user job's shell runs under flux-security's IMP, which applies the device policy
itself with a BPF program on its own cgroup (the unit's, or one below it); job-exec names
such units ``imp-shell-…``. Where the kernel says how many programs are attached to either,
that answer decides, as for any unit; only a device policy sdexec cannot see (the query not
answered) is NOT_CHECKABLE for them rather than failed.
"""

import errno

from flux_sdexec.containment.cgroups import LEGACY, V2
from flux_sdexec.containment.verdicts import (
    ENFORCED,
    NOT_CHECKABLE,
    NOT_ENFORCED,
    Verdict,
    hierarchy_label,
)

DEVICE_CONSTRAINTS = ("DeviceAllow", "DevicePolicy")
USER_MANAGER_DEVICES = "systemd's user manager does not apply device policies (systemd#23198)"
IMP_DEVICES = "applied by the IMP (multi-user job), not visible to sdexec"


def is_multiuser_unit(unit_name):
    """A job shell that job-exec runs under flux-security's IMP (``imp-shell-…``)."""
    return unit_name.startswith("imp-shell-")


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


def _refused(exc):
    """A BPF query the kernel did not answer, as a reason names it."""
    code = errno.errorcode.get(exc.errno, str(exc.errno))
    how = "was refused" if exc.errno in (errno.EPERM, errno.EACCES) else "failed"
    return f"the BPF program query {how} ({code}): device policy cannot be verified"


def _programs(unit):
    """``(count, below, refused)``: the BPF device programs attached to the unit's own cgroup
    v2 directory and, for a multi-user unit whose main process (the IMP) is in a cgroup below
    it (``below``), to that one too: the IMP attaches its program to its own cgroup. The
    count is None when not known: the kernel did not say for each (``refused``: the OSError
    of the last query it did not answer) and none has a program."""
    if unit.cg.programs is None or unit.layout == LEGACY or unit.own(V2) is None:
        return None, False, None
    directories = [unit.own(V2)]
    process = unit.cg.paths.get(V2)
    below = is_multiuser_unit(unit.name) and process != directories[0]
    if below:
        directories.append(process)
    count, refused = 0, None
    for directory in directories:
        try:
            count += unit.cg.programs(V2, directory)
        except OSError as exc:
            refused = exc
    if count or refused is None:
        return count, below, None
    return None, below, refused


def _cgroups(below, conjunction):
    """The cgroups the BPF query asked about, as a reason names them."""
    return "the unit's cgroup" + (f" {conjunction} the IMP's below it" if below else "")


def _attached(name, unit, programs, below):
    text = f"v2 BPF device programs attached to {_cgroups(below, 'and')}: {programs}"
    return Verdict(name, ENFORCED, unit.reason(text), hierarchy_label(V2))


def _imp(name, unit, label, why):
    """A multi-user unit's verdict where its v1 devices cgroup (``why``) restricts nothing:
    the IMP's BPF program decides where the kernel says; NOT_CHECKABLE where it does not."""
    programs, below, _ = _programs(unit)
    if programs is None:
        return Verdict(name, NOT_CHECKABLE, unit.reason(IMP_DEVICES), label)
    if programs:
        return _attached(name, unit, programs, below)
    text = f"{why}, and no BPF device program is attached to {_cgroups(below, 'or')}"
    return Verdict(name, NOT_ENFORCED, unit.reason(text), label)


def devices(name, want, wanted, unit):
    multiuser = is_multiuser_unit(unit.name)
    if "devices" not in unit.cg.paths:
        where = V2 if unit.layout != LEGACY else None
        programs, below, refused = _programs(unit)
        if programs:
            return _attached(name, unit, programs, below)
        if name == "DevicePolicy" and want == "auto" and "DeviceAllow" not in wanted:
            text = "DevicePolicy=auto restricts nothing"
            return Verdict(name, ENFORCED, unit.reason(text), hierarchy_label(where))
        if multiuser and programs is None:
            return Verdict(name, NOT_CHECKABLE, unit.reason(IMP_DEVICES), hierarchy_label(V2))
        reason = USER_MANAGER_DEVICES
        if programs == 0:
            reason = f"no BPF device program is attached to {_cgroups(below, 'or')}"
        elif refused is not None and unit.cg.privileged:
            reason = _refused(refused)
        return Verdict(name, NOT_ENFORCED, unit.reason(reason), hierarchy_label(where))
    label = hierarchy_label("devices")
    if unit.own("devices") is None:
        text = "v1 devices.list not read: the unit has no v1 devices cgroup"
        if multiuser:
            return _imp(name, unit, label, text)
        return Verdict(name, NOT_ENFORCED, unit.reason(text), label)
    text = unit.read("devices", "devices.list")
    if text is None:
        return Verdict(name, NOT_ENFORCED, unit.reason("v1 devices.list unavailable"), label)
    entries = _device_entries(text)
    if name == "DevicePolicy" and want == "auto" and "DeviceAllow" not in wanted:
        text = "v1 devices.list read: DevicePolicy=auto restricts nothing"
        return Verdict(name, ENFORCED, unit.reason(text), label)
    if _allows(entries, "c *:*", "rwm") and _allows(entries, "b *:*", "rwm"):
        text = "v1 devices.list allows every device (a *:* rwm)"
        if multiuser:
            return _imp(name, unit, label, text)
        return Verdict(name, NOT_ENFORCED, unit.reason(text), label)
    if name == "DeviceAllow":
        for entry in want.split(","):
            spec, _, perms = entry.strip().partition(" ")
            node = unit.cg.devices.get(spec)
            if node is not None and not _allows(entries, node, perms.strip() or "rwm"):
                text = f"v1 devices.list does not allow {node} {perms.strip()} ({spec})"
                return Verdict(name, NOT_ENFORCED, unit.reason(text), label)
    text = f"v1 devices.list allows {len(entries)} entries, not every device"
    return Verdict(name, ENFORCED, unit.reason(text), label)
