"""What `make demo` and `make check` set up, decided without building anything.

scripts/setup.sh installs what scripts/prereqs.sh finds missing, only as root on Debian;
scripts/tarball.sh picks each release tarball: the one given, else the vendored one, else a
download of the published URL (a file:// URL stands in for the network), sha256 checked. A
stand-in ``flux`` that fails makes the flux check fail; stand-in ``make`` and ``apt-get``
record any call, so a test sees that nothing was run.
"""

import hashlib
import os
import pathlib
import subprocess

TOP = pathlib.Path(__file__).resolve().parents[2]


def write_exe(path, text):
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(tmp_path, args, **env):
    """Run a script of scripts/ with stand-ins first on PATH and no FLUX_* from outside."""
    bindir = tmp_path / "bin"
    if not bindir.exists():
        bindir.mkdir()
        write_exe(bindir / "flux", "exit 1\n")
        for tool in ("make", "apt-get"):
            write_exe(bindir / tool, f'echo "{tool} $*" >>"{tmp_path}/ran"\nexit 0\n')
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FLUX_", "SDEXEC_"))}
    base.update(
        PATH=f"{bindir}:{os.environ['PATH']}",
        SDEXEC_VENDOR=str(tmp_path / "vendor"),
        SDEXEC_DOWNLOADS=str(tmp_path / "downloads"),
    )
    base.update(env)
    return subprocess.run(
        [str(TOP / "scripts" / args[0]), *args[1:]],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
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
