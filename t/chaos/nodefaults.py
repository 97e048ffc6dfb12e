"""The faults on the nodes of t/site/nodes.sh: each aimed at one node, two of them new.

- ``brokerkill``: node N's broker SIGKILLed (its pid from the harness's pidfile; never rank
  0's, whose loss ends the instance: the schedule never draws it), left dead 0-5 s, and
  started again (``nodes.sh broker-up N``, ``broker-ready N``: it answers and runs sdexec);
- ``managerkill``: node N's systemd manager SIGKILLed, its session bus SIGTERMed, 0-3 s
  later a new manager started (``nodes.sh manager-up N``), as t0113 does;
- reexec, reload, buskill, stall: on node N's manager and bus (its systemctl and busctl);
  modstop: the sdexec module process of node N's broker as it is now; clientkill as ever.

A fault ends only when the node is whole again, even when the run is told to stop meanwhile.
"""

import time

from .faults import Injector


class NodeInjector(Injector):
    """An Injector whose faults reach one node each (see faults.Injector for the rest).

    Args:
        nodes: a nodes.Nodes.
        brokers: ``{rank: broker pid}``, kept up to date here when a broker starts again
            (the run's RSS sampling reads it).
    """

    def __init__(self, nodes, plan, brokers, module_path, srcdir, log):
        super().__init__(plan, brokers, module_path, srcdir, log)
        self.nodes = nodes

    def describe(self, fault):
        return fault.describe(every_rank=True)

    def manager_env(self, rank):
        return self.nodes.env(rank)

    def broker_pid(self, rank):
        pid = self.nodes.pid(rank, "broker")
        if pid is None:
            raise RuntimeError(f"node{rank}'s broker is not running")
        return pid

    def _brokerkill(self, fault):
        if fault.rank == 0:
            raise RuntimeError("rank 0's broker is never killed: the instance would end")
        old = self.nodes.kill_broker(fault.rank)
        time.sleep(fault.arg)
        new = self.nodes.start_broker(fault.rank)
        self.brokers[fault.rank] = new
        self.log(f"    | node{fault.rank}: broker {old} killed, {new} answers")

    def _managerkill(self, fault):
        old = self.nodes.kill_manager(fault.rank)
        time.sleep(fault.arg)
        new = self.nodes.start_manager(fault.rank)
        self.log(f"    | node{fault.rank}: manager {old} killed, {new} answers")
