"""v1 OOM kills from the kernel log (usage/oom_log.py): which accounting slice a record
names, counted per slice, and taken into a hybrid host's record.
"""

import socket
import types

from usage_fixtures import PARENT, SLICE, UNIT, Proc, accounting, tree

from flux_sdexec.containment import cgroups
from flux_sdexec.usage import cgroup_usage
from flux_sdexec.usage.oom_log import OomLog

KMSG_OOM = (
    "6,2286,1855756565,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
    "mems_allowed=0,oom_memcg=/app.slice/app-sdexec.slice/app-sdexec-shell\\x5cx2d0.slice/"
    "shell-0.service,task_memcg=/app.slice/app-sdexec.slice/app-sdexec-shell\\x5cx2d0.slice/"
    "shell-0.service,task=python3,pid=14008,uid=0\n"
)

SLICED = types.SimpleNamespace(slice=SLICE, cgroup=None)  # an account: its slice


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
    rec = acc._record(p, SLICED)
    assert rec.oom_kills is None and "/dev/kmsg" in rec.null_reasons["oom_kills"]

    class Log:
        fd = 1

        def kills(self, name, final):
            return 2 if name == SLICE else 0

    acc.oom_log = Log()
    assert acc._record(p, SLICED).oom_kills == 2
