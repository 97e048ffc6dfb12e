"""The decisions of ``flux sdexec upgrade``, without a broker: which jobs block or end,
what a rank must show after the reload, job-exec's arguments, the report."""

from rooted import RootBridge, service

from flux_sdexec.cli import upgrade_plan as plan

MODULE = "/opt/sdexec/sdexec.py"


def stats_jobs(**impls):
    """job-exec's stats ``jobs`` with one entry per id=implementation."""
    return {jobid: {"implementation": impl, "running": 1} for jobid, impl in impls.items()}


def test_bgexec_jobs_are_reattached_every_other_implementation_ends():
    jobs = plan.sort_jobs(stats_jobs(fB="bgexec", fA="bulk-exec", fC="bgexec", fD="testexec"))
    assert jobs.reattachable == ("fB", "fC")
    assert jobs.ending == (("fA", "bulk-exec"), ("fD", "testexec"))


def test_a_job_without_implementation_yet_is_initializing_not_ending():
    """job-exec says "none" for a job whose J and R it is still reading: the upgrade waits
    for it to get its implementation rather than refusing (seen in a chaos run)."""
    jobs = plan.sort_jobs({"fX": {"implementation": "none"}, "fY": {}})
    assert jobs.initializing == ("fX", "fY") and jobs.ending == () and jobs.reattachable == ()
    assert plan.refusal(jobs, force=False) is None


def test_a_job_being_finalized_is_set_apart():
    """Its shells are done, its release not sent yet: the removal must wait for it."""
    jobs = plan.sort_jobs({"fA": {"implementation": "bgexec", "finalizing": 1}})
    assert jobs.finalizing == ("fA",) and jobs.reattachable == () and jobs.ending == ()


def test_jobs_without_their_recoverable_event_are_in_startup():
    assert plan.in_startup(("fA", "fB", "fC"), {"fB"}) == ["fA", "fC"]
    assert plan.in_startup(("fA",), {"fA"}) == []


def test_ending_jobs_refuse_naming_them_unless_forced():
    jobs = plan.sort_jobs(stats_jobs(fA="bulk-exec", fB="bgexec"))
    why = plan.refusal(jobs, force=False)
    assert why.startswith("refusing to upgrade: these running jobs would end")
    assert "fA (bulk-exec)" in why and "fB" not in why and "--force" in why
    assert plan.refusal(jobs, force=True) is None


def test_only_reattachable_jobs_never_refuse():
    assert plan.refusal(plan.sort_jobs(stats_jobs(fB="bgexec")), force=False) is None
    assert plan.refusal(plan.sort_jobs({}), force=False) is None


def test_job_exec_keeps_a_method_it_was_loaded_with():
    """Loaded with method=bulk-exec over a config saying bgexec: loaded again with it;
    a method the config gives (or the default, bulk-exec) needs no argument."""
    assert plan.job_exec_args("bulk-exec", "bgexec") == ["method=bulk-exec"]
    assert plan.job_exec_args("bgexec", None) == ["method=bgexec"]
    assert plan.job_exec_args("bgexec", "bgexec") == []
    assert plan.job_exec_args("bulk-exec", None) == []


def mods(path=MODULE):
    return [{"name": "job-exec", "path": "job-exec"}, {"name": "sdexec", "path": path}]


def test_every_rank_running_the_new_file_and_answering_passes():
    stats = {0: {"procs": {}}, 1: {"procs": {}, "module": MODULE}}
    assert plan.rank_problems(MODULE, {0: mods(), 1: mods()}, stats) == []


def test_each_wrong_rank_is_named_with_what_is_wrong():
    problems = plan.rank_problems(
        MODULE,
        {0: mods("/old/sdexec.py"), 1: [], 2: "no answer within 5s", 3: mods()},
        {0: {}, 1: {}, 2: {}, 3: "Function not implemented"},
    )
    assert problems == [
        f"rank 0: sdexec runs /old/sdexec.py, not {MODULE}",
        "rank 1: sdexec is not loaded",
        "rank 2: module list failed: no answer within 5s",
        "rank 3: sdexec does not answer: Function not implemented",
    ]


def test_a_rank_whose_sdexec_reports_another_file_is_wrong():
    problems = plan.rank_problems(MODULE, {0: mods()}, {0: {"module": "/elsewhere.py"}})
    assert problems == ["rank 0: sdexec reports file /elsewhere.py"]


def module_stats(module_file):
    """What ``sdexec.stats-get`` answers for a module loaded from ``module_file`` (the real
    payload, from the real service on a fake systemd with nothing loaded)."""
    svc = service(RootBridge(), module_file=module_file)
    try:
        return svc.stats()
    finally:
        svc.unload(None)


def test_the_file_the_module_itself_reports_is_checked():
    """stats-get names its file under "module": a rank whose module process runs another
    file than the broker lists is caught (the check read "file" and never ran)."""
    stats = {0: module_stats(MODULE), 1: module_stats("/elsewhere.py")}
    problems = plan.rank_problems(MODULE, {0: mods(), 1: mods()}, stats)
    assert problems == ["rank 1: sdexec reports file /elsewhere.py"]


