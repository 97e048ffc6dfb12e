"""Usage records over fake cgroup trees of each layout: unified, hybrid, legacy.

A tree holds what the kernel leaves in a unit's accounting slice once the unit's own cgroup
is gone (the files and formats of Linux 6.x); the adapter's reader finds them through a
mountinfo naming the mounts, as on a real host. The hybrid tree is this test machine.
"""

import logging
import socket
import types

import pytest

from flux_sdexec.usage.oom_log import OomLog
from flux_sdexec.usage.accounting import Accounting
from flux_sdexec.config import Settings
from flux_sdexec.containment import cgroups
from flux_sdexec.usage import cgroup_usage
from flux_sdexec.core.registry import Registry
from flux_sdexec.core.shelljobs import job_number
from flux_sdexec.usage.record import FIGURES, UsageRecord
from flux_sdexec.usage import gather_events, gatherings
from flux_sdexec.usage.record import dothex
from flux_sdexec.usage.job_usage import JobUsage
from stubs import StubWatchers

UNIT = "shell-0-fA1:tb.service"
SLICE = cgroup_usage.accounting_slice(UNIT, "0a1b2c3d")
PARENT = f"/app.slice/{cgroup_usage.PARENT_SLICE}"
CPU_STAT = "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnice_usec 0\n"


def mountinfo(cg, layout):
    if layout == cgroups.UNIFIED:
        return f"30 1 0:27 / {cg} rw - cgroup2 cgroup2 rw\n"
    lines = [
        f"{40 + n} 1 0:{40 + n} / {cg / c} rw - cgroup cgroup rw,{c}"
        for n, c in enumerate(("memory", "pids", "cpuacct"))
    ]
    if layout == cgroups.HYBRID:
        lines.append(f"30 1 0:27 / {cg / 'unified'} rw - cgroup2 cgroup2 rw")
    return "\n".join(lines) + "\n"


def tree(root, layout, **hierarchies):
    """A /proc and cgroup mounts under ``root``; ``hierarchies``: {name: {file: text}} of the
    slice's directory there (``v2`` is the cgroup2 mount)."""
    cg = root / "cgroup"
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "mountinfo").write_text(mountinfo(cg, layout))
    for hierarchy, files in hierarchies.items():
        base = (
            cg
            if layout == cgroups.UNIFIED
            else cg / ("unified" if hierarchy == "v2" else hierarchy)
        )
        directory = base / PARENT.lstrip("/") / SLICE
        directory.mkdir(parents=True)
        for name, text in files.items():
            (directory / name).write_text(text)
    return str(root / "proc")


