"""flux sdexec usage's ``-t``: what the tree below rank 0 is given to gather a running job's
rows (review 3 #10), without flux: rank 0's ``sdexec.usage-live`` answered by a stand-in
that checks ``wait`` as the broker does (``usage/accounting.py``)."""

import errno

import fluxpath
import pytest

fluxpath.add()

from flux.job import JobID  # noqa: E402

from flux_sdexec.cli import ask, main, usage  # noqa: E402
from flux_sdexec.usage.job_usage import LIVE_STEP_S, LIVE_WAIT_MAX_S  # noqa: E402

JOB = JobID(123456789)
ROWS = {str(r): {"rank": r, "host": f"n{r}", "result": "running"} for r in (0, 1)}


def gather(monkeypatch, timeout):
    """``records()`` of a running 2-rank job with nothing kept; the usage-live requests
    sent, and what the user is shown."""
    monkeypatch.setattr(usage, "_kept", lambda h, jobid: {})
    monkeypatch.setattr(usage, "_ranks", lambda h, jobid: [0, 1])
    sent = []

    def ask_all(h, topic, ranks, payload, timeout):
        sent.append((topic, ranks, payload, timeout))
        answer = ask.Answer(0)
        if not 0 < payload["wait"] <= LIVE_WAIT_MAX_S:  # as Accounting.answer_live
            answer.error = (errno.EPROTO, f"usage-live: wait must be in (0, {LIVE_WAIT_MAX_S}]")
        else:
            answer.payload = {"rows": ROWS, "missing": {}}
        return {0: answer}

    monkeypatch.setattr(ask, "ask_all", ask_all)
    return sent, usage.records(None, JOB, timeout)


@pytest.mark.parametrize("timeout", [5.0, 61.0, 120.0, 3600.0])
def test_a_long_timeout_gives_the_tree_at_most_the_brokers_maximum(monkeypatch, timeout):
    """``-t 120``: the tree waits at most LIVE_WAIT_MAX_S, so each running rank's row is
    shown (it was ``missing: usage-live: wait must be in (0, 60.0]`` on every rank); the
    client itself still waits the whole ``-t``."""
    sent, (recs, complete) = gather(monkeypatch, timeout)
    wait = min(timeout - 1, LIVE_WAIT_MAX_S)
    assert sent == [("sdexec.usage-live", [0], {"jobid": JOB.f58plain, "wait": wait}, timeout)]
    assert (recs, complete) == ([ROWS["0"], ROWS["1"]], False)


def test_a_timeout_that_leaves_the_levels_below_no_time_is_refused(capsys):
    """Each level down waits LIVE_STEP_S less, never less than LIVE_STEP_S: ``-t 0.5`` gave
    every level 0.25 s, so a child's answer came after its parent's deadline. Under
    ``usage.MIN_TIMEOUT_S`` the command line is refused (exit 2, one line saying why);
    at it, four levels each wait less than the one above."""
    with pytest.raises(SystemExit) as exit_:
        main.parser().parse_args(["usage", "-t", "0.5", JOB.f58])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error == (
        "flux sdexec usage: error: argument -t/--timeout: 0.5 is too short:"
        f" at least {usage.MIN_TIMEOUT_S:g} s (the tree below rank 0 waits one second less,"
        f" {LIVE_STEP_S:g} s less at each level down)"
    )
    args = main.parser().parse_args(["usage", "-t", f"{usage.MIN_TIMEOUT_S:g}", JOB.f58])
    wait = usage.live_wait(args.timeout)
    levels = [max(wait - level * LIVE_STEP_S, LIVE_STEP_S) for level in range(4)]
    assert levels == sorted(set(levels), reverse=True)
