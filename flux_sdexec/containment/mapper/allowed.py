"""``[sdexec] allowed-devices``: device patterns every constrained job may use.

An entry is ``"<glob> [perms]"``: a glob under ``/dev/`` and one to three of the
letters ``rwm`` (default ``rw``). ``parse`` refuses anything else (ValueError with
the reason). ``expand`` matches the globs against the device tree now: only
character and block devices count, a symlink whose target leaves /dev is
skipped (one inside is kept under the link's name), and the entries come back
sorted and de-duplicated. A pattern that matches nothing is not an error: one
policy serves nodes with different hardware.
"""

import glob
import os
import re
import stat

KEY = "sdexec.allowed-devices"
_PERMS = re.compile(r"(?!.*(.).*\1)[rwm]{1,3}\Z")


def _parse_entry(i, entry):
    where = f"{KEY}[{i}]"
    if not isinstance(entry, str):
        raise ValueError(f"{where} is not a string")
    fields = entry.split()
    if not fields:
        raise ValueError(f"{where} is empty")
    if len(fields) > 2:
        raise ValueError(f"{where}: expected '<glob> [perms]', got {entry!r}")
    pattern, perms = fields[0], fields[1] if len(fields) == 2 else "rw"
    if not pattern.startswith("/dev/") or pattern == "/dev/":
        raise ValueError(f"{where}: {pattern!r} is not a path under /dev/")
    if ".." in pattern.split("/"):
        raise ValueError(f"{where}: {pattern!r} contains '..'")
    if "**" in pattern:
        raise ValueError(f"{where}: {pattern!r} contains '**'")
    if not _PERMS.match(perms):
        raise ValueError(f"{where}: permissions {perms!r} are not one to three of r, w, m")
    return pattern, perms


def parse(value):
    """Validate the configured value (None: not set).

    Returns:
        list of (glob, perms).

    Raises:
        ValueError: with the reason, naming the entry.
    """
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{KEY} is not an array")
    return [_parse_entry(i, entry) for i, entry in enumerate(value)]


def expand(patterns, dev="/dev"):
    """DeviceAllow entries (``"/dev/x perms"``) the patterns match under ``dev`` now.

    Args:
        patterns: what ``parse`` returned.
        dev: the device tree root (tests use a temporary directory).
    """
    root = os.path.realpath(dev)
    found = set()
    for pattern, perms in patterns:
        rel = pattern[len("/dev/") :]
        for path in glob.glob(os.path.join(glob.escape(dev), rel)):
            if os.path.commonpath([root, os.path.realpath(path)]) != root:
                continue  # a symlink (here or in a parent directory) leaving /dev
            try:
                mode = os.stat(path).st_mode
            except OSError:
                continue  # dangling link, or gone since the glob
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                found.add(f"/dev/{os.path.relpath(path, dev)} {perms}")
    return sorted(found)


def append(device_allow, entries):
    """``DeviceAllow`` text (comma-separated) with ``entries`` added, without duplicates."""
    current = [e.strip() for e in device_allow.split(",") if e.strip()] if device_allow else []
    return ",".join(dict.fromkeys(current + list(entries)))
