# flux-sdexec: helpers shared by t0003 and t0041 (background and waitable processes).
# Source after sharness-sdexec.sh, inside the instance (waiter.py is written to the trash directory).

# unit LABEL RANK: the unit name of a labeled process in this instance.
unit() {
	echo "$1-$2:$SDEXEC_INSTANCE.service"
}

# waiter.py MODE LABEL RANK [READY]: a wait client that knows when sdexec
# has taken its wait (flux sproc wait cannot tell). sdexec handles the
# requests of one client in order, so once a list request sent after the
# wait is answered, the wait has been handled: parked, or answered.
#   park-exit: park a wait, then exit (the broker sends sdexec a disconnect)
#   park:      park a wait, retrying while a departed waiter is still
#              registered; write READY; print "status N" or "error: TEXT"
cat >waiter.py <<'EOF'
import sys
import time

import flux
import flux.subprocess as sp

mode, label, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
h = flux.Flux()


def park():
    rpc = sp.wait(h, label=label, service="sdexec", nodeid=rank)
    sp.list(h, service="sdexec", nodeid=rank).get()
    return rpc


def outcome(rpc):
    try:
        return f"status {rpc.get_status()}"
    except OSError as exc:
        return f"error: {exc.strerror}"


if mode == "park-exit":
    rpc = park()
    if rpc.is_ready():
        sys.exit(f"wait answered at once: {outcome(rpc)}")
    sys.exit(0)

deadline = time.monotonic() + 30
while True:
    rpc = park()
    if not rpc.is_ready():
        break
    text = outcome(rpc)
    if "already being waited on" not in text or time.monotonic() > deadline:
        break
    time.sleep(0.1)
with open(sys.argv[4], "w") as ready:
    ready.write("parked\n")
print(outcome(rpc), flush=True)
EOF

# state_is LABEL STATE [RANK]: flux sproc ps shows LABEL in STATE (R or Z).
state_is() {
	$sproc_ps -r ${3:-0} -n -o "{state} {label}" | grep -qx "$2 $1"
}
# tracked LABEL [RANK]: sdexec still tracks a process labeled LABEL.
tracked() {
	$sproc_ps -r ${2:-0} -n -o "{label}" | grep -qx "$1"
}
