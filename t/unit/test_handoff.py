"""Which units a clean unload hands to the next sdexec, and the site option that decides.

Processes are driven by the PropertiesChanged sequences recorded in t/fixtures/.
"""

import errno
import signal
import syslog

import pytest

from flux_sdexec import config

from flux_sdexec.core import handoff
from flux_sdexec.core.errors import RequestError
from flux_sdexec.core.events import (
    AnswerWait,
    Log,
    OutputClosed,
    OutputDrained,
    Reap,
    StopUnit,
    UnitChanged,
    Unloading,
    WaitRequested,
)
from flux_sdexec.core.machine import handle
from flux_sdexec.core.states import ProcState

from helpers import new, pid_of, replay, until_failed, until_state

UNLOADING = "sdexec module is unloading"


def proc(unit, background=True, waitable=True):
    return new(
        ["/bin/sleep"],
        unit=unit,
        label=unit.split(":")[0],
        background=background,
        waitable=waitable,
        streams=("stdout", "stderr"),
    )


def running(unit, **kw):
    p = proc(unit, **kw)
    replay(p, "sigterm", until=until_state("sigterm", "active"))
    return p


def test_only_started_waitable_processes_are_kept_while_the_instance_runs():
    """keep-waitable in state run: a running and an exited waitable process are kept; a
    foreground, a non-waitable, a not yet started and a collected one are not."""
    kept_running = running("run:t1.service")
    zombie = proc("zombie:t1.service")
    replay(zombie, "exit-1", until=until_failed("exit-1"))
    assert zombie.state is ProcState.ZOMBIE
    foreground = new(["/bin/sleep"], unit="fg:t1.service", streams=("stdout", "stderr"))
    replay(foreground, "sigterm", until=until_state("sigterm", "active"))
    detached = running("detached:t1.service", waitable=False)
    starting = proc("starting:t1.service")
    replay(starting, "sigterm", until=until_state("sigterm", "activating"))
    collected = proc("collected:t1.service")
    replay(collected, "exit-1", until=until_failed("exit-1"))
    handle(collected, WaitRequested(object()))
    handle(collected, OutputDrained())
    assert collected.state is ProcState.RELEASING
    procs = [kept_running, zombie, foreground, detached, starting, collected]
    assert [p.state for p in procs] == [
        ProcState.RUNNING,
        ProcState.ZOMBIE,
        ProcState.RUNNING,
        ProcState.RUNNING,
        ProcState.STARTING,
        ProcState.RELEASING,
    ]
    assert handoff.plan_unload(procs, handoff.KEEP_WAITABLE, "run").hand_over == {
        "run:t1.service",
        "zombie:t1.service",
    }


@pytest.mark.parametrize(
    "policy, state",
    [
        (handoff.KEEP_WAITABLE, "cleanup"),
        (handoff.KEEP_WAITABLE, "shutdown"),
        (handoff.KEEP_WAITABLE, "finalize"),
        (handoff.KEEP_WAITABLE, "init"),
        (handoff.KEEP_WAITABLE, None),
        (handoff.STOP_ALL, "run"),
    ],
)
def test_nothing_is_kept_at_shutdown_unknown_state_or_stop_all(policy, state):
    """Shutting down, a state the broker cannot tell, or stop-all: every unit stops."""
    procs = [running("run:t1.service")]
    plan = handoff.plan_unload(procs, policy, state)
    assert plan.stops_all and plan.hand_over == set() and plan.stop == ("run:t1.service",)


def test_the_plan_names_what_is_stopped_and_the_stop_timers_of_each():
    """One plan: the units kept, the loaded ones stopped (a gone one is not), every stop
    timer (the guard carries those of the units kept), the waits answered, no guard delay
    while the broker runs."""
    kept = new(
        ["/bin/sleep"], unit="kept:t1.service", label="kept", background=True, waitable=True,
        streams=("stdout", "stderr"), stop_timer_sec=30, stop_signal=signal.SIGUSR1,
    )  # fmt: skip
    replay(kept, "sigterm", until=until_state("sigterm", "active"))
    stopped = new(
        ["/bin/sleep"], unit="fg:t1.service", streams=("stdout", "stderr"), stop_timer_sec=5,
        stop_signal=signal.SIGTERM,
    )  # fmt: skip
    replay(stopped, "sigterm", until=until_state("sigterm", "active"))
    gone = proc("gone:t1.service", waitable=False)
    replay(gone, "exit-1", until=until_failed("exit-1"))
    handle(gone, UnitChanged({"ActiveState": "inactive", "SubState": "dead"}))
    assert gone.unit.gone
    plan = handoff.plan_unload([kept, stopped, gone], handoff.KEEP_WAITABLE, "run")
    assert plan.hand_over == {"kept:t1.service"} and plan.stop == ("fg:t1.service",)
    assert plan.stop_timers == {
        "kept:t1.service": (30, signal.SIGUSR1),
        "fg:t1.service": (5, signal.SIGTERM),
    }
    assert plan.guarded_timers() == {"kept:t1.service": (30, signal.SIGUSR1)}
    assert plan.stop_signals() == {
        "kept:t1.service": signal.SIGUSR1,
        "fg:t1.service": signal.SIGTERM,
    }
    assert plan.answer_waits and plan.guard_after_exit == 0 and not plan.stops_all


