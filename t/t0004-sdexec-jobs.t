#!/bin/sh

test_description='Flux jobs run through our sdexec with the default bulk-exec method

Runs under flux start --test-size=2 with our conf.d/sdexec.toml plus
[exec] service = "sdexec", so job-exec starts every job shell as a systemd
transient unit named shell-<rank>-<f58plain jobid>.service (bulk-exec sets
SDEXEC_NAME). Covers 1- and 2-node jobs, stdout, exit codes, a missing
command, cancel, flux job kill, a time limit, exec.sdexec-properties, 200
short jobs and 20 2-node jobs, and checks that no unit is left behind.
t0005 runs the same jobs with exec.method = "bgexec".'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_extra_config exec.toml <<-EOF
	[exec]
	service = "sdexec"

	[exec.sdexec-properties]
	MemoryHigh = "200M"
	EOF

sdexec_under_flux 2 jobs
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"

# f58 ID: the job ID as it appears in unit names.
f58() {
	flux job id --to=f58plain "$1"
}
# shell_unit RANK ID: the unit bulk-exec names the job shell of ID on RANK.
shell_unit() {
	echo "shell-$1-$(f58 "$2").service"
}
# wait_start ID / wait_clean ID: bounded waits on the job eventlog.
wait_start() {
	flux job wait-event -q -t "$T" "$1" start
}
wait_clean() {
	flux job wait-event -q -t "$T" "$1" clean
}

test_job_setup bulk-exec
test_expect_success '1-node job shell runs in its shell-0-<jobid> unit' '
	id=$(flux submit -N1 cat /proc/self/cgroup) &&
	timeout "$T" flux job attach $id >cgroup.out &&
	test_debug "cat cgroup.out" &&
	grep -E "^(0::|[0-9]+:name=systemd:)/" cgroup.out >cgroup.v2 &&
	grep -F "/$(shell_unit 0 $id)" cgroup.v2
'
test_job_basics
test_expect_success 'flux cancel ends a running job with a cancel exception' '
	id=$(flux submit sleep 300) &&
	wait_start $id &&
	unit_active $(shell_unit 0 $id) &&
	flux cancel $id &&
	wait_clean $id &&
	has_exception $id cancel &&
	test_expect_code 143 flux job status $id &&
	sdexec_wait_until units_gone $(shell_unit 0 $id)
'
test_expect_success 'flux job kill -s SIGUSR1 ends a 2-node job with that signal' '
	id=$(flux submit -N2 -n2 sleep 300) &&
	wait_start $id &&
	unit_active $(shell_unit 0 $id) &&
	unit_active $(shell_unit 1 $id) &&
	tasks_running $id &&
	flux job kill -s SIGUSR1 $id &&
	wait_clean $id &&
	test_expect_code 138 flux job status $id &&
	sdexec_wait_until units_gone $(shell_unit 0 $id) $(shell_unit 1 $id)
'
test_expect_success 'a 1s time limit ends the job with a timeout exception' '
	id=$(flux submit -t 1s sleep 300) &&
	wait_start $id &&
	wait_clean $id &&
	has_exception $id timeout &&
	test_expect_code 142 flux job status $id &&
	sdexec_wait_until units_gone $(shell_unit 0 $id)
'
test_expect_success 'exec.sdexec-properties MemoryHigh=200M reaches both shell units' '
	id=$(flux submit -N2 -n2 sleep 300) &&
	wait_start $id &&
	for r in 0 1; do
		u=$(shell_unit $r $id) &&
		unit_active $u &&
		systemctl --user show -p MemoryHigh --value $u >memhigh.$r &&
		test_debug "cat memhigh.$r" &&
		echo 209715200 >memhigh.expected &&
		test_cmp memhigh.expected memhigh.$r || return 1
	done &&
	flux cancel $id &&
	wait_clean $id
'
test_job_volume
test_expect_success 'every job ended as intended' '
	job_results -a -c 0 >results.out &&
	test_debug "cat results.out" &&
	cat >results.expected <<-EOF &&
	      2 CANCELED
	    225 COMPLETED
	      5 FAILED
	      1 TIMEOUT
	EOF
	test_cmp results.expected results.out
'
test_jobs_leave_nothing 233

test_done
