"""The post-start AllowedCPUs check: does the unit's cgroup v2 cpuset hold what was asked?

Reads /proc and the cgroup v2 filesystem of the running process, nothing else.
Returns problems as text for the state machine (``AllowedCpusChecked``) rather
than raising; the texts are flux-core's, so job-exec's drain reasons read the same.
"""

from flux_sdexec.values import parse_idset

HINT = "(is cpuset controller delegated to the user instance?)"
UNAVAILABLE = f"AllowedCPUs not enforced: cpuset.cpus unavailable {HINT}"


def _cgroup2_mount():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] == "cgroup2":
                return fields[4]
    return None


def _cgroup2_path(pid):
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                return line[3:].strip()
    return None


def check_allowed_cpus(pid, expected):
    """Compare the cpuset of ``pid``'s cgroup with ``expected`` (an idset string).

    Returns:
        None when they match, else the reason as text.
    """
    try:
        mount, path = _cgroup2_mount(), _cgroup2_path(pid)
    except OSError as exc:
        return f"AllowedCPUs: cannot read cgroup for pid {pid}: {exc.strerror}"
    if mount is None or path is None:
        return UNAVAILABLE
    try:
        with open(f"{mount}{path}/cpuset.cpus") as f:
            text = f.read().strip()
    except FileNotFoundError:
        return UNAVAILABLE
    except OSError as exc:
        return f"AllowedCPUs: failed to read cpuset.cpus: {exc.strerror}"
    try:
        actual = parse_idset(text)
    except ValueError:
        return "AllowedCPUs: failed to parse cpuset"
    if actual != parse_idset(expected):
        return f"AllowedCPUs not enforced: expected {expected} got {text or '(empty)'} {HINT}"
    return None
