# flux-sdexec: job tests shared by t0004 (bulk-exec) and t0005 (bgexec).
# Source after sharness-sdexec.sh, inside the instance; each function defines tests.

# test_job_volume: 200 short jobs, then 20 2-node jobs, all COMPLETED.
test_job_volume() {
	test_expect_success '200 short jobs all complete' '
		flux submit --cc=1-200 true >volume.ids &&
		test $(wc -l <volume.ids) -eq 200 &&
		flux queue drain -t 150s &&
		flux jobs -n -o "{result}" $(cat volume.ids) | sort | uniq -c >volume.out &&
		test_debug "cat volume.out" &&
		echo "    200 COMPLETED" >volume.expected &&
		test_cmp volume.expected volume.out
	'
	test_expect_success '20 2-node jobs all complete' '
		flux submit -N2 -n2 --cc=1-20 true >volume2.ids &&
		test $(wc -l <volume2.ids) -eq 20 &&
		flux queue drain -t 60s &&
		flux jobs -n -o "{result}" $(cat volume2.ids) | sort | uniq -c >volume2.out &&
		test_debug "cat volume2.out" &&
		echo "     20 COMPLETED" >volume2.expected &&
		test_cmp volume2.expected volume2.out
	'
}

# no_job_units_left: no shell unit, whatever its state, is named after a job of this
# instance (bulk-exec unit names carry no instance name, so match job IDs).
no_job_units_left() {
	flux jobs -a -c 0 -n -o "{id.f58plain}" >alljobs.ids &&
	systemctl --user list-units --all --plain --no-legend "shell-*" >shell-units.out &&
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
