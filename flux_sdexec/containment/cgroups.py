"""Where a process's cgroups are, from the text of /proc files. Pure: stdlib only.

A *hierarchy* is named ``"v2"`` (the cgroup2 mount) or by a v1 controller (``"memory"``,
``"pids"``, …; co-mounted controllers share one mount) or a named v1 hierarchy
(``"name=systemd"``). The layout is ``unified`` (cgroup2 only), ``hybrid`` (v1 controller
hierarchies beside a cgroup2 mount) or ``legacy`` (no cgroup2 mount).
"""

import re

UNIFIED, HYBRID, LEGACY = "unified", "hybrid", "legacy"
V2 = "v2"
V1_CONTROLLERS = frozenset(
    "blkio cpu cpuacct cpuset devices freezer hugetlb memory misc net_cls net_prio perf_event pids"
    " rdma".split()
)


def _unescape(field):
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(mountinfo):
    """``{hierarchy: (mount point, mount root)}`` from /proc/self/mountinfo text (first wins)."""
    mounts = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if len(fields) < sep + 4 or len(fields) < 5:
            continue
        fstype, options = fields[sep + 1], fields[sep + 3].split(",")
        where = (_unescape(fields[4]), _unescape(fields[3]))
        if fstype == "cgroup2":
            mounts.setdefault(V2, where)
        elif fstype == "cgroup":
            for opt in options:
                if opt in V1_CONTROLLERS or opt.startswith("name="):
                    mounts.setdefault(opt, where)
    return mounts


def layout(mounts):
    """``unified``, ``hybrid`` or ``legacy`` for ``parse_mounts`` output."""
    v1 = any(h in V1_CONTROLLERS for h in mounts)
    if V2 not in mounts:
        return LEGACY
    return HYBRID if v1 else UNIFIED


def parse_proc_cgroup(text):
    """``{hierarchy: path}`` from /proc/<pid>/cgroup text (``0::`` is ``"v2"``)."""
    paths = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        number, controllers, path = parts
        if number == "0" and not controllers:
            paths[V2] = path
        for name in filter(None, controllers.split(",")):
            paths[name] = path
    return paths


def unit_dir(path, unit_name):
    """The unit's own cgroup on ``path`` (the ancestor named ``unit_name``), or None.

    The limits of a unit sit on its cgroup; its main process may be in a sub-cgroup of it
    (Delegate=yes), or in no cgroup of the unit at all for a hierarchy systemd left alone
    (on v1 it stays at the hierarchy's root, ``cpuset:/``).
    """
    if path is None:
        return None
    parts = path.split("/")
    for name in (unit_name, "_" + unit_name):  # systemd escapes a few names with "_"
        if name in parts:
            return "/".join(parts[: parts.index(name) + 1])
    return None


def fs_path(mount, root, path):
    """The directory of cgroup ``path`` (as /proc/<pid>/cgroup says it) under a mount."""
    if root != "/" and (path == root or path.startswith(root + "/")):
        path = path[len(root) :]
    return mount.rstrip("/") + "/" + path.lstrip("/")
