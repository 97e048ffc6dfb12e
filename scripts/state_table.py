#!/usr/bin/env python3
"""Refresh the state table in doc/dev/design.md from flux_sdexec/core/table.py.

    scripts/state_table.py [DOC]          write the table between BEGIN and END
    scripts/state_table.py --check [DOC]  exit 1 if the table there is not the generated one

``make doc-table`` runs the first; t/unit/test_table.py does what the second does.
"""

import sys
from pathlib import Path

TOP = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOP))

from flux_sdexec.core.table import markdown  # noqa: E402

DOC = TOP / "doc" / "dev" / "design.md"
BEGIN = "<!-- BEGIN state table: generated from flux_sdexec/core/table.py by make doc-table -->"
END = "<!-- END state table -->"


def spliced(text, table):
    """``text`` with ``table`` between its BEGIN and END lines (ValueError without them)."""
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"no {BEGIN!r} ... {END!r} lines")
    return f"{head}{BEGIN}\n\n{table}\n{END}{tail}"


def main(argv):
    check = "--check" in argv
    paths = [a for a in argv if a != "--check"]
    doc = Path(paths[0]) if paths else DOC
    text = doc.read_text()
    try:
        new = spliced(text, markdown())
    except ValueError as exc:
        print(f"{doc}: {exc}", file=sys.stderr)
        return 1
    if new == text:
        return 0
    if check:
        print(f"{doc}: the state table differs from core/table.py: make doc-table", file=sys.stderr)
        return 1
    doc.write_text(new)
    print(f"{doc}: state table refreshed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
