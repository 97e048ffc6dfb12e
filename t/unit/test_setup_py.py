"""setup.py: what it declares holds for the code."""

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

TOP = pathlib.Path(__file__).resolve().parents[2]


def vermin_command():
    """vermin under this interpreter, else the one on PATH (make deps installs it with pip
    for the developer's python3; flux's interpreter may be another): it reads code, so any
    interpreter does."""
    try:
        import vermin  # noqa: F401
    except ImportError:
        path = shutil.which("vermin")
        if path is None:
            pytest.skip("vermin not installed (make deps)")
        return [path]
    return [
        sys.executable,
        "-c",
        "import sys, vermin; sys.argv[0] = 'vermin'; sys.exit(vermin.main())",
    ]


def test_setup_py_tells_the_true_minimum_python():
    """Finding 5: python_requires in setup.py is the minimum vermin finds for the code."""
    declared = re.search(r'python_requires=">=([0-9.]+)"', (TOP / "setup.py").read_text())
    out = subprocess.run(
        [*vermin_command(), "--no-tips", "--eval-annotations", "flux_sdexec"],
        cwd=TOP,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"Minimum required versions: ([0-9.]+)", out)
    assert found.group(1) == declared.group(1)
