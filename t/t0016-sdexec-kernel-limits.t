#!/bin/sh
test_description='limits the kernel really enforces, and verdicts that agree with it

One broker. exec.sdexec-properties asks every job shell for MemoryMax=50M, TasksMax=20
and CPUQuota=20%, with [sdexec] containment-check = "warn". Each limit is exercised
against the kernel (a job over MemoryMax is killed, a fork beyond TasksMax fails, the
CPU quota throttles a busy loop) and sdexec'"'"'s verdict must be enforced, read from the
file the kernel keeps the limit in on this layout. Client-set AllowedCPUs and
DevicePolicy get the verdict the kernel'"'"'s behaviour calls for. Where this machine does
not enforce a limit (a probe unit of the user manager, outside sdexec, shows it) the test
is skipped, saying why.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_extra_config t0016.toml <<-EOF
	[exec]
	service = "sdexec"
	sdexec-properties = { MemoryMax = "50M", TasksMax = "20", CPUQuota = "20%" }

	[sdexec]
	containment-check = "warn"
	EOF

sdexec_under_flux 1 jobs
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"

. "$SDEXEC_SRCDIR/t/lib/sharness-limits.sh"
limits_probe memory tasks cpu devices
test $(nproc --all) -ge 2 && test_set_prereq CPUS

test_expect_success 'stats show the layout and the policy, nothing counted yet' '
	containment >stats0.json &&
	jq -e ".layout == \"$LAYOUT\" and .policy == \"warn\" and .constraints == {}" stats0.json
'
test_expect_success MEMORY_KILLS 'a job over MemoryMax is killed, and MemoryMax is enforced' '
	test_expect_code 137 run -n1 "$PY" -c "bytearray(200 << 20)" 2>oom.err &&
	grep "Killed" oom.err &&
	sdexec_wait_until counted MemoryMax enforced 1 &&
	test $(count MemoryMax not-enforced) -eq 0 &&
	case $LAYOUT in
	unified) want="unified: v2 memory.max is 52428800" ;;
	*) want="$LAYOUT: v1 memory.limit_in_bytes is 52428800" ;;
	esac &&
	test "$(field MemoryMax last_read)" = "$want"
'
test_expect_success 'a job under MemoryMax runs to completion' '
	run -n1 "$PY" -c "bytearray(10 << 20)"
'
test_expect_success TASKS_LIMITED 'a fork beyond TasksMax fails inside the job, and TasksMax is enforced' '
	before=$(count TasksMax enforced) &&
	run -n1 "$PY" "$PWD/forks.py" 40 >forks.out &&
	read forked failure <forks.out &&
	test "$failure" = EAGAIN &&
	test $forked -ge 1 && test $forked -lt 20 &&
	sdexec_wait_until counted TasksMax enforced $((before + 1)) &&
	test $(count TasksMax not-enforced) -eq 0 &&
	case $LAYOUT in
	unified) hier=v2 ;;
	*) hier=v1:pids ;;
	esac &&
	test "$(field TasksMax hierarchy)" = $hier &&
	test "$(field TasksMax last_read)" = "$LAYOUT: ${hier%:pids} pids.max is 20"
'
test_expect_success CPU_QUOTA 'CPUQuota is enforced: the quota read back, the loop throttled' '
	before=$(count CPUQuota enforced) &&
	run -n1 sh "$PWD/cpu.sh" >cpu.out &&
	test_debug "cat cpu.out" &&
	read version quota period throttled <cpu.out &&
	test $quota -eq $((period / 5)) &&
	test $throttled -gt 0 &&
	sdexec_wait_until counted CPUQuota enforced $((before + 1)) &&
	test $(count CPUQuota not-enforced) -eq 0 &&
	case $version in
	v1) want="$LAYOUT: v1 cpu.cfs_quota_us is $quota, cpu.cfs_period_us is $period" ;;
	v2) want="$LAYOUT: v2 cpu.max is $quota $period" ;;
	esac &&
	test "$(field CPUQuota last_read)" = "$want"
