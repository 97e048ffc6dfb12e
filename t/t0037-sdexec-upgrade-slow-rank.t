#!/bin/sh

test_description='flux sdexec upgrade with one broker stopped past the hold

Runs under flux start --test-size=4 with [exec] service = "sdexec", method =
"bgexec". Jobs on ranks 0-2 end while the upgrade is held up by rank 3 (its broker
SIGSTOPped as soon as the new sdexec starts on rank 0, for longer than the 20 s
hold of adopted records): job-exec, loaded once rank 3 answers, must still collect
every job shell status, so every job completes with its own exit code.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_bgexec_jobs_under_flux 4

FLUX_EXEC_PATH_PREPEND=$SDEXEC_SRCDIR/cmd
export FLUX_EXEC_PATH_PREPEND
# past the 20 s claim window (flux_sdexec/core/waits.py CLAIM_WINDOW), under tbon.torpid_max (30 s)
STOPPED_FOR=25

# sdexec_child BROKER_PID: the pid of the sdexec module process under that broker.
sdexec_child() {
	pgrep -P $1 -f "sdexec\.py\$"
}
# new_sdexec BROKER_PID OLD_PID: a different sdexec process runs under the broker.
new_sdexec() {
	_ns=$(sdexec_child $1) && test -n "$_ns" && test "$_ns" != "$2"
}

test_expect_success 'each broker is found by pid' '
	for r in 0 1 2 3; do
		flux exec -r $r flux getattr broker.pid >broker$r.pid || return 1
	done &&
	sdexec_child $(cat broker0.pid) >sdexec0.old
'
test_expect_success 'gated jobs run on ranks 0, 1 and 2, past their startup window' '
	: >jobs.ids &&
	for r in 0 1 2; do
		flux submit -n1 --requires=rank:$r -t 3m \
			sh -c "n=0; while ! test -e jobs.gate && test \$n -lt 1200; do \
				sleep 0.1; n=\$((n+1)); done; exit $((r + 3))" >>jobs.ids || return 1
	done &&
	for id in $(cat jobs.ids); do
		wait_event $id recoverable -p exec || return 1
	done
'
test_expect_success 'upgrade; rank 3 stopped once the new sdexec starts on rank 0; jobs end' '
	{ flux sdexec upgrade --timeout 90 >upgrade.out 2>upgrade.err & } &&
	upid=$! &&
	n=0 &&
	while ! new_sdexec $(cat broker0.pid) $(cat sdexec0.old); do
		n=$((n + 1)) && test $n -lt 3000 || return 1
		sleep 0.02
	done &&
	kill -STOP $(cat broker3.pid) &&
	test_when_finished "kill -CONT $(cat broker3.pid)" &&
	touch jobs.gate &&
	sleep $STOPPED_FOR &&
	kill -CONT $(cat broker3.pid) &&
	wait $upid &&
	test_debug "cat upgrade.out upgrade.err" &&
	grep "upgrade: sdexec reloaded from $SDEXEC_MODULE on 4 rank(s)" upgrade.out &&
	grep "upgrade: jobs reattached by job-exec: 3" upgrade.out
'
test_expect_success 'the shells ended with no waiter; their holds began with job-exec'"'"'s waits' '
	for r in 0 1 2; do
		flux exec -r $r flux dmesg >dmesg$r.out &&
		grep "shell-$r-.*: no waiter after adoption: collectable for 20s after the first wait" \
			dmesg$r.out &&
		grep -E "shell-$r-.*: (a client waits|job-exec loaded): collectable for 20s" \
			dmesg$r.out || return 1
	done
'
test_expect_success 'every job completed with its own exit code, no exception' '
	r=0 &&
	for id in $(cat jobs.ids); do
		wait_event $id clean &&
		flux job eventlog $id >$id.eventlog &&
		test_debug "cat $id.eventlog" &&
		! grep exception $id.eventlog &&
		test_expect_code $((r + 3)) flux job status $id &&
		r=$((r + 1)) || return 1
	done
'
test_expect_success 'no unit of the instance is left at the end' '
	sdexec_check_no_units
'

test_done
