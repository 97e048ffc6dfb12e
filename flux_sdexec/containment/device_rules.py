"""The verdict rules for DeviceAllow and DevicePolicy. Pure: stdlib only.

v1: the ``devices.list`` of the unit's own devices cgroup must not allow everything
(``a *:* rwm``) and must hold each DeviceAllow node the adapter resolved. v2: enforced when a
BPF device program is attached to the unit's cgroup (root's manager attaches one; only root
may ask the kernel); an unprivileged *user* manager attaches none (systemd issue #23198), so
not enforced. A
multi-user job's shell runs under flux-security's IMP, which applies the device policy
itself; job-exec names such units ``imp-shell-…``, and for them a device policy sdexec cannot
see is NOT_CHECKABLE rather than failed.
"""

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


def _programs(unit):
    """BPF device programs on the unit's own cgroup v2 directory, None when not known."""
    if unit.cg.programs is None or unit.layout == LEGACY or unit.own(V2) is None:
        return None
    return unit.cg.programs(V2, unit.own(V2))


def devices(name, want, wanted, unit):
    multiuser = is_multiuser_unit(unit.name)
    if "devices" not in unit.cg.paths:
        where = V2 if unit.layout != LEGACY else None
        programs = _programs(unit)
        if programs:
            text = f"v2 BPF device programs attached to the unit's cgroup: {programs}"
            return Verdict(name, ENFORCED, unit.reason(text), hierarchy_label(V2))
        if name == "DevicePolicy" and want == "auto" and "DeviceAllow" not in wanted:
            text = "DevicePolicy=auto restricts nothing"
            return Verdict(name, ENFORCED, unit.reason(text), hierarchy_label(where))
        if multiuser:
            return Verdict(name, NOT_CHECKABLE, unit.reason(IMP_DEVICES), hierarchy_label(V2))
        reason = USER_MANAGER_DEVICES
        if programs == 0:
            reason = "no BPF device program is attached to the unit's cgroup"
        return Verdict(name, NOT_ENFORCED, unit.reason(reason), hierarchy_label(where))
    label = hierarchy_label("devices")
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
