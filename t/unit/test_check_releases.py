"""The v2 tier's releases at once (scripts/vm/check-releases.sh), with stand-ins.

The script is copied into a temporary tree with a stand-in ``scripts/vm/build.sh`` (says
``built RELEASE``, exits with ``build-rc-<release>``, default 0) and a stand-in
``scripts/vm/check-v2.sh`` (says ``guests of RELEASE``, touches ``booted-<release>``, waits
while ``hold-<release>`` exists, at most 60 s, says ``guests of RELEASE done`` and exits with
``rc-<release>``, default 0).
"""

import os
import pathlib
import shutil
import subprocess

from test_prebuild import wait_for

TOP = pathlib.Path(__file__).resolve().parents[2]

BUILD = """#!/bin/sh
echo "built $V2_RELEASE"
exit "$(cat "$STAND_IN/build-rc-$V2_RELEASE" 2>/dev/null || echo 0)"
"""

CHECK_V2 = """#!/bin/sh
echo "guests of $V2_RELEASE (make $MAKE_PID)"
touch "$STAND_IN/booted-$V2_RELEASE"
i=0
while [ -e "$STAND_IN/hold-$V2_RELEASE" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
echo "guests of $V2_RELEASE done"
exit "$(cat "$STAND_IN/rc-$V2_RELEASE" 2>/dev/null || echo 0)"
"""


def heading(release):
    return f"== tier: v2 guest, {release} (systemd as pid 1, unified cgroup v2, flux.service)"


def check_releases(tmp_path, *releases):
    """check-releases.sh RELEASES in a tree of tmp_path with the stand-ins (a Popen)."""
    vm = tmp_path / "scripts" / "vm"
    vm.mkdir(parents=True, exist_ok=True)
    shutil.copy(TOP / "scripts" / "vm" / "check-releases.sh", vm)
    for name, text in (("build.sh", BUILD), ("check-v2.sh", CHECK_V2)):
        (vm / name).write_text(text)
        (vm / name).chmod(0o755)
    env = dict(os.environ, STAND_IN=str(tmp_path), MAKE_PID="4242")
    return subprocess.Popen(
        [str(vm / "check-releases.sh"), *releases],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_every_releases_guests_boot_at_once_their_outputs_in_order(tmp_path):
    (tmp_path / "hold-bookworm").touch()
    (tmp_path / "hold-trixie").touch()
    tier = check_releases(tmp_path, "bookworm", "trixie")
    wait_for(lambda: (tmp_path / "booted-bookworm").exists())
    wait_for(lambda: (tmp_path / "booted-trixie").exists())
    (tmp_path / "hold-trixie").unlink()  # the second release ends first
    (tmp_path / "hold-bookworm").unlink()
    out, _ = tier.communicate(timeout=30)
    assert tier.returncode == 0, out
    assert out.splitlines() == [
        heading("bookworm"),
        "built bookworm",
        "guests of bookworm (make 4242)",
        "guests of bookworm done",
        heading("trixie"),
        "built trixie",
        "guests of trixie (make 4242)",
        "guests of trixie done",
    ]


def test_a_release_that_failed_fails_the_tier_the_others_still_run(tmp_path):
    (tmp_path / "build-rc-bookworm").write_text("1\n")
    tier = check_releases(tmp_path, "bookworm", "trixie")
    out, _ = tier.communicate(timeout=30)
    assert tier.returncode == 1
    assert "guests of bookworm (make 4242)" not in out  # not booted without its image
    assert "guests of trixie done" in out
    (tmp_path / "rc-trixie").write_text("1\n")
    (tmp_path / "build-rc-bookworm").unlink()
    tier = check_releases(tmp_path, "bookworm", "trixie")
    out, _ = tier.communicate(timeout=30)
    assert tier.returncode == 1
    assert "guests of bookworm done" in out and "guests of trixie done" in out
