"""What systemd scales ``N%`` limits by, and a share of it in bytes. Pure: stdlib only.

systemd (252: ``physical_memory()`` and ``system_tasks_max()`` in limits-util.c) does not
take MemTotal and pid_max alone: it takes the minimum with the limit set on the *root
cgroup*, which is PID 1's cgroup with a trailing ``/init.scope`` (or the older
``/system.slice``, ``/system``) cut off. In a container limited to 8 GiB, ``MemoryMax=50%``
is 4 GiB, whatever the host has. Memory limits are read from v2 ``memory.max`` when every
controller is on v2, else from v1 ``memory.limit_in_bytes``; the task limit from
``pids.max``; a file that is missing or says ``max`` leaves the kernel's value.
"""

from fractions import Fraction

TASKS_MAX = 4194303  # systemd's ceiling for the task limit (TASKS_MAX)
UINT64_MAX = 2**64 - 1
_ROOT_SUFFIXES = ("/init.scope", "/system.slice", "/system")


def root_cgroup(pid1_path):
    """The root cgroup systemd reads limits from, given PID 1's cgroup path."""
    for suffix in _ROOT_SUFFIXES:
        if pid1_path.endswith(suffix):
            return pid1_path[: -len(suffix)] or "/"
    return pid1_path or "/"


def _limit(text):
    """A cgroup limit file's value in bytes or tasks, None for no limit or unreadable."""
    text = (text or "").strip()
    if not text.isdigit() or int(text) >= UINT64_MAX:
        return None
    return int(text)


def physical_memory(mem_total, page, root_limit_text):
    """The bytes systemd scales memory percentages by.

    Args:
        mem_total: the kernel's memory (MemTotal, which is _SC_PHYS_PAGES pages).
        page: the page size.
        root_limit_text: the root cgroup's ``memory.max`` (v2) or ``memory.limit_in_bytes``
            (v1), None when unreadable.
    """
    limit = _limit(root_limit_text)
    if limit is None:
        return mem_total
    return min(mem_total, limit // page * page)


def tasks_limit(pid_max, threads_max, root_pids_max_text):
    """The task count systemd scales ``TasksMax=N%`` by.

    Args:
        pid_max, threads_max: the kernel's ``kernel.pid_max`` and ``kernel.threads-max``.
        root_pids_max_text: the root cgroup's ``pids.max``, None when unreadable.
    """
    root = _limit(root_pids_max_text)
    return min(TASKS_MAX, pid_max - 1, threads_max, TASKS_MAX if not root else root)


def memory_share(memory, page, percent, allocated=1, total=1):
    """Bytes of ``percent``% times ``allocated``/``total`` of ``memory``, as systemd rounds.

    ``percent`` is the N of ``N%`` (a Fraction, int or decimal text: taken exactly). systemd
    scales by whole pages and rounds down (``physical_memory_scale``); a share above zero is
    at least one page, since systemd refuses a MemoryMax of 0.
    """
    share = Fraction(percent) * allocated / total / 100
    pages = memory // page * share
    if share > 0:
        return max(int(pages), 1) * page
    return 0
