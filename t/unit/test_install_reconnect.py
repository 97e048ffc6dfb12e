"""``make install``'s step for ``flux-shell-reconnect`` (``make install-reconnect``), against a
temporary DESTDIR (review 3 #13). A site names the file in the IMP's ``allowed-shells``, so
whoever can write it, or a directory above it, runs code as every user who submits a job:
installed as root, it and its directories are root's and not group- or other-writable, or
the install refuses. Flux-core's shell path is written into it quoted, whatever it holds."""

import os
import pathlib
import stat
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PREFIX = "/opt/flux"
INSTALLED = f"{PREFIX}/libexec/flux-sdexec/flux-shell-reconnect"
AS_ROOT = os.geteuid() == 0


def install(destdir, flux_shell="/usr/libexec/flux/flux-shell"):
    """``make install-reconnect`` into ``destdir``: the finished process."""
    return subprocess.run(
        ["make", "-s", "-C", str(ROOT), "install-reconnect", "FLUX_PYTHON=/usr/bin/python3"]
        + [f"FLUX_SHELL={flux_shell}", f"DESTDIR={destdir}", f"PREFIX={PREFIX}"],
        capture_output=True,
        text=True,
    )


def on_the_path(destdir):
    """The installed file, then each directory above it up to DESTDIR (the target's /)."""
    path = pathlib.Path(f"{destdir}{INSTALLED}")
    out = [path]
    while path != destdir:
        path = path.parent
        out.append(path)
    return out


def test_the_shell_path_is_written_quoted(tmp_path):
    """A path with a space, ``|``, ``&``, a quote and a backslash: the installed file execs
    exactly that file with --reconnect and its own arguments (the unquoted ``exec @FLUX_SHELL@``
    split it at the space; the Makefile's ``sed 's|...|...|'`` broke on the ``|``)."""
    odd = tmp_path / "flux lib|it's & \\ x"
    odd.mkdir()
    shell = odd / "flux-shell"
    shell.write_text('#!/bin/sh\nfor a in "$@"; do echo "<$a>"; done\n')
    shell.chmod(0o755)
    stage = tmp_path / "stage"
    done = install(stage, shell)
    assert (done.returncode, done.stderr if AS_ROOT else "") == (0, "")
    run = subprocess.run([f"{stage}{INSTALLED}", "a b", "$HOME"], capture_output=True, text=True)
    assert (run.returncode, run.stdout, run.stderr) == (0, "<--reconnect>\n<a b>\n<$HOME>\n", "")


def test_installed_as_root_it_and_its_directories_are_roots_alone(tmp_path):
    """``stat -c %U`` of the file and of each directory above it is root, none is group- or
    other-writable, even under a umask that would make them so."""
    if not AS_ROOT:
        pytest.skip("the install is root's only as root (this runs as uid %d)" % os.geteuid())
    stage = tmp_path / "stage"
    old = os.umask(0o002)
    try:
        done = install(stage)
    finally:
        os.umask(old)
    assert (done.returncode, done.stderr) == (0, "")
    for path in on_the_path(stage):
        owner = subprocess.run(["stat", "-c", "%U", path], capture_output=True, text=True).stdout
        assert (path, owner, path.stat().st_mode & 0o022) == (path, "root\n", 0)
    assert stat.S_IMODE(pathlib.Path(f"{stage}{INSTALLED}").stat().st_mode) == 0o755


@pytest.mark.parametrize("how", ["group-writable", "not root's"])
def test_a_directory_on_the_path_writable_by_another_user_is_refused(tmp_path, how):
    """``/opt/flux`` the flux user's (or its group's to write): the install refuses, with
    one line saying which directory and why, and installs nothing."""
    if not AS_ROOT:
        pytest.skip("the install is root's only as root (this runs as uid %d)" % os.geteuid())
    stage = tmp_path / "stage"
    opt_flux = stage / "opt" / "flux"
    opt_flux.mkdir(parents=True)
    if how == "group-writable":
        opt_flux.chmod(0o775)
        why = "owner uid 0, mode 775"
    else:
        os.chown(opt_flux, 65534, 65534)
        why = "owner uid 65534, mode 755"
    done = install(stage)
    assert done.returncode != 0
    assert [line for line in done.stderr.splitlines() if not line.startswith("make")] == [
        f"install-reconnect: {opt_flux} is writable by a user other than root ({why}):"
        " flux-shell-reconnect goes in the IMP's allowed-shells; install it where every"
        " directory is root's and not group- or other-writable (PREFIX, MODULE_DIR)"
    ]
    assert not (opt_flux / "libexec").exists()
