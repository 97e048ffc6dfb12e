"""core/table.py as doc/dev/design.md shows it: the generated table cannot go stale."""

import importlib.util
from pathlib import Path

from flux_sdexec.core.table import ROWS, TABLE, markdown

TOP = Path(__file__).resolve().parents[2]
SCRIPT = TOP / "scripts" / "state_table.py"


def _script():
    spec = importlib.util.spec_from_file_location("state_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rows_written_are_the_table():
    """ROWS, which the document shows, expand to exactly TABLE's entries."""
    keys = [(state, key) for states, key, _, _ in ROWS for state in states]
    assert len(keys) == len(set(keys)) and set(keys) == set(TABLE)


def test_design_md_shows_the_generated_table():
    """The table between design.md's markers is markdown()'s: run `make doc-table`."""
    script = _script()
    text = script.DOC.read_text()
    assert script.spliced(text, markdown()) == text


def test_a_changed_row_is_seen(tmp_path):
    """A document whose table lags the code fails the check and is refreshed by the script."""
    script = _script()
    stale = script.spliced(script.DOC.read_text(), "| stale |\n")
    doc = tmp_path / "design.md"
    doc.write_text(stale)
    assert script.main(["--check", str(doc)]) == 1
    assert script.main([str(doc)]) == 0
    assert script.main(["--check", str(doc)]) == 0
