"""The v2 tier's second guest booted early (scripts/vm/check-v2.sh --early) and waited for.

check-v2.sh and the libraries it sources are copied into a temporary tree with a stand-in
``scripts/vm/run.sh``: it prints what it would boot (virtual CPUs, timeout, niceness, parts
and tests) and adds ``boot <vCPUs>`` to the file ``runs``, then, while the file
``hold-<vCPUs>`` exists, writes its niceness to ``nice-<vCPUs>`` (at most 60 s), adds ``end
<vCPUs>`` to ``runs`` and exits with ``rc-<vCPUs>`` (default 0).
"""

import os
import pathlib
import shutil
import subprocess

import pytest

from test_prebuild import wait_for

TOP = pathlib.Path(__file__).resolve().parents[2]

RUN = """#!/bin/sh
smp= timeout=
while [ "$1" != -- ]; do
    case $1 in --smp) smp=$2 ;; --timeout) timeout=$2 ;; esac
    shift
done
shift
echo "guest smp=$smp timeout=$timeout nice=$(nice)" $2 $3
echo "boot $smp" >>"$STAND_IN/runs"
i=0
while [ -e "$STAND_IN/hold-$smp" ] && [ $i -lt 600 ]; do
    nice >"$STAND_IN/nice-$smp"
    sleep 0.1
    i=$((i + 1))
done
echo "end $smp" >>"$STAND_IN/runs"
exit "$(cat "$STAND_IN/rc-$smp" 2>/dev/null || echo 0)"
"""

FIRST_ALONE = "guest smp=3 timeout=3000 nice=0 V2_PARTS=upstream V2_OURS="
EARLY = (
    "guest smp=2 timeout=4800 nice=0 V2_PARTS=ours production"
    " V2_OURS=t0011-sdexec-mapper.t t0032-sdexec-usage-tree.t t0013-sdexec-containment-check.t"
    " t0016-sdexec-kernel-limits.t t0045-sdexec-containment-v2.t t0031-sdexec-usage.t"
)


@pytest.fixture
def tree(tmp_path):
    """tmp_path/top: check-v2.sh, its libraries, the stand-in run.sh; a built flux-core."""
    vm = tmp_path / "top" / "scripts" / "vm"
    vm.mkdir(parents=True)
    for name in ("check-v2.sh", "release-lib.sh"):
        shutil.copy(TOP / "scripts" / "vm" / name, vm)
    shutil.copy(TOP / "scripts" / "build-lib.sh", vm.parent)
    (vm / "run.sh").write_text(RUN)
    (vm / "run.sh").chmod(0o755)
    (tmp_path / "flux-core").mkdir()
    (tmp_path / "flux-core" / ".flux-sdexec-built").touch()
    (tmp_path / "vm").mkdir()
    return tmp_path


def check_v2(tree, *args, make_pid=None):
    """check-v2.sh ARGS of the tree, started (a Popen), its output piped."""
    env = dict(
        os.environ,
        STAND_IN=str(tree),
        V2_RELEASE="bookworm",
        VM_DIR=str(tree / "vm"),
        FLUX_CORE_BUILD=str(tree / "flux-core"),
    )
    env.pop("MAKE_PID", None)
    if make_pid is not None:
        env["MAKE_PID"] = str(make_pid)
    cmd = [str(tree / "top" / "scripts" / "vm" / "check-v2.sh"), *args]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_the_early_guest_runs_every_test_but_upstreams_and_is_waited_for(tree):
    (tree / "hold-2").touch()
    (tree / "hold-3").touch()
    early = check_v2(tree, "--early", "4242")
    wait_for(lambda: (tree / "nice-2").exists())
    main = check_v2(tree, make_pid=4242)
    wait_for(lambda: (tree / "nice-3").exists())  # the first guest booted
    (tree / "hold-3").unlink()  # and done; the early one still runs
    (tree / "hold-2").unlink()
    out, _ = main.communicate(timeout=30)
    assert early.wait(timeout=30) == 0
    assert main.returncode == 0, out
    lines = out.splitlines()
    assert lines[0] == FIRST_ALONE
    assert lines[1] == (
        "check-v2: the second guest (booted during the host tiers: our tests,"
        " the production instance):"
    )
    assert lines[2] == EARLY
    assert lines[3] == "check-v2: exit 0"  # written once it ended
    assert lines[4].startswith("check-v2: both bookworm guests done in ")
    assert not (tree / "vm" / "early.log").exists()
    assert not (tree / "vm" / "early.make").exists()


