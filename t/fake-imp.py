#!/usr/bin/env python3
"""A stand-in for flux-security's IMP, for multi-user job tests without flux-security.

job-exec runs a guest's job shell as `IMP exec SHELL JOBID`, and over sdexec asks
for Type=notify, KillMode=process and its stop-timer options. Like the real IMP,
this one is the unit's main process: it reads its input through
$FLUX_IMP_EXEC_HELPER, sends READY=1, runs the job, sends STOPPING=1 when the job
is over (the unit then deactivates) and exits with the job's status. Unlike the
real one it runs the jobspec's command itself, in the job's working directory, in
place of SHELL (a real shell, not running as the guest, refuses the guest's J).

Two settings come from the jobspec's environment, as set by the test's submitter:
  FAKE_IMP_LOG    a file that gets a line per step ("ready", "exit N", "stopping",
                  "signal N"), so a test can see what reached the IMP and in what order
  FAKE_IMP_AFTER  what to do once the job is over: "exit" (default), "linger"
                  (stay until SIGUSR1, logging and ignoring SIGTERM: the stop timer's
                  escalation) or "hang" (ignore both: processes sdexec cannot kill)
"""

import base64
import json
import os
import signal
import socket
import subprocess
import sys


def jobspec_from_helper():
    """The jobspec inside the sign-none J that job-exec's helper writes to stdout."""
    out = subprocess.run(
        os.environ["FLUX_IMP_EXEC_HELPER"], shell=True, check=True, stdout=subprocess.PIPE
    ).stdout
    payload = json.loads(out)["J"].split(".")[1]
    return json.loads(base64.b64decode(payload + "=" * (-len(payload) % 4)))


def notify(state):
    address = os.environ["NOTIFY_SOCKET"]
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(state.encode(), address)


def main(argv):
    if len(argv) != 4 or argv[1] != "exec":
        print(f"fake-imp: usage: {argv[0]} exec SHELL JOBID", file=sys.stderr)
        return 1
    jobspec = jobspec_from_helper()
    env = jobspec["attributes"]["system"]["environment"]
    logpath = env.get("FAKE_IMP_LOG", os.devnull)

    def log(line):
        with open(logpath, "a") as f:
            print(line, file=f)

    notify("READY=1")
    log("ready")
    job = subprocess.run(
        jobspec["tasks"][0]["command"],
        env=env,
        cwd=jobspec["attributes"]["system"]["cwd"],
        stdin=subprocess.DEVNULL,
    )
    status = job.returncode if job.returncode >= 0 else 128 - job.returncode
    log(f"exit {status}")
    after = env.get("FAKE_IMP_AFTER", "exit")
    escalation = {signal.SIGTERM, signal.SIGUSR1}
    if after != "exit":
        signal.pthread_sigmask(signal.SIG_BLOCK, escalation)  # taken by sigwait below
    notify("STOPPING=1")
    log("stopping")
    if after == "exit":
        return status
    while True:
        signum = signal.sigwait(escalation)
        log(f"signal {signum}")
        if after == "linger" and signum == signal.SIGUSR1:
            return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
