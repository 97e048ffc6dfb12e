"""flux sdexec units without flux: job ids from labels and unit names, the rows, the table."""

import time

from flux_sdexec.cli import unitrows
from flux_sdexec.core.shelljobs import is_f58plain, job_id
from flux_sdexec.cli.columns import render


def test_job_id_from_bgexec_labels_and_bulk_exec_unit_names():
    """bgexec's shell-<rank>-<f58plain> label (imp-shell- for multi-user jobs), a rank-suffixed
    unit name, bulk-exec's verbatim unit name: the job id (f58plain); anything else: None."""
    assert job_id("shell-0-f2Xz9") == "f2Xz9"
    assert job_id("imp-shell-12-fABC") == "fABC"
    assert job_id("shell-3-fhihGvK-3:t1234abcd.service") == "fhihGvK"
    assert job_id("shell-1-fhihGvK.service") == "fhihGvK"
    for other in (None, "", "mylabel", "shell-fABC", "shell-0-f0OIl", "xshell-0-fABC"):
        assert job_id(other) is None


def test_rows_tracked_then_untracked_per_rank():
    """Each rank's tracked processes, then (--all) its untracked units; job id from the label,
    else the unit name, printed by ``encode``; no pid before systemd reported one; start time
    as local time."""
    started = 1796115048.2
    answers = {
        1: {
            "rank": 1,
            "procs": [
                {
                    "unit": "shell-1-fA-1:tX.service",
                    "label": "shell-1-fA",
                    "state": "running",
                    "pid": 42,
                    "started": started,
                },
                {"unit": "shell-1-fB.service", "label": None, "state": "starting", "pid": -1},
            ],
            "untracked": [
                {"unit": "left-1:tX.service", "label": "left", "unit_state": "active.running"}
            ],
        },
        0: {"rank": 0, "procs": [], "untracked": []},
    }
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started))
    assert unitrows.rows(answers, lambda plain: f"<{plain}>") == [
        {
            "rank": 1,
            "unit": "shell-1-fA-1:tX.service",
            "jobid": "<fA>",
            "state": "running",
            "pid": 42,
            "start": when,
            "label": "shell-1-fA",
            "reason": None,
        },
        {
            "rank": 1,
            "unit": "shell-1-fB.service",
            "jobid": "<fB>",
            "state": "starting",
            "pid": None,
            "start": None,
            "label": None,
            "reason": None,
        },
        {
            "rank": 1,
            "unit": "left-1:tX.service",
            "jobid": None,
            "state": "untracked (active.running)",
            "label": "left",
        },
    ]


def test_rows_show_a_suspect_shell_and_an_orphan_being_stopped():
    """A shell nobody waits on shows what its job was last seen as; a shell stopped because
    its job is over shows the state "orphan" and the reason."""
    answers = {
        0: {
            "procs": [
                {
                    "unit": "a",
                    "label": "shell-0-fA",
                    "state": "running",
                    "pid": 7,
                    "job": "job fA is RUN",
                },
                {
                    "unit": "b",
                    "label": "shell-0-fB",
                    "state": "running",
                    "pid": 8,
                    "orphan": "job fB is inactive",
                    "job": "job fB is RUN",
                },
            ]
        }
    }
    rows = unitrows.rows(answers)
    assert [(r["state"], r["reason"]) for r in rows] == [
        ("running", "no waiter; job fA is RUN"),
        (unitrows.ORPHAN, "job fB is inactive"),
    ]
    header = unitrows.lines(rows)[0].split()
    assert header[-1] == "REASON"


def test_render_pads_columns_aligns_numbers_right_and_shows_missing_as_dash():
    """Headers ending in > are right-aligned; None or absent values print as -."""
    lines = render((("N>", "n"), ("NAME", "name")), [{"n": 7, "name": "a"}, {"n": 123}])
    assert lines == ["  N NAME", "  7 a", "123 -"]


def test_an_f58plain_id_is_f_then_base58_digits_alone():
    """What sdexec.usage-live takes as a job id: no f58 sign, no 0/O/I/l, nothing around."""
    assert is_f58plain("f2Xz9") and is_f58plain("fhihGvK")
    for bad in ("", "f", "2Xz9", "f2Xz0", "fOO", "f2Xz9 ", "ƒ2Xz9", None, 12):
        assert not is_f58plain(bad), bad


def test_a_job_id_that_does_not_fit_64_bits_is_none():
    """flux's job ids are 64 bits: the largest is ``fjpXCZedGfVQ``; one more (or any longer
    id) is no job's, not the job whose KVS key its last 64 bits make (review 3 #11)."""
    largest, beyond = "fjpXCZedGfVQ", "fjpXCZedGfVR"  # 2^64 - 1, 2^64
    assert is_f58plain(largest) and job_id(f"shell-0-{largest}") == largest
    for bad in (beyond, "f" + "z" * 12, "f2" + "1" * 20):
        assert not is_f58plain(bad), bad
        assert job_id(f"shell-0-{bad}") is None, bad
        assert job_id(f"imp-shell-3-{bad}-3:t1234abcd.service") is None, bad
