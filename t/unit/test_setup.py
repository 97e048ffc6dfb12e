"""What `make demo` and `make check` set up, decided without building anything.

scripts/setup.sh installs what scripts/prereqs.sh finds missing, only as root on Debian;
scripts/tarball.sh picks each release tarball: the one given, else the vendored one, else a
download of the published URL (a file:// URL stands in for the network), sha256 checked. A
stand-in ``flux`` that fails makes the flux check fail; stand-in ``make`` and ``apt-get``
record any call, so a test sees that nothing was run.

flux-core's build tree (check-upstream and the v2 tier run flux-core's tests from it) is
looked for in a temporary SDEXEC_BUILDS, or at a FLUX_CORE_BUILD that does not exist: never
this machine's own.
"""

import hashlib
import os
import pathlib
import shutil
import subprocess
import tarfile

import pytest

TOP = pathlib.Path(__file__).resolve().parents[2]


def write_exe(path, text):
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stand_ins(tmp_path):
    """tmp_path/bin, made once: a ``flux`` that fails, ``make`` and ``apt-get`` that record."""
    bindir = tmp_path / "bin"
    if not bindir.exists():
        bindir.mkdir()
        write_exe(bindir / "flux", "exit 1\n")
        for tool in ("make", "apt-get"):
            write_exe(bindir / tool, f'echo "{tool} $*" >>"{tmp_path}/ran"\nexit 0\n')
    return bindir


def run(tmp_path, args, **env):
    """Run a script of scripts/ with stand-ins first on PATH and no FLUX_* from outside."""
    bindir = stand_ins(tmp_path)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FLUX_", "SDEXEC_"))}
    base.update(
        PATH=f"{bindir}:{os.environ['PATH']}",
        SDEXEC_VENDOR=str(tmp_path / "vendor"),
        SDEXEC_DOWNLOADS=str(tmp_path / "downloads"),
        SDEXEC_BUILDS=str(tmp_path / "builds"),
    )
    base.update(env)
    # "make": this checkout's Makefile under the real make (the stand-in records the make
    # commands the Makefile's scripts run); "bash": a command line, run in the checkout
    if args[0] in ("make", "bash"):
        script = shutil.which(args[0])
    else:
        script = str(TOP / "scripts" / args[0])
    return subprocess.run(
        [script, *args[1:]],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=TOP,
    )


