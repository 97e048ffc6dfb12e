#!/bin/sh

test_description='sdexec background and waitable processes: stopping and unloading

Runs under flux start --test-size=2 with our conf.d/sdexec.toml. Covers
errors after start and the stop timer of waitable processes, module unload
with a running process and a parked waiter, the waitable unit left for the
next sdexec and adopted, units of TERM-ignoring processes, and a label taken
again once its status was collected.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_under_flux 2

. "$SDEXEC_SRCDIR/t/lib/sharness-background.sh"

# A process that ignores SIGTERM in a unit that stops itself after 1s
# (RuntimeMaxUSec) and that systemd never kills (TimeoutStopUSec=infinity).
# With SIGCONT as the stop-timer signal it survives all three expiries, so
# sdexec gives up with EDEADLK after the process started successfully.
stubborn_opts="--setopt=SDEXEC_PROP_RuntimeMaxUSec=1000000 \
	--setopt=SDEXEC_PROP_TimeoutStopUSec=infinity \
	--setopt=SDEXEC_STOP_TIMER_SEC=1"
# stopped UNIT: systemd is done stopping UNIT (whatever the outcome).
stopped() {
	case $(sdexec_unit_state "$1") in
	active | activating | deactivating) return 1 ;;
	esac
}
# kill_unit UNIT: SIGKILL what is left of UNIT and make systemd forget it.
kill_unit() {
	systemctl --user kill --signal=KILL "$1"
	sdexec_wait_until stopped "$1" &&
	systemctl --user reset-failed "$1" 2>/dev/null
	sdexec_wait_unit_gone "$1"
}

test_expect_success 'a wait gets the error of a unit that failed after start' '
	test_when_finished "kill_unit $(unit deadlk 0)" &&
	$sdexec -r 0 --bg --waitable --label=deadlk $stubborn_opts \
		--setopt=SDEXEC_STOP_TIMER_SIGNAL=18 \
		sh -c "trap \"\" TERM; exec sleep 120" >deadlk.out &&
	grep -x "0: [1-9][0-9]*" deadlk.out &&
	test_must_fail timeout 60 $sproc_wait deadlk 2>deadlk.err &&
	test_debug "cat deadlk.err" &&
	grep "Errno 35\] SIGKILL timeout, unit may still be active" deadlk.err &&
	flux dmesg | grep "sdexec.err\[0\]: deadlk\[.*\]: SIGKILL timeout"
'
# A waitable process becomes ZOMBIE as soon as its exit status is known; its
# stop timer must be cancelled then (nothing is left to escalate), so no later
# expiry may hit the state machine in ZOMBIE (once an InvalidTransition bug).
# Here the stop timer's SIGKILL (2nd expiry) ends the main process while a
# TERM-ignoring child keeps the unit deactivating; a second process started
# just after it, whose 3rd expiry is logged ("abandoning"), tells the test
# when the first one's 3rd expiry is over.
test_expect_success 'a stop timer outliving a waitable process logs no internal error' '
	test_when_finished "kill_unit $(unit zombietimer 0); kill_unit $(unit marker 0)" &&
	$sdexec -r 0 --bg --waitable --label=zombietimer $stubborn_opts \
		sh -c "trap \"\" TERM; sleep 120 >/dev/null 2>&1 & exec sleep 120" &&
	$sdexec -r 0 --bg --waitable --label=marker $stubborn_opts \
		--setopt=SDEXEC_STOP_TIMER_SIGNAL=18 \
		sh -c "trap \"\" TERM; exec sleep 120" &&
	sdexec_wait_until sdexec_dmesg_has "marker.*abandoning after" &&
	test_debug "flux dmesg | grep zombietimer" &&
	! sdexec_dmesg_has "InvalidTransition"
'
test_expect_success 'collect the processes of the previous test' '
	{ $sproc_wait marker || :; } &&
	{ $sproc_wait zombietimer || :; } &&
	! tracked marker &&
	! tracked zombietimer
'


test_expect_success 'module remove answers a running client and a parked waiter' '
	fg=fg-unload:$SDEXEC_INSTANCE.service &&
	{ $sdexec -r 1 --setopt=SDEXEC_NAME=$fg \
		sh -c "echo ready >&2; exec sleep 120" 2>fg.err & } &&
	fgpid=$! &&
	$sdexec -r 1 --bg --waitable --label=unload sleep 120 &&
	{ flux python waiter.py park unload 1 unload.ready >unload.out & } &&
	waitpid=$! &&
	sdexec_wait_for_file fg.err &&
	sdexec_wait_for_file unload.ready &&
	flux exec -r 1 flux module remove sdexec &&
	test_must_fail wait $fgpid &&
	wait $waitpid &&
	test_debug "cat fg.err unload.out" &&
	grep "unloading" fg.err &&
	grep "^error: .*unloading" unload.out
