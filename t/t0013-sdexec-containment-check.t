#!/bin/sh
test_description='containment you can trust: every constraint verified after start

Two brokers, [exec] sdexec-constrain-resources = true with a MemoryMax in
exec.sdexec-properties, so every job shell asks for AllowedCPUs,
AllowedMemoryNodes, DevicePolicy and a scaled MemoryMax. Each verdict must be what
the kernel does on this machine, probed outside sdexec: on a hybrid or legacy layout
systemd applies AllowedCPUs and AllowedMemoryNodes only on cgroup v2 (not enforced),
MemoryMax lands in the v1 memory controller (enforced), DevicePolicy in the v1 devices
controller where the user manager may write it. [sdexec] containment-check decides
what a constraint not enforced does to a job: enforce (fail it, drain the rank), warn
(log once, run it), off (no check); a job whose constraints the kernel all enforces
runs under enforce. [sdexec] containment-required is checked and shown; this host (a v1
devices hierarchy) has nothing unenforceable, so the job memo that names what a job runs
without (cgroup v2) is exercised by driving its adapter against this instance.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_extra_config t0013.toml <<-EOF
	[exec]
	service = "sdexec"
	sdexec-constrain-resources = true
	sdexec-properties = { MemoryMax = "8G" }
	EOF

sdexec_under_flux 2 jobs
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"

. "$SDEXEC_SRCDIR/t/lib/sharness-limits.sh"
limits_probe memory devices cpuset

case $LAYOUT in
unified)
	CPUSET_REASON="unified: v2 cpuset.cpus.effective unavailable (is cpuset controller delegated to the user instance?)"
	;;
*)
	CPUSET_REASON="$LAYOUT: v1 cpuset.cpus not read: the unit has no v1 cpuset cgroup (systemd sets AllowedCPUs only on cgroup v2)"
	;;
