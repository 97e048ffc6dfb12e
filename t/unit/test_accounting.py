"""Each process's accounting (usage/accounting.py): its slice placed, read at its exit and
stopped at its end; an adopted job shell's record looked up first.

Slices. When the adapter stops a unit's accounting slice, and what a stop that did not go through
becomes (the sweeper's). No flux, no systemd: a bridge that answers each stop at once.

Adopted job shells. The usage record of a job shell adopted at load (review 2026-12b, finding 1).

A bgexec shell ended while job-exec was out (an upgrade): the old sdexec wrote its job's
record, stopped its accounting slice at unload and handed the unit over. The next sdexec
adopts the finished unit; reading the slice again gives nulls (it is gone), or after a
crash the same figures with the OOM kills counted again. So an adopted job shell's record is
looked up in the job's KVS directory first (asynchronously: ``Jobs`` holds the lookups
until answered) and written only when it is not there. No flux, no systemd: the write to
the job (the ShellEnded that ``JobUsage`` hands its gatherings, which also raises the
``oom`` exception) is recorded. The usage a process has is what a wait answer would carry
(``after_usage``).
"""

import errno
import types

import fluxpath
import pytest
from stubs import StubSweeper
from usage_fixtures import CPU_STAT, PARENT, SLICE, UNIT, Jobs, Proc, accounting, proc, tree

from flux_sdexec.containment import cgroups
from flux_sdexec.core.errors import UnitError
from flux_sdexec.core.states import ProcState
from flux_sdexec.usage import cgroup_usage

fluxpath.add()
from flux.job import JobID  # noqa: E402


def test_place_gives_each_start_a_slice_of_its_own(tmp_path):
    """Two starts of one unit name (a label reused) get two slices; a client's is kept."""
    acc = accounting(tree(tmp_path, cgroups.HYBRID))
    props = [("MemoryMax", "t", 1 << 20)]
    first, second = proc(), proc()
    placed = acc.place(first, props)
    (name,) = acc.slices([first])
    assert placed == props + [("Slice", "s", name)]
    acc.place(second, props)
    assert acc.slices([second]) != {name}
    assert name.startswith("app-sdexec-shell\\x2d0\\x2dfA1:tb_")
    assert cgroup_usage.is_accounting_slice(name)
    client = proc(opts={"SDEXEC_PROP_Slice": "x.slice"})
    assert acc.place(client, props) == props and acc.slices([client]) == set()


@pytest.mark.parametrize(
    "usage, shell, other",
    [("jobs", True, False), ("all", True, True), ("none", False, False)],
)
def test_sdexec_usage_says_which_units_get_a_slice(tmp_path, usage, shell, other):
    """``[sdexec] usage``: job shells (the default), every unit, or none; a unit without a
    slice has no account (no usage read, nothing handed to its job)."""
    acc = accounting(tree(tmp_path, cgroups.HYBRID), usage=usage)
    job_shell, exec_ = proc(), proc(name="ls-0:tb.service")
    assert (acc.place(job_shell, []) != []) is shell
    assert (acc.place(exec_, []) != []) is other
    assert bool(acc.slices([job_shell])) is shell and bool(acc.slices([exec_])) is other
    assert acc.jobs.started == (["fA1"] if shell else [])


def test_an_adopted_unit_keeps_the_slice_systemd_says_it_is_in(tmp_path):
    acc = accounting(tree(tmp_path, cgroups.HYBRID))
    p = proc()
    acc.adopted(p, {"Slice": SLICE})
    assert acc.slices([p]) == {SLICE}
    old = proc()
    acc.adopted(old, {"Slice": "app.slice"})  # started by an sdexec without accounting
    assert acc.slices([old]) == set()


class Stops:
    def __init__(self, answer=None):
        self.stopped = []
        self.answer = answer  # what systemd answers each stop (None: done)

    def stop_unit(self, name, on_reply=None, **kwargs):
        self.stopped.append(name)
        on_reply(self.answer)


