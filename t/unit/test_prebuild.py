"""make check's background image builds and early guests (scripts/vm/prebuild.sh), with stand-ins.

The script is copied into a temporary tree with a stand-in ``scripts/vm/build.sh`` and a
stand-in ``scripts/vm/check-v2.sh`` beside it. The build says nothing to ``--why-not`` (or
why, when told) and otherwise records its pid, says its release and niceness, then waits for
the file ``go`` or 60 s. The early guest (``check-v2.sh --early PID``) writes its release,
niceness and PID to ``early-<pid>``, then waits for the file ``go-guests`` or 60 s, writing
its niceness to ``nice-<pid>`` meanwhile.
"""

import os
import pathlib
import shutil
import subprocess
import time

import pytest

TOP = pathlib.Path(__file__).resolve().parents[2]

BUILD = """#!/bin/sh
[ "$1" = --why-not ] && { cat "$STAND_IN/why" 2>/dev/null; exit 0; }
echo "$$" >>"$STAND_IN/pids"
echo "vm: built $V2_RELEASE at nice $(nice)"
i=0
while [ ! -e "$STAND_IN/go" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
"""

CHECK_V2 = """#!/bin/sh
echo "$V2_RELEASE at nice $(nice) $1 $2" >"$STAND_IN/.early-$$"
mv "$STAND_IN/.early-$$" "$STAND_IN/early-$$"  # whole when seen
i=0
while [ ! -e "$STAND_IN/go-guests" ] && [ $i -lt 600 ]; do
    nice >"$STAND_IN/nice-$$"
    sleep 0.1
    i=$((i + 1))
done
"""


def tree(tmp_path):
    """tmp_path/scripts/vm: prebuild.sh and the stand-ins."""
    vm = tmp_path / "scripts" / "vm"
    vm.mkdir(parents=True)
    shutil.copy(TOP / "scripts" / "vm" / "prebuild.sh", vm)
    for name, text in (("build.sh", BUILD), ("check-v2.sh", CHECK_V2)):
        (vm / name).write_text(text)
        (vm / name).chmod(0o755)


def niceness(pid):
    """The niceness of process ``pid`` (/proc/PID/stat's 19th field)."""
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])


def early_guests(tmp_path):
    """{pid: what the stand-in early guest wrote} of those started."""
    return {int(p.name[6:]): p.read_text().strip() for p in tmp_path.glob("early-*")}


def run(tmp_path, *args):
    """prebuild.sh ARGS of the tree ``tree`` made, its cache in tmp_path/cache."""
    env = dict(os.environ, STAND_IN=str(tmp_path), SDEXEC_BUILDS=str(tmp_path / "cache"))
    script = tmp_path / "scripts" / "vm" / "prebuild.sh"
    return subprocess.run([str(script), *args], env=env, capture_output=True, text=True, timeout=60)


def wait_for(predicate, seconds=20):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"not within {seconds} s"
        time.sleep(0.1)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_builds_each_release_then_boots_its_early_guest_at_nice_19(tmp_path):
    tree(tmp_path)
    watched = subprocess.Popen(["sleep", "60"])
    try:
        out = run(tmp_path, "start", str(watched.pid), "bookworm", "trixie")
        assert out.returncode == 0, out.stderr
        assert "building the v2 images of bookworm trixie in the background" in out.stdout
        wait_for(lambda: (tmp_path / "pids").exists())
        assert early_guests(tmp_path) == {}  # not before its image
        (tmp_path / "go").touch()
        wait_for(lambda: len(early_guests(tmp_path)) == 2)
        guests = early_guests(tmp_path)
        assert sorted(guests.values()) == [
            f"bookworm at nice 19 --early {watched.pid}",
            f"trixie at nice 19 --early {watched.pid}",
        ]
        report = run(tmp_path, "report")  # waits for the builds, not for the guests
        assert report.returncode == 0, report.stderr
        lines = report.stdout.splitlines()
        assert lines[:2] == [
            "prebuild: vm: built bookworm at nice 19",
            "prebuild: vm: built trixie at nice 19",
        ]
        assert lines[2].startswith("prebuild: vm: background image builds done in ")
        assert not (tmp_path / "cache" / "v2-prebuild.log").exists()
        assert run(tmp_path, "report").stdout == ""  # once only
        assert all(alive(pid) for pid in guests)
        (tmp_path / "go-guests").touch()
        wait_for(lambda: not any(alive(pid) for pid in guests))
    finally:
        watched.kill()
        watched.wait()


def test_the_builds_stop_when_make_ends_first(tmp_path):
    """A tier failed: make exits, and the builds (still waiting) are stopped with it."""
    tree(tmp_path)
    watched = subprocess.Popen(["sleep", "60"])
    out = run(tmp_path, "start", str(watched.pid), "bookworm")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: (tmp_path / "pids").exists())
    build = int((tmp_path / "pids").read_text())
    assert alive(build)
    watched.kill()
    watched.wait()
    wait_for(lambda: not alive(build))
    report = run(tmp_path, "report")
    assert (
        "prebuild: vm: make ended first: the image builds and early guests stopped" in report.stdout
    )
    assert early_guests(tmp_path) == {}


def test_the_early_guests_stop_when_make_ends_first(tmp_path):
    tree(tmp_path)
    (tmp_path / "go").touch()
    watched = subprocess.Popen(["sleep", "60"])
    out = run(tmp_path, "start", str(watched.pid), "bookworm")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: len(early_guests(tmp_path)) == 1)
    (guest,) = early_guests(tmp_path)
    assert alive(guest)
    watched.kill()
    watched.wait()
    wait_for(lambda: not alive(guest))


def test_nothing_starts_where_the_guest_cannot_be_built(tmp_path):
    tree(tmp_path)
    (tmp_path / "why").write_text("not root\n")
    out = run(tmp_path, "start", str(os.getpid()), "bookworm")
    assert (out.returncode, out.stdout) == (0, "")
    assert not (tmp_path / "cache").exists()
    assert run(tmp_path, "report").stdout == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="only root sets a niceness back to 0")
def test_report_sets_the_session_and_only_it_back_to_niceness_0(tmp_path):
    """The host tiers are over: the early guests get the cores' fair share (a guest left at
    19 beside others would starve into its own timeouts); make's own processes keep theirs."""
    tree(tmp_path)
    (tmp_path / "go").touch()
    watched = subprocess.Popen(["nice", "-n", "5", "sleep", "60"])
    try:
        assert run(tmp_path, "start", str(watched.pid), "bookworm").returncode == 0
        wait_for(lambda: len(early_guests(tmp_path)) == 1)
        (guest,) = early_guests(tmp_path)
        nice = tmp_path / f"nice-{guest}"
        wait_for(lambda: nice.exists() and nice.read_text() == "19\n")
        assert run(tmp_path, "report").returncode == 0
        wait_for(lambda: nice.read_text() == "0\n")
        assert niceness(watched.pid) == 5
    finally:
        (tmp_path / "go-guests").touch()
        watched.kill()
        watched.wait()
