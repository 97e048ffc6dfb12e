"""Every sdexec request is the instance owner's (review 3, finding 5): a guest, the job's
own user included, gets EPERM from the broker for ``usage``, ``usage-live`` and
``usage-gather`` as for ``exec``, because no handler opts guests in. The job's memo is
another matter (``flux job memo`` lets a job's user rewrite it): doc/guide/usage.md says the
KVS record is the one to trust.
"""

import ast
import pathlib

MODULES = pathlib.Path(__file__).resolve().parents[2] / "flux_sdexec" / "modules"


def handlers(path):
    """``{topic: the keywords of its request_handler}`` of a module file."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "request_handler":
            found[node.args[0].value] = {k.arg for k in node.keywords}
    return found


def test_no_sdexec_handler_lets_a_guest_in():
    found = handlers(MODULES / "sdexec.py")
    assert {"exec", "usage", "usage-live", "usage-gather"} <= found.keys()
    assert {topic for topic, keywords in found.items() if "allow_guest" in keywords} == set()