'
# The instance keeps running, so the waitable unit is left for the next sdexec
# (the upgrade procedure, t0012); the foreground one stops with its client.
test_expect_success 'the foreground unit is stopped, the waitable one left running' '
	sdexec_wait_unit_gone $fg &&
	sdexec_unit_is $(unit unload 1) active &&
	flux exec -r 1 flux dmesg >unload.dmesg &&
	grep "left running for the next sdexec: $(unit unload 1) (active.running" unload.dmesg
'
test_expect_success 'load sdexec again on rank 1: it adopts the unit, which can be collected' '
	flux exec -r 1 flux module load $SDEXEC_MODULE &&
	$sdexec -r 1 true &&
	$sproc_kill -r 1 9 unload &&
	test_expect_code 137 $sproc_wait -r 1 unload &&
	sdexec_wait_unit_gone $(unit unload 1)
'
# StopUnit only starts a stop: a unit whose process ignores SIGTERM ends
# "failed" after systemd SIGKILLs it (TimeoutStopUSec). Unload must still see
# it through (bounded grace, then SIGKILL, then ResetFailedUnit) so that no
# unit of the instance stays loaded.
test_expect_success 'module remove leaves no unit of a TERM-ignoring process' '
	u=$(unit stubborn 1) &&
	test_when_finished "kill_unit $u; flux exec -r 1 flux module load $SDEXEC_MODULE" &&
	$sdexec -r 1 --bg --label=stubborn \
		--setopt=SDEXEC_PROP_TimeoutStopUSec=1000000 \
		sh -c "trap \"\" TERM; exec sleep 120" &&
	flux exec -r 1 flux module remove sdexec &&
	sdexec_wait_until stopped $u &&
	test_debug "systemctl --user list-units --all --plain --no-legend $u" &&
	sdexec_unit_gone $u
'
# The same after a wait: the waitable process exited but left a child that
# ignores SIGTERM; collecting its status stops the unit, systemd SIGKILLs the
# child after TimeoutStopUSec, the unit ends "failed", and sdexec (still
# watching it, RELEASING) resets it.
test_expect_success 'a collected unit with a TERM-ignoring child goes away' '
	u=$(unit leftchild 0) &&
	test_when_finished "kill_unit $u" &&
	$sdexec -r 0 --bg --waitable --label=leftchild \
		--setopt=SDEXEC_PROP_TimeoutStopUSec=1000000 \
		sh -c "trap \"\" TERM; sleep 120 >/dev/null 2>&1 & exit 0" &&
	$sproc_wait leftchild &&
	sdexec_wait_until stopped $u &&
	test_debug "systemctl --user list-units --all --plain --no-legend $u" &&
	sdexec_unit_gone $u
'
test_expect_success 'sdexec works on rank 1 after the reload' '
	$sdexec -r 1 true &&
	! tracked stubborn 1
'
# A label is free again once a wait has given the status, as in flux-core's C module.
test_expect_success 'the label of a process flux sproc wait collected is free at once' '
	$sdexec -r 0 --bg --waitable --label=again \
		sh -c "while ! test -e again.gate; do sleep 0.1; done; exit 3" &&
	{ flux python waiter.py park again 0 again.ready >again.out & } &&
	wpid=$! &&
	sdexec_wait_until test -e again.ready &&
	touch again.gate &&
	wait $wpid &&
	grep -x "status 768" again.out &&
	$sdexec -r 0 --bg --waitable --label=again sh -c "exit 4" &&
	test_expect_code 4 $sproc_wait -r 0 again &&
	flux dmesg | grep "again\[[0-9]*\]: label taken by a new exec, let go"
'
# reuse.py LABEL RANK: on one handle, park a wait on LABEL, open its gate, print the
# status; at once (within the answer grace) start a new LABEL, and print its status.
cat >reuse.py <<'EOF'
import sys

import flux
import flux.subprocess as sp

label, rank = sys.argv[1], int(sys.argv[2])
h = flux.Flux()
rpc = sp.wait(h, label=label, service="sdexec", nodeid=rank)
sp.list(h, service="sdexec", nodeid=rank).get()
open(label + ".gate", "w").close()
print("status", rpc.get_status(), flush=True)
cmd = ["sh", "-c", "exit 5"]
sp.rexec_bg(h, cmd, label=label, waitable=True, service="sdexec", nodeid=rank).get_pid()
print("status", sp.wait(h, label=label, service="sdexec", nodeid=rank).get_status())
EOF
test_expect_success 'a new exec takes the label within the answer grace, its client connected' '
	$sdexec -r 1 --bg --waitable --label=grace \
		sh -c "while ! test -e grace.gate; do sleep 0.1; done; exit 3" &&
	flux python reuse.py grace 1 >grace.out &&
	printf "status 768\nstatus 1280\n" >grace.expected &&
	test_cmp grace.expected grace.out &&
	flux exec -r 1 flux dmesg | grep "grace\[[0-9]*\]: label taken by a new exec, let go"
'

test_expect_success 'no unit of this instance is left' '
	sdexec_check_no_units
'
test_done
