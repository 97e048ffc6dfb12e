"""holds.py's connection on a fake sd-bus that records, in one list, every connection
opened, every call sent (and on which connection) and every close: the order in which
sdexec's references to its units are taken and dropped. No systemd, no sleeping: the
test answers the calls and fires the timers and the fd watcher by hand."""

import errno
from types import SimpleNamespace

import fluxpath
from stubs import StubLog, StubWatchers

fluxpath.add()

from flux_sdexec.systemd import holds as holds_mod  # noqa: E402
from flux_sdexec.systemd import sdbus  # noqa: E402
from flux_sdexec.systemd.holds import Holds  # noqa: E402


class Call:
    def __init__(self, member, unit):
        self.member, self.unit = member, unit


class Reply:
    def __init__(self, kind, cookie, errnum=None):
        self.kind, self.cookie, self.errnum = kind, cookie, errnum


class World:
    """Every connection the holds open, and one record of what happened, in order:
    ("open", n), (member, unit, n) for a call sent on connection n, ("close", n).
    ``answering``: whether a new connection answers its calls at once."""

    def __init__(self):
        self.events, self.buses = [], []
        self.answering = True
        self.not_taken = set()  # members systemd does not take (it is reexecuting)

    def bus(self, user_mode=True):
        bus = FakeBus(self, len(self.buses) + 1)
        self.buses.append(bus)
        return bus

    def since(self, event):
        return self.events[self.events.index(event) + 1 :]


class FakeBus:
    """sdbus.Bus as holds.py uses it. A call is answered at once (``answering``) or when
    the test says so (``answer``); ``lose()`` makes the next process() fail."""

    def __init__(self, world, n):
        self.world, self.n = world, n
        self.answering = world.answering
        self.cookie = 0
        self.ready, self.unanswered = [], []
        self.lost = self.closed = False
        world.events.append(("open", n))

    def new_call(self, dest, path, iface, member):
        return Call(member.decode(), path if isinstance(path, str) else None)

    def send(self, m):
        self.cookie += 1
        self.world.events.append((m.member, m.unit, self.n))
        if m.member in self.world.not_taken:  # the bus's NoReply: recipient disconnected
            reply = Reply(sdbus.METHOD_ERROR, self.cookie, errno.ETIMEDOUT)
        else:
            reply = Reply(sdbus.METHOD_RETURN, self.cookie)
        (self.ready if self.answering else self.unanswered).append(reply)
        return self.cookie

    def call(self, m, usec=0):
        self.world.events.append((m.member, m.unit, self.n))
        if not self.answering:
            raise OSError(errno.ETIMEDOUT, "Connection timed out")

    def answer(self):
        self.ready += self.unanswered
        self.unanswered = []

    def lose(self):
        self.lost = True

    def process(self):
        if self.lost:
            raise OSError(errno.ECONNRESET, "Connection reset by peer")
        if not self.ready:
            return 0, None, 0, 0
        reply = self.ready.pop(0)
        return 1, reply, reply.kind, reply.cookie

    def fileno(self):
        return 100 + self.n

    def close(self, flush=True):
        assert not self.closed, f"connection {self.n} closed twice"
        self.closed = True
        self.world.events.append(("close", self.n))


def fake_sdbus(world):
    """The names holds.py takes from sdbus, on ``world``'s connections."""
    return SimpleNamespace(
        Bus=world.bus,
        DISCONNECTED=sdbus.DISCONNECTED,
        METHOD_ERROR=sdbus.METHOD_ERROR,
        ffi=SimpleNamespace(NULL=None),
        lib=SimpleNamespace(sd_bus_message_unref=lambda m: None),
        path_encode=lambda prefix, unit: unit,
        reply_error=lambda m: (m.errnum or errno.ENOENT, "from the fake bus"),
    )


def on_fake_bus(monkeypatch, on_released=None):
    """Holds on ``World``'s connections: (holds, world, watchers, units released)."""
    world, watchers, released = World(), StubWatchers(), []
    monkeypatch.setattr(holds_mod, "sdbus", fake_sdbus(world))
    monkeypatch.setattr(holds_mod, "append", lambda m, sig, unit: setattr(m, "unit", unit))
    holds = Holds(
        StubLog(), watchers, on_released=on_released or (lambda unit, lost: released.append(unit))
    )
    return holds, world, watchers, released


def late_unref(holds, world, watchers):
    """a.service held, b.service released on a connection that stopped answering, and the
    Unref's UNREF_TIMEOUT passed; the next connection answers only when told."""
    holds.hold("a.service")
    holds.hold("b.service")
    world.buses[0].answering = False
    holds.release("b.service")
    world.answering = False
    [timer] = watchers.armed()
    timer.fire()


