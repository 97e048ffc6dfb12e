#!/bin/sh

test_description='sdexec background and waitable processes

Runs under flux start --test-size=2 with our conf.d/sdexec.toml. Covers
flux exec --bg and --waitable, flux sproc wait/kill/ps --service sdexec,
retained output, waiters that collide or disconnect, ps states, and broker
log records of background output (stopping and unloading: t0041).'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_under_flux 2

. "$SDEXEC_SRCDIR/t/lib/sharness-background.sh"

test_expect_success 'background exec prints rank and pid' '
	$sdexec -r 1 --bg true >bg.out &&
	test_debug "cat bg.out" &&
	grep -x "1: [1-9][0-9]*" bg.out
'
test_expect_success 'a background process has stdin at end of file' '
	$sdexec -r 0 --bg --waitable --label=stdin cat &&
	timeout 30 $sproc_wait stdin
'
test_expect_success 'wait by label returns the exit code' '
	$sdexec -r 0 --bg --waitable --label=w0 true &&
	$sdexec -r 0 --bg --waitable --label=w3 sh -c "exit 3" &&
	$sdexec -r 1 --bg --waitable --label=w5 sh -c "exit 5" &&
	$sproc_wait w0 &&
	test_expect_code 3 $sproc_wait w3 &&
	test_expect_code 5 $sproc_wait -r 1 w5
'
test_expect_success 'wait by pid returns the exit code' '
	$sdexec -r 1 --bg --waitable sh -c "exit 4" >bypid.out &&
	pid=$(cut -d" " -f2 bypid.out) &&
	test_expect_code 4 $sproc_wait -r 1 $pid
'
test_expect_success 'a collected process is gone: a second wait fails' '
	test_must_fail $sproc_wait w0 2>w0-again.err &&
	grep "not found" w0-again.err
'
test_expect_success 'the unit of a collected process is gone' '
	sdexec_wait_unit_gone $(unit w3 0) &&
	sdexec_wait_unit_gone $(unit w5 1)
'
test_expect_success 'waiting on a process that is not waitable fails' '
	$sdexec -r 0 --bg --label=nowait sleep 120 &&
	test_must_fail $sproc_wait nowait 2>nowait.err &&
	grep "not waitable" nowait.err &&
	$sproc_kill -r 0 9 nowait &&
	sdexec_wait_unit_gone $(unit nowait 0)
'
test_expect_success 'kill by label, then wait returns 137' '
	$sdexec -r 0 --bg --waitable --label=k9 sleep 120 &&
	$sproc_kill -r 0 9 k9 &&
	test_expect_code 137 $sproc_wait k9
'
test_expect_success 'a parked wait is answered when the process ends' '
	$sdexec -r 1 --bg --waitable --label=parked sleep 120 &&
	{ flux python waiter.py park parked 1 parked.ready >parked.out & } &&
	pid=$! &&
	sdexec_wait_for_file parked.ready &&
	state_is parked R 1 &&
	$sproc_kill -r 1 15 parked &&
	wait $pid &&
	echo "status 15" >parked.expected &&
	test_cmp parked.expected parked.out
'
test_expect_success 'wait --output returns the newest 8 KiB of output, in order' '
	$sdexec -r 0 --bg --waitable --label=big seq 1 5000 &&
	$sproc_wait --output big >big.out &&
	seq 1 5000 | tac |
		awk "{ n += length(\$0) + 1; if (n > 8192) exit; print }" |
		tac >big.expected &&
	test_cmp big.expected big.out &&
	test $(wc -c <big.out) -le 8192 &&
	test $(($(wc -c <big.out) + 5)) -gt 8192 &&
	tail -n 1 big.out | grep -x 5000
'
test_expect_success 'wait --output keeps stdout and stderr apart' '
	$sdexec -r 1 --bg --waitable --label=both \
		sh -c "echo to-out; echo to-err >&2; echo more-out; exit 2" &&
	test_expect_code 2 $sproc_wait -r 1 --output both \
		>both.out 2>both.err &&
	printf "to-out\nmore-out\n" >both.out.expected &&
	echo to-err >both.err.expected &&
	test_cmp both.out.expected both.out &&
	test_cmp both.err.expected both.err
'
test_expect_success 'a second concurrent waiter is refused' '
	$sdexec -r 0 --bg --waitable --label=busy sleep 120 &&
	{ flux python waiter.py park busy 0 busy.ready >busy.out & } &&
	pid=$! &&
	sdexec_wait_for_file busy.ready &&
	test_must_fail $sproc_wait busy 2>busy.err &&
	test_debug "cat busy.err" &&
	grep "already being waited on" busy.err &&
	$sproc_kill -r 0 15 busy &&
	wait $pid &&
	echo "status 15" >busy.expected &&
	test_cmp busy.expected busy.out
'
test_expect_success 'a waiter that disconnects leaves the process waitable' '
	$sdexec -r 1 --bg --waitable --label=gone sleep 120 &&
	flux python waiter.py park-exit gone 1 &&
	{ flux python waiter.py park gone 1 gone.ready >gone.out & } &&
	pid=$! &&
	sdexec_wait_for_file gone.ready &&
	$sproc_kill -r 1 15 gone &&
	wait $pid &&
	echo "status 15" >gone.expected &&
	test_cmp gone.expected gone.out
'
test_expect_success 'a process that ends after its waiter left can be collected' '
	$sdexec -r 0 --bg --waitable --label=later sleep 120 &&
	flux python waiter.py park-exit later 0 &&
	$sproc_kill -r 0 9 later &&
	sdexec_wait_until state_is later Z &&
	test_expect_code 137 $sproc_wait later
'
test_expect_success 'ps shows R while running and Z once exited' '
	$sdexec -r 0 --bg --waitable --label=psr sleep 120 &&
	sdexec_wait_until state_is psr R &&
	$sproc_ps -r 0 >ps.out &&
	test_debug "cat ps.out" &&
	grep "R *psr *sleep\$" ps.out &&
	$sproc_kill -r 0 9 psr &&
	sdexec_wait_until state_is psr Z &&
	test_expect_code 137 $sproc_wait psr &&
	! tracked psr
'

test_expect_success 'non-waitable background output goes to the broker log' '
	$sdexec -r 0 --bg --label=chatty \
		sh -c "echo hello-out; echo hello-err >&2" >chatty.out &&
	pid=$(cut -d" " -f2 chatty.out) &&
	sdexec_wait_until sdexec_dmesg_has "chatty\[$pid\]: Exit 0" &&
	flux dmesg >chatty.dmesg &&
	grep "sdexec.info\[0\]: chatty\[$pid\]: hello-out\$" chatty.dmesg &&
	grep "sdexec.err\[0\]: chatty\[$pid\]: hello-err\$" chatty.dmesg
'
test_expect_success 'without a label the log name is the command basename' '
	$sdexec -r 0 --bg /bin/sh -c "echo unlabeled-out" >unlabeled.out &&
	pid=$(cut -d" " -f2 unlabeled.out) &&
	sdexec_wait_until sdexec_dmesg_has "sh\[$pid\]: Exit 0" &&
	flux dmesg | grep "sdexec.info\[0\]: sh\[$pid\]: unlabeled-out\$"
'
test_expect_success 'a killed background process is logged as killed' '
	$sdexec -r 0 --bg --label=victim sleep 120 >victim.out &&
	pid=$(cut -d" " -f2 victim.out) &&
	$sproc_kill -r 0 9 victim &&
	sdexec_wait_until sdexec_dmesg_has "victim\[$pid\]: Killed by signal 9"
'


test_expect_success 'no unit of this instance is left' '
	sdexec_check_no_units
'
test_done
