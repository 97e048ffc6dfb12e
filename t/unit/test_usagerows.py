"""``flux sdexec usage``'s rows (cli/usagerows.py) and total (usage/record.py) from
per-rank records."""

from flux_sdexec.cli import usagerows
from flux_sdexec.usage.record import total

R0 = {
    "rank": 0,
    "host": "n0",
    "cpu_s": 2.25,
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
    "cpu_s": 2.0,
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
        "cpu_s": 4.25,
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
    assert "400.0M (rank 1)" in lines[3] and "3.50s" in lines[3] and "4.25s" in lines[3]
    assert lines[0].split()[3:5] == ["CPU", "USER"]


def test_the_unit_source_s_absent_figures_are_blank_not_zero():
    """A rank read from its unit (systemd 257): CPU and MAXMEM, USER/SYS/TASKS blank."""
    unit_read = {"rank": 0, "host": "n0", "cpu_s": 1.5, "cpu_user_s": None, "cpu_sys_s": None,
                 "memory_peak": 200 << 20, "tasks_peak": None, "oom_kills": 0,
                 "result": "success"}  # fmt: skip
    row, total_row = usagerows.rows("fA", [unit_read])
    assert (row["cpu_s"], row["cpu_user_s"], row["cpu_sys_s"]) == ("1.50s", None, None)
    assert (row["tasks_peak"], row["oom_kills"], row["memory_peak"]) == (None, 0, "200.0M")
    assert (total_row["cpu_s"], total_row["cpu_user_s"]) == ("1.50s", None)


def test_a_missing_rank_is_a_row_of_its_own_and_out_of_the_total():
    """A rank rank 0 marked missing (its node lost) says why; the total is the others'."""
    lost = {"rank": 2, "missing": "rank 2 lost"}
    table = usagerows.rows("fA1", [R0, lost, R1])
    assert [r["rank"] for r in table] == [0, 1, 2, "total"]
    assert table[2]["result"] == "missing: rank 2 lost" and table[2].get("cpu_user_s") is None
    assert table[3]["cpu_user_s"] == "3.50s" and table[3]["oom_kills"] == 1
    assert "missing: rank 2 lost" in usagerows.lines(table)[3]


def test_cpu_percent_is_cpu_seconds_over_the_wall_seconds_between_two_looks():
    before = {0: R0, 1: R1}
    after = {0: dict(R0, cpu_s=3.75), 1: R1, 2: R1}
    # rank 0: 1.5 CPU seconds in 2 s; rank 1 idle; rank 2 not seen before: no figure
    assert usagerows.cpu_percent(before, after, 2.0) == {0: 75.0, 1: 0.0}
    # records of an older sdexec (no cpu_s): user plus system
    old = {0: {"cpu_user_s": 2.0, "cpu_sys_s": 0.25}}
    assert usagerows.cpu_percent(old, {0: {"cpu_user_s": 3.0, "cpu_sys_s": 0.75}}, 2.0) == {0: 75.0}
    table = usagerows.rows("fA1", list(after.values()), {0: 75.0, 1: 0.0})
    head = usagerows.lines(table, watch=True)[0].split()
    assert head[:4] == ["JOBID", "RANK", "HOST", "CPU%"]
    assert table[0]["cpu_percent"] == 75.0