@pytest.mark.parametrize(
    "gone, active, stop_sent, reset_sent, opts, stopped",
    [
        (True, "inactive", False, False, {}, True),  # the unit went
        (False, "active", True, False, {}, True),  # sdexec stopped it (a waitable, waited)
        (False, "failed", False, True, {}, True),  # sdexec reset it
        (False, "deactivating", False, False, {}, True),  # stopping (sent nothing at unload)
        (False, "active", False, False, {}, False),  # let go active: kept for the next
        (True, "inactive", False, False, {"SDEXEC_PROP_Slice": "x.slice"}, False),  # client's
    ],
)
def test_the_slice_is_stopped_once_sdexec_is_done_with_a_unit_going_away(
    tmp_path, gone, active, stop_sent, reset_sent, opts, stopped
):
    bridge = Stops()
    acc = accounting(tree(tmp_path, cgroups.UNIFIED), bridge=bridge, sweeper=StubSweeper())
    stopping = active == "deactivating"
    unit = types.SimpleNamespace(name=UNIT, pid=None, finished=False, gone=gone, stopping=stopping)
    p = Proc(
        unit=unit,
        cmd=types.SimpleNamespace(opts=opts, label=None),
        state=ProcState.DONE,
        calls=types.SimpleNamespace(stop_sent=stop_sent, reset_sent=reset_sent),
    )
    if not opts:
        acc.adopted(p, {"Slice": SLICE})  # in a slice of its own
    acc.done(p)
    acc.done(p)  # once only
    assert bridge.stopped == ([SLICE] if stopped else [])


def done_proc(acc, gone):
    """A record sdexec is done with, of a unit with an accounting slice (``gone``: seen end)."""
    unit = types.SimpleNamespace(name=UNIT, pid=None, finished=False, gone=gone, stopping=False)
    p = Proc(
        unit=unit,
        cmd=types.SimpleNamespace(opts={}, label=None),
        state=ProcState.DONE,
        calls=types.SimpleNamespace(stop_sent=False, reset_sent=False),
    )
    acc.adopted(p, {"Slice": SLICE})
    return p


@pytest.mark.parametrize(
    "answer, swept",
    [
        (UnitError(errno.ECONNRESET, "lost connection to systemd"), [SLICE]),  # a reexec
        (UnitError(errno.ETIMEDOUT, "systemd did not answer"), [SLICE]),
        (UnitError(errno.ENOENT, "Unit not loaded."), []),  # already gone
    ],
)
def test_a_slice_stop_that_did_not_go_through_goes_to_the_sweeper(tmp_path, answer, swept):
    """A stop lost to a manager reexec left the slice running for good (chaos seed 12)."""
    sweeper = StubSweeper()
    acc = accounting(tree(tmp_path, cgroups.UNIFIED), bridge=Stops(answer), sweeper=sweeper)
    acc.done(done_proc(acc, gone=True))
    assert sweeper.swept == swept


def test_the_slice_of_a_unit_left_to_the_sweeper_is_stopped_too(tmp_path):
    """A start systemd never answered (the unit swept, never seen): its slice was left."""
    bridge = Stops()
    acc = accounting(tree(tmp_path, cgroups.UNIFIED), bridge=bridge, sweeper={UNIT})
    acc.done(done_proc(acc, gone=False))
    assert bridge.stopped == [SLICE]


JOB = "fA1"  # the job id in UNIT (shell-0-fA1)
STARTED, EXITED = 1000.0, 1012.5  # ExecMainStartTimestamp, ExecMainExitTimestamp (s)


# what the old sdexec wrote (``flux job info JOB sdexec-usage.0``)
COMMITTED = {
    "cpu_user_s": 2.0,
    "cpu_sys_s": 0.5,
    "memory_peak": 300 << 20,
    "tasks_peak": 3,
    "oom_kills": 1,
    "wall_s": 12.5,
    "result": "success",
    "status": 0,
    "null_reasons": {},
    "rank": 0,
    "host": "node0",
    "unit": UNIT,
}


# read back: the record (an older sdexec's lacks ``cpu_s``: null)
FIGURES = {k: v for k, v in COMMITTED.items() if k not in ("rank", "host", "unit")}
FIGURES["cpu_s"] = None


