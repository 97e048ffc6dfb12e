#!/bin/sh
test_description='post-start AllowedCPUs check: SDEXEC_TEST_EXPECTED_CPUS (with sdexec-debug)

A process whose unit cgroup does not hold the expected cpuset is SIGKILLed and
its request fails with EIO; job-exec turns that into a job exception and a
drained rank. Without sdexec-debug the option is ignored, as in flux-core.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_extra_config exec.toml <<-EOF
	[exec]
	service = "sdexec"
	EOF

sdexec_under_flux 2 jobs

T=$SDEXEC_WAIT_TIMEOUT
never="9998-9999"  # no machine has these CPUs, so the check always fails

# rank1_log_has PATTERN: rank 1's own ring buffer (its errors are not forwarded)
rank1_log_has() {
	flux exec -r 1 flux dmesg | grep -q -- "$1"
}
# set_debug true|false: flux config load with [systemd] sdexec-debug changed, then
# wait until rank 1 has it (followers take the new config from rank 0 asynchronously)
set_debug() {
	flux config get | jq ".systemd.\"sdexec-debug\" = $1" | flux config load &&
	sdexec_wait_until rank1_debug_is $1
}
rank1_debug_is() {
	flux exec -r 1 flux config get | jq -e ".systemd.\"sdexec-debug\" == $1" >/dev/null
}

test_expect_success 'sdexec-debug on' '
	set_debug true &&
	flux config get | jq -e ".systemd.\"sdexec-debug\" == true"
'
test_expect_success 'a unit whose cpuset does not match is killed and fails with EIO' '
	test_expect_code 1 $sdexec -r 1 --setopt=SDEXEC_NAME=pscheck.service \
		--setopt=SDEXEC_TEST_EXPECTED_CPUS=$never sh -c "echo ran; sleep 60" \
		>pscheck.out 2>pscheck.err &&
	test_debug "cat pscheck.err" &&
	grep "AllowedCPUs" pscheck.err &&
	rank1_log_has "pscheck.service: post-start check failed: AllowedCPUs" &&
	sdexec_wait_unit_gone pscheck.service
'
test_expect_success 'a malformed SDEXEC_TEST_EXPECTED_CPUS is refused' '
	test_must_fail $sdexec -r 1 --setopt=SDEXEC_TEST_EXPECTED_CPUS=x true 2>badset.err &&
	grep "SDEXEC_TEST_EXPECTED_CPUS" badset.err
'
test_expect_success 'a job whose check fails gets an exception and drains the rank' '
	id=$(flux submit -N1 --requires=rank:1 \
		--setattr=system.exec.bulkexec.sdexec-test-expected-cpus=$never true) &&
	flux job wait-event -q -t $T $id clean &&
	flux job eventlog $id >job.eventlog &&
	test_debug "cat job.eventlog" &&
	grep "exception.*AllowedCPUs" job.eventlog &&
	flux resource drain -n -o "{ranks} {reason}" >drain.out &&
	test_debug "cat drain.out" &&
	grep "^1 .*AllowedCPUs" drain.out &&
	flux resource undrain 1
'
test_expect_success 'with sdexec-debug off the option is ignored' '
	set_debug false &&
	$sdexec -r 1 --setopt=SDEXEC_TEST_EXPECTED_CPUS=$never true
'
test_expect_success 'no unit of this instance is left' '
	sdexec_check_no_units
'
test_done
