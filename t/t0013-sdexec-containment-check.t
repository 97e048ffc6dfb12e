#!/bin/sh
test_description='containment you can trust: every constraint verified after start

Two brokers, [exec] sdexec-constrain-resources = true with a MemoryMax in
exec.sdexec-properties, so every job shell asks for AllowedCPUs,
AllowedMemoryNodes, DevicePolicy and a scaled MemoryMax. This machine gives the
user instance neither the cpuset nor the memory controller in cgroup v2, and
systemd'"'"'s user manager never applies device policies: none of them is
enforced. [sdexec] containment-check decides what that does to a job: enforce
(fail it, drain the rank), warn (log once, run it), off (no check).'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_extra_config t0013.toml <<-EOF
	[exec]
	service = "sdexec"
	sdexec-constrain-resources = true
	sdexec-properties = { MemoryMax = "8G" }
	EOF

sdexec_under_flux 2 jobs
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"

CPUSET_REASON="cpuset.cpus unavailable (is cpuset controller delegated to the user instance?)"
MEMORY_REASON="memory.max unavailable (is memory controller delegated to the user instance?)"
DEVICE_REASON="systemd's user manager does not apply device policies (systemd#23198)"

# containment RANK: the containment object of sdexec's stats on RANK.
containment() {
	flux exec -r "$1" flux module stats sdexec | jq -c .containment
}
# set_policy [POLICY]: set (or, without POLICY, drop) containment-check and wait until
# sdexec on rank 1 applies it (modules take a reload after the broker's config changes).
set_policy() {
	if test $# -gt 0; then
		sdexec_set_config policy "$(printf "[sdexec]\ncontainment-check = \"%s\"" "$1")"
	else
		sdexec_set_config policy
	fi &&
	sdexec_wait_until policy_is ${1:-enforce}
}
policy_is() {
	containment 1 | jq -e ".policy == \"$1\"" >/dev/null
}
# count RANK CONSTRAINT OUTCOME: how many starts on RANK had CONSTRAINT with OUTCOME.
count() {
	containment "$1" | jq ".constraints.$2[\"$3\"] // 0"
}
# counted RANK CONSTRAINT OUTCOME N: the count has reached N (the check runs once the
# main process exists, so it waits for a process that lives on).
counted() {
	test $(count "$1" "$2" "$3") -ge "$4"
}
# shell_unit RANK ID: the bulk-exec job shell unit of job ID on RANK.
shell_unit() {
	echo "shell-$1-$(flux job id --to=f58plain "$2").service"
}
unit_prop() {
	systemctl --user show -p "$2" --value "$1"
}

test_expect_success 'the default policy is enforce, nothing counted yet' '
	containment 1 >stats0.out &&
	jq -e ".policy == \"enforce\" and .constraints == {}" stats0.out
'
test_expect_success 'enforce: a constrained job fails naming the constraint and reason, rank drains' '
	id=$(flux submit -N1 -n1 --requires=rank:1 true) &&
	job_exception $id >enforce.note &&
	host=$(flux exec -r 1 hostname) &&
	grep -F "sdexec constraint check failed on $host (rank 1): AllowedCPUs not enforced: $CPUSET_REASON" \
		enforce.note &&
	flux resource drain -n -o "{ranks} {reason}" >drain.out &&
	grep -F "1 sdexec constraint check failed on $host for job $id" drain.out &&
	flux resource undrain 1
'
test_expect_success 'enforce: stats count each constraint of that start with its reason' '
	containment 1 >stats1.out &&
	test_debug "jq . stats1.out" &&
	for c in AllowedCPUs AllowedMemoryNodes MemoryMax DevicePolicy; do
		test $(count 1 $c not-enforced) -eq 1 || return 1
	done &&
	jq -e ".constraints.MemoryMax.last_reason == \"$MEMORY_REASON\"" stats1.out &&
	jq -e ".constraints.DevicePolicy.last_reason == \"$DEVICE_REASON\"" stats1.out &&
	jq -e ".constraints.AllowedCPUs.last_reason == \"$CPUSET_REASON\"" stats1.out