def recording(tmp_path, slice_files=None, parent=None):
    """An Accounting over a tree holding the slice's ``slice_files`` (none: the slice is
    gone), its lookups and writes to the job recorded (``acc.jobs``)."""
    files = {"v2": slice_files} if slice_files else {}
    acc = accounting(tree(tmp_path, cgroups.UNIFIED, **files), jobs=Jobs())
    acc.parent = parent
    return acc


def usage(acc, p):
    """The usage (JSON) a wait answered now would carry."""
    sent = []
    acc.after_usage(p, sent.append)
    (found,) = sent
    return found


def adopted(acc, finished=True, adopt=True):
    """A finished job shell as adoption builds it: its pid dead, its slice from systemd
    (``adopt=False``: one this sdexec started, in the same slice)."""
    unit = types.SimpleNamespace(
        name=UNIT,
        pid=4242424,
        finished=finished,
        gone=finished,
        result=None,
        wait_status=0,
        started_at=STARTED,
    )
    p = Proc(
        unit=unit,
        cmd=types.SimpleNamespace(opts={}, label=None),
        state=ProcState.ZOMBIE if finished else ProcState.RUNNING,
        calls=types.SimpleNamespace(stop_sent=False, reset_sent=False),
    )
    exit_usec = int(EXITED * 1e6) if finished else 0
    if adopt:
        acc.adopted(p, {"Slice": SLICE, "ExecMainExitTimestamp": exit_usec})
    else:
        acc.place(p, [])
    return p


def test_a_record_the_predecessor_wrote_is_kept_not_overwritten_with_nulls(tmp_path):
    """The upgrade case of the sketch (t_usage_adopt.py): slice gone, where slices are not
    known yet. Nothing is written; the process carries the record that was written."""
    acc = recording(tmp_path)
    p = adopted(acc)
    acc.read_usage(p)
    acc.read_usage(p)  # asked twice: one lookup only
    assert acc.jobs.commits == []
    # this rank's key in the job's KVS directory, the job's id as flux spells it
    assert [key for key, _ in acc.jobs.sent] == [f"job.{JobID(JOB).dothex}.sdexec-usage.0"]
    acc.jobs.answer(record=COMMITTED)
    assert acc.jobs.commits == [] and usage(acc, p) == FIGURES


def test_after_a_crash_the_oom_exception_is_not_raised_again(tmp_path):
    """The slice is still there (the crash left it) and counts the kill again: the record
    exists, so neither the record nor the ``oom`` exception is written a second time."""
    events = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"
    files = {"cpu.stat": CPU_STAT, "memory.events": events, "cgroup.controllers": "memory"}
    acc = recording(tmp_path, files, parent=PARENT)
    p = adopted(acc)
    acc.read_usage(p)
    acc.jobs.answer(record=COMMITTED)
    assert acc.jobs.commits == [] and usage(acc, p) == FIGURES


def test_no_record_yet_is_written_once_with_the_wall_time_up_to_the_exit(tmp_path):
    """The unit ended while no sdexec ran (a crash before its exit was seen): the record
    read at adoption is written, once, its wall time from systemd's exit timestamp."""
    acc = recording(tmp_path, {"cpu.stat": CPU_STAT}, parent=PARENT)
    p = adopted(acc)
    acc.read_usage(p)
    acc.jobs.answer(exc=OSError(errno.ENOENT, "No such file or directory"))
    assert len(acc.jobs.commits) == 1
    assert acc.jobs.commits[0]["cpu_user_s"] == 2.0 and acc.jobs.commits[0]["wall_s"] == 12.5
    acc.read_usage(p)
    assert len(acc.jobs.commits) == 1 and acc.jobs.sent == []