def test_a_gone_or_failed_process_is_not_kept():
    """A waitable process whose unit systemd forgot, or that has an error stored, stops."""
    gone = proc("gone:t1.service")
    replay(gone, "exit-1", until=until_failed("exit-1"))
    handle(gone, UnitChanged({"ActiveState": "inactive", "SubState": "dead"}))
    assert gone.unit.gone and gone.state is ProcState.ZOMBIE
    failed = running("failed:t1.service")
    failed.error = (errno.EIO, "post-start check failed")
    assert handoff.plan_unload([gone, failed], handoff.KEEP_WAITABLE, "run").hand_over == set()


def test_an_ended_unit_sdexec_holds_loaded_is_kept():
    """A waitable process whose unit ended inactive (an IMP's: STOPPING=1) but that sdexec
    still holds loaded (Unit.Ref, systemd/holds.py) is handed over with its status."""
    ended = proc("ended:t1.service")
    replay(ended, "exit-1", until=until_failed("exit-1"))
    handle(ended, UnitChanged({"ActiveState": "inactive", "SubState": "dead"}))
    assert ended.unit.gone and ended.state is ProcState.ZOMBIE
    held = {"ended:t1.service"}
    assert handoff.plan_unload([ended], handoff.KEEP_WAITABLE, "run", held).hand_over == held
    assert handoff.plan_unload([ended], handoff.STOP_ALL, "run", held).hand_over == set()


def test_a_kept_unit_is_logged_not_stopped_and_its_parked_wait_gets_enosys():
    """Unloading(hand_over=True): ENOSYS to the parked wait, one log line, no StopUnit."""
    p = running("run:t1.service")
    waiter = object()
    handle(p, WaitRequested(waiter))
    pid = pid_of("sigterm")
    assert handle(p, Unloading(hand_over=True)) == [
        AnswerWait(waiter, error=(errno.ENOSYS, UNLOADING)),
        Log(
            syslog.LOG_INFO,
            f"left running for the next sdexec: run:t1.service (active.running, pid {pid})",
        ),
        Reap(),
    ]
    assert p.state is ProcState.DONE


def test_at_a_shutdown_its_jobs_outlive_a_kept_units_wait_is_not_answered():
    """Unloading(hand_over=True, answer_wait=False), a shutdown the running jobs outlive: the
    waiter is job-exec, unloaded by the same shutdown, and any answer (an error) would end
    the job it hands to the restarted instance (bgexec raises a fatal exception on a failed
    wait). The wait is let go, saying so; the restarted job-exec waits again."""
    p = running("run:t1.service")
    waiter = object()
    handle(p, WaitRequested(waiter))
    pid = pid_of("sigterm")
    assert handle(p, Unloading(hand_over=True, answer_wait=False)) == [
        Log(
            syslog.LOG_INFO,
            "run:t1.service: its wait is left unanswered: the shutdown hands the unit to the"
            " restarted instance",
        ),
        Log(
            syslog.LOG_INFO,
            f"left running for the next sdexec: run:t1.service (active.running, pid {pid})",
        ),
        Reap(),
    ]
    assert p.state is ProcState.DONE and p.wait.waiter is None


def test_an_unkept_unit_is_still_stopped():
    """Unloading() of the same process without keep stops its unit, as before."""
    p = running("run:t1.service")
    assert handle(p, Unloading()) == [StopUnit(), Reap()]


def test_kept_zombie_is_logged_with_its_exited_state():
    """An exited waitable process is handed over as it is: no ResetFailedUnit either."""
    p = proc("zombie:t1.service")
    replay(p, "exit-1", until=until_failed("exit-1"))
    handle(p, OutputClosed("stdout"))
    pid = pid_of("exit-1")
    assert handle(p, Unloading(hand_over=True)) == [
        Log(
            syslog.LOG_INFO,
            f"left running for the next sdexec: zombie:t1.service (failed.failed, pid {pid})",
        ),
        Reap(),
    ]


def test_sdexec_unload_option():
    """[systemd] sdexec-unload: keep-waitable by default, stop-all accepted."""
    assert config.sdexec_unload({}) == handoff.KEEP_WAITABLE
    assert config.sdexec_unload({"systemd": {"enable": True}}) == handoff.KEEP_WAITABLE
    assert config.sdexec_unload({"systemd": {"sdexec-unload": "stop-all"}}) == handoff.STOP_ALL
    conf = {"systemd": {"sdexec-unload": "keep-waitable"}}
    assert config.sdexec_unload(conf) == handoff.KEEP_WAITABLE


@pytest.mark.parametrize("value", ["stop", "STOP-ALL", True, 1, ["stop-all"]])
def test_bad_sdexec_unload_is_refused_naming_key_and_values(value):
    """A bad value is EINVAL, naming the key, the allowed values and what was given."""
    with pytest.raises(RequestError) as info:
        config.sdexec_unload({"systemd": {"sdexec-unload": value}})
    assert info.value.errno == errno.EINVAL
    assert info.value.strerror == (
        "error reading [systemd] config table: "
        f'sdexec-unload must be "keep-waitable" or "stop-all", got {value!r}'
    )


