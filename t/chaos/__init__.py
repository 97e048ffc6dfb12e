"""flux-sdexec's chaos test: jobs through sdexec while systemd, the bus and the module misbehave.

schedule.py (the plan from the seed) and verdict.py (invariants over what a run recorded) are
pure and unit-tested in t/unit/test_chaos.py; procs.py, faults.py, jobs.py, inner.py and run.py
touch the machine. Run it with ``make chaos`` (doc/dev/chaos.md).
"""