'
test_expect_success 'the log names each constraint and reason once, however many jobs' '
	id=$(flux submit -N1 -n1 --requires=rank:1 true) &&
	job_exception $id >enforce2.note &&
	flux resource undrain 1 &&
	test $(count 1 AllowedCPUs not-enforced) -eq 2 &&
	flux exec -r 1 flux dmesg >rank1.log &&
	for c in AllowedCPUs AllowedMemoryNodes MemoryMax DevicePolicy; do
		test $(grep -c ": $c not-enforced: .*(first seen)" rank1.log) -eq 1 || return 1
	done
'
test_expect_success 'a bad policy fails flux config reload and the old one stays' '
	printf "[sdexec]\ncontainment-check = \"strict\"\n" >"$SDEXEC_CONF_DIR/zz-policy.toml" &&
	test_must_fail flux config reload 2>reload.err &&
	grep "sdexec.containment-check must be one of enforce, warn, off" reload.err &&
	rm "$SDEXEC_CONF_DIR/zz-policy.toml" &&
	containment 0 | jq -e ".policy == \"enforce\"" &&
	set_policy
'
test_expect_success 'warn: the constrained job runs, its unit carries the mapped properties' '
	set_policy warn &&
	id=$(flux submit -N1 -n1 --requires=rank:1 --cwd="$PWD" \
		sh -c "until test -e go.$$; do sleep 0.1; done") &&
	unit=$(shell_unit 1 $id) &&
	sdexec_wait_until unit_active $unit &&
	core=$(flux job info $id R | jq -r ".execution.R_lite[0].children.core") &&
	flux python -c "import flux, json, sys
f = flux.Flux().rpc(\"sdexec-mapper.lookup\", {\"R\": sys.argv[1]}, nodeid=1)
print(json.dumps(f.get()))" "$(flux R encode --ranks=1 --cores=$core)" >mapped.json &&
	test_debug "cat mapped.json" &&
	test "$(unit_prop $unit AllowedCPUs)" = "$(jq -r .AllowedCPUs mapped.json)" &&
	test "$(unit_prop $unit AllowedMemoryNodes)" = "$(jq -r .AllowedMemoryNodes mapped.json)" &&
	test "$(unit_prop $unit MemoryMax)" = "$(jq -r .MemoryMax mapped.json)" &&
	test "$(unit_prop $unit DevicePolicy)" = closed &&
	touch go.$$ &&
	flux job wait-event -t $T $id clean &&
	test "$(flux job status $id; echo $?)" = 0 &&
	flux resource drain -n -o "{ranks}" >drain2.out &&
	test_must_be_empty drain2.out
'
test_expect_success 'warn: the start was counted, and logged nothing new' '
	test $(count 1 AllowedCPUs not-enforced) -eq 3 &&
	flux exec -r 1 flux dmesg >rank1.log2 &&
	test $(grep -c ": AllowedCPUs not-enforced: .*(first seen)" rank1.log2) -eq 1
'
test_expect_success 'off: the job runs and nothing is checked or counted' '
	set_policy off &&
	containment 1 >before.out &&
	run -N1 -n1 --requires=rank:1 true &&
	containment 1 >after.out &&
	jq -e ".policy == \"off\"" after.out &&
	jq -e .constraints before.out >before.c &&
	jq -e .constraints after.out >after.c &&
	test_cmp before.c after.c
'
test_expect_success 'enforce: properties a client sets itself are checked and counted, never fatal' '
	set_policy &&
	before=$(count 1 MemoryHigh not-enforced) &&
	$sdexec -r 1 --bg --label=client --setopt=SDEXEC_PROP_MemoryHigh=1G sleep 300 &&
	sdexec_wait_until counted 1 MemoryHigh not-enforced $((before + 1)) &&
	$sproc_ps -r 1 >client.ps &&
	grep -E " R +client " client.ps &&
	$sproc_kill -r 1 9 client
'
test_expect_success 'no unit is left' '
	sdexec_check_no_units
'
test_done
