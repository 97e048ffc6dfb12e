"""Starting and stopping the guard unit of handed-over units (see handoff.py).

The guard is one small transient unit per rank: the unload that hands units
over starts it, the next sdexec stops it at load, once it tracks the units. Its
After= on them keeps a unit that ends meanwhile loaded, with its exit status:
a unit whose main process sent STOPPING=1 (the IMP of a multi-user job) ends
inactive, not "exited", and systemd would unload it at once.
"""

import os

from flux_sdexec.core import handoff
from flux_sdexec.systemd import teardown
from flux_sdexec.core.errors import UnitError

_PASSED_ENV = ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS")  # what systemctl --user needs


def start(bridge, log, name, broker_pid, units, stop_timers=None, after_exit=0):
    """Start guard ``name`` for ``units``; a failure is logged (the units stay).
    ``stop_timers``: unit name to (seconds, signal), the stop timers of the units handed
    over (handoff.py: the guard's stop signals them, the next sdexec adopts them with it);
    ``after_exit``: seconds it waits after the broker's exit (handoff.UnloadPlan)."""
    argv = handoff.guard_command(broker_pid, units, after_exit)
    env = [f"{k}={os.environ[k]}" for k in _PASSED_ENV if k in os.environ]
    env.append(handoff.stop_timers_env(stop_timers or {}))
    props = [
        ("ExecStart", "a(sasb)", [(argv[0], argv, False)]),
        ("Environment", "as", env),
        ("Type", "s", "exec"),
        ("CollectMode", "s", "inactive-or-failed"),
        ("After", "as", sorted(units)),  # a reference: the units stay loaded while it runs
    ]
    try:
        bridge.start_transient_unit(name, props)
    except UnitError as exc:
        log.error(f"{name}: cannot start ({exc}): stop the units left running by hand")


def handed_timers(bridge, log, name):
    """The stop timers a predecessor's guard ``name`` carries (none without a guard)."""
    if not bridge.list_units([name]):
        return {}
    try:
        environment = bridge.get_unit_properties(name).get("Environment") or []
    except OSError as exc:
        log.error(f"{name}: cannot read the stop timers handed over ({exc})")
        return {}
    return handoff.parse_stop_timers(environment)


def stop(bridge, log, name):
    """Stop a predecessor's guard, if there is one, and see it gone."""
    if bridge.list_units([name]):
        teardown.quietly(log, bridge.stop_unit, name)
        teardown.see_units_gone(bridge, log, [name])