def test_a_late_unref_takes_every_hold_again_before_the_old_connection_closes(monkeypatch):
    """Review 2026-12b finding 3: the late Unref closed the connection (dropping every
    reference) before the new one had sent, let alone seen answered, its Refs: an ended
    unit held only by sdexec could be collected in the gap."""
    holds, world, watchers, released = on_fake_bus(monkeypatch)
    late_unref(holds, world, watchers)
    assert world.since(("Unref", "b.service", 1)) == [("open", 2), ("Ref", "a.service", 2)]
    assert released == [] and holds.releasing("b.service")
    world.buses[1].answer()  # systemd took a.service's new reference
    watchers.fds[1].fire()
    assert world.since(("Unref", "b.service", 1)) == [
        ("open", 2),
        ("Ref", "a.service", 2),
        ("close", 1),  # only now: a.service was never without a reference
    ]
    assert released == ["b.service"] and not holds.releasing("b.service")
    assert holds.held == {"a.service"}


def test_a_reconnect_destroys_the_old_connection_s_watcher(monkeypatch):
    """A stopped fd watcher stays referenced by the flux handle until destroyed."""
    holds, world, watchers, _ = on_fake_bus(monkeypatch)
    late_unref(holds, world, watchers)
    old, new = watchers.fds
    assert old.destroyed and not old.running
    assert new.running and not new.destroyed


def test_a_release_while_the_old_connection_is_open_waits_for_its_close(monkeypatch):
    """The old connection still refers to every unit held before the reconnect: a unit
    released meanwhile on the new one keeps its name until the old one is closed too."""
    holds, world, watchers, released = on_fake_bus(monkeypatch)
    late_unref(holds, world, watchers)
    world.buses[1].answering = True
    holds.release("a.service")  # sent after its Ref on the new connection: both answered
    assert world.events[-2:] == [("Unref", "a.service", 2), ("GetUnit", "a.service", 2)]
    assert released == [] and holds.releasing("a.service")
    world.buses[1].answer()
    watchers.fds[1].fire()
    assert world.events[-1] == ("close", 1)
    assert sorted(released) == ["a.service", "b.service"]


def test_a_second_late_answer_keeps_the_first_old_connection(monkeypatch):
    """While the new connection's Refs are unanswered the old one stays, whatever else is
    late: at most two connections, and the old one closes once the Refs are answered."""
    holds, world, watchers, released = on_fake_bus(monkeypatch)
    late_unref(holds, world, watchers)
    holds.release("a.service")  # on the new connection, not answered either
    [timer] = watchers.armed()
    timer.fire()
    assert [e for e in world.events if e[0] in ("open", "close")] == [("open", 1), ("open", 2)]
    assert released == []
    world.buses[1].answering = True  # the bus is back: the GetUnit after the Unref too
    world.buses[1].answer()
    watchers.fds[1].fire()
    assert world.events[-1] == ("close", 1)
    assert sorted(released) == ["a.service", "b.service"]


def test_a_lost_connection_is_replaced_at_once(monkeypatch):
    """A connection that failed has no reference left to keep: closed, then every hold
    taken again on a new one; the releases in flight on it are over."""
    holds, world, watchers, released = on_fake_bus(monkeypatch)
    holds.hold("a.service")
    holds.hold("b.service")
    world.buses[0].answering = False
    holds.release("b.service")
    world.buses[0].lose()
    watchers.fds[0].fire()
    assert world.since(("Unref", "b.service", 1)) == [
        ("close", 1),
        ("open", 2),
        ("Ref", "a.service", 2),
    ]
    assert released == ["b.service"]
    assert watchers.fds[0].destroyed


def test_nothing_held_closes_the_old_connection_at_once(monkeypatch):
    """The late release was of the only unit held: no Ref to wait for."""
    holds, world, watchers, released = on_fake_bus(monkeypatch)
    holds.hold("b.service")
    world.buses[0].answering = False
    holds.release("b.service")
    watchers.armed()[0].fire()
    assert world.since(("Unref", "b.service", 1)) == [("open", 2), ("close", 1)]
    assert released == ["b.service"]


def test_close_closes_both_connections(monkeypatch):
    """The unload's close, with the old connection still open: both go, the releases too."""
    holds, world, watchers, released = on_fake_bus(monkeypatch)
    late_unref(holds, world, watchers)
    holds.close()
    assert sorted(e for e in world.events if e[0] == "close") == [("close", 1), ("close", 2)]
    assert released == [] or released == ["b.service"]
    assert not holds.releasing("b.service")


def test_a_release_is_lost_unless_systemd_answered_on_a_connection_that_stays(monkeypatch):
    """Review 2026-12b finding 2: a release over with its connection closed said the name
    was free, though systemd drops the reference only once it learns the connection went
    (and may have the unit loaded meanwhile). Such a release is reported ``lost``."""
    seen = []
    holds, world, watchers, _ = on_fake_bus(monkeypatch, lambda u, lost: seen.append((u, lost)))
    for unit in ("a.service", "b.service", "c.service"):
        holds.hold(unit)
    holds.release("a.service")  # Unref and GetUnit answered at once
    assert seen == [("a.service", False)]
    world.buses[0].answering = False
    holds.release("b.service")
    world.buses[0].lose()
    watchers.fds[0].fire()
    assert seen[1:] == [("b.service", True)]
    world.buses[1].answering = False
    holds.release("c.service")
    watchers.armed()[0].fire()  # late: the holds move to a third connection
    world.buses[2].answer()
    watchers.fds[2].fire()  # its Ref answered: the second connection closes
    assert world.events[-1] == ("close", 2) and seen[2:] == [("c.service", True)]