esac
# the verdict this machine's kernel calls for, per constraint of a mapped job shell
NOT_ENFORCED="AllowedCPUs AllowedMemoryNodes"
ENFORCED=
for _c in MemoryMax:MEMORY_KILLS DevicePolicy:DEVICES_CLOSED; do
	if test_have_prereq ${_c#*:}; then
		ENFORCED="$ENFORCED ${_c%:*}"
	else
		NOT_ENFORCED="$NOT_ENFORCED ${_c%:*}"
	fi
done
say "kernel enforces:$ENFORCED; does not: $NOT_ENFORCED"
test_have_prereq CPUSET_APPLIED || test_set_prereq CPUSET_NOT_APPLIED

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
# checks RANK CONSTRAINT / checked RANK CONSTRAINT N: starts on RANK that had CONSTRAINT
# checked, whatever the verdict.
checks() {
	containment "$1" | jq ".constraints.$2 // {} | (.enforced // 0) +
		(.[\"not-enforced\"] // 0) + (.[\"not-checkable\"] // 0) + (.unenforceable // 0)"
}
checked() {
	test $(checks "$1" "$2") -ge "$3"
}
# shell_unit RANK ID: the bulk-exec job shell unit of job ID on RANK.
shell_unit() {
	echo "shell-$1-$(flux job id --to=f58plain "$2").service"
}
unit_prop() {
	systemctl --user show -p "$2" --value "$1"
}

# field RANK CONSTRAINT KEY: one key of a constraint's stats, raw.
field() {
	containment "$1" | jq -r ".constraints.$2.$3"
}

test_expect_success 'the default policy is enforce, nothing counted yet, the layout shown' '
	containment 1 >stats0.out &&
	jq -e ".policy == \"enforce\" and .constraints == {} and .layout == \"$LAYOUT\"" stats0.out
'
test_expect_success CPUSET_NOT_APPLIED 'enforce: a constrained job fails naming the constraint and reason, rank drains' '
	id=$(flux submit -N1 -n1 --requires=rank:1 true) &&
	job_exception $id >enforce.note &&
	host=$(flux exec -r 1 hostname) &&
	grep -F "sdexec constraint check failed on $host (rank 1): AllowedCPUs not enforced: $CPUSET_REASON" \
		enforce.note &&
	flux resource drain -n -o "{ranks} {reason}" >drain.out &&
	grep -F "1 sdexec constraint check failed on $host for job $id" drain.out &&
	flux resource undrain 1
'
test_expect_success CPUSET_NOT_APPLIED 'enforce: stats count each constraint of that start as the kernel has it' '
	containment 1 >stats1.out &&
	test_debug "jq . stats1.out" &&
	for c in $NOT_ENFORCED; do
		test $(count 1 $c not-enforced) -eq 1 &&
		jq -e ".constraints.$c.last_reason | startswith(\"$LAYOUT: \")" stats1.out || return 1
	done &&
	for c in $ENFORCED; do
		test $(count 1 $c enforced) -eq 1 && test $(count 1 $c not-enforced) -eq 0 || return 1
	done &&
	jq -e ".constraints.AllowedCPUs.last_reason == \"$CPUSET_REASON\"" stats1.out
'
test_expect_success CPUSET_NOT_APPLIED,MEMORY_KILLS 'MemoryMax was read where the kernel keeps it' '
	case $LAYOUT in
	unified) want="^unified: v2 memory.max is [0-9]*$" hier=v2 ;;
	*) want="^$LAYOUT: v1 memory.limit_in_bytes is [0-9]*$" hier=v1:memory ;;
	esac &&
	field 1 MemoryMax last_read | grep "$want" &&
	test "$(field 1 MemoryMax hierarchy)" = $hier
'
test_expect_success CPUSET_NOT_APPLIED 'the log names each constraint not enforced and its reason once, however many jobs' '
	id=$(flux submit -N1 -n1 --requires=rank:1 true) &&
	job_exception $id >enforce2.note &&
	flux resource undrain 1 &&
	test $(count 1 AllowedCPUs not-enforced) -eq 2 &&
	flux exec -r 1 flux dmesg >rank1.log &&
	for c in $NOT_ENFORCED; do
		test $(grep -c ": $c not-enforced: .*(first seen)" rank1.log) -eq 1 || return 1
	done &&
	for c in $ENFORCED; do
		test_must_fail grep ": $c not-enforced" rank1.log || return 1
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

# V1_DEVICES: a v1 devices hierarchy is mounted (hybrid or legacy): the user manager applies
# device policies through it, so this host has no unenforceable constraint.
grep -E " - cgroup [^ ]+ [^ ]*[,]devices([, ]|$)" /proc/self/mountinfo >/dev/null &&
	test_set_prereq V1_DEVICES
# required_is JSON: sdexec on rank 1 applies containment-required JSON (compact).
required_is() {
	test "$(containment 1 | jq -c .required)" = "$1"
}
set_required() {
	if test $# -gt 1; then
		sdexec_set_config required "$(printf "[sdexec]\ncontainment-required = %s" "$1")"
	else
		sdexec_set_config required
	fi &&
	sdexec_wait_until required_is "${2:-[]}"
}
test_expect_success V1_DEVICES 'a v1 devices hierarchy: nothing is unenforceable here, nothing required' '
	for r in 0 1; do
		containment $r | jq -e ".unenforceable == {} and .required == []" || return 1
	done
'
test_expect_success 'an unknown containment-required name fails flux config reload, naming it' '
	printf "[sdexec]\ncontainment-required = [\"DevicePolicy\", \"Foo\"]\n" \
		>"$SDEXEC_CONF_DIR/zz-required.toml" &&
	test_must_fail flux config reload 2>required.err &&
	test_debug "cat required.err" &&
	grep -F "sdexec.containment-required[1]: '"'"'Foo'"'"' is not a containment constraint (one of AllowedCPUs, AllowedMemoryNodes," \
		required.err &&
	rm "$SDEXEC_CONF_DIR/zz-required.toml" &&
	containment 0 | jq -e ".required == []" &&
	set_required
'
test_expect_success 'containment-required: applied at reload, shown in the stats of every rank' '
	set_required "[\"DevicePolicy\", \"DeviceAllow\"]" "[\"DevicePolicy\",\"DeviceAllow\"]" &&
	containment 0 | jq -e ".required == [\"DevicePolicy\",\"DeviceAllow\"]"
'
test_expect_success V1_DEVICES 'required device policies this host applies: no error at the reload' '
	flux dmesg >required0.log &&
	flux exec -r 1 flux dmesg >required1.log &&
	test_must_fail grep "is required (sdexec.containment-required) but never enforced" \
		required0.log required1.log
'
test_expect_success 'containment-required dropped again' '
	set_required
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
test_expect_success CPUSET_NOT_APPLIED 'warn: the start was counted, and logged nothing new' '
	test $(count 1 AllowedCPUs not-enforced) -eq 3 &&
	flux exec -r 1 flux dmesg >rank1.log2 &&
	test $(grep -c ": AllowedCPUs not-enforced: .*(first seen)" rank1.log2) -eq 1
'
# memo.py JOBID REASON: what sdexec does for a job shell that runs without an unenforceable
# constraint (JobMemos, broker/memo.py), driven directly with this handle: this host has
# no unenforceable constraint, so no job shell of ours needs it. Prints each debug line.
cat >memo.py <<-EOF
	import sys
	import flux
	from flux.job import JobID
	from flux_sdexec.broker.memo import JobMemos
	from flux_sdexec.broker.watchers import Watchers


	class Log:
	    def debug(self, text):
	        print(text)

	    error = debug


	h = flux.Flux()
	memos = JobMemos(h, Log(), Watchers(h, Log()))
	answered = memos._answered


	def done(future):
	    answered(future)
	    h.reactor_stop()


	memos._answered = done
	unit = "shell-0-%s.service" % JobID(sys.argv[1]).f58plain
	memos.not_enforced(unit, {"DevicePolicy": sys.argv[2]})
	memos.not_enforced(unit, {"DevicePolicy": "twice"})
	if memos.pending() != 1:
	    sys.exit("expected one memo sent, not %d" % memos.pending())
	h.reactor_run()  # until it is answered (or times out: memo.TIMEOUT)
	sys.exit(1 if memos.pending() else 0)
	EOF
test_expect_success 'warn: the job memo lands in the eventlog once; a job that is over gets none' '
	id=$(flux submit -N1 -n1 --requires=rank:0 sleep 300) &&
	flux job wait-event -t $T $id start &&
	PYTHONPATH=$SDEXEC_SRCDIR flux python memo.py $id "test: no device program" >memo.out &&
	test_must_be_empty memo.out &&
	flux job eventlog $id >memo.eventlog &&
	test_debug "cat memo.eventlog" &&
	test $(grep -c " memo " memo.eventlog) -eq 1 &&
	grep -F "memo sdexec={\"not_enforced\":{\"DevicePolicy\":\"test: no device program\"}}" \
		memo.eventlog &&
	test "$(flux jobs -n -o "{user.sdexec.not_enforced}" $id)" = \
		"{\"DevicePolicy\": \"test: no device program\"}" &&
	flux cancel $id &&
	flux job wait-event -t $T $id clean &&
	PYTHONPATH=$SDEXEC_SRCDIR flux python memo.py $id "late" >late.out &&
	grep "job-manager.memo of $(flux job id --to=f58plain $id): job is inactive" late.out
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
	before=$(checks 1 MemoryHigh) &&
	$sdexec -r 1 --bg --label=client --setopt=SDEXEC_PROP_MemoryHigh=1G sleep 300 &&
	sdexec_wait_until checked 1 MemoryHigh $((before + 1)) &&
	$sproc_ps -r 1 >client.ps &&
	grep -E " R +client " client.ps &&
	$sproc_kill -r 1 9 client
'

# kernel_only.py: site mappers that map only what this machine's kernel enforces
# (KernelOnly), and that plus MemoryHigh (WithMemoryHigh).
_drop="$NOT_ENFORCED"
test_have_prereq DEVICES_CLOSED || _drop="$_drop DeviceAllow"
cat >kernel_only.py <<-EOF
	from flux_sdexec.map import HwlocMapper

	DROP = set("$_drop".split())


	class KernelOnly(HwlocMapper):
	    def finalize_properties(self, properties, R, extra_properties=None):
	        properties = super().finalize_properties(properties, R, extra_properties)
	        return {k: v for k, v in properties.items() if k not in DROP}


	class WithMemoryHigh(KernelOnly):
	    def finalize_properties(self, properties, R, extra_properties=None):
	        properties = super().finalize_properties(properties, R, extra_properties)
	        properties["MemoryHigh"] = "1G"
	        return properties
	EOF
# set_mapper [CLASS]: sdexec-mapper on rank 1 uses kernel_only.CLASS (none: the default).
set_mapper() {
	if test $# -gt 0; then
		sdexec_set_config mapper "$(printf "[sdexec]\nmapper = \"kernel_only.%s\"\nmapper-searchpath = \"%s\"" "$1" "$PWD")"
	else
		sdexec_set_config mapper
	fi &&
	sdexec_wait_until mapper_is ${1:+kernel_only.$1}
}
mapper_is() {
	flux exec -r 1 flux module stats sdexec-mapper |
		jq -e ".config.mapper_impl == \"${1:-flux_sdexec.map.HwlocMapper}\"" >/dev/null
}
undrained() {
	flux resource drain -n -o "{ranks}" >drain.now &&
	test_must_be_empty drain.now
}
test_expect_success MEMORY_KILLS 'enforce: a job whose constraints the kernel all enforces runs' '
	set_mapper KernelOnly &&
	before=$(count 1 MemoryMax enforced) &&
	run -N1 -n1 --requires=rank:1 true &&
	test $(count 1 MemoryMax enforced) -eq $((before + 1)) &&
	undrained
