"""The IMP's fatal error is the exec's error (impfatal.py): a job shell whose IMP refuses to
run it (a wrong allowed-shells) fails with EPERM and the IMP's line, for bulk-exec's
stream and for bgexec's wait, and its node is drained when systemd says the IMP never
reported ready; after lost signals, only when a read says so (review 2026-12b, finding 7).
"""

import errno
import syslog

import fluxpath

fluxpath.add()

from flux_sdexec.core import impfatal  # noqa: E402
from flux_sdexec.broker.output import OutputReader  # noqa: E402
from flux_sdexec.core.events import (  # noqa: E402
    AnswerWait,
    DrainOutput,
    DrainRank,
    Log,
    OutputChunk,
    OutputClosed,
    OutputDrained,
    Respond,
    RespondError,
    UnitChanged,
    WaitRequested,
)
from flux_sdexec.core.states import ProcState  # noqa: E402

from helpers import feed, new  # noqa: E402
from stubs import StubLog, StubWatchers  # noqa: E402

IMP = ["/usr/libexec/flux/flux-imp", "exec", "/usr/libexec/flux/flux-shell", "ƒ2vAnGmk"]
LINE = b"flux-imp: Fatal: exec: shell not in allowed-shells\n"
TEXT = LINE.decode().rstrip()
PID = 4242
JOB = "f2vAnGmk"
# Type=notify: the IMP exits 1 before READY=1, so the unit never becomes active
REFUSED = [
    {"ActiveState": "activating", "SubState": "start", "ExecMainPID": PID},
    {"ActiveState": "failed", "SubState": "failed", "Result": "exit-code"},
    {"ExecMainCode": 1, "ExecMainStatus": 1},
]
READY = {"ActiveState": "active", "SubState": "running", "ExecMainPID": PID}
GONE = {"ActiveState": "inactive", "SubState": "dead"}


class Outbox:
    """What the stderr reader sends a foreground client, recorded."""

    def __init__(self):
        self.sent = []

    def respond_output(self, msg, encoder, chunk, eof, flow):
        self.sent.append(encoder.data(chunk, eof) if chunk else encoder.eof())


def write_stderr(proc, lines):
    """``lines`` written to ``proc``'s stderr and read by its OutputReader; what it sent."""
    outbox = Outbox()
    reader = OutputReader(StubWatchers(), StubLog(), proc, "stderr", "0", outbox, None)
    for line in lines:
        reader.remote.sendall(line)
        reader.drain()
    reader.close()
    return outbox


class Request:
    msg = "exec-msg"


def imp_fg(cmdline=IMP, label=None, unit="shell-0-f2vAnGmk.service"):
    streams = ("stdout", "stderr")
    return new(cmdline=cmdline, streams=streams, label=label, unit=unit, request=Request())


def imp_bg(label="imp-shell-0-f2vAnGmk"):
    return new(
        cmdline=IMP,
        streams=("stdout", "stderr"),
        label=label,
        background=True,
        waitable=True,
        unit=f"{label}.service",
    )


def run_fg(proc, props, stderr=(LINE,)):
    """Signals, the stderr lines through the foreground reader, EOFs, the unit gone."""
    actions = feed(proc, *(UnitChanged(s) for s in props))
    outbox = write_stderr(proc, stderr)
    actions += feed(proc, OutputClosed("stdout"), OutputClosed("stderr"), UnitChanged(GONE))
    return actions, outbox


def answers(actions):
    return [a for a in actions if isinstance(a, (Respond, RespondError, AnswerWait))]


def test_bulk_exec_gets_the_imps_line_as_eperm_and_the_rank_is_drained():
    proc = imp_fg()
    actions, outbox = run_fg(proc, REFUSED)
    assert answers(actions) == [
        Respond({"type": "started", "pid": PID}),
        RespondError(errno.EPERM, TEXT),
    ]
    assert DrainRank(f"IMP error for job {JOB}: {TEXT}") in actions
    assert Log(syslog.LOG_ERR, f"flux-imp[{PID}]: {TEXT}") in actions
    assert b"shell not in allowed-shells" in outbox.sent[0]  # the stderr went out as usual
    assert proc.state is ProcState.DONE


def test_bgexec_wait_gets_the_imps_line_as_eperm():
    proc = imp_bg()
    waiter = object()
    actions = feed(proc, UnitChanged(REFUSED[0]), WaitRequested(waiter))
    actions += feed(proc, OutputChunk("stderr", "0", LINE))
    actions += feed(proc, *(UnitChanged(s) for s in REFUSED[1:]))
    assert DrainOutput() in actions
    actions = feed(proc, OutputDrained())
    assert answers(actions) == [AnswerWait(waiter, error=(errno.EPERM, TEXT))]
    assert DrainRank(f"IMP error for job {JOB}: {TEXT}") in actions


def test_bgexec_wait_after_the_exit_gets_it_too():
    proc = imp_bg()
    feed(proc, OutputChunk("stderr", "0", LINE), *(UnitChanged(s) for s in REFUSED))
    assert proc.state is ProcState.ZOMBIE
    waiter = object()
    actions = feed(proc, WaitRequested(waiter), OutputDrained())
    assert answers(actions) == [AnswerWait(waiter, error=(errno.EPERM, TEXT))]


def test_after_ready_the_error_stands_but_the_node_is_not_drained():
    """Once the IMP said READY=1 the job's user may have written the line: no drain."""
    proc = imp_fg()
    props = [READY, *REFUSED[1:]]
    actions, _ = run_fg(proc, props)
    assert RespondError(errno.EPERM, TEXT) in actions
    assert not [a for a in actions if isinstance(a, DrainRank)]


