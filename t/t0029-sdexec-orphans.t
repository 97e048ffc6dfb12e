#!/bin/sh

test_description='No orphan shell holds a node

Runs under flux start --test-size=2 with [exec] service = "sdexec", method =
"bgexec". job-exec removed and loaded again by hand while a 2-node job is in its
startup window: job-exec cannot reattach it ("job is not recoverable: no
recoverable event") and the job ends with that exception; its two shells, which
nobody waits on any more, are stopped within 30 s, logged with the reason, and
shown by flux sdexec units meanwhile. A job running past its startup window is
untouched. ORPHAN_ROUNDS (default 2) rounds of job-exec and sdexec reloaded by
hand do the same through adoption.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_bgexec_jobs_under_flux 2

FLUX_EXEC_PATH_PREPEND=$SDEXEC_SRCDIR/cmd
export FLUX_EXEC_PATH_PREPEND
ROUNDS=${ORPHAN_ROUNDS:-2}

# A job held in its startup window (as t0017 does): its shells' user rc waits for the
# gate file startup.gate in the job's cwd, at most 180 s. The shell globs the rc path,
# so it goes where no space is (the trash directory has one).
SLOW_RC=$(mktemp -d /tmp/sdexec-t0029.XXXXXX)/slow.lua
cleanup "rm -rf \"${SLOW_RC%/slow.lua}\""
cat >$SLOW_RC <<-'EOT'
local n = 0
while not io.open("startup.gate") and n < 1800 do os.execute("sleep 0.1"); n = n + 1 end
EOT

# held_job: submit a 2-node job held in its startup window; wait until both its shells
# run; print its id.
held_job() {
	_hj_id=$(flux submit -N2 -n2 -t 5m -o userrc=$SLOW_RC sh -c "exit 3") &&
	wait_event $_hj_id start &&
	sdexec_wait_until unit_active $(bgexec_unit 0 $_hj_id) &&
	sdexec_wait_until unit_active $(bgexec_unit 1 $_hj_id) &&
	echo $_hj_id
}
# running_job GATE: a 2-node job past its startup window, waiting for file GATE, exit 5.
running_job() {
	_rj_id=$(flux submit -N2 -n2 -t 5m \
		sh -c "while ! test -e $1; do sleep 0.1; done; exit 5") &&
	wait_event $_rj_id recoverable -p exec &&
	echo $_rj_id
}
# not_recoverable ID: the job ended with job-exec's exception for a failed reattach.
not_recoverable() {
	wait_event $1 clean &&
	flux job eventlog $1 >$1.eventlog &&
	grep "exception.*job is not recoverable: no recoverable event" $1.eventlog
}
# shells_gone_within SECONDS ID: both shell units of ID are gone within SECONDS of wall
# time from now (written to gone.secs).
shells_gone_within() {
	_sg_start=$(date +%s.%N) &&
	SDEXEC_WAIT_TIMEOUT=$1 sdexec_wait_until units_gone \
		$(bgexec_unit 0 $2) $(bgexec_unit 1 $2) &&
	echo "$(date +%s.%N) $_sg_start" | awk '{printf "%.1f\n", $1 - $2}' >gone.secs &&
	test_debug "cat gone.secs" &&
	awk -v limit=$1 '{exit !($1 <= limit)}' gone.secs
}
# untouched ID: a running job's shells are still active.
untouched() {
	unit_active $(bgexec_unit 0 $1) && unit_active $(bgexec_unit 1 $1)
}
# units_show ID PATTERN: flux sdexec units shows both shells of ID with a line matching
# PATTERN.
units_show() {
	flux sdexec units >units.out &&
	test $(grep "shell-[01]-$(flux job id --to=f58plain $1)" units.out |
		grep -c -- "$2") -eq 2
}

test_job_setup bgexec

test_expect_success 'a bad orphan-check-interval fails flux config reload' '
	printf "[sdexec]\norphan-check-interval = \"often\"\n" \
		>"$SDEXEC_CONF_DIR/zz-orphan.toml" &&
	test_must_fail flux config reload 2>reload.err &&
	test_debug "cat reload.err" &&
	grep "sdexec.orphan-check-interval must be a duration above zero like \"10s\": got .often." \
		reload.err &&
	rm "$SDEXEC_CONF_DIR/zz-orphan.toml" &&
	flux config reload
'
test_expect_success 'orphan-check-interval = "1s" (checks come quickly below)' '
	sdexec_set_config orphan "[sdexec]
orphan-check-interval = \"1s\""
'
# checks RANK: the job queries rank RANK's sdexec has sent.
checks() {
	flux exec -r $1 flux module stats sdexec | jq ".\"orphan-checks\""
}
# checked_since RANK N: rank RANK has sent more than N job queries.
checked_since() {
	test $(checks $1) -gt $2
}
test_expect_success 'job-exec removed under a job in its startup window and a running one' '
	rm -f startup.gate run.gate &&
	run_id=$(running_job run.gate) &&
	id=$(held_job) &&
	echo $id >held.id && echo $run_id >run.id &&
	flux exec -r all flux dmesg -C &&
	flux module remove job-exec &&
	sdexec_wait_until units_show $id "no waiter; job f.* is RUN" &&
	test_debug "cat units.out" &&
	units_show $run_id "no waiter; job f.* is RUN"
'
test_expect_success 'their shells nobody waits on are checked again and again, untouched' '
	c0=$(checks 0) && c1=$(checks 1) &&
	sdexec_wait_until checked_since 0 $((c0 + 10)) &&
	sdexec_wait_until checked_since 1 $((c1 + 10)) &&
	untouched $(cat held.id) &&
	untouched $(cat run.id) &&
	test $(flux module stats sdexec | jq ".\"orphans-stopped\"") -eq 0
'
test_expect_success 'job-exec loaded again' '
	flux module load job-exec
'
test_expect_success 'the job ends with the exception of a failed reattach' '
	not_recoverable $(cat held.id)
'
test_expect_success 'its two shells are gone within 30 s' '
	shells_gone_within 30 $(cat held.id)
'
test_expect_success 'each rank logged why it stopped its shell' '
	id=$(flux job id --to=f58plain $(cat held.id)) &&
	for r in 0 1; do
		flux exec -r $r flux dmesg >dmesg.$r &&
		grep "shell-$r-$id\[[0-9]*\]: job $id is inactive: stopping the orphan" dmesg.$r ||
		return 1
	done
'
test_expect_success 'the job past its startup window is untouched and ends with its own code' '
	run_id=$(cat run.id) &&
	untouched $run_id &&
	touch run.gate &&
	wait_event $run_id clean &&
	test_expect_code 5 flux job status $run_id &&
	! grep exception $(flux job eventlog $run_id >run.eventlog; echo run.eventlog)
'
test_expect_success 'no unit is left' '
	touch startup.gate &&
	sdexec_check_no_units
'

# round N: job-exec and sdexec reloaded by hand (no flux sdexec upgrade) under a 2-node
# job in its startup window and a running one: the first ends with the reattach
# exception and its shells are gone within 30 s (the seconds it took in round.N); the
# running one is reattached and untouched.
round() {
	rm -f startup.gate run.gate &&
	run_id=$(running_job run.gate) &&
	id=$(held_job) &&
	flux module remove job-exec &&
	flux exec -r all flux module reload $SDEXEC_MODULE &&
	flux module load job-exec &&
	not_recoverable $id &&
	shells_gone_within 30 $id &&
	cp gone.secs round.$1 &&
	untouched $run_id &&
	touch run.gate &&
	wait_event $run_id clean &&
	test_expect_code 5 flux job status $run_id &&
	touch startup.gate &&
	sdexec_check_no_units
}
test_expect_success 'the default orphan-check-interval again for the rounds' '
	sdexec_set_config orphan
'
for n in $(seq 1 $ROUNDS); do
	test_expect_success "round $n of job-exec and sdexec reloaded by hand: orphans stopped" "
		round $n &&
		test_debug \"cat round.$n\"
	"
done
test_expect_success "every round: the shells gone within 30 s of the job being clean" '
	cat round.* >rounds &&
	test $(wc -l <rounds) -eq $ROUNDS &&
	awk "\$1 > 30 { bad = 1 } END { exit bad }" rounds &&
	echo "slowest of $ROUNDS round(s): $(sort -n rounds | tail -1) s" >&2
'

test_done
