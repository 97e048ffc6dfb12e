"""The transition table: total where it must be, terminal states without exits."""

import inspect

from flux_sdexec.core import events
from flux_sdexec.core.events import Unloading
from flux_sdexec.core.states import ESCALATING, LIVE, TERMINAL, Phase, ProcState
from flux_sdexec.core.table import TABLE

INPUTS = [
    cls
    for _, cls in inspect.getmembers(events, inspect.isclass)
    if any(TABLE.get((s, cls)) for s in ProcState)
]


def test_terminal_states_have_no_exits():
    """Nothing may follow DONE."""
    assert not [key for key in TABLE if key[0] in TERMINAL]


def test_every_live_state_can_unload():
    """Unloading is legal in every non-terminal state and always ends in DONE."""
    for state in LIVE:
        assert TABLE[(state, Unloading)][0] == {ProcState.DONE}


def test_targets_are_states_and_keys_are_inputs_or_phases():
    """Every target is a ProcState; every key an input event or a unit phase."""
    assert all(t in ProcState for targets, _ in TABLE.values() for t in targets)
    assert all(isinstance(key, Phase) or key in INPUTS for _, key in TABLE)


def test_every_input_is_taken_in_every_escalating_state_but_the_acks():
    """While the unit runs its course every input has a row, except the answers to
    orders only given elsewhere (OutputDrained: a zombie's wait; ContainmentChecked:
    before "started"; AnswerMaybeLost: after a wait was answered)."""
    acks = {events.OutputDrained, events.ContainmentChecked, events.AnswerMaybeLost}
    missing = [(s, i.__name__) for s in ESCALATING for i in INPUTS if (s, i) not in TABLE]
    assert all(events.__dict__[name] in acks for _, name in missing)