'
test_expect_success MEMORY_KILLS,DEVICES_CLOSED 'enforce, DevicePolicy required: the kernel enforces it here, the job runs' '
	set_required "[\"DevicePolicy\"]" "[\"DevicePolicy\"]" &&
	before=$(count 1 DevicePolicy enforced) &&
	run -N1 -n1 --requires=rank:1 true &&
	test $(count 1 DevicePolicy enforced) -eq $((before + 1)) &&
	test $(count 1 DevicePolicy unenforceable) -eq 0 &&
	undrained &&
	set_required
'
test_expect_success MEMORY_KILLS,V1_MEMORY 'enforce: with MemoryMax and MemoryHigh only MemoryHigh, which v1 lacks, fails' '
	set_mapper WithMemoryHigh &&
	before=$(count 1 MemoryMax enforced) &&
	id=$(flux submit -N1 -n1 --requires=rank:1 true) &&
	job_exception $id >high.note &&
	grep -F "MemoryHigh not enforced: $LAYOUT: MemoryHigh has no v1 equivalent" high.note &&
	test $(count 1 MemoryMax enforced) -eq $((before + 1)) &&
	flux resource undrain 1
'
test_expect_success 'the default mapper again' '
	set_mapper
'
test_expect_success 'no unit is left' '
	sdexec_check_no_units
'
test_done
