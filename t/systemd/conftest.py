"""Fixtures for the systemd tier: a real systemd user instance, never a mock.

The session fixture runs t/start-user-systemd.sh and loads its exports into os.environ.
``sd`` gives each test an open SystemdBridge plus helpers; every unit it names is killed,
stopped and reset afterwards, and the test fails if one is still loaded.
"""

import os
import select
import shlex
import subprocess
import sys
import time
import uuid
from collections import defaultdict

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, TOP)


def _add_flux_python_path():
    """Make flux's Python bindings importable (the holds and adoption tests use the broker side)."""
    try:
        import flux  # noqa: F401
    except ImportError:
        try:
            out = subprocess.run(
                ["flux", "env", "sh", "-c", "echo $PYTHONPATH"], capture_output=True, text=True
            ).stdout
        except OSError:
            return
        sys.path[1:1] = [p for p in out.strip().split(":") if p]


_add_flux_python_path()

from flux_sdexec.systemd.bridge import SystemdBridge  # noqa: E402
from flux_sdexec.core.unitstate import TRACKED  # noqa: E402

WAIT_TIMEOUT = 10.0


@pytest.fixture(scope="session", autouse=True)
def user_systemd():
    """Start (or find) the systemd user instance and export its environment."""
    script = os.path.join(TOP, "t", "start-user-systemd.sh")
    out = subprocess.run([script], check=True, stdout=subprocess.PIPE, text=True).stdout
    for line in out.splitlines():
        key, _, value = line.split(" ", 1)[1].partition("=")  # export KEY='value'
        os.environ[key] = shlex.split(value)[0]


def systemctl(*args):
    return subprocess.run(
        ["systemctl", "--user", *args], capture_output=True, text=True, timeout=30
    )


def exec_props(argv, *extra):
    """The properties the sdexec module sends, plus ``extra`` (Name, signature, value)."""
    return [
        ("ExecStart", "a(sasb)", [(argv[0], list(argv), False)]),
        ("RemainAfterExit", "b", True),
        ("Environment", "as", ["LANG=C"]),
        ("Type", "s", "exec"),
        *extra,
    ]


def state(props):
    """(ActiveState, SubState) of a merged props dict."""
    return props.get("ActiveState"), props.get("SubState")


class Harness:
    """An open bridge that records on_change() per unit and waits without sleeping."""

    def __init__(self, shared=False):
        self.signals = defaultdict(list)
        self.views = defaultdict(dict)  # merged props up to cursor
        self.cursor = defaultdict(int)  # signals already looked at by wait_for()
        self.units = []
        self.bridge = SystemdBridge(
            lambda unit, props: self.signals[unit].append(props), TRACKED, shared=shared
        )
        self.bridge.open()

    def new_unit(self, unit=None):
        """Watch a unit name (unique unless given) and clean it up after the test."""
        unit = unit or f"pytest-{uuid.uuid4().hex[:8]}.service"
        self.units.append(unit)
        self.bridge.watch(unit)
        return unit

    def start(self, argv, *extra, unit=None):
        unit = unit or self.new_unit()
        self.bridge.start_transient_unit(unit, exec_props(argv, *extra))
        return unit

    def states(self, unit):
        """Distinct (ActiveState, SubState) pairs seen, in order, repeats collapsed."""
        seen = []
        for props in self.signals[unit]:
            if "ActiveState" in props and (not seen or seen[-1] != state(props)):
                seen.append(state(props))
        return seen

    def wait_for(self, unit, pred, timeout=WAIT_TIMEOUT):
        """Pump until pred(merged props) holds at a signal not consumed by an earlier wait;
        return that merged view."""
        deadline = time.monotonic() + timeout
        view = self.views[unit]
        while True:
            self.bridge.pump()  # first: a call may have left signals queued in sd-bus
            signals = self.signals[unit]
            while self.cursor[unit] < len(signals):
                view.update(signals[self.cursor[unit]])
                self.cursor[unit] += 1
                if pred(view):
                    return dict(view)
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{unit}: timed out, states {self.states(unit)}")
            select.select([self.bridge], [], [], left)

    def wait_state(self, unit, active, sub):
        return self.wait_for(unit, lambda p: state(p) == (active, sub))

    def cleanup(self):
        self.bridge.close()
        for unit in self.units:
            systemctl("kill", "--signal=SIGKILL", unit)
            systemctl("stop", unit)
            systemctl("reset-failed", unit)
        if self.units:
            left = systemctl("list-units", "--all", "--plain", "--no-legend", *self.units)
            assert left.stdout.strip() == "", f"units leaked: {left.stdout}"


@pytest.fixture
def sd(user_systemd):
    harness = Harness()
    yield harness
    harness.cleanup()


@pytest.fixture
def sd2(user_systemd):
    """A second, independent connection."""
    harness = Harness()
    yield harness
    harness.cleanup()


@pytest.fixture
def shared_pair(user_systemd):
    """Two connections of brokers that share the manager (SystemdBridge shared=True)."""
    pair = (Harness(shared=True), Harness(shared=True))
    yield pair
    for harness in pair:
        harness.cleanup()
