"""/proc discovery for bench.py: where a module runs and what it costs.

The C module is two threads of the broker (sdexec, sdbus); ours is a process the
broker starts (flux-module-python-exec). ``locate()`` finds them; ``Tasks.read()``
gives their CPU seconds, ``rss_kb()`` a process's resident memory.

CPU time comes from schedstat (the scheduler's nanosecond run time), not from the
utime/stime of /proc/<pid>/stat: those are sampled at the clock tick (10 ms), far
too coarse for the ~1-2 ms a launch costs a module.
"""

import glob
import os


class BenchError(Exception):
    pass


def cpu_seconds(path):
    """CPU seconds run by a thread (/proc/<pid>/task/<tid>) or, summed over its threads
    of the moment, a process (/proc/<pid>); 0 for what is gone."""
    tasks = [path] if "/task/" in path else glob.glob(f"{path}/task/*")
    total = 0
    for task in tasks:
        try:
            with open(f"{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def proc_ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    return int(text[text.rindex(")") + 2 :].split()[1])


def proc_cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]


def broker_threads(bpid, comm):
    """Stat paths of the broker's threads whose comm (thread name) is ``comm``."""
    found = []
    for task in glob.glob(f"/proc/{bpid}/task/*"):
        try:
            with open(f"{task}/comm") as f:
                if f.read().strip() == comm:
                    found.append(task)
        except OSError:
            pass
    return found


def module_children(bpid, needle):
    """Pids of the broker's child processes whose command line mentions ``needle``."""
    pids = []
    for d in glob.glob("/proc/[0-9]*"):
        pid = int(d.rsplit("/", 1)[1])
        try:
            if proc_ppid(pid) == bpid and any(needle in a for a in proc_cmdline(pid)):
                pids.append(pid)
        except (OSError, ValueError):
            pass
    return pids


class Tasks:
    """The CPU accounting targets of one module (on one rank, or merged)."""

    def __init__(self):
        self.module = []  # /proc paths: the sdexec thread or process
        self.sdbus = []  # /proc paths: sdbus threads (C module only)
        self.rexec = []  # /proc paths: the broker's rexec thread (message channel of
        #                  exec'd modules: it relays every message of a Python module)
        self.server = []  # /proc paths: broker processes, plus module processes
        self.desc = []

    def read(self):
        return {k: sum(cpu_seconds(p) for p in getattr(self, k)) for k in CPU_KEYS}

    def merge(self, other):
        for k in CPU_KEYS + ("desc",):
            getattr(self, k).extend(getattr(other, k))
        return self


CPU_KEYS = ("module", "sdbus", "rexec", "server")


def cpu_delta(c0, c1):
    return {k: c1[k] - c0[k] for k in c0}


def locate(kind, module_path, broker_pids):
    """Find where the module runs on each rank: a broker thread, or a child process.

    Returns {rank: Tasks}.
    """
    found = {}
    for rank, bpid in broker_pids.items():
        tasks = found[rank] = Tasks()
        tasks.server.append(f"/proc/{bpid}")
        children = [  # a module loader (flux-module-exec, flux-module-python-exec.py)
            p for p in module_children(bpid, "flux-module-") if module_path in proc_cmdline(p)
        ]
        threads = broker_threads(bpid, "sdexec")
        if children:
            if len(children) != 1:
                raise BenchError(f"rank {rank}: several sdexec processes: {children}")
            pid = children[0]
            tasks.module.append(f"/proc/{pid}")
            tasks.server.append(f"/proc/{pid}")
            argv = " ".join(os.path.basename(a) for a in proc_cmdline(pid)[1:])
            tasks.desc.append(f"rank {rank}: process pid {pid} (child of broker {bpid}: {argv})")
        elif len(threads) == 1:
            tasks.module.append(threads[0])
            tid = threads[0].split("/")[4]
            tasks.desc.append(f"rank {rank}: thread 'sdexec' tid {tid} of broker pid {bpid}")
        else:
            raise BenchError(f"rank {rank}: cannot find the sdexec task (threads={threads})")
        for name in ("sdbus", "rexec"):
            for path in broker_threads(bpid, name):
                getattr(tasks, name).append(path)
                tasks.desc.append(
                    f"rank {rank}: thread '{name}' tid {path.split('/')[4]} of broker pid {bpid}"
                )
    return found


def rss_kb(pid):
    """VmRSS of process ``pid`` in kB (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def host_note():
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    brokers = 0
    for d in glob.glob("/proc/[0-9]*"):
        try:
            args = proc_cmdline(int(d.rsplit("/", 1)[1]))
        except (OSError, ValueError):
            continue
        if args and os.path.basename(args[0]) == "flux-broker":
            brokers += 1
    return f"{os.cpu_count()} CPUs, loadavg {load}, flux-broker processes on host: {brokers}"
