"""The processes one sdexec tracks, found by unit, pid, label or client.

Pure: stdlib only. Insertion order is start order (``sdexec.list`` relies on it).
"""


class Registry:
    """Live processes indexed by unit name; other lookups scan (tens of entries, not millions)."""

    def __init__(self):
        self._by_unit = {}

    def __iter__(self):
        return iter(list(self._by_unit.values()))

    def __len__(self):
        return len(self._by_unit)

    def add(self, entry):
        """Track ``entry`` (anything with unit, proc.pid, proc.label, sender, matchtag)."""
        self._by_unit[entry.unit] = entry

    def remove(self, entry):
        """Forget ``entry``; a second remove is harmless."""
        self._by_unit.pop(entry.unit, None)

    def by_unit(self, unit):
        return self._by_unit.get(unit)

    def find(self, pid, label):
        """The entry with ``label`` if one is given, else the one whose pid is ``pid``.

        pid -1 ("not known yet") never matches, unlike flux-core. A process that is
        only being let go is not found.
        """
        for entry in self._by_unit.values():
            if not entry.proc.visible:
                continue
            if label is not None:
                if entry.proc.label == label:
                    return entry
            elif pid > 0 and entry.proc.pid == pid:
                return entry
        return None

    def has_label(self, label):
        return any(e.proc.label == label and e.proc.visible for e in self._by_unit.values())

    def by_request(self, sender, matchtag):
        """The entry whose exec request came from ``sender`` with ``matchtag``."""
        for entry in self._by_unit.values():
            if entry.sender == sender and entry.matchtag == matchtag:
                return entry
        return None

    def by_sender(self, sender):
        """Every entry whose exec request or parked wait came from ``sender``."""
        return [
            e for e in self._by_unit.values() if e.sender == sender or e.waiter_sender == sender
        ]
