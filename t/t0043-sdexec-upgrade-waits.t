#!/bin/sh

test_description='A wait answer sdexec sent to a client that left

Runs under flux start --test-size=2 with our conf.d/sdexec.toml. A client
that parks a wait and leaves as soon as the answer arrives: the next client
gets the status (by label or pid) within the hold, then the record is let
go; a client still connected finds nothing on a second wait.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_under_flux 2

# unit_of LABEL RANK: the unit of a labelled process on RANK.
unit_of() {
	echo "$1-$2:$SDEXEC_INSTANCE.service"
}
# The answer to a parked wait goes out before sdexec hears that its client left (t0012 shows
# it with job-exec). Here a client of the test's own makes the order certain: it parks a
# wait on a running process, leaves as soon as the answer arrives (never reading it).
cat >departing.py <<-'EOT'
import sys
import flux
import flux.subprocess as sp
label, rank = sys.argv[1], int(sys.argv[2])
h = flux.Flux()
rpc = sp.wait(h, label=label, service="sdexec", nodeid=rank)
sp.list(h, service="sdexec", nodeid=rank).get()  # the wait is parked
answered = []
rpc.then(lambda f: (answered.append(1), h.reactor_stop()))  # arrived; never read
timeout = h.timer_watcher_create(30, lambda *args: h.reactor_stop()).start()
open(label + ".parked", "w").close()
h.reactor_run()
sys.exit(0 if answered else "no answer")
EOT
# connected.py LABEL RANK: one client parks a wait on LABEL, opens its gate (LABEL.gate),
# prints the exit code it gets, then waits again on the same handle.
cat >connected.py <<-'EOT'
import sys
import flux
import flux.subprocess as sp
label, rank = sys.argv[1], int(sys.argv[2])
h = flux.Flux()
rpc = sp.wait(h, label=label, service="sdexec", nodeid=rank)
sp.list(h, service="sdexec", nodeid=rank).get()  # the wait is parked
open(label + ".gate", "w").close()
print(rpc.get_status() >> 8)
try:
    sp.wait(h, label=label, service="sdexec", nodeid=rank).get_status()
except OSError as exc:
    print(exc)
    sys.exit(1)
sys.exit("second wait succeeded")
EOT
test_expect_success 'a wait answer left unread by a departing client: the next client gets it' '
	$sdexec -r 1 --bg --waitable --label=lost sh -c "while ! test -e lost.gate; do sleep 0.1; done; exit 5" >lost.pid &&
	{ flux python departing.py lost 1 & } &&
	dpid=$! &&
	sdexec_wait_until test -e lost.parked &&
	touch lost.gate &&
	wait $dpid &&
	test_expect_code 5 $sproc_wait -r 1 lost &&
	flux exec -r 1 flux dmesg | grep "lost\[.*\]: its waiter left within 2s of the answer: collectable for 20s"
'
test_expect_success 'by pid too; a record nobody collects again is let go after the hold' '
	$sdexec -r 1 --bg --waitable --label=lost2 sh -c "while ! test -e lost2.gate; do sleep 0.1; done; exit 4" >lost2.pid &&
	{ flux python departing.py lost2 1 & } &&
	dpid=$! &&
	sdexec_wait_until test -e lost2.parked &&
	touch lost2.gate &&
	wait $dpid &&
	test_expect_code 4 $sproc_wait -r 1 $(cut -d" " -f2 lost2.pid) &&
	$sdexec -r 1 --bg --waitable --label=lost3 sh -c "while ! test -e lost3.gate; do sleep 0.1; done; exit 2" &&
	{ flux python departing.py lost3 1 & } &&
	dpid=$! &&
	sdexec_wait_until test -e lost3.parked &&
	touch lost3.gate &&
	wait $dpid &&
	SDEXEC_WAIT_TIMEOUT=40 sdexec_wait_until sdexec_unit_gone $(unit_of lost3 1) &&
	flux exec -r 1 flux dmesg | grep "lost3\[.*\]: not collected within 20s, let go" &&
	test_must_fail $sproc_wait -r 1 lost3 2>lost3.err &&
	grep "not found" lost3.err
'
test_expect_success 'a connected client: a second wait after the answer finds nothing' '
	$sdexec -r 1 --bg --waitable --label=kept sh -c "while ! test -e kept.gate; do sleep 0.1; done; exit 3" &&
	test_expect_code 1 flux python connected.py kept 1 >kept.out &&
	test_debug "cat kept.out" &&
	head -1 kept.out | grep -x 3 &&
	grep "not found" kept.out &&
	sdexec_check_no_units
'

test_expect_success 'no unit of the instance is left at the end' '
	sdexec_check_no_units
'

test_done