def test_guard_unit_is_outside_every_instance_glob():
    """The guard's name has no ':', so no sdexec's ``*:<instance>.service`` matches it."""
    assert handoff.guard_unit("t3fd9999c", 0) == "sdexec-guard-0-t3fd9999c.service"
    assert handoff.guard_unit("fA:fB", 3) == "sdexec-guard-3-fA_fB.service"


def test_guard_command_waits_for_the_broker_then_stops_the_units():
    """argv: sh -c SCRIPT with the broker pid, the grace, the wait after the broker's exit
    and the units (sorted)."""
    argv = handoff.guard_command("1234", {"b:t1.service", "a:t1.service"})
    assert argv[:2] == ["/bin/sh", "-c"]
    assert argv[3:] == ["sdexec-guard", "1234", "2", "0", "a:t1.service", "b:t1.service"]
    assert 'kill -0 "$pid"' in argv[2] and 'systemctl --user stop --no-block "$@"' in argv[2]


def test_the_stop_timers_handed_over_travel_in_the_guards_environment():
    timers = {"imp-shell-0-fA:t1.service": (30, 10), "b:t1.service": (5, 9)}
    env = handoff.stop_timers_env(timers)
    assert env == "SDEXEC_STOP_TIMERS=b:t1.service=9:5 imp-shell-0-fA:t1.service=10:30"
    assert handoff.parse_stop_timers(["PATH=/bin", env, "SDEXEC_STOP_TIMERS=x=y:1"]) == timers
    assert handoff.parse_stop_timers(["XDG_RUNTIME_DIR=/run/user/0"]) == {}
    assert handoff.stop_timers_env({}) == "SDEXEC_STOP_TIMERS="


def test_an_adopted_unit_keeps_its_stop_timer_else_an_imps_is_sigusr1():
    """Before: an adopted unit had no stop timer, and its stop signal was SIGKILL, which the
    flux user's manager sends the IMP alone (the guest's job lives on)."""
    imp = ["/usr/libexec/flux/flux-imp", "exec", "/usr/libexec/flux/flux-shell", "f1"]
    handed = {"a:t1.service": (7, signal.SIGUSR2)}
    assert handoff.adopted_stop_timer("a:t1.service", imp, handed) == (7, signal.SIGUSR2)
    assert handoff.adopted_stop_timer("b:t1.service", imp, handed) == (30, signal.SIGUSR1)
    assert handoff.adopted_stop_timer("c:t1.service", ["/bin/sleep"], {}) == (
        None,
        signal.SIGKILL,
    )


def test_the_guard_script_has_nothing_systemd_would_expand():
    """systemd replaces ${NAME} in ExecStart (an unknown name by nothing) before sh runs it."""
    assert "${" not in handoff.guard_command("1", {"a:t1.service"})[2]


@pytest.mark.parametrize("state", ["cleanup", "shutdown", "finalize", None])
def test_waitable_units_are_kept_at_a_shutdown_their_jobs_outlive(state):
    """FLUX_DISABLE_JOB_CLEANUP (running jobs are not cancelled at shutdown: flux.service
    restarted under bgexec jobs): the job shells are kept for the restarted instance."""
    detached = running("detached:t1.service", waitable=False)
    procs = [running("run:t1.service"), detached]
    plan = handoff.plan_unload(procs, handoff.KEEP_WAITABLE, state, jobs_outlive_shutdown=True)
    assert not plan.stops_all and plan.hand_over == {"run:t1.service"}
    assert not plan.answer_waits  # job-exec goes with the same shutdown
    assert plan.stop == ("detached:t1.service",)
    plan = handoff.plan_unload(procs, handoff.STOP_ALL, state, jobs_outlive_shutdown=True)
    assert plan.stops_all and plan.hand_over == set()


def test_the_guard_of_a_restart_waits_its_grace_after_the_broker_exits():
    """Units kept at a shutdown are stopped only if no sdexec took them over within the
    restart grace after the broker exited; at an upgrade (the broker runs on) at once."""
    argv = handoff.guard_command("1234", {"a:t1.service"}, after_exit=300)
    assert argv[3:] == ["sdexec-guard", "1234", "2", "300", "a:t1.service"]
    assert 'sleep "$after"' in argv[2]
    for state, after in (("run", 0), ("shutdown", 300), (None, 300)):
        plan = handoff.plan_unload([], handoff.KEEP_WAITABLE, state, restart_grace=300)
        assert plan.guard_after_exit == after


def test_restart_grace_option():
    """``sdexec.restart-grace``: a duration, 5 minutes unless set."""
    assert config.restart_grace({}) == handoff.DEFAULT_RESTART_GRACE == 300
    assert config.restart_grace({"sdexec": {"restart-grace": "10m"}}) == 600
    with pytest.raises(RequestError) as exc:
        config.restart_grace({"sdexec": {"restart-grace": "later"}})
    assert exc.value.errno == errno.EINVAL
    assert "sdexec.restart-grace must be a duration above zero" in str(exc.value)
