# flux-sdexec: job tests shared by t0004 (bulk-exec) and t0005 (bgexec).
# Source after sharness-sdexec.sh, inside the instance; each test_* function defines tests.

T=$SDEXEC_WAIT_TIMEOUT

# run ARGS: flux run, bounded (exit 124 if it hangs).
run() {
	timeout --kill-after=5 "$T" flux run "$@"
}
# has_exception ID TYPE: the job's eventlog has an exception of TYPE.
has_exception() {
	flux job eventlog "$1" >eventlog.out &&
	test_debug "cat eventlog.out" &&
	grep "exception type=\"$2\"" eventlog.out
}
# tasks_running ID: every shell of job ID has started its tasks (the leader's shell.start).
# `flux job kill` is an event each shell applies to the tasks it runs: sent before a
# shell started them, it is lost for that shell (flux-core: "open loop").
tasks_running() {
	flux job wait-event -q -t "$T" -p exec "$1" shell.start
}
# job_exception ID: wait until job ID is clean; print its exception events (fails if none).
job_exception() {
	flux job wait-event -q -t "$T" "$1" clean &&
	flux job eventlog "$1" >"$1.eventlog" &&
	test_debug "cat $1.eventlog" &&
	grep "exception" "$1.eventlog"
}
# wait_event ID EVENT [OPTIONS]: bounded wait on the job eventlog.
wait_event() {
	_we_id=$1 _we_event=$2
	shift 2
	flux job wait-event -q -t "$T" "$@" $_we_id $_we_event
}
# bgexec_unit RANK ID: the unit of bgexec's job shell of ID on broker RANK (labelled).
bgexec_unit() {
	echo "shell-$1-$(flux job id --to=f58plain "$2")-$1:$SDEXEC_INSTANCE.service"
}
# job_results [flux jobs options or IDs]: how many of the jobs ended with each result.
job_results() {
	flux jobs -n -o "{result}" "$@" | sort | uniq -c
}
# unit_active UNIT / units_gone UNIT...: systemd's view of job shell units.
unit_active() {
	sdexec_unit_is "$1" active
}
units_gone() {
	for u in "$@"; do
		sdexec_unit_gone "$u" || return 1
	done
}

# test_job_setup METHOD: job-exec uses our sdexec with METHOD; a 1-node job runs.
test_job_setup() {
	_jobs_method=$1
	test_expect_success "job-exec runs job shells with sdexec and $1" '
		flux config get | jq -e ".exec.service == \"sdexec\"" &&
		flux module stats job-exec >job-exec.stats &&
		jq -e ".method == \"$_jobs_method\"" job-exec.stats &&
		jq -e ".config.exec_service == \"sdexec\"" job-exec.stats
	'
	test_expect_success 'our sdexec is the module loaded on both ranks' '
		flux exec -r all flux module list -l >modules.out &&
		test $(grep -c "^sdexec .* $SDEXEC_MODULE\$" modules.out) -eq 2
	'
	test_expect_success '1-node job: flux run hostname prints the hostname' '
		hostname >hostname.expected &&
		run -N1 hostname >hostname.out &&
		test_cmp hostname.expected hostname.out
	'
}

# test_job_basics: multi-rank jobs, shell units (shell_unit RANK ID, defined by the
# script, names them), output, exit codes, a missing command.
test_job_basics() {
	test_expect_success '2-node job runs a task on each rank' '
		printf "0\n1\n" >ranks.expected &&
		run -N2 -n2 flux getattr rank | sort >ranks.out &&
		test_cmp ranks.expected ranks.out
	'
	test_expect_success '2-node job shells run in their shell units' '
		id=$(flux submit -N2 -n2 cat /proc/self/cgroup) &&
		timeout "$T" flux job attach $id >cgroup2.out &&
		test_debug "cat cgroup2.out" &&
		grep -E "^(0::|[0-9]+:name=systemd:)/" cgroup2.out >cgroup2.v2 &&
		grep -F "/$(shell_unit 0 $id)" cgroup2.v2 &&
		grep -F "/$(shell_unit 1 $id)" cgroup2.v2
	'
	test_expect_success 'flux job attach of a submitted job gets its stdout and stderr' '
		id=$(flux submit sh -c "echo to stdout; echo to stderr >&2") &&
		timeout "$T" flux job attach $id >attach.out 2>attach.err &&
		echo to stdout >attach.expected-out &&
		echo to stderr >attach.expected-err &&
		test_cmp attach.expected-out attach.out &&
		test_cmp attach.expected-err attach.err
	'
	test_expect_success 'flux run false exits 1' '
		test_expect_code 1 run false
	'
	test_expect_success 'flux run sh -c "exit 3" exits 3' '
		test_expect_code 3 run sh -c "exit 3"
	'
	test_expect_success '2-node job exits with its highest task exit code' '
		test_expect_code 5 run -N2 -n2 \
			sh -c "exit \$((FLUX_TASK_RANK == 1 ? 5 : 2))"
	'
	test_expect_success 'a missing command exits 127 with an exec exception naming it' '
		test_expect_code 127 run /nonexistent/cmd 2>missing.err &&
		test_debug "cat missing.err" &&
		grep "/nonexistent/cmd" missing.err &&
		has_exception $(flux job last) exec &&
		grep "/nonexistent/cmd" eventlog.out
	'
}

# all_complete NAME COUNT DRAIN-TIMEOUT SUBMIT-ARGS...: submit COUNT jobs (ids in
# NAME.ids), drain the queue, and check that every one of them COMPLETED.
all_complete() {
	_ac_name=$1 _ac_count=$2 _ac_timeout=$3
	shift 3
	flux submit --cc=1-$_ac_count "$@" true >$_ac_name.ids &&
	test $(wc -l <$_ac_name.ids) -eq $_ac_count &&
	flux queue drain -t $_ac_timeout &&
	job_results $(cat $_ac_name.ids) >$_ac_name.out &&
	test_debug "cat $_ac_name.out" &&
	printf "%7d COMPLETED\n" $_ac_count >$_ac_name.expected &&
	test_cmp $_ac_name.expected $_ac_name.out
}
# test_job_volume: 200 short jobs, then 20 2-node jobs, all COMPLETED.
test_job_volume() {
	test_expect_success '200 short jobs all complete' '
		all_complete volume 200 150s
	'
	test_expect_success '20 2-node jobs all complete' '
		all_complete volume2 20 60s -N2 -n2
	'
}

# no_job_units_left: no shell unit, whatever its state, is named after a job of this
# instance, any user's (bulk-exec unit names carry no instance name, so match job IDs).
no_job_units_left() {
	flux jobs -a -A -c 0 -n -o "{id.f58plain}" >alljobs.ids &&
	systemctl --user list-units --all --plain --no-legend "shell-*" "imp-shell-*" \
		>shell-units.out &&
	! grep -F -f alljobs.ids shell-units.out
}

# test_jobs_leave_nothing NJOBS: after NJOBS jobs, no unit is left and sdexec tracks nothing.
test_jobs_leave_nothing() {
	_jobs_expected=$1
	test_expect_success 'no shell unit of any job of this instance is left' '
		sdexec_wait_until no_job_units_left &&
		test $(wc -l <alljobs.ids) -eq $_jobs_expected
	'
	test_expect_success 'no unit of this instance is left and sdexec tracks nothing' '
		sdexec_check_no_units &&
		for r in 0 1; do
			flux exec -r $r flux module stats sdexec >stats.$r &&
			jq -e ".procs == {}" stats.$r || return 1
		done
	'
}