def test_an_unref_systemd_did_not_take_is_not_taken_for_a_release(monkeypatch):
    """Defect 9 of issue 33 (units left loaded after a reexec storm): an Unref sent as
    systemd re-executes is answered by the bus ("recipient disconnected without replying")
    while systemd keeps the reference through the reexec. It was taken for an answer, the
    unit looked up and released: the unit stayed loaded until the connection closed. Now
    the holds move to a new connection, whose close of the old one drops the reference."""
    seen = []
    holds, world, watchers, _ = on_fake_bus(monkeypatch, lambda u, lost: seen.append((u, lost)))
    holds.hold("a.service")
    holds.hold("b.service")
    world.not_taken = {"Unref"}
    holds.release("b.service")
    assert world.events[-1] == ("Unref", "b.service", 1) and seen == []
    world.not_taken = set()
    [timer] = watchers.armed()
    timer.fire()
    watchers.fds[1].fire()  # the new connection's Ref answered
    assert world.since(("Unref", "b.service", 1)) == [
        ("open", 2), ("Ref", "a.service", 2), ("close", 1)
    ]  # fmt: skip
    assert seen == [("b.service", True)] and holds.held == {"a.service"}


def test_a_ref_systemd_did_not_take_stays_held_and_is_taken_again(monkeypatch):
    """A Ref answered by the bus during a reexec may have been taken (systemd keeps it) or
    not: the unit stays held (a later Unref drops it either way), and the holds move to a
    new connection so that systemd has exactly one reference (Refs count: a second Ref on
    one connection would need two Unrefs)."""
    holds, world, watchers, _ = on_fake_bus(monkeypatch)
    world.not_taken = {"Ref"}
    holds.hold("a.service")
    assert holds.held == {"a.service"}
    world.not_taken = set()
    [timer] = watchers.armed()
    timer.fire()
    watchers.fds[1].fire()
    assert world.since(("Ref", "a.service", 1)) == [
        ("open", 2), ("Ref", "a.service", 2), ("close", 1)
    ]  # fmt: skip
    assert holds.held == {"a.service"} and watchers.armed() == []


def moves_given_up(monkeypatch):
    """a.service held, and MOVES_MAX moves in a row whose Refs were not taken either:
    (holds, world, watchers)."""
    holds, world, watchers, _ = on_fake_bus(monkeypatch)
    world.not_taken = {"Ref"}
    holds.hold("a.service")
    for _ in range(holds_mod.MOVES_MAX):
        watchers.armed()[0].fire()
        watchers.fds[-1].fire()
    return holds, world, watchers


def test_moves_stop_after_too_many_refs_not_taken(monkeypatch):
    holds, world, watchers = moves_given_up(monkeypatch)
    assert watchers.armed() == [] and len(world.buses) == holds_mod.MOVES_MAX + 1
    assert holds.held == {"a.service"}
    assert [bus.closed for bus in world.buses] == [True] * holds_mod.MOVES_MAX + [False]


def test_a_move_keeps_the_old_connection_until_a_new_one_s_refs_are_taken(monkeypatch):
    """Review 2026-12c finding 6a: a Ref on the new connection answered by the bus (systemd
    re-executing again) counted as answered, and the old connection, the one reference
    systemd surely had, was closed. It stays open until a move's Refs are all taken."""
    holds, world, watchers, _ = on_fake_bus(monkeypatch)
    holds.hold("a.service")  # taken on connection 1
    world.not_taken = {"Ref"}
    holds.hold("b.service")
    watchers.armed()[0].fire()  # the holds move to connection 2, whose Refs are not taken
    watchers.fds[-1].fire()
    assert [e for e in world.events if e[0] == "close"] == [], "closed before a Ref was taken"
    world.not_taken = set()
    [timer] = watchers.armed()
    timer.fire()  # the holds move again, to connection 3: both Refs taken
    assert [e for e in world.events if e[0] == "close"] == []
    watchers.fds[-1].fire()
    opened = world.since(("open", 3))
    assert sorted(opened[:2]) == [("Ref", "a.service", 3), ("Ref", "b.service", 3)]
    assert opened[2:] == [("close", 1), ("close", 2)]
    assert holds.held == {"a.service", "b.service"} and watchers.armed() == []


def test_moves_resume_once_systemd_takes_a_ref_again(monkeypatch):
    """Review 2026-12c finding 6b: once MOVES_MAX moves took no Ref, no move ever started
    again: a reexec weeks later left its Refs not taken for the module's life."""
    holds, world, watchers = moves_given_up(monkeypatch)
    assert watchers.armed() == []
    world.not_taken = set()
    holds.hold("b.service")  # systemd is back
    world.not_taken = {"Ref"}
    holds.hold("c.service")  # the next reexec
    assert len(watchers.armed()) == 1, "no move armed for a Ref not taken"
    world.not_taken = set()
    watchers.armed()[0].fire()
    assert ("open", holds_mod.MOVES_MAX + 2) in world.events
