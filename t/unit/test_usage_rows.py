"""``flux sdexec usage``'s rows (cli/usagerows.py) and total (core/usage_record.py) from
per-rank records."""

from flux_sdexec.cli import usagerows
from flux_sdexec.core.usage_record import total

R0 = {
    "rank": 0,
    "host": "n0",
    "cpu_user_s": 2.0,
    "cpu_sys_s": 0.25,
    "memory_peak": 300 << 20,
    "tasks_peak": 7,
    "oom_kills": 0,
    "result": "success",
}
R1 = {
    "rank": 1,
    "host": "n1",
    "cpu_user_s": 1.5,
    "cpu_sys_s": 0.5,
    "memory_peak": 400 << 20,
    "tasks_peak": 9,
    "oom_kills": 1,
    "result": "success",
}


def test_total_sums_cpu_and_oom_and_takes_the_largest_peaks():
    assert total([R0, R1]) == {
        "ranks": 2,
        "cpu_user_s": 3.5,
        "cpu_sys_s": 0.75,
        "memory_peak": 400 << 20,
        "memory_peak_rank": 1,
        "tasks_peak": 9,
        "oom_kills": 1,
    }


def test_total_of_figures_no_rank_gave_is_none():
    rec = {"rank": 0, "cpu_user_s": 1.0, "memory_peak": None, "oom_kills": None}
    t = total([rec])
    assert (t["memory_peak"], t["memory_peak_rank"], t["oom_kills"]) == (None, None, None)


def test_rows_are_per_rank_in_order_then_total():
    lines = usagerows.lines(usagerows.rows("fA", [R1, dict(R0, running=True)]))
    assert [line.split()[:2] for line in lines] == [
        ["JOBID", "RANK"],
        ["fA", "0"],
        ["fA", "1"],
        ["fA", "total"],
    ]
    assert lines[1].split()[-1] == "running" and lines[2].split()[-1] == "success"
    assert "400.0M (rank 1)" in lines[3] and "3.50s" in lines[3]
