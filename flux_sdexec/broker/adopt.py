"""Adoption: the units a crashed predecessor left running become background waitables.

At load, every unit matching this instance's glob and rank is tracked as an
SdProc with no exec request; a unit that cannot be adopted is let go (teardown), and
nothing of it stays: not tracked, not held, its keeper not spared by the sweep below.
Its properties are read (GetAll, on the rare connection) before its signals are watched:
over a bus, whose daemon forwards a unit's signals only once its match is in, a unit
that ended in between would never be seen to end (its job shell's wait never answered,
the job stuck). So once watched it is read again on the hot connection (CatchUp.read),
after its match: that answer and the signals that follow it leave no gap.
Then the accounting slices and keepers of this instance's and rank's unit names that no
adopted unit uses (their unit gone, their stop lost to a crash or to an unload whose
stops systemd refused or did not answer) go to the sweeper: they match no unit glob, and
nothing else would ever stop them.
"""

import errno

from flux_sdexec.core.errors import RequestError
from flux_sdexec.core.events import UnitChanged
from flux_sdexec.core.handoff import adopted_stop_timer
from flux_sdexec.core.protocol import ExecRequest
from flux_sdexec.core.sdproc import SdProc
from flux_sdexec.systemd import guard, teardown
from flux_sdexec.systemd.keepers import keeper_of, keeper_unit
from flux_sdexec.usage import cgroup_usage

# where the accounting slices (usage/cgroup_usage.py) and the keepers (keepers.py) are
SLICE_PATTERNS = [f"{cgroup_usage.SLICE_PREFIX}*.slice", "*:*.slice"]


def adopt_leftovers(
    *, log, namer, registry, feed, systemd, catch_up, holds, accounting, orphans, guard_unit
):
    """Track this rank's leftover units (``namer``'s) in ``registry``; returns how many.

    The parts the service wires: ``feed(p, input)`` into the state machine, the
    ``SystemdPort`` (its bridge, bus, keepers and sweeper), ``catch_up`` and ``holds``,
    ``accounting`` (the slice an adopted unit runs in), ``orphans`` (is its job over?), and
    ``guard_unit``, the guard a handing-over unload left (handoff.py)."""
    bridge, bus, keepers = systemd.bridge, systemd.bus, systemd.keepers
    adopted = 0
    handed = guard.handed_timers(bridge, log, guard_unit)  # the stop timers (handoff.py)
    for unit, _, _ in bridge.list_units([namer.glob]):
        ours, label = namer.parse(unit)
        if not ours:
            continue  # another rank's (or a verbatim SDEXEC_NAME): not ours to touch
        props, p = {}, None
        try:
            bus.pump()  # signals read before the GetAll must not be applied after it
            props = bridge.get_unit_properties(unit)
            if label is not None and registry.has_label(label):
                raise RequestError(errno.EEXIST, f"label {label} is already tracked")
            exec_start = props.get("ExecStart") or [(unit, [unit])]
            cmdline = list(exec_start[0][1]) or [unit]
            stop_timer_sec, stop_signal = adopted_stop_timer(unit, cmdline, handed)
            cmd = ExecRequest(
                cmdline=cmdline,
                env={},
                label=label,
                background=True,
                waitable=True,
                stop_timer_sec=stop_timer_sec,
                stop_signal=stop_signal,
            )
            p = SdProc(None, cmd, unit, adopted=True)
            keepers.record(unit, keeper_of(unit, props))  # released with it
            accounting.adopted(p, props)
            registry.add(p)
            holds.hold(unit, wait=True)  # before the guard, which holds it, stops
            bridge.watch(unit)
            p.unit.found_at_load(props)
            start_usec = props.get("ExecMainStartTimestamp")
            p.unit.started_at = start_usec / 1e6 if start_usec else None
            feed(p, UnitChanged(props, reread=True))  # its history before is unknown
            catch_up.read(p)  # what changed before its match went in (the docstring)
            orphans.consider(p)  # its job may be over: no job-exec may ask for it
            adopted += 1
            log.info(f"adopted {unit} ({p.unit.state}, pid {p.pid})")
        except OSError as exc:
            log.error(f"{unit}: cannot adopt ({exc}), letting it go")
            state, keeper = props.get("ActiveState", "active"), keeper_of(unit, props)
            teardown.release_now(bridge, log, unit, state, keeper=keeper)
            if p is not None:  # a later step failed (its watch): what it took goes
                registry.remove(p)
                keepers.pop(unit)
                holds.release(unit)
    for name in leftover_slices(bridge, namer, accounting.slices(registry) | keepers.known()):
        systemd.sweeper.sweep(name, "left by an earlier sdexec, no unit of it adopted")
    return adopted


def leftover_slices(bridge, namer, in_use):
    """The accounting slices and keepers systemd has of this sdexec's unit names (instance
    and rank, ``namer.parse``) that are not ``in_use`` (by an adopted unit)."""
    left = []
    for name, _, _ in bridge.list_units(SLICE_PATTERNS):
        unit = cgroup_usage.slice_unit(name) or keeper_unit(name)
        if unit is not None and name not in in_use and namer.parse(unit)[0]:
            left.append(name)
    return left
