"""What this host's systemd manager can never enforce, and what that does to a check's
verdicts. Pure: stdlib only.

sdexec's units belong to a systemd *user* manager. Some constraints such a manager never
applies on a host, whatever the job, and that is known from the cgroup layout at load:

- DeviceAllow / DevicePolicy with no v1 ``devices`` hierarchy mounted. On the unified layout
  (every site's: systemd as pid 1, cgroup2 only) a device policy is a BPF program the manager
  attaches, and an unprivileged user manager (the ``flux`` user's) attaches none (systemd
  issue #23198); root's does (seen in the v2 guest: ``/dev/kmsg`` denied under
  ``DevicePolicy=closed``), and each start's verdict then reads the program back. On a
  hybrid or legacy layout without the v1 devices controller nothing can apply it. With a v1
  devices hierarchy (hybrid or legacy, this project's test machine) the user manager writes
  ``devices.list`` and the check reads it: nothing here. A multi-user job's shell
  (``imp-shell-…``) is confined by flux-security's IMP, which attaches its own device
  program; its device verdicts are read back where the kernel answers (root's sdexec, whose
  set here is empty) and NOT_CHECKABLE where it does not.

Under ``sdexec.containment-check = "enforce"`` a constraint of that set found not enforced
does not fail the exec: ``classify`` makes its verdict UNENFORCEABLE (counted apart in the
stats, logged once, named in the job's eventlog by the adapter), unless the site lists it in
``sdexec.containment-required``, which keeps it NOT_ENFORCED: the exec fails, as it did
before. Every other NOT_ENFORCED verdict fails the exec as before.
"""

from flux_sdexec.containment.cgroups import HYBRID, LEGACY, UNIFIED
from flux_sdexec.containment.device_rules import DEVICE_CONSTRAINTS, USER_MANAGER_DEVICES
from flux_sdexec.containment.verdicts import NOT_ENFORCED, UNENFORCEABLE

__all__ = [
    "NO_V1_DEVICES",
    "UNENFORCEABLE",
    "classify",
    "not_applied",
    "required_conflicts",
    "unenforceable",
]

NO_V1_DEVICES = "no v1 devices hierarchy is mounted: nothing applies device policies"


def unenforceable(layout, v1_devices, user_manager=True, privileged=False):
    """The constraints this host's manager can never apply, each with its reason.

    Args:
        layout: ``unified``, ``hybrid`` or ``legacy`` (``cgroups.layout``); anything else
            (the layout is not known) claims nothing.
        v1_devices: whether a v1 ``devices`` hierarchy is mounted.
        user_manager: whether the units belong to a user manager (sdexec's always do).
        privileged: whether that manager runs as root (root's user manager attaches BPF
            device programs on v2; an unprivileged one cannot).

    Returns:
        ``{constraint: reason}``, empty when the manager may apply every constraint.
    """
    if v1_devices or layout not in (UNIFIED, HYBRID, LEGACY):
        return {}
    if layout == UNIFIED:
        if not user_manager or privileged:
            return {}  # the system manager, and root's, attach device programs on v2
        reason = USER_MANAGER_DEVICES
    else:
        reason = NO_V1_DEVICES
    return {name: reason for name in DEVICE_CONSTRAINTS}


def classify(verdicts, unenforceable, required=()):
    """``verdicts`` with each NOT_ENFORCED one of a constraint in ``unenforceable`` and not
    in ``required`` made UNENFORCEABLE (its reason and hierarchy kept)."""
    return [
        (
            v._replace(outcome=UNENFORCEABLE)
            if v.outcome == NOT_ENFORCED
            and v.constraint in unenforceable
            and v.constraint not in required
            else v
        )
        for v in verdicts
    ]


def not_applied(verdicts):
    """``{constraint: reason}`` of the UNENFORCEABLE verdicts: what a job runs without."""
    return {v.constraint: v.reason for v in verdicts if v.outcome == UNENFORCEABLE}


def required_conflicts(required, unenforceable):
    """``{constraint: reason}`` of the ``required`` constraints this host never enforces:
    under ``enforce`` every constrained exec asking for one of them fails."""
    return {name: unenforceable[name] for name in required if name in unenforceable}
