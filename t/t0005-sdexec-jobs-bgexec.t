#!/bin/sh

test_description='Flux jobs run through our sdexec with exec.method = "bgexec"

Runs under flux start --test-size=2 with our conf.d/sdexec.toml plus
[exec] service = "sdexec", method = "bgexec": job-exec starts each job shell
as a background, waitable sdexec process labelled shell-<rank>-<jobid>, so
its unit is shell-<rank>-<jobid>-<brokerrank>:<instance>.service (two
brokers share this node, so the broker rank is appended). Covers what t0004
covers for bulk-exec, plus a job-exec reload while jobs run: the jobs are
reattached by label, keep running, and end with their real status.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_extra_config exec.toml <<-EOF
	[exec]
	service = "sdexec"
	method = "bgexec"

	[exec.sdexec-properties]
	MemoryHigh = "200M"
	EOF

sdexec_under_flux 2 jobs
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"

# shell_unit RANK ID, as test_job_basics wants it: bgexec's labelled shell unit.
shell_unit() {
	bgexec_unit "$@"
}

# both_units_active ID / both_units_gone ID: the job's shell units on rank 0 and 1.
both_units_active() {
	unit_active $(shell_unit 0 $1) && unit_active $(shell_unit 1 $1)
}
both_units_gone() {
	sdexec_wait_until units_gone $(shell_unit 0 $1) $(shell_unit 1 $1)
}
# job_state ID: the job's state, e.g. RUN.
job_state() {
	flux jobs -n -o "{state}" $1
}

test_job_setup bgexec
test_job_basics
test_expect_success 'flux cancel ends a running 2-node job with a cancel exception' '
	id=$(flux submit -N2 -n2 sleep 300) &&
	wait_event $id start &&
	both_units_active $id &&
	flux cancel $id &&
	wait_event $id clean &&
	has_exception $id cancel &&
	test_expect_code 143 flux job status $id &&
	both_units_gone $id
'
test_expect_success 'flux job kill -s SIGUSR1 ends a 2-node job with that signal' '
	id=$(flux submit -N2 -n2 sleep 300) &&
	wait_event $id start &&
	both_units_active $id &&
	tasks_running $id &&
	flux job kill -s SIGUSR1 $id &&
	wait_event $id clean &&
	test_expect_code 138 flux job status $id &&
	both_units_gone $id
'
test_expect_success 'a 1s time limit ends the job with a timeout exception' '
	id=$(flux submit -t 1s sleep 300) &&
	wait_event $id start &&
	wait_event $id clean &&
	has_exception $id timeout &&
	test_expect_code 142 flux job status $id &&
	sdexec_wait_until units_gone $(shell_unit 0 $id)
'
test_expect_success 'exec.sdexec-properties MemoryHigh=200M reaches both shell units' '
	id=$(flux submit -N2 -n2 sleep 300) &&
	wait_event $id start &&
	echo 209715200 >memhigh.expected &&
	for r in 0 1; do
		u=$(shell_unit $r $id) &&
		unit_active $u &&
		systemctl --user show -p MemoryHigh --value $u >memhigh.$r &&
		test_debug "cat memhigh.$r" &&
		test_cmp memhigh.expected memhigh.$r || return 1
	done &&
	flux cancel $id &&
	wait_event $id clean
'

# A job that runs until the test creates its file "go" (bounded by -t).
go_job() {
	flux submit --flags=debug -t 2m -N2 -n2 \
		sh -c "while ! test -e $1; do sleep 0.1; done; exit ${2:-0}"
}
test_expect_success 'reload job-exec while a 2-node job runs: the job is reattached' '
	id=$(go_job go.1) &&
	wait_event $id start &&
	wait_event $id recoverable -p exec &&
	both_units_active $id &&
	flux module reload job-exec &&
	wait_event $id debug.exec-reattach-finish &&
	flux job eventlog $id >reattach.out &&
	grep debug.start-lost reattach.out &&
	test "$(job_state $id)" = RUN &&
	both_units_active $id
'
test_expect_success 'the reattached job exits 0 and succeeds without exception' '
	touch go.1 &&
	wait_event $id clean &&
	flux job status $id &&
	flux job eventlog $id >reattach-end.out &&
	test_debug "cat reattach-end.out" &&
	! grep exception reattach-end.out &&
	grep "finish status=0" reattach-end.out &&
	both_units_gone $id
'
test_expect_success 'a reattached job that exits 7 reports exit code 7' '
	id=$(go_job go.2 7) &&
	wait_event $id recoverable -p exec &&
	flux module reload job-exec &&
	wait_event $id debug.exec-reattach-finish &&
	touch go.2 &&
	wait_event $id clean &&
	test_expect_code 7 flux job status $id &&
	flux job eventlog $id >reattach-7.out &&
	! grep exception reattach-7.out &&
	both_units_gone $id
'
test_expect_success 'a reattached job can be killed with a signal' '
	id=$(go_job go.never) &&
	wait_event $id recoverable -p exec &&
	flux module reload job-exec &&
	wait_event $id debug.exec-reattach-finish &&
	flux job kill -s SIGUSR1 $id &&
	wait_event $id clean &&
	test_expect_code 138 flux job status $id &&
	both_units_gone $id
'
test_expect_success 'a reattached job can be canceled' '
	id=$(go_job go.never) &&
	wait_event $id recoverable -p exec &&
	flux module reload job-exec &&
	wait_event $id debug.exec-reattach-finish &&
	flux cancel $id &&
	wait_event $id clean &&
	has_exception $id cancel &&
	both_units_gone $id
'
test_job_volume
test_expect_success 'every job ended as intended' '
	job_results -a -c 0 >results.out &&
	test_debug "cat results.out" &&
	cat >results.expected <<-EOF &&
	      3 CANCELED
	    225 COMPLETED
	      7 FAILED
	      1 TIMEOUT
	EOF
	test_cmp results.expected results.out
'
test_jobs_leave_nothing 236

test_done
