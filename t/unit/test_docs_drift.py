"""The man pages cannot drift from the code.

Every subcommand of ``flux sdexec`` has its section in doc/man1/flux-sdexec.rst and a line
in its SYNOPSIS; every option (and choice) argparse accepts is in that section; so are the
columns and states the commands print. Every config key the code reads, and every flux-core
key config.py says we rely on, is a term of doc/man5/flux-config-sdexec.rst; and the code
reads no key config.READ_KEYS does not list. The command line comes from the argparse parser
itself: building it needs no broker, so flux's package is stubbed when this Python has none.
"""

import ast
import re
import sys
import types
from pathlib import Path

import pytest

from flux_sdexec import config
from flux_sdexec.cli import report, unitrows

TOP = Path(__file__).resolve().parents[2]
MAN1 = (TOP / "doc" / "man1" / "flux-sdexec.rst").read_text()
MAN5 = (TOP / "doc" / "man5" / "flux-config-sdexec.rst").read_text()
TABLES = ("systemd", "sdexec", "exec")


def section(text, title):
    """The body of the rst subsection ``title`` (underlined with ``-``), up to the next
    subsection or section."""
    m = re.search(rf"^{re.escape(title)}\n-+\n(.*?)(?=^\S[^\n]*\n[-=]+\n|\Z)", text, re.M | re.S)
    assert m, f"doc/man1/flux-sdexec.rst has no section {title!r}"
    return m.group(1)


def mentions(text, word):
    """``word`` in ``text`` as a whole token (not inside a longer option or name)."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def _stub_flux(monkeypatch):
    names = {"flux": {}, "flux.job": {"JobID": object}, "flux.hostlist": {"Hostlist": object}}
    names["flux.idset"] = {"IDset": object}
    names["flux.kvs"] = {}
    names["flux.constants"] = {}
    for name, attrs in names.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)


@pytest.fixture
def subcommands(monkeypatch):
    """``{name: argparse parser}`` of every ``flux sdexec`` subcommand."""
    before = set(sys.modules)
    try:
        import flux.hostlist  # noqa: F401
        import flux.idset  # noqa: F401
        import flux.job  # noqa: F401
    except ImportError:
        _stub_flux(monkeypatch)
    from flux_sdexec.cli import main

    top = main.parser()
    (choices,) = [a.choices for a in top._actions if a.choices and a.dest == "command"]
    yield dict(choices)
    for name in set(sys.modules) - before:  # imported against the stubs: forget them
        if name.startswith("flux_sdexec.cli.") and name not in ("flux_sdexec.cli.report",):
            sys.modules.pop(name, None)


def undocumented_options(name, sub):
    """The option strings and choices of subcommand ``name`` its section does not name."""
    text = section(MAN1, name)
    missing = []
    for action in sub._actions:
        words = [o for o in action.option_strings if o not in ("-h", "--help")]
        if words:
            words += [str(c) for c in action.choices or ()]
        missing += [w for w in words if not mentions(text, w)]
    return missing


def test_every_subcommand_has_a_section_and_a_synopsis_line(subcommands):
    """A subcommand added to cli/main.py without its man page section fails here."""
    synopsis = MAN1.split("DESCRIPTION")[0]
    missing = [n for n in subcommands if f"**sdexec** **{n}**" not in synopsis]
    assert missing == []
    for name in subcommands:
        section(MAN1, name)


def test_every_option_is_documented_in_its_subcommands_section(subcommands):
    """Every option string (short and long) and choice argparse accepts, per subcommand."""
    missing = {n: undocumented_options(n, sub) for n, sub in subcommands.items()}
    assert {n: m for n, m in missing.items() if m} == {}


def test_output_columns_and_states_are_documented():
    """The table headers of status and units, and every state status can print."""
    status, units = section(MAN1, "status"), section(MAN1, "units")
    headers = [h.rstrip(">") for h, _ in report.COLUMNS]
    states = [report.OK, report.NOT_ENFORCED, report.UNLOADED, report.NOT_OURS]
    states += [report.UNREACHABLE, report.ERROR]
    assert [w for w in headers + states if not mentions(status, w)] == []
    unit_headers = [h.rstrip(">") for h, _ in unitrows.COLUMNS]
    unit_headers += [unitrows.UNTRACKED, unitrows.ORPHAN]
    assert [w for w in unit_headers if not mentions(units, w)] == []


def test_every_config_key_is_a_term_of_the_config_page():
    """Each key read (config.READ_KEYS) and relied on (config.FLUX_CORE_KEYS) has an entry."""
    keys = list(config.READ_KEYS) + list(config.FLUX_CORE_KEYS)
    assert [k for k in keys if not re.search(rf"^{re.escape(k)}$", MAN5, re.M)] == []


def _gets(tree):
    """Every ``X.get("<lowercase key>", ...)`` call of a module: (call node, key)."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and re.fullmatch(r"[a-z][a-z-]*", node.args[0].value)
        ):
            yield node, node.args[0].value


def _chained_table(node):
    """The table of a ``.get(TABLE, ...).get(KEY)`` chain, else None."""
    r = node.func.value
    if isinstance(r, ast.Call) and isinstance(r.func, ast.Attribute) and r.func.attr == "get":
        if r.args and isinstance(r.args[0], ast.Constant) and r.args[0].value in TABLES:
            return r.args[0].value
    return None


def keys_read_by_the_code():
    """``{"table.key" or "?.key": file}`` the package reads: anywhere, a ``.get(TABLE).get(KEY)``
    chain (a config object asked of the broker); and every lowercase ``.get`` of the files
    READ_KEYS names that read whole tables (config.py, mapper/mapper_service.py: no chains), the
    table taken from READ_KEYS ("?" when it lists no such key)."""
    known = {k.split(".", 1)[1]: k for k in config.READ_KEYS}
    found, plain = {}, {}
    for path in sorted((TOP / "flux_sdexec").rglob("*.py")):
        rel = str(path.relative_to(TOP))
        for node, key in _gets(ast.parse(path.read_text())):
            table = _chained_table(node)
            if table:
                found[f"{table}.{key}"] = rel
            elif key not in TABLES:
                plain.setdefault(rel, []).append(key)
    chained_files = set(found.values())
    for rel in set(config.READ_KEYS.values()) - chained_files:
        for key in plain.get(rel, []):
            found[known.get(key, f"?.{key}")] = rel
    return found


def test_the_key_table_is_what_the_code_reads():
    """READ_KEYS lists exactly the keys the code reads, each in the file it names."""
    assert keys_read_by_the_code() == config.READ_KEYS


@pytest.mark.parametrize("page", ["man1/flux-sdexec.rst", "man5/flux-config-sdexec.rst"])
def test_pages_build_without_warnings(page):
    """What `make man` does (rst2man --halt=warning), in process: a warning raises."""
    core = pytest.importorskip("docutils.core", reason="docutils not installed (make deps)")
    source = (TOP / "doc" / page).read_text()
    out = core.publish_string(
        source, writer_name="manpage", settings_overrides={"halt_level": 2, "report_level": 2}
    )
    assert out.startswith(b'.\\" Man page generated from reStructuredText')
