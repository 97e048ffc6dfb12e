"""The transition table: total where it must be, terminal states without exits."""

from flux_sdexec.events import UnitChanged, Unloading
from flux_sdexec.states import TERMINAL, TRANSITIONS, ProcState


def test_terminal_states_have_no_exits():
    """Nothing may follow DONE."""
    assert not [key for key in TRANSITIONS if key[0] in TERMINAL]


def test_every_live_state_can_unload():
    """Unloading is legal in every non-terminal state and always ends in DONE."""
    for state in set(ProcState) - TERMINAL:
        assert TRANSITIONS[(state, Unloading)] == {ProcState.DONE}


def test_targets_are_states():
    """Every target in the table is a ProcState, and a running process can reach DONE."""
    assert all(t in ProcState for targets in TRANSITIONS.values() for t in targets)
    assert ProcState.DONE in TRANSITIONS[(ProcState.RUNNING, UnitChanged)]
