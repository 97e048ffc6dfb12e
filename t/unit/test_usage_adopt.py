"""The usage record of a job shell adopted at load (review 2026-12b, finding 1).

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

from test_usage import CPU_STAT, PARENT, SLICE, UNIT, Jobs, Proc, accounting, tree

from flux_sdexec.containment import cgroups
from flux_sdexec.usage import cgroup_usage
from flux_sdexec.core.states import ProcState

fluxpath.add()
from flux.job import JobID  # noqa: E402

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
FIGURES = {k: v for k, v in COMMITTED.items() if k not in ("rank", "host", "unit")}


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