def test_a_failed_early_guest_fails_the_tier(tree):
    (tree / "rc-2").write_text("1\n")
    assert check_v2(tree, "--early", "4242").wait(timeout=30) == 0
    main = check_v2(tree, make_pid=4242)
    out, _ = main.communicate(timeout=30)
    assert main.returncode == 1
    assert "check-v2: exit 1" in out.splitlines()


def test_an_early_guest_of_another_make_is_not_used(tree):
    assert check_v2(tree, "--early", "4242").wait(timeout=30) == 0
    main = check_v2(tree, make_pid=4343)
    out, _ = main.communicate(timeout=30)
    assert main.returncode == 0, out
    assert (
        "guest smp=3 timeout=3000 nice=0 V2_PARTS=upstream ours"
        " V2_OURS=t0011-sdexec-mapper.t t0032-sdexec-usage-tree.t"
    ) in out
    assert (
        "guest smp=2 timeout=3000 nice=0 V2_PARTS=ours production"
        " V2_OURS=t0013-sdexec-containment-check.t t0016-sdexec-kernel-limits.t"
        " t0045-sdexec-containment-v2.t t0031-sdexec-usage.t"
    ) in out
    assert (tree / "vm" / "early.log").exists()  # the other make's, left alone


def test_a_second_early_guest_of_the_release_is_refused(tree):
    (tree / "hold-2").touch()
    early = check_v2(tree, "--early", "4242")
    wait_for(lambda: (tree / "nice-2").exists())
    again = check_v2(tree, "--early", "4343")
    out, _ = again.communicate(timeout=30)
    (tree / "hold-2").unlink()
    early.wait(timeout=30)
    assert again.returncode == 1
    assert out == "check-v2: an early bookworm guest runs already\n"


def runs(tree):
    """The stand-in guests' boots and ends, in order."""
    path = tree / "runs"
    return path.read_text().splitlines() if path.exists() else []


def waiting_for_a_lock(proc):
    """Whether ``proc`` waits in flock (its child)."""
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm, rest = text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1]
        if comm == "flock" and int(rest.split()[1]) == proc.pid:
            return True
    return False


def test_a_pair_boots_after_the_pair_before_it(tree):
    """Two guests keep the two cores busy: a release whose pair boots now waits for the
    pair before it (scripts/vm/check-releases.sh starts every release at once)."""
    (tree / "hold-2").touch()
    (tree / "hold-3").touch()
    first = check_v2(tree)
    wait_for(lambda: sorted(runs(tree)) == ["boot 2", "boot 3"])
    second = check_v2(tree)
    wait_for(lambda: waiting_for_a_lock(second))
    assert sorted(runs(tree)) == ["boot 2", "boot 3"]  # not booted while the first pair runs
    (tree / "hold-2").unlink()
    (tree / "hold-3").unlink()
    assert first.wait(timeout=30) == 0 and second.wait(timeout=30) == 0
    order = runs(tree)
    assert sorted(order[:4]) == ["boot 2", "boot 3", "end 2", "end 3"], order
    assert sorted(order[4:]) == ["boot 2", "boot 3", "end 2", "end 3"], order


def test_a_first_guest_joining_its_early_guest_boots_while_another_pair_runs(tree):
    (tree / "hold-2").touch()
    (tree / "hold-3").touch()
    pair = check_v2(tree)
    early = check_v2(tree, "--early", "4242")
    wait_for(lambda: len(runs(tree)) == 3)
    main = check_v2(tree, make_pid=4242)
    wait_for(lambda: sorted(runs(tree)) == ["boot 2", "boot 2", "boot 3", "boot 3"])
    (tree / "hold-2").unlink()
    (tree / "hold-3").unlink()
    for proc in (pair, early, main):
        assert proc.wait(timeout=30) == 0
