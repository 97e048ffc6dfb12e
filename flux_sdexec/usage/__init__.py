"""What a unit used, and where its job's figures go.

- ``cgroup_usage``: a unit's accounting slice, and its usage record from the slice's cgroup files;
- ``oom_log``: v1 OOM kills from the kernel log (/dev/kmsg);
- ``job_usage``: a job shell's record in the job's KVS directory, and its ``oom`` exception.

Pure but for ``oom_log`` (reads /dev/kmsg) and ``job_usage`` (flux, inside its methods).
"""