def test_the_wait_answer_waits_for_the_lookup_and_carries_the_record(tmp_path):
    """A wait answered while the lookup is out is sent from its reply, once, with the
    record that was written; one answered after it goes at once."""
    acc = recording(tmp_path)
    p = adopted(acc)
    acc.read_usage(p)
    sent = []
    acc.after_usage(p, sent.append)
    assert sent == []  # not inline: the lookup is not answered yet
    acc.jobs.answer(record=COMMITTED)
    assert sent == [FIGURES]
    acc.after_usage(p, lambda u: sent.append("again"))
    assert sent == [FIGURES, "again"]


def test_a_failed_lookup_writes_nothing_and_answers_with_what_was_read(tmp_path):
    """Whether the record exists is unknown: it is not overwritten; the wait gets the
    figures read at adoption."""
    acc = recording(tmp_path, {"cpu.stat": CPU_STAT}, parent=PARENT)
    p = adopted(acc)
    acc.read_usage(p)
    sent = []
    acc.after_usage(p, lambda u: sent.append(u["cpu_user_s"]))
    acc.jobs.answer(exc=OSError(errno.EHOSTUNREACH, "No route to host"))
    assert acc.jobs.commits == [] and sent == [2.0]


def test_a_lookup_still_out_at_unload_answers_its_waits_once(tmp_path):
    acc = recording(tmp_path)
    p = adopted(acc)
    acc.read_usage(p)
    sent = []
    acc.after_usage(p, sent.append)
    acc.flush()
    assert sent == [None]  # the usage unknown: the answer goes without it
    acc.jobs.answer(record=COMMITTED)  # too late: nothing more is sent
    assert sent == [None] and acc.jobs.commits == []


def test_a_unit_adopted_running_is_looked_up_when_it_ends(tmp_path):
    """Adopted running, it ends under this sdexec: nobody can have written its record, but
    the lookup costs one KVS read, and says so."""
    acc = recording(tmp_path, {"cpu.stat": CPU_STAT}, parent=PARENT)
    p = adopted(acc, finished=False)
    acc.find_slices(p)  # seen running: nothing read
    assert acc.jobs.sent == [] and acc.jobs.commits == []
    p.unit.finished = p.unit.gone = True
    acc.read_usage(p)
    acc.jobs.answer(exc=OSError(errno.ENOENT, "No such file or directory"))
    assert len(acc.jobs.commits) == 1


def test_a_process_this_sdexec_started_is_written_at_once(tmp_path, monkeypatch):
    """No lookup: its record goes to the job at its exit; its answers wait, in order, for
    the record to be handed on (so its job's memo is posted before job-exec hears of the
    end), then carry it."""
    acc = recording(tmp_path, {"cpu.stat": CPU_STAT}, parent=PARENT)
    monkeypatch.setattr(cgroup_usage, "accounting_slice", lambda unit, token: SLICE)
    p = adopted(acc, adopt=False)
    acc.read_usage(p)
    assert acc.jobs.sent == [] and len(acc.jobs.commits) == 1
    sent = []
    acc.after_usage(p, lambda u: sent.append(("wait", u["cpu_user_s"])))
    acc.after_usage(p, lambda u: sent.append("finished"))
    assert sent == []
    acc.jobs.hand_on()
    assert sent == [("wait", 2.0), "finished"]
    acc.after_usage(p, lambda u: sent.append("now"))
    assert sent[-1] == "now"


def test_an_end_not_handed_on_at_unload_answers_with_what_was_read(tmp_path, monkeypatch):
    acc = recording(tmp_path, {"cpu.stat": CPU_STAT}, parent=PARENT)
    monkeypatch.setattr(cgroup_usage, "accounting_slice", lambda unit, token: SLICE)
    p = adopted(acc, adopt=False)
    acc.read_usage(p)
    sent = []
    acc.after_usage(p, lambda u: sent.append(u["cpu_user_s"]))
    acc.flush()
    acc.jobs.hand_on()  # too late: nothing more is sent
    assert sent == [2.0]


