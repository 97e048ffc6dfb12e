"""flux-sdexec's chaos test: jobs through sdexec while systemd, the bus and the module misbehave.

schedule.py (the plan from the seed), verdict.py (invariants over what a run recorded) and
nodeverdict.py (which job endings and drains a node fault explains) are pure and unit-tested in
t/unit/test_chaos.py and t/unit/test_chaos_nodes.py; procs.py, faults.py, jobs.py, inner.py and
run.py touch the machine, and on the nodes of t/site/nodes.sh also nodes.py, nodefaults.py and
nodesrun.py. Run it with ``make chaos`` or ``make chaos NODES=3`` (doc/dev/chaos.md).
"""
