"""Transient unit names: ``<label>[-<rank>]:<instance>.service``.

Owns the design's "Unit Naming" rules and the fallback of sdexec-protocol.md
§9.4 for today's flux-core, whose top-level instances all have jobid-path "/".
Pure: imports only the stdlib, never asks the broker for anything.
"""

import errno
import json
import re
import uuid

from flux_sdexec.core.errors import RequestError

UNIT_NAME_MAX = 255
SYSTEM_INSTANCE = "sys"

_UNSAFE_RE = re.compile(r"[^A-Za-z0-9_.-]")
_UUID_STEM_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}\Z")
_LABEL_RE = re.compile(r"[A-Za-z0-9_.-]+\Z")
# systemd's unit name alphabet (unit-name.c): letters, digits, ":-_.\" and "@"
_UNIT_RE = re.compile(r"[A-Za-z0-9:_.\\@-]+\.service\Z")
_SLICE_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_.")
_SLICE_ESCAPED = re.compile(r"\\x([0-9a-f]{2})")


def slice_escape(text):
    """``text`` as part of a slice's name, where ``-`` means nesting: every character but
    letters, digits and ``:_.`` escaped as systemd escapes it (``-`` is ``\\x2d``)."""
    return "".join(c if c in _SLICE_PLAIN else "\\x%02x" % ord(c) for c in text)


def slice_unescape(text):
    """``slice_escape``'s inverse: every ``\\xNN`` is its character again."""
    return _SLICE_ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), text)


def f58plain(component):
    """Render one jobid-path component for a unit name.

    A job ID written ``ƒXXX`` becomes ``fXXX``; any character a unit name
    cannot hold becomes ``_``, so a path can never make the name invalid.
    """
    if component.startswith("ƒ"):
        component = "f" + component[1:]
    return _UNSAFE_RE.sub("_", component)


def needs_instance_uuid(jobid_path, system_instance):
    """Whether the instance part of unit names comes from rank 0's ``broker.uuid``: only for
    an unnamed top-level instance that is not the system instance (see render_instance)."""
    return not system_instance and not [p for p in jobid_path.split("/") if p]


def render_instance(jobid_path, system_instance, instance_uuid):
    """Render the broker's jobid-path as the instance part of a unit name.

    Args:
        jobid_path: the ``jobid-path`` broker attribute, e.g. ``/`` or ``/ƒA/ƒB``.
        system_instance: True when ``broker.sd-notify`` is set (flux.service).
        instance_uuid: rank 0's ``broker.uuid``, shared by every broker of the instance.

    Returns:
        e.g. ``fA:fB``; for an unnamed top level ``sys`` or ``t`` + 8 hex digits.
    """
    parts = [f58plain(p) for p in jobid_path.split("/") if p]
    if parts:
        return ":".join(parts)
    if system_instance:
        return SYSTEM_INSTANCE
    return "t" + instance_uuid.replace("-", "")[:8].lower()


def needs_rank_suffix(mapping):
    """Decide from ``broker.mapping`` (RFC 34 taskmap) whether a node hosts >1 broker.

    Args:
        mapping: the attribute's JSON text, or None when it is not set.

    Returns:
        True when more than one broker may share a node, or when the map is
        missing, empty or unreadable (the safe answer).
    """
    if not mapping:
        return True
    try:
        blocks = json.loads(mapping)
        if isinstance(blocks, dict):
            blocks = blocks["map"]
        tasks_per_node = {}
        for nodeid, nnodes, ppn, repeat in blocks:
            for node in range(nodeid, nodeid + nnodes):
                tasks_per_node[node] = tasks_per_node.get(node, 0) + ppn * repeat
    except (ValueError, TypeError, KeyError):
        return True
    if not tasks_per_node:
        return True
    return max(tasks_per_node.values()) > 1


def check_unit_name(name):
    """Raise RequestError(EINVAL) unless ``name`` is a usable service unit name."""
    if not isinstance(name, str) or len(name.encode()) > UNIT_NAME_MAX or not _UNIT_RE.match(name):
        raise RequestError(errno.EINVAL, f"invalid unit name {name!r}")
    return name


def check_label(label):
    """Raise RequestError(EINVAL) unless ``label`` can start a unit name."""
    if not _LABEL_RE.match(label):
        raise RequestError(
            errno.EINVAL,
            f"label {label!r} cannot form a unit name "
            "(allowed: letters, digits, '_', '.', '-'; no ':')",
        )
    return label


class UnitNamer:
    """Names the units of one sdexec, with the instance and rank fixed at load."""

    def __init__(self, instance, rank, rank_suffix):
        self.instance = instance
        self.rank = rank
        self.rank_suffix = rank_suffix

    @property
    def glob(self):
        """The pattern matching every unit of this instance, and no other."""
        return f"*:{self.instance}.service"

    def name(self, label=None, override=None):
        """Return the unit name for a request.

        Args:
            label: the subprocess label, or None for a truncated-UUID name.
            override: ``SDEXEC_NAME``, used verbatim when given.

        Raises:
            RequestError: EINVAL for an unusable label or name.
        """
        if override is not None:
            return check_unit_name(override)
        stem = check_label(label) if label else str(uuid.uuid4())[:13]
        if self.rank_suffix:
            stem = f"{stem}-{self.rank}"
        return check_unit_name(f"{stem}:{self.instance}.service")

    def parse(self, unit):
        """Read one of this sdexec's unit names back.

        Returns:
            (True, label) for a unit of this instance and rank, label None for a
            UUID name; (False, None) for anything else (another rank's, another
            instance's, or a verbatim SDEXEC_NAME).
        """
        suffix = f":{self.instance}.service"
        if not unit.endswith(suffix):
            return False, None
        stem = unit[: -len(suffix)]
        if self.rank_suffix:
            stem, sep, rank = stem.rpartition("-")
            if not sep or rank != str(self.rank):
                return False, None
        if not stem or ":" in stem:
            return False, None
        return True, None if _UUID_STEM_RE.match(stem) else stem
