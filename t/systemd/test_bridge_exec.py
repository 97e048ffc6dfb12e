"""SystemdBridge against the real systemd user instance: units run to their end (exit codes,
signals, a missing binary, stop escalation) and their stdio on our socketpairs.
"""

import errno
import select
import signal
import socket

import pytest

from flux_sdexec.core.errors import UnitError

TRUE, FALSE, SH, SLEEP = "/bin/true", "/bin/false", "/bin/sh", "/bin/sleep"


def exit_facts(props):
    keys = ("ActiveState", "SubState", "Result", "ExecMainCode", "ExecMainStatus")
    return {key: props[key] for key in keys}


def recv_all(sock):
    sock.settimeout(10)
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def test_stdio_socketpairs(sd):
    """Output arrives on our socketpair ends; EOF only once the stopped unit lets go of them."""
    names = ("StandardInputFileDescriptor", "StandardOutputFileDescriptor")
    names += ("StandardErrorFileDescriptor",)
    pairs = [socket.socketpair() for _ in names]
    ours = [a for a, _ in pairs]
    props = [(name, "h", b.fileno()) for name, (_, b) in zip(names, pairs)]
    try:
        unit = sd.start([SH, "-c", "echo hi; echo err >&2"], *props)
    finally:
        for _, b in pairs:
            b.close()  # systemd got its own copies
    sd.wait_state(unit, "active", "exited")
    assert select.select(ours, [], [], 0)[0] == ours[1:]  # data, but systemd still holds the fds
    assert [ours[1].recv(100), ours[2].recv(100)] == [b"hi\n", b"err\n"]
    assert select.select(ours, [], [], 0)[0] == []
    sd.bridge.stop_unit(unit)
    sd.wait_state(unit, "inactive", "dead")
    assert [recv_all(s) for s in ours[1:]] == [b"", b""]
    for s in ours:
        s.close()


def test_clean_exit(sd):
    """`true` ends active/exited (RemainAfterExit) with code 1 (CLD_EXITED), status 0."""
    unit = sd.start([TRUE])
    view = sd.wait_state(unit, "active", "exited")
    assert exit_facts(view) == {
        "ActiveState": "active",
        "SubState": "exited",
        "Result": "success",
        "ExecMainCode": 1,
        "ExecMainStatus": 0,
    }
    assert view["ExecMainPID"] > 0
    sd.bridge.stop_unit(unit)
    sd.wait_state(unit, "inactive", "dead")
    # active/running is skipped when systemd coalesces a fast exit
    assert [s for s in sd.states(unit) if s != ("active", "running")] == [
        ("inactive", "dead"),
        ("activating", "start"),
        ("active", "exited"),
        ("inactive", "dead"),
    ]


def test_exit_1(sd):
    """`false` ends failed/failed with status 1; ResetFailedUnit takes it to inactive/dead."""
    unit = sd.start([FALSE])
    view = sd.wait_state(unit, "failed", "failed")
    assert exit_facts(view) == {
        "ActiveState": "failed",
        "SubState": "failed",
        "Result": "exit-code",
        "ExecMainCode": 1,
        "ExecMainStatus": 1,
    }
    sd.bridge.reset_failed_unit(unit)
    sd.wait_state(unit, "inactive", "dead")


def test_missing_binary(sd):
    """A missing binary with Type=exec fails the start: status 203 (EXIT_EXEC), never running."""
    unit = sd.start(["/notacmd"])
    view = sd.wait_state(unit, "failed", "failed")
    assert exit_facts(view) == {
        "ActiveState": "failed",
        "SubState": "failed",
        "Result": "exit-code",
        "ExecMainCode": 1,
        "ExecMainStatus": 203,
    }
    assert sd.states(unit) == [("inactive", "dead"), ("activating", "start"), ("failed", "failed")]
    sd.bridge.reset_failed_unit(unit)
    sd.wait_state(unit, "inactive", "dead")


def test_kill_sigterm(sd):
    """SIGTERM gives code 2 (CLD_KILLED), status 15, and counts as a clean exit: active/exited."""
    unit = sd.start([SLEEP, "100"])
    sd.wait_state(unit, "active", "running")
    sd.bridge.kill_unit(unit, signal.SIGTERM)
    view = sd.wait_state(unit, "active", "exited")
    assert exit_facts(view) == {
        "ActiveState": "active",
        "SubState": "exited",
        "Result": "success",
        "ExecMainCode": 2,
        "ExecMainStatus": 15,
    }


def test_stop_ignoring_sigterm(sd):
    """StopUnit of a process ignoring SIGTERM stays deactivating until SIGKILL: failed/failed."""
    ours, theirs = socket.socketpair()
    extra = [
        ("KillMode", "s", "process"),
        ("TimeoutStopUSec", "t", 2**64 - 1),
        ("StandardOutputFileDescriptor", "h", theirs.fileno()),
    ]
    with ours, theirs:
        unit = sd.start([SH, "-c", "trap '' TERM; echo ready; exec sleep 100"], *extra)
        theirs.close()
        ours.settimeout(10)
        assert ours.recv(100) == b"ready\n"  # else SIGTERM may beat the trap
    sd.bridge.stop_unit(unit)
    sd.wait_state(unit, "deactivating", "stop-sigterm")
    sd.bridge.kill_unit(unit, signal.SIGKILL)
    view = sd.wait_state(unit, "failed", "failed")
    assert exit_facts(view) == {
        "ActiveState": "failed",
        "SubState": "failed",
        "Result": "signal",
        "ExecMainCode": 2,
        "ExecMainStatus": 9,
    }


def test_kill_exited_unit(sd):
    """KillUnit on an active/exited unit has no main process: ESRCH."""
    unit = sd.start([TRUE])
    sd.wait_state(unit, "active", "exited")
    with pytest.raises(UnitError) as exc:
        sd.bridge.kill_unit(unit, signal.SIGTERM)
    assert (exc.value.errno, str(exc.value)) == (errno.ESRCH, "No main process to kill")
