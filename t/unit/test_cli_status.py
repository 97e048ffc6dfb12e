"""flux sdexec status without flux: judging each rank's answer, folding, the table."""

import errno

from flux_sdexec.cli import report

MODULE = "/usr/local/libexec/flux-sdexec/sdexec.py"
SLICE_REASON = "systemd reports no CPUUsageNSec of an exited unit"
SLICE_SOURCE = {"source": "slice", "reason": SLICE_REASON}
CPU_REASON = "cpuset.cpus unavailable (is cpuset controller delegated to the user instance?)"


def stats(
    policy="enforce",
    constraints=None,
    running=0,
    zombie=0,
    adopted=0,
    reconnects=0,
    unenforceable=None,
    layout="hybrid",
    usage_source=SLICE_SOURCE,
):
    """A stats-get answer of our module (the fields status reads, as the module sends them)."""
    containment = {"policy": policy, "layout": layout, "constraints": constraints or {}}
    containment.update(unenforceable=unenforceable or {}, required=[])
    return {
        "procs": {},
        "version": "0.1.0",
        "module": MODULE,
        "systemd": {"kind": "private", "via": "/run/user/0/systemd/private"},
        "reconnects": reconnects,
        "tracked": {"starting": 0, "running": running, "finished": 0, "zombie": zombie},
        "adopted": adopted,
        "containment": containment,
        "usage-source": usage_source,
    }


def not_enforced(reason, **extra):
    """One constraint's tally entry with one start that found it not enforced."""
    return {"enforced": 0, "not-enforced": 1, "not-checkable": 0, "last_reason": reason, **extra}


def test_judge_our_module_healthy():
    """Our module's answer: every field status shows, counts from the tracked states."""
    r = report.judge(3, "node3", stats(running=2, zombie=1, adopted=4))
    assert r == {
        "rank": 3,
        "host": "node3",
        "state": "ok",
        "healthy": True,
        "detail": None,
        "version": "0.1.0",
        "module": MODULE,
        "systemd": "private",
        "via": "/run/user/0/systemd/private",
        "reconnects": 0,
        "layout": "hybrid",
        "policy": "enforce",
        "not_enforced": {},
        "unenforceable": {},
        "tracked": 3,
        "running": 2,
        "zombie": 1,
        "adopted": 4,
        "usage": "slice",
        "usage_note": f"slice: {SLICE_REASON}",
    }


def test_judge_silent_unloaded_foreign_and_failed_ranks_are_unhealthy():
    """No answer, ENOSYS, the C module's answer (procs only), an unreachable rank, another
    error: each unhealthy, saying why."""
    cases = [
        (dict(timeout=2.5), "unreachable", "no answer within 2.5s"),
        (dict(error=(errno.ENOSYS, "Function not implemented")), "unloaded", None),
        (dict(answer={"procs": {}}), "not-ours", None),
        (dict(error=(errno.EHOSTUNREACH, "No route to host")), "unreachable", "No route to host"),
        (dict(error=(errno.EPERM, "Operation not permitted")), "error", "Operation not permitted"),
    ]
    for kwargs, state, detail in cases:
        r = report.judge(1, "n1", **kwargs)
        assert (r["state"], r["healthy"]) == (state, False)
        assert r["detail"] == detail or (detail is None and r["detail"])
        assert r["version"] is None and r["running"] is None


def test_judge_not_enforced_is_unhealthy_only_under_enforce():
    """A constraint some start found not enforced: shown under every policy, a failure only
    under enforce; unknown keys of the tally (a newer module's) are ignored."""
    constraints = {
        "AllowedCPUs": not_enforced(CPU_REASON, hierarchy="v2"),
        "MemoryMax": {"enforced": 3, "not-enforced": 0, "not-checkable": 0, "last_reason": ""},
    }
    warn = report.judge(0, "n0", stats("warn", constraints))
    enforce = report.judge(0, "n0", stats("enforce", constraints))
    assert (warn["state"], warn["healthy"]) == ("ok", True)
    assert (enforce["state"], enforce["healthy"]) == ("not-enforced", False)
    assert warn["not_enforced"] == enforce["not_enforced"] == {"AllowedCPUs": CPU_REASON}


def test_fold_groups_alike_ranks_and_sums_counts():
    """Ranks differing only in host and counts share a row; counts are summed; a rank
    that differs otherwise (unloaded, another reconnect count) gets its own row."""
    records = [
        report.judge(0, "n0", stats(running=1)),
        report.judge(1, "n0", stats(running=2, zombie=1)),
        report.judge(2, "n1", error=(errno.ENOSYS, "")),
        report.judge(3, "n1", stats(adopted=5)),
        report.judge(4, "n2", stats(reconnects=1)),
    ]
    groups = report.fold(reversed(records))
    assert [(g["ranks"], g["hosts"], g["state"]) for g in groups] == [
        ([0, 1, 3], ["n0", "n1"], "ok"),
        ([2], ["n1"], "unloaded"),
        ([4], ["n2"], "ok"),
    ]
    assert [(g["running"], g["zombie"], g["adopted"], g["tracked"]) for g in groups] == [
        (3, 1, 5, 4),
        (None, None, None, None),
        (0, 0, 0, 0),
    ]


