"""What the local broker's state machine is doing, asked at unload.

flux-core's ``state-machine.get`` answers ``{"state": "run", ...}``. It is asked
after the module's reactor stopped, with a short timeout: a broker that is itself
exiting (its reactor gone, the module SIGTERMed) cannot answer, and that must not
hold up the unload.
"""

STATE_TIMEOUT = 1.0  # seconds; a live broker answers in milliseconds


def broker_state(handle, log, timeout=STATE_TIMEOUT):
    """The local broker's state (``run``, ``cleanup``, ``finalize``, ...), or None.

    None means it cannot say (no answer in time, an error, an odd payload); the
    caller then treats the instance as shutting down, and the reason is logged.
    """
    try:
        state = handle.rpc("state-machine.get").wait_for(timeout).get()["state"]
        if isinstance(state, str):
            return state
        log.warning(f"state-machine.get: state is {state!r}, not a string")
    except OSError as exc:
        log.warning(f"state-machine.get: {exc.strerror or exc}")
    except (KeyError, TypeError) as exc:
        log.warning(f"state-machine.get: malformed response ({exc!r})")
    return None
