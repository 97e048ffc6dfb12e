"""Signals of other brokers' units never reach a module whose brokers share the manager."""

TRUE = "/bin/true"


def run_to_dead(harness):
    """Start `true` on ``harness``, stop it, and see it inactive/dead; its unit name."""
    unit = harness.start([TRUE])
    harness.wait_state(unit, "active", "exited")
    harness.bridge.stop_unit(unit)
    harness.wait_state(unit, "inactive", "dead")
    return unit


def test_shared_bridges_see_only_their_units(shared_pair, sd):
    """A's unit goes through its whole life; then B runs one of its own. Every signal of A's
    unit was sent before B's (one manager, one bus daemon: in order), so by then B would have
    had them: it had none, only the bus's NameAcquired. A private connection (``sd``) got
    them all, counted as untracked."""
    a, b = shared_pair
    assert a.bridge.via == b.bridge.via == "the user bus"
    assert a.bridge.signals.stats()["filter"] == "per-unit"
    private_before = sd.bridge.signals.untracked
    theirs = run_to_dead(a)
    run_to_dead(b)
    sd.bridge.pump()
    assert theirs not in b.signals
    assert b.bridge.signals.untracked <= 1
    assert sd.bridge.signals.untracked - private_before >= 2


def test_matches_return_after_reconnect(shared_pair):
    """A unit watched before a reconnect, and one watched after, both get their signals."""
    a, _ = shared_pair
    before = a.new_unit()
    a.bridge.reconnect()
    after = a.start([TRUE])
    a.wait_state(after, "active", "exited")
    a.start([TRUE], unit=before)
    a.wait_state(before, "active", "exited")
    for unit in (before, after):
        a.bridge.stop_unit(unit)
        a.wait_state(unit, "inactive", "dead")
    assert a.bridge.signals.untracked <= 2  # a NameAcquired per connection