def test_report_says_what_was_done_and_how_long_jobs_were_held():
    report = plan.Report(module=MODULE, ranks=2, queues=[None], reattached=["fA", "fB"])
    report.waited_startup, report.held, report.versions = 1.25, 3.04, {0: "0.2", 1: "0.2"}
    assert report.lines() == [
        f"sdexec reloaded from {MODULE} on 2 rank(s)",
        "queues stopped and started again: (default)",
        "waited 1.2s for jobs in their startup window",
        "jobs reattached by job-exec: 2 (fA, fB)",
        "sdexec version: 0.2",
        "scheduling was held for 3.0s",
    ]


def test_report_names_the_jobs_force_ended_and_queues_none_started():
    report = plan.Report(module=MODULE, ranks=1, ended=[("fA", "bulk-exec")])
    lines = report.lines()
    assert "queues stopped and started again: none were started" in lines
    assert "jobs ended (--force): fA (bulk-exec)" in lines
    assert "jobs reattached by job-exec: 0" in lines


# ---- restore: what to undo, from what the ranks list after every owed answer is in ----


def test_nothing_changed_nothing_to_restore():
    assert plan.restore_steps(plan.Changes(), {}) == ([], [])


def test_sdexec_is_loaded_again_only_where_it_is_missing():
    """Rank 1's removal was refused (or its load came late and succeeded): left alone."""
    changes = plan.Changes(sdexec_ranks={0, 1, 2})
    listed = {0: {"job-exec"}, 1: {"sdexec"}, 2: set()}
    assert plan.restore_steps(changes, listed) == ([("load-sdexec", [0, 2])], [])


def test_job_exec_whose_removal_completed_late_is_loaded_again_with_its_args():
    changes = plan.Changes(job_exec_args=["method=bgexec"])
    steps, _ = plan.restore_steps(changes, {0: {"sdexec"}})
    assert steps == [("load-job-exec", ["method=bgexec"])]


def test_job_exec_still_loaded_is_not_loaded_twice():
    """A removal refused, or answered after the restore waited: job-exec is listed."""
    changes = plan.Changes(job_exec_args=[])
    assert plan.restore_steps(changes, {0: {"sdexec", "job-exec"}}) == ([], [])


def test_a_rank_that_cannot_be_listed_gets_its_load_and_is_named():
    changes = plan.Changes(sdexec_ranks={3}, job_exec_args=[])
    steps, problems = plan.restore_steps(changes, {0: "no answer within 5s", 3: "down"})
    assert steps == [("load-sdexec", [3]), ("load-job-exec", [])]
    assert problems == [
        "rank 0: module list failed: no answer within 5s",
        "rank 3: module list failed: down",
    ]


def test_restore_order_sdexec_then_job_exec_then_queues():
    """job-exec reattaches through sdexec, and scheduling comes back last."""
    changes = plan.Changes(queues=[None, "batch"], job_exec_args=[], sdexec_ranks={1})
    steps, _ = plan.restore_steps(changes, {0: {"sdexec"}, 1: set()})
    assert [s for s, _ in steps] == ["load-sdexec", "load-job-exec", "start-queues"]
    assert steps[2] == ("start-queues", [None, "batch"])


def symlinked_module(tmp_path):
    """A site's side-by-side install: ``v2/sdexec.py``, reached as ``current/sdexec.py``
    (``current`` a symlink to ``v2``). Returns (the path asked for, the file it resolves to)."""
    real = tmp_path / "v2" / "sdexec.py"
    real.parent.mkdir()
    real.write_text("# the module\n")
    (tmp_path / "current").symlink_to("v2")
    return str(tmp_path / "current" / "sdexec.py"), str(real)


def test_a_module_reached_through_a_symlink_passes(tmp_path):
    """Review 2026-12b, finding 5: --module through a symlinked directory. The broker lists
    the path it was given, the module reports the file it resolved (Path.resolve()): the
    same file, so no problem, on either side."""
    asked, real = symlinked_module(tmp_path)
    stats = {0: module_stats(real), 1: module_stats(real)}
    assert plan.rank_problems(asked, {0: mods(asked), 1: mods(asked)}, stats) == []
    assert plan.rank_problems(real, {0: mods(asked), 1: mods(real)}, stats) == []


def test_through_a_symlink_another_file_is_still_wrong(tmp_path):
    asked, real = symlinked_module(tmp_path)
    other = tmp_path / "v1.py"
    other.write_text("# the old module\n")
    stats = {0: module_stats(str(other))}
    assert plan.rank_problems(asked, {0: mods(asked)}, stats) == [
        f"rank 0: sdexec reports file {other}"
    ]


def test_report_says_which_file_each_rank_runs(tmp_path):
    """The path asked for and, per file, the ranks whose module reports it."""
    asked, real = symlinked_module(tmp_path)
    report = plan.Report(module=asked, ranks=3, files={0: real, 1: real, 2: "/old/sdexec.py"})
    lines = report.lines()
    assert lines[0] == f"sdexec reloaded from {asked} on 3 rank(s)"
    assert lines[1:3] == [f"ranks 0-1 run {real}", "rank 2 runs /old/sdexec.py"]
