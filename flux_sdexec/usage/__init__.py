"""Usage: what each unit used, gathered per job up the TBON, and where a job's figures go.

Pure:

- ``record``: the usage record, its JSON and its KVS keys;
- ``cgroup_usage``: a unit's accounting slice, and its record from the slice's cgroup files;
- ``unit_usage``: the record from what systemd keeps of an exited unit, and whether it does;
- ``job_gather``: one job's gathering at one broker (the merge, the wait, the job's totals);
- ``gather_events``: the gathering's events, actions and ``sdexec.usage-gather`` payload;
- ``gatherings``: every job's gathering at one broker, events in, actions out;
- ``record_commits``: rank 0's record writes batched, one KVS commit out at a time.

The flux side:

- ``accounting``: each process's slice placed, read at its exit (or its unit's figures
  asked of systemd) and stopped at its end;
- ``job_usage``: the gatherings' actions carried out (RPCs, timers, the KVS, the memo);
- ``oom_log``: v1 OOM kills from the kernel log (/dev/kmsg).
"""