'
test_expect_success 'acceptance: all three counted enforced, never anything else' '
	containment >stats1.json &&
	test_debug "jq . stats1.json" &&
	for c in MemoryMax TasksMax CPUQuota; do
		jq -e ".constraints.$c.enforced >= 1 and
			.constraints.$c[\"not-enforced\"] == 0 and
			.constraints.$c[\"not-checkable\"] == 0" stats1.json || return 1
	done &&
	flux dmesg >dmesg1.out &&
	test_must_fail grep -E "(MemoryMax|TasksMax|CPUQuota) not-enforced" dmesg1.out
'
# checked CONSTRAINT N: N starts had CONSTRAINT checked, whatever the verdict.
checked() {
	containment | jq -e ".constraints.$1 // {} | (.enforced // 0) + (.[\"not-enforced\"] // 0) +
		(.[\"not-checkable\"] // 0) >= $2" >/dev/null
}
# checks CONSTRAINT: how many starts had CONSTRAINT checked.
checks() {
	containment | jq ".constraints.$1 // {} | (.enforced // 0) + (.[\"not-enforced\"] // 0) +
		(.[\"not-checkable\"] // 0)"
}
# client LABEL PROPERTY=VALUE COMMAND: run COMMAND >LABEL.out in the background under
# sdexec with SDEXEC_PROP_PROPERTY, wait until it wrote its line and was checked, kill it.
client() {
	_client_c=${2%%=*} &&
	_client_n=$(checks $_client_c) &&
	$sdexec -r 0 --bg --label=$1 --setopt=SDEXEC_PROP_$2 \
		sh -c "$3 >\"$PWD/$1.out\"; exec sleep 300" &&
	sdexec_wait_until checked $_client_c $((_client_n + 1)) &&
	sdexec_wait_for_file $1.out &&
	$sproc_kill -r 0 9 $1 &&
	test_debug "cat $1.out"
}
test_expect_success CPUS 'AllowedCPUs: the verdict is what the kernel did to the affinity' '
	client cpus AllowedCPUs=0 "sed -n \"s/^Cpus_allowed_list:[[:space:]]*//p\" /proc/self/status" &&
	if test "$(cat cpus.out)" = 0; then
		test $(count AllowedCPUs enforced) -eq 1
	else
		test $(count AllowedCPUs not-enforced) -eq 1 &&
		field AllowedCPUs last_reason >cpus.reason &&
		test_debug "cat cpus.reason" &&
		case $LAYOUT in
		unified) grep "^unified: v2 cpuset.cpus.effective" cpus.reason ;;
		*) grep -x "$LAYOUT: v1 cpuset.cpus not read: the unit has no v1 cpuset cgroup (systemd sets AllowedCPUs only on cgroup v2)" cpus.reason ;;
		esac
	fi
'
test_expect_success KMSG 'DevicePolicy=closed: the verdict is what the kernel did to a device open' '
	client device DevicePolicy=closed \
		"if (exec 3</dev/kmsg) 2>/dev/null; then echo opened; else echo denied; fi" &&
	if test "$(cat device.out)" = denied; then
		test $(count DevicePolicy enforced) -eq 1 &&
		field DevicePolicy last_read >device.read &&
		test_debug "cat device.read" &&
		case $LAYOUT in
		unified) grep -x "unified: v2 BPF device programs attached to the unit.s cgroup: [0-9]*" device.read ;;
		*) grep -x "$LAYOUT: v1 devices.list allows [0-9]* entries, not every device" device.read ;;
		esac
	else
		test $(count DevicePolicy not-enforced) -eq 1 &&
		field DevicePolicy last_reason | grep "^$LAYOUT: "
	fi
'
test_expect_success 'no unit is left' '
	sdexec_check_no_units
'
test_done