def tarball(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(name.encode() * 100)
    return path


def nothing_ran(tmp_path):
    return not (tmp_path / "ran").exists()


def test_not_root_changes_nothing_and_prints_the_commands(tmp_path):
    """A missing flux-core, not root: the commands to run (with the vendored tarball where
    there is one), exit 1, no make, no apt-get."""
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    core = tarball(vendor, "flux-core-0.88.0-59-g4a5e79f56.tar.gz")
    out = run(tmp_path, ["setup.sh", "flux"], SETUP_UID="1000", FLUX_CORE_SHA256=sha256(core))
    assert out.returncode == 1
    assert "missing: flux-core" in out.stderr
    assert out.stdout.splitlines()[1:3] == [
        "    make flux-security FLUX_SECURITY_TARBALL=<flux-security release tarball:"
        " doc/guide/install.md, Prerequisites>",
        f"    make flux-core FLUX_CORE_TARBALL={core}",
    ]
    assert "nothing was changed" in out.stdout
    assert nothing_ran(tmp_path)


def test_not_debian_changes_nothing(tmp_path):
    """Root, but no /etc/debian_version: the same refusal."""
    out = run(tmp_path, ["setup.sh", "flux"], SETUP_UID="0", SETUP_DEBIAN="/nonexistent")
    assert out.returncode == 1
    assert "nothing was changed" in out.stdout
    assert nothing_ran(tmp_path)


def test_plan_uses_the_tarballs_given(tmp_path):
    """FLUX_*_TARBALL come first; --plan names them and the steps, and runs nothing."""
    sec, core = tarball(tmp_path, "sec.tar.gz"), tarball(tmp_path, "core.tar.gz")
    out = run(
        tmp_path,
        ["setup.sh", "--plan", "flux"],
        SETUP_UID="0",
        SETUP_DEBIAN=str(sec),
        FLUX_SECURITY_TARBALL=str(sec),
        FLUX_CORE_TARBALL=str(core),
    )
    assert out.returncode == 0, out.stderr
    assert f"make flux-security from {sec}" in out.stdout
    assert f"make flux-core from {core}" in out.stdout
    assert "make deps" not in out.stdout  # only the flux check failed
    assert nothing_ran(tmp_path)


def test_vendored_tarball_is_used_when_its_sha256_matches(tmp_path):
    """No tarball given: the vendored one, checked against the expected sha256."""
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    core = tarball(vendor, "flux-core-0.88.0-59-g4a5e79f56.tar.gz")
    out = run(tmp_path, ["tarball.sh", "flux-core"], FLUX_CORE_SHA256=sha256(core))
    assert (out.returncode, out.stdout) == (0, f"{core}\n")
    assert "(sha256 checked)" in out.stderr


def test_vendored_tarball_with_another_sha256_is_refused(tmp_path):
    """The pinned sha256 of flux-core's tarball does not match a stand-in file."""
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    tarball(vendor, "flux-core-0.88.0-59-g4a5e79f56.tar.gz")
    out = run(tmp_path, ["tarball.sh", "flux-core"])
    assert (out.returncode, out.stdout) == (1, "")
    assert "does not match sha256 48e94dd5" in out.stderr


def test_download_from_the_url_is_checked_and_kept(tmp_path):
    """Neither given nor vendored: the URL is downloaded, checked, and reused next time."""
    published = tarball(tmp_path, "flux-security-0.15.0.tar.gz")
    env = dict(FLUX_SECURITY_URL=published.as_uri(), FLUX_SECURITY_SHA256=sha256(published))
    out = run(tmp_path, ["tarball.sh", "flux-security"], **env)
    got = tmp_path / "downloads" / "flux-security-0.15.0.tar.gz"
    assert (out.returncode, out.stdout) == (0, f"{got}\n")
    assert got.read_bytes() == published.read_bytes()
    published.unlink()  # the next run must not need the network
    again = run(tmp_path, ["tarball.sh", "flux-security"], **env)
    assert (again.returncode, again.stdout) == (0, f"{got}\n")
    assert "downloaded before" in again.stderr


def test_download_with_another_sha256_is_refused_and_deleted(tmp_path):
    """A download that does not match the pinned sha256 is not kept, and nothing is built."""
    published = tarball(tmp_path, "flux-security-0.15.0.tar.gz")
    out = run(tmp_path, ["tarball.sh", "flux-security"], FLUX_SECURITY_URL=published.as_uri())
    assert (out.returncode, out.stdout) == (1, "")
    assert "does not match sha256 15b2328f" in out.stderr and "refused" in out.stderr
    assert list((tmp_path / "downloads").iterdir()) == []


def test_plan_without_a_flux_core_source_stops_before_anything(tmp_path):
    """flux-core has no published tarball of the tested version: say so, change nothing."""
    sec = tarball(tmp_path, "sec.tar.gz")
    out = run(
        tmp_path,
        ["setup.sh", "flux"],
        SETUP_UID="0",
        SETUP_DEBIAN=str(sec),
        FLUX_SECURITY_TARBALL=str(sec),
    )
    assert out.returncode == 1
    assert "set FLUX_CORE_TARBALL=<tarball> or FLUX_CORE_URL=<url>" in out.stderr
    assert nothing_ran(tmp_path)


# flux-core installed but its build tree gone (issue 46 item 9): `make check` stopped at the v2
# tier with a bare `make: *** [check-v2] Error 2` (scripts/vm/build.sh died in `ls -td ... |
# head -1` under `set -euo pipefail`), and `make flux-core` said "nothing to do".

CORE = "flux-core-0.88.0-59-g4a5e79f56"


def v2_host(tmp_path, core=True):
    """Root on Debian with the guest's tools (stand-ins) and vendored tarballs (flux-core's
    only when ``core``), checked against their own sha256: what --why-not asks of a host."""
    run(tmp_path, ["tarball.sh"])  # makes the stand-ins in bin/
    for tool in ("mmdebstrap", "qemu-system-x86_64", "qemu-img", "file"):
        write_exe(tmp_path / "bin" / tool, "exit 0\n")
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    env = dict(SETUP_UID="0", SETUP_DEBIAN=str(tmp_path / "bin" / "file"))
    sec = tarball(vendor, "flux-security-0.15.0.tar.gz")
    env.update(FLUX_SECURITY_SHA256=sha256(sec))
    if core:
        env.update(FLUX_CORE_SHA256=sha256(tarball(vendor, f"{CORE}.tar.gz")))
    return env


def test_v2_why_not_is_silent_when_the_missing_tree_can_be_built(tmp_path):
    """FLUX_CORE_BUILD names no tree, but the flux-core tarball is there: the tier can run
    (scripts/vm/build.sh builds the tree first), so --why-not says nothing."""
    env = v2_host(tmp_path)
    out = run(
        tmp_path, ["vm/build.sh", "--why-not"], FLUX_CORE_BUILD=str(tmp_path / "nowhere"), **env
    )
    assert (out.returncode, out.stdout) == (0, ""), out.stderr
    assert nothing_ran(tmp_path)


def test_v2_why_not_without_a_tree_or_a_tarball_is_one_line(tmp_path):
    """No tree kept in SDEXEC_BUILDS, none named, no flux-core tarball: one line saying why
    and what to run (it exited 2 with nothing when no tree was kept)."""
    env = v2_host(tmp_path, core=False)
    out = run(tmp_path, ["vm/build.sh", "--why-not"], **env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        f"no flux-core build tree in {tmp_path}/builds and no flux-core tarball to build one"
        " (scripts/tarball.sh flux-core says why): run make flux-core FLUX_CORE_TARBALL=<tarball>\n"
    )


def test_check_v2_with_the_tree_pointing_nowhere_skips_saying_why(tmp_path):
    """The tier, as `make check` runs it, with FLUX_CORE_BUILD pointing nowhere and no
    tarball to build it from: one SKIP line naming the tree and the command; in CI
    (CI=true) the same line as a failure."""
    env = v2_host(tmp_path, core=False)
    nowhere = tmp_path / "nowhere"
    why = (
        f"no flux-core build tree at FLUX_CORE_BUILD={nowhere} and no flux-core tarball to"
        " build one (scripts/tarball.sh flux-core says why): run make flux-core"
        " FLUX_CORE_TARBALL=<tarball>\n"
    )
    check_v2 = ["make", "--no-print-directory", "check-v2"]
    out = run(tmp_path, check_v2, FLUX_CORE_BUILD=str(nowhere), CI="", **env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"SKIP: v2 tier: {why}"
    out = run(tmp_path, check_v2, FLUX_CORE_BUILD=str(nowhere), CI="true", **env)
    assert out.returncode != 0 and out.stdout == f"FAIL: v2 tier cannot run: {why}"
    assert not nowhere.exists() and nothing_ran(tmp_path)


def test_plan_builds_only_the_missing_tree(tmp_path):
    """As root on Debian the missing tree is built by make flux-core from the vendored
    tarball, into FLUX_CORE_BUILD; --plan says so and runs nothing."""
    env = v2_host(tmp_path)
    nowhere = tmp_path / "nowhere"
    out = run(tmp_path, ["setup.sh", "--plan", "flux-tree"], FLUX_CORE_BUILD=str(nowhere), **env)
    assert out.returncode == 0, out.stderr
    assert (
        f"make flux-core from {tmp_path}/vendor/{CORE}.tar.gz: only its build tree, into {nowhere}"
        in out.stdout
    )
    assert "make deps" not in out.stdout and "make flux-security" not in out.stdout
    assert nothing_ran(tmp_path)


def test_missing_tree_not_root_is_one_line_with_the_command(tmp_path):
    """Not root: one line, the tree and the command to run; nothing run."""
    env = v2_host(tmp_path)
    nowhere = tmp_path / "nowhere"
    env.update(SETUP_UID="1000", FLUX_CORE_BUILD=str(nowhere))
    out = run(tmp_path, ["setup.sh", "flux-tree"], **env)
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        f"setup: no flux-core build tree at FLUX_CORE_BUILD={nowhere}, which check-upstream and"
        " the v2 tier run flux-core's tests from; nothing was changed. Run, as root on Debian:"
        f" make flux-core FLUX_CORE_TARBALL={tmp_path}/vendor/{CORE}.tar.gz"
        f" FLUX_CORE_BUILD={nowhere}"
    ]
    assert nothing_ran(tmp_path)


def _installed_core_and_tarball(tmp_path):
    """flux-core installed (a stand-in flux in a prefix) and a stand-in tarball whose configure
    writes config.h and its arguments (``make`` records): flux-core.sh's environment, its
    build tree pointing nowhere. Returns the tarball and the environment."""
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    python = tmp_path / "python3"
    write_exe(python, 'case "$*" in *sys.executable*) echo "$0" ;; esac\nexit 0\n')
    write_exe(
        prefix / "bin" / "flux",
        'case $1 in\nversion) printf "commands:\\t0.88.0-59-g4a5e79f56\\n'
        'libflux-security:\\t0.15.0\\nbuild-options:\\t+systemd\\n" ;;\n'
        f'python) shift; exec "{python}" "$@" ;;\nesac\n',
    )
    top = tmp_path / "src" / CORE
    top.mkdir(parents=True)
    write_exe(
        top / "configure",
        "mkdir -p config\necho '#define HAVE_LIBSYSTEMD 1' >config/config.h\n"
        'echo "$@" >configure.args\n',
    )
    (tmp_path / "vendor").mkdir()
    core = tmp_path / "vendor" / f"{CORE}.tar.gz"
    with tarfile.open(core, "w:gz") as tar:
        tar.add(top, arcname=CORE)
    env = dict(
        FLUX_CORE_PREFIX=str(prefix),
        FLUX_PYTHON=str(python),
        FLUX_CORE_BUILD=str(tmp_path / "nowhere"),
        FLUX_CORE_SHA256=sha256(core),
    )
    return core, env


def test_make_flux_core_restores_a_missing_tree(tmp_path):
    """flux-core installed, FLUX_CORE_BUILD pointing nowhere, no tarball named: make flux-core
    builds the tree from the vendored tarball and installs nothing."""
    core, env = _installed_core_and_tarball(tmp_path)
    nowhere = tmp_path / "nowhere"
    out = run(tmp_path, ["flux-core.sh"], **env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"but there is no build tree at {nowhere}" in out.stdout
    assert "building it, installing nothing" in out.stdout
    assert (nowhere / ".flux-sdexec-built").read_text() == sha256(core) + "\n"
    ran = (tmp_path / "ran").read_text()
    assert "make -j" in ran and "make install" not in ran


def test_flux_service_goes_where_systemd_looks(tmp_path):
    """configure is told where flux.service goes: under the prefix's lib/systemd/system, where
    systemd looks (left to itself, on Debian 13's merged /usr it picks prefix/usr/lib/...)."""
    _, env = _installed_core_and_tarball(tmp_path)
    out = run(tmp_path, ["flux-core.sh"], **env)
    assert out.returncode == 0, out.stdout + out.stderr
    args = (tmp_path / "nowhere" / "configure.args").read_text().split()
    prefix = env["FLUX_CORE_PREFIX"]
    assert f"--with-systemdsystemunitdir={prefix}/lib/systemd/system" in args


def _apt_get_needing_update(tmp_path, then=""):
    """A stand-in apt-get, as in a new build root (mmdebstrap leaves no package lists): install
    fails, naming the package it cannot locate, until update has run; then it runs THEN."""
    write_exe(
        stand_ins(tmp_path) / "apt-get",
        f'echo "apt-get $*" >>"{tmp_path}/ran"\n'
        f'case " $* " in *" update "*) : >"{tmp_path}/updated"; exit 0 ;; esac\n'
        f'[ -e "{tmp_path}/updated" ] ||\n'
        '    { echo "E: Unable to locate package gcc" >&2; exit 100; }\n'
        f"{then}\nexit 0\n",
    )


@pytest.mark.skipif(os.getuid() != 0, reason="apt-get is run only as root")
def test_build_deps_in_a_new_root_show_no_false_error(tmp_path):
    """No package lists yet: the first install's 'Unable to locate package' is not shown (it
    was followed by a successful install); update, then install, ran."""
    _apt_get_needing_update(tmp_path)
    out = run(
        tmp_path,
        ["bash", "-c", '. scripts/build-lib.sh; say() { echo "$*"; }; install_build_deps gcc'],
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Unable to locate" not in out.stdout + out.stderr
    ran = (tmp_path / "ran").read_text().splitlines()
    assert [line.split()[1] for line in ran] == ["install", "update", "install"]


@pytest.mark.skipif(os.getuid() != 0, reason="apt-get is run only as root")
def test_make_flux_core_in_a_root_whose_python_comes_with_the_build_deps(tmp_path):
    """A minimal root (Debian 13's build root for the v2 guest) has no /usr/bin/python3 until
    flux-core's build dependencies bring it: flux-core.sh installs them before it asks for
    FLUX_PYTHON, and configures with it."""
    _, env = _installed_core_and_tarball(tmp_path)
    python = pathlib.Path(env["FLUX_PYTHON"])
    python.rename(tmp_path / "python3.later")
    shutil.rmtree(tmp_path / "prefix")
    _apt_get_needing_update(tmp_path, then=f'cp "{tmp_path}/python3.later" "{python}"')
    out = run(tmp_path, ["flux-core.sh"], **env)
    assert "is not an executable" not in out.stderr
    args = (tmp_path / "nowhere" / "configure.args").read_text().split()
    assert f"PYTHON={python}" in args