def test_a_missing_mark_found_is_no_record_the_figures_read_are_written(tmp_path):
    """Review 3, finding 4: this rank was marked missing (its parent saw it lost, or an
    hour passed); the adopted shell's figures replace the mark and the wait carries them."""
    acc = recording(tmp_path, {"cpu.stat": CPU_STAT}, parent=PARENT)
    p = adopted(acc)
    acc.read_usage(p)
    acc.jobs.answer(record={"rank": 0, "missing": "no record within 3600 s"})
    assert len(acc.jobs.commits) == 1 and acc.jobs.commits[0]["cpu_user_s"] == 2.0
    acc.jobs.hand_on()
    assert usage(acc, p)["cpu_user_s"] == 2.0


# ---- usage from the unit itself (usage/unit_usage.py) ----

SYSTEMD_257 = {"CPUUsageNSec": 1_500_000_000, "MemoryPeak": 200 << 20}
SYSTEMD_252 = {
    "CPUUsageNSec": 2**64 - 1,
    "MemoryPeak": UnitError(errno.ENXIO, "Unknown property MemoryPeak."),
}


class Gets(Stops):
    """A bridge whose Get calls wait for ``answer_gets``; stops answered at once."""

    def __init__(self):
        super().__init__()
        self.gets = []  # (unit, name, on_reply), not answered yet

    def get_property(self, unit, name, on_reply, timeout=None):
        assert timeout, "sent without waiting, with a deadline"
        self.gets.append((unit, name, on_reply))

    def answer_gets(self, answers):
        gets, self.gets = self.gets, []
        for _, name, on_reply in gets:
            answer = answers[name]
            on_reply(answer) if isinstance(answer, Exception) else on_reply(None, answer)


def exiting(name=UNIT, active="active", result=None, opts=None):
    """A process whose exit is known, as read_usage sees it (its unit still loaded)."""
    unit = types.SimpleNamespace(
        name=name,
        pid=4242,
        finished=True,
        gone=False,
        stopping=False,
        active_state=active,
        result=result,
        wait_status=0,
        started_at=STARTED,
    )
    return Proc(
        unit=unit,
        cmd=types.SimpleNamespace(opts=opts or {}, label=None),
        state=ProcState.ZOMBIE,
        calls=types.SimpleNamespace(stop_sent=False, reset_sent=False),
    )


def learning(tmp_path, usage="jobs"):
    bridge = Gets()
    acc = accounting(tree(tmp_path, cgroups.UNIFIED), bridge=bridge, usage=usage, source=None)
    acc.sent = lambda: bridge.stopped.append("sent")  # the deadline armed: BusWatcher.sent
    return acc, bridge


@pytest.mark.parametrize(
    "answers, source, reason",
    [
        (SYSTEMD_257, "unit", None),
        (SYSTEMD_252, "slice", "systemd reports no CPUUsageNSec of an exited unit"),
    ],
)
def test_the_first_unit_that_exits_after_load_tells_the_source(tmp_path, answers, source, reason):
    """Any unit (a flux exec one here, no slice of its own): its two Gets pipelined, its
    exit's answers not held; a second exit meanwhile asks nothing; then decided for good."""
    acc, bridge = learning(tmp_path)
    first, second = exiting("ls-0:tb.service"), exiting("true-0:tb.service")
    assert acc.place(first, []) == [] and first.accounted  # its exit is heard
    acc.read_usage(first)
    acc.read_usage(second)
    assert [(u, n) for u, n, _ in bridge.gets] == [
        ("ls-0:tb.service", "CPUUsageNSec"),
        ("ls-0:tb.service", "MemoryPeak"),
    ]
    assert bridge.stopped == ["sent"]
    assert usage(acc, first) is None  # nothing waits on a unit without an account
    bridge.answer_gets(answers)
    assert (acc.source.source, acc.source.reason) == (source, reason)
    acc.read_usage(exiting("again-0:tb.service"))
    assert bridge.gets == []  # never asked again
    later = proc(name="later-0:tb.service")
    acc.place(later, [])
    assert not hasattr(later, "accounted")  # decided: a flux exec unit's exit is not heard


def test_a_unit_that_is_no_longer_loaded_teaches_nothing(tmp_path):
    """Stopped and unloaded, systemd answers UINT64_MAX for any unit: not a sign of 252."""
    acc, bridge = learning(tmp_path)
    acc.read_usage(exiting(active="inactive"))
    assert bridge.gets == [] and acc.source.learning


