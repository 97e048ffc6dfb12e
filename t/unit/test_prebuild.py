"""make check's background image build (scripts/vm/prebuild.sh), with a stand-in build.sh.

The script is copied with a stand-in ``scripts/vm/build.sh`` beside it into a temporary
tree: the stand-in says nothing to ``--why-not`` (or why, when told) and otherwise records
its release and niceness, then waits for a file or 60 s.
"""

import os
import pathlib
import shutil
import subprocess
import time

TOP = pathlib.Path(__file__).resolve().parents[2]

BUILD = """#!/bin/sh
[ "$1" = --why-not ] && { cat "$STAND_IN/why" 2>/dev/null; exit 0; }
echo "$$" >>"$STAND_IN/pids"
echo "vm: built $V2_RELEASE at nice $(nice)"
i=0
while [ ! -e "$STAND_IN/go" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
"""


def tree(tmp_path):
    """tmp_path/scripts/vm: prebuild.sh and the stand-in build.sh."""
    vm = tmp_path / "scripts" / "vm"
    vm.mkdir(parents=True)
    shutil.copy(TOP / "scripts" / "vm" / "prebuild.sh", vm)
    (vm / "build.sh").write_text(BUILD)
    (vm / "build.sh").chmod(0o755)


def run(tmp_path, *args):
    """prebuild.sh ARGS of the tree ``tree`` made, its cache in tmp_path/cache."""
    env = dict(os.environ, STAND_IN=str(tmp_path), SDEXEC_BUILDS=str(tmp_path / "cache"))
    script = tmp_path / "scripts" / "vm" / "prebuild.sh"
    return subprocess.run([str(script), *args], env=env, capture_output=True, text=True, timeout=60)


def wait_for(predicate, seconds=10):
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


def test_builds_each_release_at_nice_19_and_report_waits_and_prints(tmp_path):
    tree(tmp_path)
    watched = subprocess.Popen(["sleep", "60"])
    try:
        out = run(tmp_path, "start", str(watched.pid), "bookworm", "trixie")
        assert out.returncode == 0, out.stderr
        assert "building the v2 images of bookworm trixie in the background" in out.stdout
        wait_for(lambda: (tmp_path / "pids").exists())
        (tmp_path / "go").touch()
        report = run(tmp_path, "report")
        assert report.returncode == 0, report.stderr
        lines = report.stdout.splitlines()
        assert lines[:2] == [
            "prebuild: vm: built bookworm at nice 19",
            "prebuild: vm: built trixie at nice 19",
        ]
        assert lines[2].startswith("prebuild: vm: background image builds done in ")
        assert not (tmp_path / "cache" / "v2-prebuild.log").exists()
        assert run(tmp_path, "report").stdout == ""  # once only
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
    assert "prebuild: vm: make ended before the image builds: stopped" in report.stdout


def test_nothing_starts_where_the_guest_cannot_be_built(tmp_path):
    tree(tmp_path)
    (tmp_path / "why").write_text("not root\n")
    out = run(tmp_path, "start", str(os.getpid()), "bookworm")
    assert (out.returncode, out.stdout) == (0, "")
    assert not (tmp_path / "cache").exists()
    assert run(tmp_path, "report").stdout == ""
