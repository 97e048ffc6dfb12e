"""The memo naming the constraints a job shell runs without (broker/memo.py).

A constrained job shell that runs with an unenforceable constraint not enforced (a device
policy on cgroup v2: test_unenforceable.py) gets one ``job-manager.memo`` per job per rank,
sent on rank 0 without waiting; its answer is read in the future's callback only, and a
failure is logged at debug level. Stub handle and futures: no flux, no sleeping.
"""

import errno

from flux_sdexec.core import shelljobs
from flux_sdexec.broker import memo
from flux_sdexec.broker.memo import JobMemos

from stubs import StubLog, StubWatchers
from test_orphan_watch import StubHandle

REASON = "unified: systemd's user manager does not apply device policies (systemd#23198)"


def memos():
    h, log = StubHandle(), StubLog()
    return h, log, JobMemos(h, log, StubWatchers())


def test_one_memo_per_job_on_rank_0_with_a_timeout():
    """The payload job-manager.memo takes, by integer job id, kept (not volatile); the same
    job again (its shell's next start on this rank, another exec of it) sends nothing."""
    h, log, m = memos()
    m.not_enforced("shell-1-fA2.service", {"DevicePolicy": REASON})
    m.not_enforced("shell-1-fA2.service", {"DevicePolicy": REASON})
    (f,) = h.sent
    assert (f.topic, f.nodeid, f.timeout) == ("job-manager.memo", 0, memo.TIMEOUT)
    assert f.payload == {
        "id": shelljobs.job_number("fA2"),
        "volatile": False,
        "memo": {"sdexec": {"not_enforced": {"DevicePolicy": REASON}}},
    }
    assert m.pending() == 1
    f.reply(None)
    assert m.pending() == 0 and log.lines == []


def test_bgexec_and_multiuser_labels_name_their_job():
    """A bgexec shell's unit carries its label (``shell-<rank>-<id>-<rank>:<instance>``)."""
    h, _, m = memos()
    m.not_enforced("shell-1-fA3-1:t1a2b3c4d.service", {"DeviceAllow": REASON})
    assert [f.payload["id"] for f in h.sent] == [shelljobs.job_number("fA3")]


def test_no_job_no_memo():
    """A unit that is not a job shell's is nobody's job: nothing is sent."""
    h, _, m = memos()
    m.not_enforced("8f1c2e6a-1b2c:t1.service", {"DevicePolicy": REASON})
    assert h.sent == [] and m.pending() == 0


def test_failures_are_logged_at_debug_and_never_raise():
    """An error answer (the job is gone), a timeout, and an rpc that raises: a debug line
    each, nothing raised, no future kept."""
    h, log, m = memos()
    m.not_enforced("shell-0-fA4.service", {"DevicePolicy": REASON})
    h.sent[0].reply(OSError(errno.ENOENT, "job is inactive"))
    m.not_enforced("shell-0-fA5.service", {"DevicePolicy": REASON})
    h.sent[1].reply(OSError(errno.ETIMEDOUT, "Connection timed out"))

    def refuse(*args):
        raise OSError(errno.ENOSYS, "Function not implemented")

    h.rpc = refuse
    m.not_enforced("shell-0-fA6.service", {"DevicePolicy": REASON})
    assert log.at("debug") == [
        "shell-0-fA4.service: job-manager.memo of fA4: job is inactive",
        "shell-0-fA5.service: job-manager.memo of fA5: Connection timed out",
        "shell-0-fA6.service: job-manager.memo of fA6: Function not implemented",
    ]
    assert [lv for lv, _ in log.lines] == ["debug"] * 3
    assert m.pending() == 0


def test_the_set_of_jobs_memoed_is_bounded():
    """Only the last REMEMBERED jobs are remembered: the oldest is forgotten first."""
    h, _, m = memos()
    digits = shelljobs.F58_DIGITS
    jobs = [f"fB{a}{b}" for a in digits for b in digits][: memo.REMEMBERED + 1]
    for plain in jobs:
        m.not_enforced(f"shell-0-{plain}.service", {"DevicePolicy": REASON})
    assert len(h.sent) == memo.REMEMBERED + 1
    assert m.remembered() == memo.REMEMBERED
    m.not_enforced(f"shell-0-{jobs[-1]}.service", {"DevicePolicy": REASON})
    assert len(h.sent) == memo.REMEMBERED + 1
    m.not_enforced(f"shell-0-{jobs[0]}.service", {"DevicePolicy": REASON})
    assert len(h.sent) == memo.REMEMBERED + 2


def test_close_drops_what_is_pending():
    """At unload the futures still out are let go (the handle goes with the module)."""
    h, _, m = memos()
    m.not_enforced("shell-0-fA7.service", {"DevicePolicy": REASON})
    m.close()
    assert m.pending() == 0
