"""The processes one sdexec tracks, found by unit, pid, label or client.

Pure: stdlib only. Insertion order is start order (``sdexec.list`` relies on it).
"""


class Registry:
    """Live SdProcs indexed by unit name; other lookups scan (tens of entries, not millions)."""

    def __init__(self):
        self._by_unit = {}

    def __iter__(self):
        return iter(list(self._by_unit.values()))

    def __len__(self):
        return len(self._by_unit)

    def add(self, p):
        """Track SdProc ``p``."""
        self._by_unit[p.unit.name] = p

    def remove(self, p):
        """Forget ``p``; a second remove is harmless."""
        self._by_unit.pop(p.unit.name, None)

    def by_unit(self, unit):
        return self._by_unit.get(unit)

    def find(self, pid, label):
        """The process with ``label`` if one is given, else the one whose pid is ``pid``.

        pid -1 ("not known yet") never matches, unlike flux-core. A process that is
        only being let go is not found.
        """
        for p in self._by_unit.values():
            if not p.visible:
                continue
            if label is not None:
                if p.cmd.label == label:
                    return p
            elif pid > 0 and p.pid == pid:
                return p
        return None

    def has_label(self, label):
        return any(p.cmd.label == label and p.visible for p in self._by_unit.values())

    def label_taken(self, p):
        """Another visible process has ``p``'s label (so ``p`` may not become visible)."""
        label = p.cmd.label
        return label is not None and any(
            q is not p and q.cmd.label == label and q.visible for q in self._by_unit.values()
        )

    def by_request(self, sender, matchtag):
        """The process whose exec request came from ``sender`` with ``matchtag``."""
        for p in self._by_unit.values():
            req = p.exec_request
            if req is not None and req.sender == sender and req.matchtag == matchtag:
                return p
        return None

    def by_sender(self, sender):
        """Every process whose exec request, parked wait or just answered wait came from
        ``sender``."""
        return [
            p
            for p in self._by_unit.values()
            if any(
                r is not None and r.sender == sender
                for r in (p.exec_request, p.wait.waiter, p.wait.answered_to)
            )
        ]
