"""``flux sdexec status`` without flux: each rank's answer judged, alike ranks folded, text.

``judge`` turns one rank's ``sdexec.stats-get`` answer (or its error, or its silence)
into a record; ``fold`` groups records that differ only in rank, host and process
counts (the counts are summed); ``lines`` prints the groups as one table plus a line
per unhealthy group, per constraint not enforced, per reason constraints are
unenforceable on the host, and where job shells' usage is read from when not from their
units (``usage/unit_usage.py``). Pure: stdlib only (hostlists come from a function the caller
passes).
"""

import errno

from flux_sdexec.cli.columns import render
from flux_sdexec.core.values import encode_idset

OK = "ok"
NOT_ENFORCED = "not-enforced"  # a constraint not enforced under the enforce policy
UNLOADED = "unloaded"
NOT_OURS = "not-ours"
UNREACHABLE = "unreachable"
ERROR = "error"

UNREACHABLE_ERRNOS = (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ECONNRESET, errno.ETIMEDOUT)
SUMMED = ("tracked", "running", "zombie", "adopted")
KEYS = (
    "state",
    "detail",
    "version",
    "module",
    "systemd",
    "reconnects",
    "layout",
    "policy",
    "not_enforced",
    "unenforceable",
)
LEARNING = "learning"  # the usage column of a rank that has not learnt its source yet


def _not_enforced(containment):
    """``{constraint: reason}`` of the constraints some start found not enforced.

    Reads the tally generically: any constraint entry with a non-zero ``not-enforced``.
    """
    found = {}
    for name, entry in (containment.get("constraints") or {}).items():
        if isinstance(entry, dict) and entry.get("not-enforced"):
            found[name] = entry.get("last_reason") or ""
    return found


def _usage(source):
    """``(usage column, note)`` of a rank's ``usage-source`` (None: an sdexec without it):
    ``unit``; ``slice`` with why; ``learning``, read from slices meanwhile."""
    if not source:
        return None, None
    if source.get("source") == "unit":
        return "unit", None
    if source.get("source") is None:
        return LEARNING, f"slice (learning: {source.get('reason')})"
    return "slice", f"slice: {source.get('reason')}"


def _blank(rank, host, state, detail):
    record = {"rank": rank, "host": host, "state": state, "healthy": False, "detail": detail}
    record.update({k: None for k in (*KEYS, "usage", "usage_note") if k not in record})
    record.update({k: None for k in SUMMED})
    return record


def judge(rank, host, answer=None, error=None, timeout=None):
    """One rank's record.

    Args:
        rank, host: the broker's rank and hostname.
        answer: its ``sdexec.stats-get`` payload (a dict), if it answered.
        error: ``(errno, text)`` if the RPC failed.
        timeout: the seconds waited, when it gave neither.

    Returns:
        A dict with ``state``, ``healthy``, ``detail`` and the fields of KEYS and SUMMED.
    """
    if error is not None:
        code, text = error
        if code == errno.ENOSYS:
            return _blank(rank, host, UNLOADED, "sdexec is not loaded")
        state = UNREACHABLE if code in UNREACHABLE_ERRNOS else ERROR
        return _blank(rank, host, state, text)
    if answer is None:
        return _blank(rank, host, UNREACHABLE, f"no answer within {timeout:g}s")
    if not isinstance(answer, dict) or "version" not in answer or "tracked" not in answer:
        return _blank(rank, host, NOT_OURS, "another sdexec is loaded (flux-core's C module?)")
    containment = answer.get("containment") or {}
    tracked = answer.get("tracked") or {}
    policy = containment.get("policy")
    missing = _not_enforced(containment)
    state = NOT_ENFORCED if missing and policy == "enforce" else OK
    usage, usage_note = _usage(answer.get("usage-source"))
    return {
        "rank": rank,
        "host": host,
        "state": state,
        "healthy": state == OK,
        "detail": None,
        "version": answer.get("version"),
        "module": answer.get("module"),
        "systemd": (answer.get("systemd") or {}).get("kind"),
        "via": (answer.get("systemd") or {}).get("via"),
        "reconnects": answer.get("reconnects"),
        "layout": containment.get("layout"),
        "policy": policy,
        "not_enforced": missing,
        "unenforceable": dict(containment.get("unenforceable") or {}),
        "usage": usage,
        "usage_note": usage_note,
        "tracked": sum(tracked.values()),
        "running": tracked.get("starting", 0) + tracked.get("running", 0),
        "zombie": tracked.get("zombie", 0),
        "adopted": answer.get("adopted"),
    }