class Proc:
    """An SdProc as Accounting reads it: ``fields``; compared by identity, weakly
    referable (Accounting keeps its accounts weakly, keyed by the process)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


class Jobs(JobUsage):
    """The real ``JobUsage`` with the flux side of its own: it records the records handed
    to the job's gathering (JSON, from each ShellEnded), holds its lookups until answered,
    as a KVS future would be, and what waits for the records to be handed on until
    ``hand_on`` (the parent broker's answer)."""

    def __init__(self):
        super().__init__(None, logging.getLogger("t"), 0, "node0", None, None, ())
        self.commits = []  # the usage JSON handed on
        self.sent = []  # (key, on_reply)
        self.started = []  # the jobs whose shells started

    def shell_started(self, plain):
        self.started.append(plain)

    def _handle(self, event):
        self.commits.append(event.record.to_json())

    def _look_up(self, key, on_reply):
        self.sent.append((key, on_reply))

    def answer(self, exc=None, record=None):
        key, on_reply = self.sent.pop(0)
        on_reply(exc, record)

    def hand_on(self):
        waiting, self.handing = self.handing, {}
        for then in waiting.values():
            self._call(then)


def accounting(proc, kmsg="", bridge=None, sweeper=frozenset(), jobs=None, usage="all"):
    """An Accounting over the tree at ``proc``, on rank 0 of host ``node0``, with an empty
    registry; slices stopped through ``bridge``, units let go in ``sweeper``, job shells'
    records to ``jobs``; ``usage``: ``[sdexec] usage``."""
    log = logging.getLogger("t")
    jobs = jobs or Jobs()
    settings = Settings(usage=usage)
    return Accounting(
        log, 0, "node0", settings, Registry(), bridge, sweeper, jobs, proc=proc, kmsg=kmsg
    )


def record(proc, opts=None, kmsg=""):
    """The adapter's record (JSON) of a finished UNIT over the tree at ``proc``."""
    acc = accounting(proc, kmsg=kmsg)
    acc.parent = PARENT
    unit = types.SimpleNamespace(name=UNIT, finished=True, result=None, wait_status=0, started_at=0)
    p = Proc(unit=unit, cmd=types.SimpleNamespace(opts=opts or {}))
    return acc._record(p, SLICE).to_json()


def test_slice_name_escapes_what_systemd_reads_as_nesting():
    assert SLICE == "app-sdexec-shell\\x2d0\\x2dfA1:tb_0a1b2c3d.slice"
    assert cgroup_usage.accounting_slice("a b/c", "1") == "app-sdexec-a\\x20b\\x2fc_1.slice"
    assert cgroup_usage.is_accounting_slice(SLICE) and not cgroup_usage.is_accounting_slice(
        "app.slice"
    )


def proc(name=UNIT, opts=None):
    """An SdProc as place() sees it."""
    unit = types.SimpleNamespace(name=name)
    return Proc(unit=unit, cmd=types.SimpleNamespace(opts=opts or {}, label=None))


def test_a_unit_whose_slice_name_would_be_too_long_gets_none(tmp_path):
    long = "x" * 240 + ".service"
    assert cgroup_usage.accounting_slice(long, "0a1b2c3d") is None
    acc = accounting(tree(tmp_path, cgroups.HYBRID))
    p = proc(long)
    assert acc.place(p, [("Type", "s", "exec")]) == [("Type", "s", "exec")]
    assert acc.slices([p]) == set()


def test_before_any_slice_was_located_every_figure_is_null_with_the_reason(tmp_path):
    acc = accounting(tree(tmp_path, cgroups.UNIFIED))
    unit = types.SimpleNamespace(
        name=UNIT, finished=True, result="signal", wait_status=9, started_at=0
    )
    p = Proc(unit=unit, cmd=types.SimpleNamespace(opts={}))
    rec = acc._record(p, SLICE).to_json()
    assert all(rec[f] is None for f in FIGURES) and rec["result"] == "signal"
    assert set(rec["null_reasons"].values()) == {
        "where the accounting slices are is not known "
        "yet (no unit's process seen alive since load)"
    }


def test_unified_gives_every_figure(tmp_path):
    files = {
        "cgroup.controllers": "cpu memory pids\n",
        "cpu.stat": CPU_STAT,
        "memory.peak": "52428800\n",
        "memory.events": "low 0\nhigh 0\nmax 12\noom 1\noom_kill 2\noom_group_kill 0\n",
        "pids.peak": "9\n",
    }
    rec = record(tree(tmp_path, cgroups.UNIFIED, v2=files))
    assert rec == {
        "cpu_user_s": 2.0,
        "cpu_sys_s": 0.5,
        "memory_peak": 52428800,
        "tasks_peak": 9,
        "oom_kills": 2,
        "wall_s": rec["wall_s"],
        "result": "success",
        "status": 0,
    }


def test_hybrid_reads_cpu_on_v2_memory_and_tasks_on_v1(tmp_path):
    proc = tree(
        tmp_path,
        cgroups.HYBRID,
        v2={"cgroup.controllers": "\n", "cpu.stat": CPU_STAT},
        memory={"memory.max_usage_in_bytes": "52690944\n"},
        pids={"pids.peak": "7\n"},
    )
    rec = record(proc)
    assert (rec["cpu_user_s"], rec["memory_peak"], rec["tasks_peak"]) == (2.0, 52690944, 7)
    assert list(rec["null_reasons"]) == ["oom_kills"]  # no kernel log here: see below


def test_hybrid_non_root_manager_has_no_memory_figures(tmp_path):
    """No v1 memory cgroup for the slice: null with the reason, CPU still exact."""
    proc = tree(tmp_path, cgroups.HYBRID, v2={"cpu.stat": CPU_STAT})
    rec = record(proc)
    assert rec["cpu_sys_s"] == 0.5
    assert rec["memory_peak"] is None and rec["oom_kills"] is None
    assert "no memory cgroup of its own" in rec["null_reasons"]["memory_peak"]
    assert "pids.peak" in rec["null_reasons"]["tasks_peak"]


def test_legacy_reads_cpuacct(tmp_path):
    proc = tree(
        tmp_path,
        cgroups.LEGACY,
        cpuacct={"cpuacct.usage_user": "1500000000\n", "cpuacct.usage_sys": "250000000\n"},
        memory={"memory.max_usage_in_bytes": "8192\n"},
    )
    rec = record(proc)
    assert (rec["cpu_user_s"], rec["cpu_sys_s"], rec["memory_peak"]) == (1.5, 0.25, 8192)


def test_no_slice_left_is_all_null_with_reasons(tmp_path):
    rec = record(tree(tmp_path, cgroups.UNIFIED))
    assert all(rec[f] is None for f in FIGURES)
    assert set(rec["null_reasons"]) == set(FIGURES)


KMSG_OOM = (
    "6,2286,1855756565,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
    "mems_allowed=0,oom_memcg=/app.slice/app-sdexec.slice/app-sdexec-shell\\x5cx2d0.slice/"
    "shell-0.service,task_memcg=/app.slice/app-sdexec.slice/app-sdexec-shell\\x5cx2d0.slice/"
    "shell-0.service,task=python3,pid=14008,uid=0\n"
)


def test_oom_kill_record_names_the_victims_accounting_slice():
    """/dev/kmsg escapes the backslash of systemd's \\x2d as \\x5c."""
    assert cgroup_usage.oom_kill_slice(KMSG_OOM) == "app-sdexec-shell\\x2d0.slice"
    assert cgroup_usage.oom_kill_slice(KMSG_OOM.replace("app-sdexec-", "app-other-")) is None
    assert (
        cgroup_usage.oom_kill_slice("6,2287,1855756581,-;Memory cgroup out of memory: Killed")
        is None
    )


def test_kernel_log_counts_kills_per_slice_and_forgets_them_once_taken():
    """One count per oom-kill record, read without blocking; other records are ignored."""
    ours, kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setblocking(False)
    oom = OomLog(ours.detach())
    name = "app-sdexec-shell\\x2d0.slice"
    for record in (KMSG_OOM, "6,1,2,-;Memory cgroup out of memory: Killed process 1\n", KMSG_OOM):
        kernel.send(record.encode())
    assert oom.kills(name, final=False) == 2  # a running unit's: kept
    assert oom.kills(name, final=True) == 2
    assert oom.kills(name, final=True) == 0
    oom.close()
    kernel.close()
    assert OomLog.open("/nonexistent/kmsg").kills(name, final=True) is None


def test_hybrid_oom_kills_come_from_the_kernel_log(tmp_path):
    proc = tree(tmp_path, cgroups.HYBRID, memory={"memory.max_usage_in_bytes": "52690944\n"})
    acc = accounting(proc, kmsg=str(tmp_path / "absent"))
    acc.parent = PARENT
    unit = types.SimpleNamespace(name=UNIT, finished=True, result=None, wait_status=9, started_at=0)
    p = Proc(unit=unit, cmd=types.SimpleNamespace(opts={}))
    rec = acc._record(p, SLICE)
    assert rec.oom_kills is None and "/dev/kmsg" in rec.null_reasons["oom_kills"]

    class Log:
        fd = 1

        def kills(self, name, final):
            return 2 if name == SLICE else 0

    acc.oom_log = Log()
    assert acc._record(p, SLICE).oom_kills == 2


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


def test_only_the_last_remembered_ended_gatherings_are_kept(monkeypatch):
    """A new job lets the oldest ended gatherings go past REMEMBERED; one still waiting
    for its record stays, however old. The one broker of an instance writes each job's
    record as it is complete."""
    monkeypatch.setattr(gatherings, "REMEMBERED", 3)
    kept = gatherings.Gatherings(0, "node0")
    alone = {"rank": 0, "size": 1, "children": []}
    usage = UsageRecord(1.0, 0.25, 100, 2, 0, 3.0, "success", 0)
    written = []
    for n, plain in enumerate(("f2", "f3", "f4", "f5", "f6", "f7"), start=1):
        kept.handle(gather_events.ShellStarted(n), 0.0)
        kept.handle(gather_events.RanksFound(n, frozenset({0}), alone), 0.0)
        if n > 1:  # jobs 2-6: each shell ends; job 1's runs on
            ended = gather_events.ShellEnded(plain, f"shell-0-{plain}.service", usage)
            actions = kept.handle(ended, 0.0)
            written += [a.jobid for a in actions if isinstance(a, gather_events.WriteRecord)]
    assert written == [2, 3, 4, 5, 6]
    assert list(kept.jobs) == [1, 3, 4, 5, 6] and kept.ended == 4


class Future:
    """A child's answer to ``sdexec.usage-live``, given by the test (``answer``)."""

    def __init__(self, topic, payload, nodeid):
        self.topic, self.payload, self.nodeid = topic, payload, nodeid
        self.callback = self.body = self.error = None

    def then(self, callback, timeout=-1.0):
        self.callback, self.timeout = callback, timeout

    def get(self):
        if self.error is not None:
            raise self.error
        return self.body

    def answer(self, body=None, error=None):
        self.body, self.error = body, error
        self.callback(self)


class LiveTree(JobUsage):
    """The real ``JobUsage`` of rank 0 over children 1 (with 2 below it) and 3: the job
    runs on ranks 0-2, its R found at once; what it asks of its children is kept
    (``asked``), what it answers too (``answers``)."""

    TOPOLOGY = {
        "rank": 0,
        "children": [{"rank": 1, "children": [{"rank": 2, "children": []}]}, {"rank": 3}],
    }

    def __init__(self):
        super().__init__(self, logging.getLogger("t"), 0, "node0", StubWatchers(), None, ())
        self.topology = self.TOPOLOGY
        self.asked, self.answers = [], []

    def rpc(self, topic, payload, nodeid):  # the flux handle's
        future = Future(topic, payload, nodeid)
        self.asked.append(future)
        return future

    def _look_up(self, key, on_reply):
        on_reply(None, {"execution": {"R_lite": [{"rank": "0-2"}]}})

    def gather(self, own):
        self.gather_live("f2", own, 2.0, lambda rows, missing: self.answers.append((rows, missing)))


ROW = {"cpu_user_s": 1.0, "running": True}


def ignored(*args):
    """What waits for rows to be handed on, where a test does not look at it."""


def test_a_live_gathering_asks_each_child_with_job_ranks_once_and_answers_once():
    """Only the child whose subtree holds job ranks is asked, with less time to wait; its
    answer and this rank's row are the one answer."""
    tree = LiveTree()
    tree.gather({0: dict(ROW, rank=0)})
    assert [(f.topic, f.payload, f.nodeid) for f in tree.asked] == [
        ("sdexec.usage-live", {"jobid": "f2", "wait": 1.75}, 1)
    ]
    assert tree.answers == []
    tree.asked[0].answer({"rows": {"1": dict(ROW, rank=1), "2": dict(ROW, rank=2)}})
    assert tree.answers == [({r: dict(ROW, rank=r) for r in (0, 1, 2)}, {})]
    assert tree.watchers.armed() == [] and tree.live == set()


def test_a_child_that_fails_or_stays_silent_has_its_ranks_missing_and_one_answer_goes():
    """A child's error marks its subtree's job ranks missing with the error; a silent one
    is marked at the wait's end, and its later answer is not sent again."""
    tree = LiveTree()
    tree.gather({0: dict(ROW, rank=0)})
    tree.asked[0].answer(error=OSError(38, "Function not implemented"))
    why = "rank 1: Function not implemented"
    assert tree.answers == [({0: dict(ROW, rank=0)}, {1: why, 2: why})]

    silent = LiveTree()
    silent.gather({})
    (timer,) = silent.watchers.armed()
    assert timer.after == 2.0
    timer.fire()
    expired = "no record within 2 s"
    assert silent.answers == [({}, {0: "no job shell runs here", 1: expired, 2: expired})]
    silent.asked[0].answer({"rows": {"1": dict(ROW, rank=1)}})
    assert len(silent.answers) == 1


def test_an_unload_answers_the_live_gatherings_with_what_they_have():
    """close() sends each live gathering's answer once; nothing waits on after it."""
    tree = LiveTree()
    tree.gather({0: dict(ROW, rank=0)})
    tree.close()
    assert tree.answers == [({0: dict(ROW, rank=0)}, {})]
    assert tree.watchers.armed() == [] and tree.live == set()


# watchers and futures of the gathering (review 3, findings 3 and 9)


class Checked(JobUsage):
    """The real ``JobUsage`` of rank 0 over child 1, a job on ranks 0-1 whose R says it
    started at ``started`` (the sdexec loaded now); what it asks of the flux handle is kept
    (``asked``), what it writes too (``written``, ReadRecord-free gatherings only)."""

    def __init__(self, R=None):
        super().__init__(self, logging.getLogger("t"), 0, "node0", StubWatchers(), None, ())
        self.topology = {"rank": 0, "children": [{"rank": 1, "children": []}]}
        self.R = R or {"execution": {"R_lite": [{"rank": "0-1"}], "starttime": 1.0}}
        self.asked, self.written, self.looked_up = [], [], []

    def rpc(self, topic, payload=None, nodeid=0):  # the flux handle's
        future = Future(topic, payload, nodeid)
        self.asked.append(future)
        return future

    def _look_up(self, key, on_reply):
        self.looked_up.append(key)
        on_reply(None, self.R if key.endswith(".R") else None)

    def _write(self, action):
        self.written.append(action)


def test_every_check_timer_is_destroyed_once_done_with():
    """A gathering through three checks to its record: each timer that fired or was
    cancelled is destroyed, none is left in the flux handle."""
    jobs = Checked()
    jobs.received({"id": job_number("f2"), "rank": 1, "rows": {"1": dict(ROW, rank=1)}}, ignored)
    for _ in range(3):
        (timer,) = jobs.watchers.armed()
        timer.fire()
        (health,) = [f for f in jobs.asked if f.callback and f.topic == "overlay.health"]
        health.answer({"children": [{"rank": 1, "status": "full"}]})
        health.callback = None
    jobs.shell_ended(
        "f2",
        "shell-0-f2.service",
        UsageRecord(1.0, 0.25, 100, 2, 0, 3.0, "success", 0),
        None,
        ignored,
    )
    (write,) = jobs.written
    assert sorted(write.entries) == ["0", "1"]
    assert jobs.watchers.timers and all(t.destroyed for t in jobs.watchers.timers)


def test_a_live_gathering_s_timer_is_destroyed_whether_answered_or_expired():
    tree = LiveTree()
    tree.gather({0: dict(ROW, rank=0)})
    tree.asked[0].answer({"rows": {"1": dict(ROW, rank=1), "2": dict(ROW, rank=2)}})
    silent = LiveTree()
    silent.gather({})
    silent.watchers.armed()[0].fire()
    for done in (tree, silent):
        assert [t.destroyed for t in done.watchers.timers] == [True]


def test_an_r_without_ranks_is_logged_and_its_rows_go_on_as_they_come():
    """Finding 9: an R the gathering cannot read raises nothing into the reactor: the job
    is gathered as one with no R."""
    jobs = Checked(R={"execution": {"R_lite": [{}]}})
    jobs.shell_ended(
        "f2",
        "shell-0-f2.service",
        UsageRecord(1.0, 0.25, 100, 2, 0, 3.0, "success", 0),
        None,
        ignored,
    )
    (write,) = jobs.written
    assert list(write.entries) == ["0"]


def test_a_job_begun_under_the_sdexec_before_has_its_record_read_back_per_rank():
    """Rank 0 loaded after the job started: each rank's entry is looked up before the
    rows are gathered; rank 1's found is not written again."""
    jobs = Checked(R={"execution": {"R_lite": [{"rank": "0-1"}], "starttime": 1.0}})
    jobs.gatherings.loaded = 2.0
    answers = {}

    def look_up(key, on_reply):
        jobs.looked_up.append(key)
        if key.endswith(".R"):
            on_reply(None, jobs.R)
        else:
            answers[key] = on_reply

    jobs._look_up = look_up
    jobs.shell_ended(
        "f2",
        "shell-0-f2.service",
        UsageRecord(1.0, 0.25, 100, 2, 0, 3.0, "success", 0),
        None,
        ignored,
    )
    assert sorted(answers) == [f"job.{dothex(job_number('f2'))}.sdexec-usage.{r}" for r in (0, 1)]
    assert jobs.written == []
    for key, on_reply in sorted(answers.items()):
        on_reply(None, dict(ROW, rank=1) if key.endswith(".1") else None)
    (write,) = jobs.written
    assert list(write.entries) == ["0"] and write.memo["sdexec"]["ranks"] == 2
