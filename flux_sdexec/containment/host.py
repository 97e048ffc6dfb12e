"""The memory and task limits systemd scales ``N%`` by on this node, read from /proc and cgroupfs.

The reads behind ``flux_sdexec.containment.hostlimits``: MemTotal, ``kernel.pid_max`` and
``kernel.threads-max``, and the root cgroup's ``memory.max`` / ``memory.limit_in_bytes`` and
``pids.max`` (the root cgroup is found from /proc/1/cgroup, its files through this process's
mountinfo). The ``proc`` root is a parameter so tests run over a fake tree. A root cgroup
file that cannot be read is ignored, as systemd ignores it.
"""

import os

from flux_sdexec.containment import cgroups, hostlimits


def read_text(path):
    """The whole text of the file ``path`` (OSError when it cannot be read)."""
    with open(path) as f:
        return f.read()


def mem_total(proc="/proc"):
    """MemTotal in bytes (OSError or ValueError when /proc cannot say)."""
    for line in read_text(f"{proc}/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise ValueError("no MemTotal in meminfo")


class _RootCgroup:
    """The root cgroup's files: ``read(controller, name)``, None when unreadable.

    Every controller is read on v2 when the layout is unified, else on its v1 hierarchy
    (systemd's ``cg_all_unified()``); the root is found on the hierarchy systemd tracks
    processes in (v2, or ``name=systemd`` on legacy).
    """

    def __init__(self, proc):
        try:
            self.mounts = cgroups.parse_mounts(read_text(f"{proc}/self/mountinfo"))
            paths = cgroups.parse_proc_cgroup(read_text(f"{proc}/1/cgroup"))
        except OSError:
            self.mounts, paths = {}, {}
        self.unified = cgroups.layout(self.mounts) == cgroups.UNIFIED
        tracker = paths.get(cgroups.V2 if cgroups.V2 in self.mounts else "name=systemd")
        self.path = None if tracker is None else hostlimits.root_cgroup(tracker)

    def read(self, controller, name):
        hierarchy = cgroups.V2 if self.unified else controller
        if self.path is None or hierarchy not in self.mounts:
            return None
        mount, root = self.mounts[hierarchy]
        try:
            return read_text(os.path.join(cgroups.fs_path(mount, root, self.path), name))
        except OSError:
            return None


def physical_memory(proc="/proc"):
    """``(bytes, page size)``: the memory systemd scales percentages by.

    Raises:
        OSError, ValueError: MemTotal cannot be read.
    """
    page, root = os.sysconf("SC_PAGE_SIZE"), _RootCgroup(proc)
    limit = root.read("memory", "memory.max" if root.unified else "memory.limit_in_bytes")
    return hostlimits.physical_memory(mem_total(proc), page, limit), page


def tasks_limit(proc="/proc"):
    """The task count systemd scales ``TasksMax=N%`` by, 0 when the kernel's is unknown."""
    try:
        pid_max = int(read_text(f"{proc}/sys/kernel/pid_max"))
        threads_max = int(read_text(f"{proc}/sys/kernel/threads-max"))
    except (OSError, ValueError):
        return 0
    root_max = _RootCgroup(proc).read("pids", "pids.max")
    return hostlimits.tasks_limit(pid_max, threads_max, root_max)
