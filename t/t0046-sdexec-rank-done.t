#!/bin/sh

test_description='A job with a rank already done survives job-exec and sdexec reloads

Runs under flux start --test-size=2 with [exec] service = "sdexec", method = "bgexec".
A 2-node job whose shell on rank 1 exits 3 at once while rank 0 runs on (ranks of a job
end apart): job-exec has that rank'"'"'s status when it is reloaded, alone or by flux sdexec
upgrade, and the job-exec that reattaches asks every rank by label again, the finished one
too (issue 47; flux-core'"'"'s C module answers "not found" and the job dies). Also the
finished rank ending between job-exec'"'"'s removal and its load, with sdexec reloaded in
between, and two job-exec reloads in a row. Each job ends with exit code 3 (the rank done before) and no exception, its usage
record has both ranks and its memo counts both, and no unit is left.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_bgexec_jobs_under_flux 2

FLUX_EXEC_PATH_PREPEND=$SDEXEC_SRCDIR/cmd
export FLUX_EXEC_PATH_PREPEND

# uneven NAME: a 2-node job whose rank 1 exits 3 once file NAME.1 exists and rank 0 exits 0
# once NAME.0 exists (each bounded to 2 minutes); its id in NAME.id, once recoverable.
uneven() {
	flux submit -N2 -n2 -t 5m sh -c "r=\$FLUX_TASK_RANK; n=0; \
		while ! test -e $1.\$r && test \$n -lt 1200; do sleep 0.1; n=\$((n + 1)); done; \
		test \$r -eq 0 || exit 3" >$1.id &&
	wait_event $(cat $1.id) recoverable -p exec
}
# shell_over RANK NAME: job NAME's shell on broker RANK ran and runs no more.
shell_over() {
	test "$(systemctl --user show -p SubState --value \
		"$(bgexec_unit $1 $(cat $2.id))")" != running
}
# past_grace NAME: job-exec had rank 1's status of job NAME and the answer grace after it
# (2 s) is over: sdexec let the unit go (flux-core's C module forgets it at once), or says
# it keeps the record while the job runs.
past_grace() {
	test "$(systemctl --user show -p LoadState --value "$(bgexec_unit 1 $(cat $1.id))")" \
		= not-found ||
	flux exec -r 1 flux dmesg |
		grep -q "shell-1-$(flux job id --to=f58plain $(cat $1.id))\[.*kept while job"
}
# rank_1_done NAME: rank 1 of job NAME exits, and its shell with it, and the answer grace
# of its status passes (a rank done seconds before the reload).
rank_1_done() {
	touch $1.1 &&
	sdexec_wait_until shell_over 1 $1
}
rank_1_done_before() {
	rank_1_done $1 &&
	sdexec_wait_until past_grace $1
}
# check_done NAME: job NAME ends with rank 1's code, 3, and no exception; its usage record
# has a row of each rank, none missing, and its memo counts both.
check_done() {
	_id=$(cat $1.id) &&
	touch $1.0 &&
	wait_event $_id clean &&
	flux job eventlog $_id >$1.eventlog &&
	test_debug "cat $1.eventlog" &&
	! grep exception $1.eventlog &&
	test_expect_code 3 flux job status $_id &&
	flux sdexec usage -o json $_id >$1.usage &&
	test_debug "cat $1.usage" &&
	jq -e "[.[].ranks[] | select(.missing | not)] | length == 2" $1.usage &&
	flux jobs -no "{user.sdexec.ranks} {user.sdexec.missing}" $_id >$1.memo &&
	test_debug "cat $1.memo" &&
	read ranks missing <$1.memo &&
	test "$ranks" = 2 && test -z "$missing"
}
# reattached NAME: job-exec reattached job NAME.
reattached() {
	flux job wait-event -q -t $T -p exec $(cat $1.id) reattach
}

test_job_setup bgexec

test_expect_success 'flux module reload job-exec with rank 1 done: the job ends with its code' '
	uneven reload &&
	rank_1_done_before reload &&
	flux module reload job-exec &&
	reattached reload &&
	check_done reload &&
	sdexec_check_no_units
'
test_expect_success 'flux sdexec upgrade with rank 1 done: the job ends with its code' '
	uneven upgrade &&
	rank_1_done_before upgrade &&
	flux sdexec upgrade --timeout 60 >upgrade.out &&
	test_debug "cat upgrade.out" &&
	grep "upgrade: jobs reattached by job-exec: 1" upgrade.out &&
	check_done upgrade &&
	sdexec_check_no_units
'
test_expect_success 'rank 1 ends while job-exec is out and sdexec is reloaded: the same' '
	uneven between &&
	flux module remove job-exec &&
	rank_1_done between &&
	flux exec -r all flux module reload $SDEXEC_MODULE &&
	flux module load job-exec &&
	flux event pub sdexec.job-exec-loaded &&
	reattached between &&
	check_done between &&
	sdexec_check_no_units
'
test_expect_success 'two job-exec reloads in a row with rank 1 done: the same' '
	uneven twice &&
	rank_1_done_before twice &&
	flux module reload job-exec &&
	reattached twice &&
	flux module reload job-exec &&
	flux job wait-event -q -t $T -p exec -c 2 $(cat twice.id) reattach &&
	check_done twice &&
	sdexec_check_no_units
'

test_done
