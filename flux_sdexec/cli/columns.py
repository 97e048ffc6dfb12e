"""Plain-text tables: a header line and one line per row, columns padded to fit.

Pure: stdlib only.
"""


def render(columns, rows):
    """Lines of a table.

    Args:
        columns: (header, key) pairs; a header ending in ``>`` is right-aligned (the
            ``>`` is not printed).
        rows: dicts; a missing or None value prints as ``-``.

    Returns:
        The header line, then one line per row; trailing blanks stripped.
    """
    heads = [h.rstrip(">") for h, _ in columns]
    right = [h.endswith(">") for h, _ in columns]
    cells = [["-" if r.get(k) is None else str(r[k]) for _, k in columns] for r in rows]
    widths = [max(len(c) for c in col) for col in zip(heads, *cells)]

    def line(values):
        out = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)]
        return " ".join(out).rstrip()

    return [line(heads)] + [line(c) for c in cells]
