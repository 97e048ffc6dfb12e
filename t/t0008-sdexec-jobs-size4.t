#!/bin/sh
test_description='jobs through our sdexec on four brokers sharing one node (bgexec)'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_extra_config exec.toml <<-EOF
	[exec]
	service = "sdexec"
	method = "bgexec"
	EOF

sdexec_under_flux 4 jobs

T=$SDEXEC_WAIT_TIMEOUT

test_expect_success 'a 4-node job runs one task on each broker' '
	timeout $T flux run -N4 -n4 flux getattr rank | sort >ranks.out &&
	printf "0\n1\n2\n3\n" >ranks.expected &&
	test_cmp ranks.expected ranks.out
'
test_expect_success 'each rank names its shell unit with its own rank suffix' '
	id=$(flux submit -N4 -n4 sh -c "cat /proc/self/cgroup") &&
	timeout $T flux job attach $id >cgroup.out &&
	for r in 0 1 2 3; do
		grep -F "/shell-$r-$(flux job id --to=f58plain $id)-$r:$SDEXEC_INSTANCE.service" \
			cgroup.out || return 1
	done
'
test_expect_success '20 concurrent 4-node jobs all complete with their exit code' '
	flux submit -N4 -n4 --cc=1-20 sh -c "exit \$((FLUX_JOB_CC % 3))" >cc.ids &&
	flux queue drain -t 120s &&
	for id in $(cat cc.ids); do
		flux job status $id; echo $?
	done | sort | uniq -c >cc.out &&
	test_debug "cat cc.out" &&
	for cc in $(seq 1 20); do echo $((cc % 3)); done | sort | uniq -c >cc.expected &&
	test_cmp cc.expected cc.out
'
test_expect_success 'no unit of this instance is left on any rank' '
	sdexec_check_no_units &&
	for r in 0 1 2 3; do
		flux exec -r $r flux module stats sdexec | jq -e ".procs == {}" || return 1
	done
'
test_done
