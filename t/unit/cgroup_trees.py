"""Fake /proc and cgroup trees of each layout (unified, hybrid, legacy) for the containment tests.

The trees are what the kernel shows: a mountinfo naming the cgroup mounts (here under a
temporary directory), /proc/<pid>/cgroup with the process's path in each hierarchy, and the
unit's own directories holding the files systemd wrote. The hybrid tree is this project's
test machine (v1 controllers, a v2 hierarchy with no controllers, systemd 252).
"""

import errno
import os

from flux_sdexec.containment import cgroups
from flux_sdexec.broker import containment_check

PID = 4242
GIB = 1 << 30
PAGE = 4096
UNIT = "shell-0-fA.service"
SLICE = f"/app.slice/{UNIT}"
V1_MAX = "9223372036854771712"  # v1's "no limit"
V1 = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids")


class Tree:
    """A fake /proc and cgroup filesystems for PID in ``layout``.

    ``own``: the v1 controllers systemd gave the unit a cgroup of (the others stay at "/");
    ``v2_controllers``: the unit's v2 cgroup.controllers.
    """

    def __init__(
        self, root, layout, own=("memory", "pids", "cpu", "devices"), v2_controllers="", unit=UNIT
    ):
        self.root, self.layout, self.name = root, layout, unit
        slice_ = f"/app.slice/{unit}"
        self.proc = root / "proc"
        (self.proc / "self").mkdir(parents=True)
        (self.proc / str(PID)).mkdir()
        (self.proc / "sys" / "kernel").mkdir(parents=True)
        (self.proc / "sys" / "kernel" / "pid_max").write_text("4194304\n")
        (self.proc / "sys" / "kernel" / "threads-max").write_text("192000\n")
        (self.proc / "meminfo").write_text(f"MemTotal: {16 * GIB // 1024} kB\nMemFree: 1 kB\n")
        mounts, lines = [], []
        cg = root / "sys" / "fs" / "cgroup"
        if layout == cgroups.UNIFIED:
            mounts.append(f"30 1 0:27 / {cg} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate")
            self.dirs = {"v2": cg}
        else:
            v1 = [("name=systemd", "systemd")] + [(c, c) for c in V1]
            self.dirs = {}
            for n, (opt, sub) in enumerate(v1):
                mounts.append(f"{40 + n} 1 0:{40 + n} / {cg / sub} rw - cgroup cgroup rw,{opt}")
                self.dirs[opt] = cg / sub
                path = slice_ if opt == "name=systemd" or opt in own else "/"
                lines.append(f"{9 - n}:{opt}:{path}")
            if layout == cgroups.HYBRID:
                mounts.append(f"30 1 0:27 / {cg / 'unified'} rw - cgroup2 cgroup2 rw")
                self.dirs["v2"] = cg / "unified"
        lines.append(f"0::{slice_}" if layout != cgroups.LEGACY else "0::/")
        (self.proc / "self" / "mountinfo").write_text("\n".join(mounts) + "\n")
        (self.proc / str(PID) / "cgroup").write_text("\n".join(lines) + "\n")
        self.unit = {}
        for hierarchy, base in self.dirs.items():
            if hierarchy in ("v2", "name=systemd") or hierarchy in own:
                self.unit[hierarchy] = base / slice_.lstrip("/")
                self.unit[hierarchy].mkdir(parents=True)
                self.write(hierarchy, **{"cgroup.procs": str(PID)})
        if "v2" in self.unit:
            self.write("v2", **{"cgroup.controllers": v2_controllers})

    def write(self, hierarchy, **files):
        for name, text in files.items():
            (self.unit[hierarchy] / name).write_text(text + "\n")

    def verdicts(self, wanted, programs=None):
        """``{constraint: (outcome, reason, hierarchy)}``; ``programs(path)``: the BPF device
        programs the kernel says are attached to a cgroup directory (default: it does not say,
        ``refused``)."""
        return {
            v.constraint: (v.outcome, v.reason, v.hierarchy)
            for v in containment_check.check_containment(
                PID, wanted, self.name, str(self.proc), programs or refused
            )
        }


def refused(path):
    """The BPF query refused, as to a process without CAP_NET_ADMIN or under seccomp."""
    raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))


def hybrid_files(tree):
    """What systemd 252 wrote for MemoryMax=50M TasksMax=5 CPUQuota=20% DevicePolicy=closed."""
    tree.write(
        "memory",
        **{
            "memory.limit_in_bytes": "52428800",
            "memory.memsw.limit_in_bytes": V1_MAX,
            "memory.soft_limit_in_bytes": V1_MAX,
        },
    )
    tree.write("pids", **{"pids.max": "5"})
    tree.write("cpu", **{"cpu.cfs_quota_us": "20000", "cpu.cfs_period_us": "100000"})
    tree.write("devices", **{"devices.list": "c 1:3 rwm\nc 1:5 rwm\nc 136:* rw\nb 7:0 r"})
