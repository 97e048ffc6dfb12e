# flux-sdexec: multi-user job tests shared by t0009 (bulk-exec) and t0010 (bgexec).
# Source after sharness-jobs.sh, inside an instance whose [exec] names t/fake-imp.py as
# the IMP with a 1s sdexec stop timer sending SIGUSR1; the script defines shell_unit.

GUEST=42

# sign_none USERID: stdin's jobspec wrapped as a J signed by USERID with
# mechanism "none" (base64 of the NUL-separated header, base64 of the payload).
sign_none() {
	flux python -c '
import base64, sys
header = b"version\0i1\0userid\0i%s\0mechanism\0snone\0" % sys.argv[1].encode()
payload = sys.stdin.buffer.read()
print(b".".join([base64.b64encode(header), base64.b64encode(payload), b"none"]).decode())
' "$1"
}
# guest_submit [flux run options] CMD...: submit CMD as the guest; print its ID.
guest_submit() {
	flux run --dry-run --env="FAKE_IMP_LOG=$(pwd)/imp.log" "$@" >guest.jobspec &&
	sign_none $GUEST <guest.jobspec >guest.J &&
	FLUX_HANDLE_USERID=$GUEST flux job submit --flags=signed guest.J
}
# unit_prop UNIT PROPERTY / loaded UNIT: systemd's view of a shell unit.
unit_prop() {
	systemctl --user show -p "$2" --value "$1"
}
loaded() {
	test -n "$(sdexec_list_units "$1")"
}
# imp_logged N: the IMP has logged at least N lines.
imp_logged() {
	test $(wc -l <imp.log) -ge "$1"
}
wait_clean() {
	flux job wait-event -q -t "$T" "$1" clean
}

# test_multiuser_jobs: guest jobs through the IMP, escalation, EDEADLK, abandoned unit,
# and nothing left behind (5 jobs).
test_multiuser_jobs() {
	test_expect_success 'job-exec has an IMP and a 1s sdexec stop timer sending SIGUSR1' '
		flux module stats job-exec >stats.out &&
		jq -e ".config.flux_imp_path == \"$SDEXEC_SRCDIR/t/fake-imp.py\"" stats.out &&
		flux config get | jq -e ".exec.\"sdexec-stop-timer-sec\" == 1"
	'
	test_expect_success 'a guest job runs as a multi-user job through the IMP' '
		rm -f imp.log &&
		id=$(guest_submit sh -c "echo hello from the guest job") &&
		flux job attach $id 2>guest.err &&
		test_debug "cat guest.err imp.log" &&
		grep "stdout: hello from the guest job" guest.err &&
		test $(flux jobs -n -o "{userid}" $id) -eq $GUEST &&
		printf "ready\nexit 0\nstopping\n" >imp.expected &&
		test_cmp imp.expected imp.log
	'
	test_expect_success 'its unit has the properties job-exec asks for multi-user jobs' '
		mkfifo go &&
		id=$(guest_submit sh -c "read x <go") &&
		flux job wait-event -q -t "$T" $id start &&
		u=$(shell_unit 0 $id) &&
		unit_prop $u Type >type.out &&
		unit_prop $u KillMode >killmode.out &&
		unit_prop $u TimeoutStopUSec >timeout.out &&
		test_debug "cat type.out killmode.out timeout.out" &&
		echo >go &&
		wait_clean $id &&
		test "$(cat type.out)" = notify &&
		test "$(cat killmode.out)" = process &&
		test "$(cat timeout.out)" = infinity
	'
	test_expect_success 'the job exit code comes through the IMP' '
		id=$(guest_submit sh -c "exit 3") &&
		test_expect_code 3 flux job attach $id
	'
	test_expect_success 'an IMP lingering after STOPPING=1 gets SIGTERM, then SIGUSR1' '
		rm -f imp.log &&
		id=$(guest_submit --env=FAKE_IMP_AFTER=linger sh -c "exit 4") &&
		test_expect_code 4 flux job attach $id &&
		test_debug "cat imp.log" &&
		printf "ready\nexit 4\nstopping\nsignal 15\nsignal 10\n" >imp.expected &&
		test_cmp imp.expected imp.log &&
		sdexec_wait_unit_gone $(shell_unit 0 $id)
	'
	test_expect_success 'an IMP that never exits: EDEADLK, a job exception, the rank drained' '
		rm -f imp.log &&
		id=$(guest_submit --env=FAKE_IMP_AFTER=hang true) &&
		echo $id >hung.id &&
		wait_clean $id &&
		sdexec_wait_until imp_logged 5 &&
		test_debug "cat imp.log" &&
		printf "ready\nexit 0\nstopping\nsignal 15\nsignal 10\n" >imp.expected &&
		test_cmp imp.expected imp.log &&
		has_exception $id exec &&
		grep "unkillable processes" eventlog.out &&
		flux resource drain -n -o "{ranks} {reason}" >drain.out &&
		test_debug "cat drain.out" &&
		grep "^0 sdexec reports SIGKILL timeout, unit may still be active for job $id" drain.out
	'
	test_expect_success 'the abandoned unit is let go once its processes end at last' '
		u=$(shell_unit 0 $(cat hung.id)) &&
		sdexec_unit_is $u deactivating &&
		systemctl --user kill -s SIGKILL $u &&
		sdexec_wait_until test_must_fail loaded $u &&
		flux resource undrain 0
	'
	test_jobs_leave_nothing 5
}