def _key(record):
    return tuple(
        tuple(sorted(record[k].items())) if isinstance(record[k], dict) else record[k] for k in KEYS
    )


def fold(records):
    """Groups of records alike in KEYS, in order of their first rank. The usage source is
    not a key: ranks still learning theirs would otherwise split a group for as long as
    some of them have run nothing.

    Returns:
        Dicts with the KEYS values, ``ranks`` (sorted), ``hosts`` (in rank order, each
        once), ``healthy``, SUMMED summed over the group (None if no rank had them),
        ``usage`` (the group's usage sources, each once, sorted) and ``usage_notes``
        (``{note: [(rank, host), ...]}``).
    """
    groups = {}
    for r in sorted(records, key=lambda r: r["rank"]):
        g = groups.get(_key(r))
        if g is None:
            g = groups[_key(r)] = {k: r[k] for k in KEYS}
            g.update(ranks=[], hosts=[], healthy=r["healthy"], **{k: None for k in SUMMED})
            g.update(usage=[], usage_notes={})
        if r["usage"] is not None and r["usage"] not in g["usage"]:
            g["usage"] = sorted(g["usage"] + [r["usage"]])
        if r["usage_note"]:
            g["usage_notes"].setdefault(r["usage_note"], []).append((r["rank"], r["host"]))
        g["ranks"].append(r["rank"])
        if r["host"] not in g["hosts"]:
            g["hosts"].append(r["host"])
        for k in SUMMED:
            if r[k] is not None:
                g[k] = (g[k] or 0) + r[k]
    return list(groups.values())


COLUMNS = (
    ("STATE", "state"),
    ("NRANKS>", "nranks"),
    ("RANKS", "idset"),
    ("HOSTS", "hostlist"),
    ("VERSION", "version"),
    ("SYSTEMD", "systemd"),
    ("RECONNECTS>", "reconnects"),
    ("TRACKED>", "tracked"),
    ("RUNNING>", "running"),
    ("ZOMBIE>", "zombie"),
    ("ADOPTED>", "adopted"),
    ("CGROUPS", "layout"),
    ("UNENFORCEABLE", "never"),
    ("POLICY", "policy"),
    ("NOT-ENFORCED", "constraints"),
    ("USAGE", "usage"),
    ("MODULE", "module"),
)


def lines(groups, hostlist=",".join):
    """The text of ``flux sdexec status``: the table, then what needs saying per group.

    Args:
        groups: ``fold()``'s result.
        hostlist: hostnames -> their hostlist text (``flux.hostlist`` in the command).
    """
    rows = []
    notes = []
    for g in groups:
        row = dict(g, nranks=len(g["ranks"]), idset=encode_idset(g["ranks"]))
        row["hostlist"] = hostlist(g["hosts"])
        row["constraints"] = ",".join(sorted(g["not_enforced"] or {})) or None
        row["never"] = ",".join(sorted(g["unenforceable"] or {})) or None
        row["usage"] = ",".join(g["usage"]) or None
        rows.append(row)
        where = _where(g["ranks"], row["hostlist"])
        if g["detail"]:
            notes.append(f"{where}: {g['state']}: {g['detail']}")
        for name, reason in sorted((g["not_enforced"] or {}).items()):
            notes.append(f"{where}: {name} not enforced: {reason}")
        by_reason = {}  # the host's constraints never enforced, one line per reason
        for name, reason in sorted((g["unenforceable"] or {}).items()):
            by_reason.setdefault(reason, []).append(name)
        for reason, names in by_reason.items():
            notes.append(f"{where}: {','.join(names)} unenforceable: {reason}")
        for note, ranks in g["usage_notes"].items():
            hosts = list(dict.fromkeys(host for _, host in ranks))
            notes.append(f"{_where([r for r, _ in ranks], hostlist(hosts))}: usage source: {note}")
    return render(COLUMNS, rows) + notes


def _where(ranks, hosts):
    """How a note names ``ranks`` (sorted) on ``hosts`` (their hostlist text)."""
    return f"rank{'s' if len(ranks) > 1 else ''} {encode_idset(ranks)} ({hosts})"