def test_under_the_unit_source_a_job_shell_gets_no_slice(tmp_path):
    """Its record is made of the unit's figures once they come; the wait answer and the
    job's hand-on wait for them; nothing is stopped at its end."""
    acc, bridge = learning(tmp_path)
    acc.read_usage(exiting("ls-0:tb.service"))
    bridge.answer_gets(SYSTEMD_257)
    p = exiting()
    assert acc.place(p, [("MemoryMax", "t", 1 << 30)]) == [("MemoryMax", "t", 1 << 30)]
    assert p.accounted and acc.slices([p]) == set() and acc.jobs.started == ["fA1"]
    acc.read_usage(p)
    sent = []
    acc.after_usage(p, sent.append)
    assert [n for _, n, _ in bridge.gets] == ["CPUUsageNSec", "MemoryPeak"]
    assert sent == [] and acc.jobs.commits == []  # waits for systemd's answers
    bridge.answer_gets(SYSTEMD_257)
    (written,) = acc.jobs.commits
    assert (written["cpu_s"], written["memory_peak"], written["oom_kills"]) == (1.5, 200 << 20, 0)
    assert (written["cpu_user_s"], written["tasks_peak"]) == (None, None)
    assert sent == []  # then for the job's hand-on, as a slice's record
    acc.jobs.hand_on()
    assert sent == [written]
    acc.done(p)
    assert bridge.stopped == ["sent", "sent"]  # no slice stopped


def test_an_oom_killed_shell_read_from_its_unit_counts_the_kill(tmp_path):
    """Result oom-kill: one kill at least, so the job's ``oom`` exception is raised."""
    acc, bridge = learning(tmp_path)
    acc.source.source = "unit"
    p = exiting(active="failed", result="oom-kill")
    acc.place(p, [])
    acc.read_usage(p)
    bridge.answer_gets(SYSTEMD_257)
    assert [c["oom_kills"] for c in acc.jobs.commits] == [1]
    assert acc.jobs.commits[0]["result"] == "oom-kill"


def test_a_get_refused_gives_absent_figures_and_the_answers_go(tmp_path):
    """The connection lost (or a deadline passed): the figures null with why, never a hang."""
    acc, bridge = learning(tmp_path)
    acc.source.source = "unit"
    p = exiting()
    acc.place(p, [])
    acc.read_usage(p)
    lost = UnitError(errno.ECONNRESET, "lost connection to systemd")
    bridge.answer_gets({"CPUUsageNSec": lost, "MemoryPeak": lost})
    (written,) = acc.jobs.commits
    assert written["cpu_s"] is None and "lost connection" in written["null_reasons"]["cpu_s"]
    acc.jobs.hand_on()
    assert usage(acc, p)["cpu_s"] is None


def test_an_unload_before_systemd_answers_sends_what_waits_once(tmp_path):
    acc, bridge = learning(tmp_path)
    acc.source.source = "unit"
    p = exiting()
    acc.place(p, [])
    acc.read_usage(p)
    sent = []
    acc.after_usage(p, sent.append)
    acc.flush()
    assert sent == [None]
    bridge.answer_gets(SYSTEMD_257)  # too late: nothing written, nothing sent
    assert sent == [None] and acc.jobs.commits == []


@pytest.mark.parametrize(
    "source, where, from_unit",
    [
        (None, "app.slice", True),  # learning: its exit's Gets tell both
        ("unit", "app.slice", True),
        ("slice", "app.slice", False),  # systemd keeps nothing: no record to make
        ("unit", "user.slice", False),  # a client's slice
    ],
)
def test_a_job_shell_adopted_without_a_slice_is_read_from_its_unit(
    tmp_path, source, where, from_unit
):
    acc, bridge = learning(tmp_path)
    acc.source.source = source
    p = exiting()
    acc.adopted(p, {"Slice": where, "ExecMainExitTimestamp": int(EXITED * 1e6)})
    assert (p in acc.accounts) is from_unit and acc.slices([p]) == set()
