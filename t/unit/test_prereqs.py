"""scripts/prereqs.sh checks the interpreter flux runs our module under, not only the tests'.

A stand-in ``flux`` on PATH answers ``flux version`` and ``flux python``, so no flux-core is
needed: what is checked is what prereqs.sh says about the interpreter it reports.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

TOP = pathlib.Path(__file__).resolve().parents[2]
PREREQS = TOP / "scripts" / "prereqs.sh"
# An interpreter stand-in's first lines: it is its own sys.executable.
STUB = '#!/bin/sh\ncase "$*" in *sys.executable*) echo "$0"; exit 0 ;; esac\n'


def fake_flux(bindir, python):
    """A ``flux`` whose version has +systemd and whose ``flux python`` is ``python``."""
    flux = bindir / "flux"
    flux.write_text(
        "#!/bin/sh\n"
        'case $1 in\nversion) echo "build-options: +systemd" ;;\n'
        f'python) shift; exec "{python}" "$@" ;;\nesac\n'
    )
    flux.chmod(0o755)


def prereqs(bindir, *checks, **env):
    run_env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "FLUX_PYTHON")}
    run_env.update(env, PATH=f"{bindir}:{os.environ['PATH']}")
    return subprocess.run(
        [str(PREREQS), *checks], env=run_env, capture_output=True, text=True, timeout=60
    )


def test_flux_python_without_pystemd_is_named(tmp_path):
    """The tests' PYTHON has everything; flux's interpreter lacks pystemd and cffi."""
    bare = tmp_path / "bare-python"
    bare.write_text(STUB + 'case "$*" in *pystemd*|*cffi*) exit 1 ;; esac\nexit 0\n')
    bare.chmod(0o755)
    fake_flux(tmp_path, bare)
    out = prereqs(tmp_path, "python", PYTHON=sys.executable)
    assert out.returncode == 1
    assert f"missing: Python package pystemd for {bare}" in out.stderr
    assert f"missing: Python package cffi for {bare}" in out.stderr
    assert f"for {sys.executable}" not in out.stderr


def test_flux_on_a_python_only_root_can_reach_is_refused():
    """flux built on an interpreter under a mode-700 directory (issue 24: a pyenv in /root)."""
    top = pathlib.Path(tempfile.mkdtemp(prefix="prereqs-", dir="/tmp"))  # not pytest's 0700 dir
    try:
        top.chmod(0o755)
        private = top / "home"
        private.mkdir(mode=0o700)
        python = private / "python3"
        python.write_text(STUB + f'exec "{sys.executable}" "$@"\n')
        python.chmod(0o755)
        fake_flux(top, python)
        out = prereqs(top, "flux")
        assert out.returncode == 1
        assert f"flux-core built with a Python every user can run ({python} is not)" in out.stderr
        private.chmod(0o755)
        assert prereqs(top, "flux").returncode == 0
    finally:
        shutil.rmtree(top)