def test_lines_one_row_per_group_then_reasons_and_problems():
    """The table has a header and one row per group; a note names each constraint not
    enforced with its reason, and each unhealthy group with its detail."""
    records = [
        report.judge(r, f"n{r}", stats("warn", {"AllowedCPUs": not_enforced(CPU_REASON)}))
        for r in range(3)
    ] + [report.judge(3, "n3", timeout=5)]
    text = report.lines(report.fold(records), hostlist=lambda hosts: "+".join(hosts))
    assert text[0].split() == [
        "STATE",
        "NRANKS",
        "RANKS",
        "HOSTS",
        "VERSION",
        "SYSTEMD",
        "RECONNECTS",
        "TRACKED",
        "RUNNING",
        "ZOMBIE",
        "ADOPTED",
        "CGROUPS",
        "UNENFORCEABLE",
        "POLICY",
        "NOT-ENFORCED",
        "USAGE",
        "MODULE",
    ]
    assert text[1].split() == [
        "ok",
        "3",
        "0-2",
        "n0+n1+n2",
        "0.1.0",
        "private",
        "0",
        "0",
        "0",
        "0",
        "0",
        "hybrid",
        "-",
        "warn",
        "AllowedCPUs",
        "slice",
        MODULE,
    ]
    assert text[2].split() == ["unreachable", "1", "3", "n3"] + ["-"] * 13
    assert text[3:] == [
        f"ranks 0-2 (n0+n1+n2): AllowedCPUs not enforced: {CPU_REASON}",
        f"ranks 0-2 (n0+n1+n2): usage source: slice: {SLICE_REASON}",
        "rank 3 (n3): unreachable: no answer within 5s",
    ]
    assert text[1].index("0.1.0") == text[0].index("VERSION")


DEVICE_REASON = "systemd's user manager does not apply device policies (systemd#23198)"
UNIFIED_DEVICES = {"DeviceAllow": DEVICE_REASON, "DevicePolicy": DEVICE_REASON}


def unenforceable_entry(n):
    """A constraint's tally entry whose ``n`` starts found it unenforceable."""
    return {
        "enforced": 0,
        "not-enforced": 0,
        "not-checkable": 0,
        "unenforceable": n,
        "last_reason": f"unified: {DEVICE_REASON}",
    }


def test_unenforceable_constraints_are_shown_and_healthy():
    """A unified rank under enforce whose job shells ran without their device policy: the
    rank is ok (the jobs ran by design), the record holds what the host never enforces and
    why; counted unenforceable starts are not not-enforced."""
    answer = stats(
        "enforce",
        {"DevicePolicy": unenforceable_entry(4)},
        unenforceable=UNIFIED_DEVICES,
        layout="unified",
    )
    r = report.judge(0, "n0", answer)
    assert (r["state"], r["healthy"], r["not_enforced"]) == ("ok", True, {})
    assert r["unenforceable"] == UNIFIED_DEVICES
    old = stats("enforce")
    del old["containment"]["unenforceable"]  # a module from before: no such key
    assert report.judge(0, "n0", old)["unenforceable"] == {}


def test_unenforceable_column_and_one_line_per_reason():
    """One row per rank group with an UNENFORCEABLE column beside CGROUPS; under the table,
    one line per reason naming its constraints; ranks with another set get their own row."""
    records = [
        report.judge(r, f"n{r}", stats(unenforceable=UNIFIED_DEVICES, layout="unified"))
        for r in range(2)
    ] + [report.judge(2, "n2", stats())]
    text = report.lines(report.fold(records), hostlist=lambda hosts: "+".join(hosts))
    header = text[0].split()
    column = header.index("UNENFORCEABLE")
    assert header[column - 1 : column + 2] == ["CGROUPS", "UNENFORCEABLE", "POLICY"]
    assert [row.split()[column] for row in text[1:3]] == ["DeviceAllow,DevicePolicy", "-"]
    assert text[3:] == [
        f"ranks 0-1 (n0+n1): DeviceAllow,DevicePolicy unenforceable: {DEVICE_REASON}",
        f"ranks 0-1 (n0+n1): usage source: slice: {SLICE_REASON}",
        f"rank 2 (n2): usage source: slice: {SLICE_REASON}",
    ]


def test_each_rank_says_where_its_job_shells_usage_is_read_from():
    """unit (no note), slice with systemd's reason, or slice while learning; ranks that
    differ only there stay one row, its USAGE each source once, a note naming the ranks of
    each reason; an sdexec that does not say adds nothing."""
    learning = {"source": None, "reason": "no unit has exited since load"}
    records = [
        report.judge(0, "n0", stats(usage_source={"source": "unit", "reason": None})),
        report.judge(1, "n1", stats(usage_source=SLICE_SOURCE)),
        report.judge(2, "n2", stats(usage_source=learning)),
        report.judge(3, "n3", stats(usage_source=None)),
    ]
    text = report.lines(report.fold(records))
    column = text[0].split().index("USAGE")
    assert len(text) == 4
    assert text[1].split()[column] == "learning,slice,unit"
    assert text[2:] == [
        f"rank 1 (n1): usage source: slice: {SLICE_REASON}",
        "rank 2 (n2): usage source: slice (learning: no unit has exited since load)",
    ]
    alone = report.lines(report.fold(records[3:]))
    assert alone[1].split()[column] == "-"