def test_no_fatal_line_is_a_plain_exit_reported_after_the_output():
    proc = imp_fg()
    actions, _ = run_fg(proc, REFUSED, stderr=(b"flux-imp: Warning: something\n",))
    assert answers(actions) == [
        Respond({"type": "started", "pid": PID}),
        Respond({"type": "finished", "status": 256}),
        RespondError(errno.ENODATA),
    ]


def test_exit_zero_or_another_command_is_a_plain_exit():
    ok = [REFUSED[0], {"ActiveState": "active", "SubState": "exited"}]
    ok.append({"ExecMainCode": 1, "ExecMainStatus": 0})
    actions, _ = run_fg(imp_fg(), ok)
    assert Respond({"type": "finished", "status": 0}) in actions
    actions, _ = run_fg(imp_fg(cmdline=["/bin/sh", "-c", "x"]), REFUSED)
    assert Respond({"type": "finished", "status": 256}) in actions
    assert RespondError(errno.EPERM, TEXT) not in actions
    assert not [a for a in actions if isinstance(a, DrainRank)]


def test_not_a_job_shell_is_not_drained():
    proc = imp_fg(unit="other.service")
    actions, _ = run_fg(proc, REFUSED)
    assert RespondError(errno.EPERM, TEXT) in actions
    assert not [a for a in actions if isinstance(a, DrainRank)]


def test_the_last_fatal_line_is_kept_and_bounded():
    watch = impfatal.ImpErrorLine()
    watch.see(b"flux-imp: Fatal: first\n")
    watch.see(b"other\nflux-imp: Fatal: " + b"x" * 2000 + b"\n")
    assert watch.line.startswith("flux-imp: Fatal: xxx")
    assert len(watch.line) == impfatal.MAX_LINE
    watch.see(b"flux-imp: Warning: not this\n")
    assert watch.line.startswith("flux-imp: Fatal: xxx")


def test_only_the_imp_with_its_stderr_read_is_watched():
    assert impfatal.runs_imp(["/usr/libexec/flux/flux-imp", "exec"])
    assert not impfatal.runs_imp(["/usr/bin/flux-imp-wrapper"])
    assert imp_fg().answers.imp_error is not None
    assert new(cmdline=IMP).answers.imp_error is None  # no stderr stream: nothing to read


# ---- review 2026-12b, finding 7: the drain rests on what systemd says, not on stderr ----

# what the catch-up's read (GetAll) answers for the IMP's unit once it ended exit 1
ENDED_READ = {
    "LoadState": "loaded",
    "ActiveState": "failed",
    "SubState": "failed",
    "Result": "exit-code",
    "ExecMainPID": PID,
    "ExecMainCode": 1,
    "ExecMainStatus": 1,
}
READY_AT = 1764650000000000  # ActiveEnterTimestamp (µs): READY=1 came, the unit was active


def through_a_catch_up(read, stderr=(LINE,)):
    """A foreground IMP exec seen starting; the connection lost; meanwhile the unit ran and
    ended, ``stderr`` written; the catch-up's read answers ``read``; EOFs, the unit gone."""
    from test_catchup import Service  # the real CatchUp over a stubbed bridge

    svc = Service()
    proc = svc.track(imp_fg(), REFUSED[0])
    write_stderr(proc, stderr)
    svc.catch_up.catch_up()
    svc.bridge.answer(proc.unit.name, read)
    for event in (OutputClosed("stdout"), OutputClosed("stderr"), UnitChanged(GONE)):
        svc.feed(proc, event)
    assert proc.state is ProcState.DONE
    return svc.actions


def drains(actions):
    return [a for a in actions if isinstance(a, DrainRank)]


def test_a_line_the_user_wrote_after_ready_does_not_drain_through_a_catch_up():
    """The connection was lost between READY=1 and the end: the catch-up reads "failed",
    never "active", but systemd's ActiveEnterTimestamp says the unit was active, so the job's
    user may have written the line: the job's own error stands, the node is not drained."""
    actions = through_a_catch_up({**ENDED_READ, "ActiveEnterTimestamp": READY_AT})
    assert RespondError(errno.EPERM, TEXT) in actions
    assert drains(actions) == []


def test_an_imp_that_failed_before_ready_drains_through_a_catch_up():
    """systemd says the unit never entered active (ActiveEnterTimestamp 0): the IMP failed
    before any code of the job's user ran, the gap notwithstanding."""
    actions = through_a_catch_up({**ENDED_READ, "ActiveEnterTimestamp": 0})
    assert drains(actions) == [DrainRank(f"IMP error for job {JOB}: {TEXT}")]


def test_unknown_history_after_a_catch_up_does_not_drain():
    """A read that does not say whether the unit was ever active: no drain."""
    actions = through_a_catch_up(ENDED_READ)
    assert RespondError(errno.EPERM, TEXT) in actions
    assert drains(actions) == []


def test_a_unit_systemd_forgot_meanwhile_does_not_drain():
    """The read finds no unit (a "not-found" stub, whose timestamps are the stub's)."""
    proc = imp_fg()
    feed(proc, *(UnitChanged(s) for s in REFUSED))
    assert not proc.unit.activity_unknown and not proc.unit.was_active
    forgotten = {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead"}
    proc.unit.update({**forgotten, "ActiveEnterTimestamp": 0}, reread=True)
    assert proc.unit.activity_unknown
    assert impfatal.drain_reason(proc) is None
