"""Orphan shells: which shells are suspect, what a job query's answer decides, and what
stopping one does to its record (orphans.py, the JobGone rows of table.py)."""

import errno
import syslog

import pytest

from flux_sdexec import config

from flux_sdexec.core import orphans, shelljobs
from flux_sdexec.core.errors import RequestError
from flux_sdexec.core.events import JobGone, Log, StopUnit, WaitRequested
from flux_sdexec.core.machine import handle
from flux_sdexec.core.states import ProcState

from helpers import new, replay

S = ProcState
UNIT = "shell-1-fuMFe9D-1:t1.service"


def shell(label="shell-1-fuMFe9D", unit=UNIT, background=True, adopted=False):
    """A bgexec job shell that runs (the sigterm recording up to its running state)."""
    p = new(
        ["flux-shell"],
        label=label,
        unit=unit,
        background=background,
        waitable=True,
        adopted=adopted,
    )
    replay(p, "sigterm", until=8)
    assert p.state is S.RUNNING
    return p


def test_job_id_and_number_from_a_shell():
    """The job id of a label or, failing that, the unit name; f58plain decodes to the id
    flux gives (flux python: int(JobID("ƒuMFe9D")) is 34359738368)."""
    assert shelljobs.shell_job(shell()) == "fuMFe9D"
    assert shelljobs.shell_job(shell(label=None, unit="shell-0-fuMFe9D.service")) == "fuMFe9D"
    assert shelljobs.job_number("f1") == 0
    assert shelljobs.job_number("f21") == 58
    assert shelljobs.job_number("fuMFe9D") == 34359738368  # flux: JobID("ƒuMFe9D")


def test_suspect_only_a_running_background_job_shell_nobody_waits_on():
    """Suspect: a background job shell, starting or running, with no waiter and not being
    stopped already. Not: a foreground one, another label, a waited one, a zombie."""
    assert orphans.suspect(shell())
    assert orphans.suspect(shell(adopted=True))
    assert not orphans.suspect(shell(background=False))
    assert not orphans.suspect(shell(label="mylabel", unit="mylabel-1:t1.service"))
    waited = shell()
    handle(waited, WaitRequested("job-exec"))
    assert not orphans.suspect(waited)
    stopping = shell()
    handle(stopping, JobGone("job fuMFe9D is inactive"))
    assert not orphans.suspect(stopping)
    over = shell()
    replay(over, "sigterm", since=8)
    assert over.state is S.ZOMBIE and not orphans.suspect(over)


def test_verdict_stops_only_for_an_inactive_or_unknown_job():
    """INACTIVE or ENOENT: stop; every active state (the startup window is RUN): keep;
    any other error or an unknown state: ask again later."""
    assert orphans.verdict("fA", state=orphans.INACTIVE) == (orphans.STOP, "job fA is inactive")
    assert orphans.verdict("fA", errnum=errno.ENOENT) == (
        orphans.STOP,
        "job fA is unknown to this instance",
    )
    for state, name in orphans.JOB_STATES.items():
        if state != orphans.INACTIVE:
            assert orphans.verdict("fA", state=state) == (orphans.KEEP, f"job fA is {name}")
    for errnum in (errno.ENOSYS, errno.ETIMEDOUT, errno.EPERM, errno.EHOSTUNREACH):
        assert orphans.verdict("fA", errnum=errnum, text="x")[0] == orphans.RETRY
    assert orphans.verdict("fA", state=3)[0] == orphans.RETRY


def test_check_delays_grow_to_the_interval():
    """0.5, 1, 2, 4 s, then the interval; never longer than the interval."""
    assert [orphans.check_delay(a, 10) for a in range(7)] == [0.5, 1, 2, 4, 10, 10, 10]
    assert [orphans.check_delay(a, 1.5) for a in range(4)] == [0.5, 1, 1.5, 1.5]


def test_job_gone_stops_the_shell_logs_why_and_lets_its_record_go():
    """A running orphan: logged with the reason and stopped; once over, its record is let go
    (nobody will wait on it), where a shell nobody waits on otherwise stays a zombie."""
    p = shell()
    actions = handle(p, JobGone("job fuMFe9D is inactive"))
    assert StopUnit() in actions
    logs = [a for a in actions if isinstance(a, Log)]
    assert logs[0].level == syslog.LOG_WARNING
    assert "job fuMFe9D is inactive: stopping the orphan" in logs[0].text
    assert handle(p, JobGone("again")) == []  # stopped once: nothing more to do
    replay(p, "sigterm", since=8)
    assert p.state in (S.RELEASING, S.DONE)

    kept = shell()
    replay(kept, "sigterm", since=8)
    assert kept.state is S.ZOMBIE  # no job query: the record waits for its wait


def test_job_gone_for_a_shell_still_starting_cancels_its_start():
    """A shell whose start systemd has not reported yet: StopUnit all the same (it cancels a
    start job still queued), where an ordinary forget would send nothing yet."""
    p = new(["flux-shell"], label="shell-1-fA", unit=UNIT, background=True, waitable=True)
    assert p.state is S.STARTING
    assert StopUnit() in handle(p, JobGone("job fA is inactive"))


def test_job_gone_for_a_zombie_lets_it_go_unless_waited():
    """A shell that ended before the answer came: its record is let go; one whose wait is
    being answered is left to the wait."""
    p = shell()
    replay(p, "sigterm", since=8, until=10)
    assert p.state is S.ZOMBIE
    handle(p, JobGone("job fuMFe9D is inactive"))
    assert p.state in (S.RELEASING, S.DONE)
    assert p.orphan == "job fuMFe9D is inactive"


def test_job_gone_for_a_waited_shell_still_answers_the_wait():
    """A shell waited on when its job is found over is stopped too; its waiter gets the
    status as for any end."""
    p = shell()
    handle(p, WaitRequested("job-exec"))
    handle(p, JobGone("job fuMFe9D is inactive"))
    actions = replay(p, "sigterm", since=8)
    assert any(type(a).__name__ == "AnswerWait" for a in actions)


def test_orphan_check_interval_default_durations_and_refusals():
    """Default 10 s; a Flux duration or a number of seconds; anything else refused with
    EINVAL naming the key."""
    assert config.orphan_check_interval({}) == orphans.DEFAULT_INTERVAL == 10
    assert config.orphan_check_interval({"sdexec": {"orphan-check-interval": "2m"}}) == 120
    assert config.orphan_check_interval({"sdexec": {"orphan-check-interval": 0.5}}) == 0.5
    for value in ("often", "0s", -1, True, [1]):
        with pytest.raises(RequestError) as exc:
            config.orphan_check_interval({"sdexec": {"orphan-check-interval": value}})
        assert exc.value.errno == errno.EINVAL
        assert str(exc.value) == (
            'sdexec.orphan-check-interval must be a duration above zero like "10s": '
            f"got {value!r}"
        )
