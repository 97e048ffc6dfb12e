#!/bin/sh
test_description='containment on the layout every site runs: unified cgroup v2

Two brokers (jobs on rank 0), [exec] sdexec-constrain-resources = true with the default containment-check
(enforce): every job shell asks for AllowedCPUs, AllowedMemoryNodes and DevicePolicy from
the mapper, and for MemoryMax, MemoryHigh, MemorySwapMax, TasksMax and CPUQuota from
exec.sdexec-properties. On v2 the user manager applies all of them but the device policy
(systemd#23198): that one is unenforceable, known at load, shown by flux sdexec status
and named in the job'"'"'s eventlog; the job runs. Every other constraint is enforced,
read where the kernel keeps it, and proved by the kernel: a job over MemoryMax is
OOM-killed, a fork bomb stops at TasksMax, a job sees only its cpuset. An admin who
requires device confinement (containment-required) gets every such job failed. Runs
only on the unified layout with the controllers delegated (the v2 guest: make check-v2).'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_extra_config t0045.toml <<-EOF
	[exec]
	service = "sdexec"
	sdexec-constrain-resources = true
	sdexec-properties = { MemoryMax = "400M", MemoryHigh = "360M", MemorySwapMax = "0", TasksMax = "64", CPUQuota = "400%" }
	EOF

if test -z "$SDEXEC_UNDER_FLUX"; then
	test "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs || {
		skip_all="not the unified cgroup layout (the v2 guest runs it: make check-v2)"
		test_done
	}
	for _c in cpuset cpu memory pids; do
		grep -qw $_c "/sys/fs/cgroup/user.slice/user-$(id -u).slice/user@$(id -u).service/cgroup.controllers" 2>/dev/null || {
			skip_all="the $_c controller is not delegated to user@$(id -u).service"
			test_done
		}
	done
fi
sdexec_under_flux 2 jobs
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"
. "$SDEXEC_SRCDIR/t/lib/sharness-limits.sh"
test $(nproc) -ge 2 && test_set_prereq CPUS

containment() {
	flux module stats sdexec | jq -c .containment
}
# run0 / submit0 ARGS: a job on rank 0, whose sdexec the stats above are of
run0() {
	run --requires=rank:0 "$@"
}
submit0() {
	flux submit --requires=rank:0 "$@"
}
# count CONSTRAINT OUTCOME: how many starts had CONSTRAINT with OUTCOME.
count() {
	containment | jq ".constraints.$1[\"$2\"] // 0"
}
counted() {
	test $(count "$1" "$2") -ge "$3"
}
field() {
	containment | jq -r ".constraints.$1.$2"
}
# cg FILE: FILE of the job's own cgroup, read inside the job
cat >cg.sh <<-'EOF'
	cat "/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)/$1"
	EOF
ALL="MemoryMax MemoryHigh MemorySwapMax TasksMax CPUQuota AllowedCPUs AllowedMemoryNodes"

test_expect_success 'at load: the layout is unified, device policies unenforceable, nothing counted' '
	containment >stats0.json &&
	test_debug "jq . stats0.json" &&
	jq -e ".layout == \"unified\" and .policy == \"enforce\" and .constraints == {}" stats0.json &&
	jq -e ".unenforceable.DevicePolicy | test(\"user manager does not apply device policies\")" stats0.json &&
	jq -e ".unenforceable.DeviceAllow" stats0.json
'
test_expect_success 'flux sdexec status says which constraints cannot be enforced, and why' '
	flux sdexec status >status.out &&
	test_debug "cat status.out" &&
	grep "^ok .* unified " status.out &&
	grep "DevicePolicy" status.out &&
	grep "systemd#23198" status.out
'
test_expect_success 'a constrained job runs under the default enforce policy' '
	id=$(submit0 -n1 -c1 sh "$PWD/cg.sh" memory.max) &&
	flux job attach $id >memmax.out &&
	test "$(cat memmax.out)" != max &&
	test "$(flux job status $id; echo $?)" = 0
'
test_expect_success 'every constraint v2 enforces is counted enforced, read where the kernel keeps it' '
	for c in $ALL; do
		sdexec_wait_until counted $c enforced 1 || return 1
	done &&
	containment >stats1.json &&
	test_debug "jq . stats1.json" &&
	for c in $ALL; do
		jq -e ".constraints.$c[\"not-enforced\"] // 0 == 0" stats1.json || return 1
		jq -e ".constraints.$c.hierarchy == \"v2\"" stats1.json || return 1
	done &&
	field TasksMax last_read | grep -x "unified: v2 pids.max is 64" &&
	field AllowedCPUs last_read | grep "^unified: v2 cpuset.cpus.effective"
'
test_expect_success 'the device policy is counted unenforceable, not enforced, never fatal' '
	counted DevicePolicy unenforceable 1 &&
	test $(count DevicePolicy not-enforced) -eq 0 &&
	flux resource drain -no {ranks} >drained.out &&
	test_must_be_empty drained.out
'
test_expect_success 'the job eventlog names the constraint the job ran without, and why' '
	flux job wait-event -t $T $id clean &&
	flux job eventlog $id >eventlog.out &&
	test_debug "cat eventlog.out" &&
	grep "^[0-9.]* memo " eventlog.out | grep DevicePolicy | grep "systemd#23198" &&
	flux jobs -no "{user.sdexec.not_enforced}" $id | grep DevicePolicy
'
test_expect_success 'a job over MemoryMax is OOM-killed by the kernel' '
	test_must_fail run0 -n1 -c1 "$PY" -c "b = bytearray(600 << 20)" 2>oom.err &&
	test_debug "cat oom.err" &&
	grep -i "oom\|killed" oom.err
'
test_expect_success 'a fork bomb stops at TasksMax' '
	run0 -n1 -c1 "$PY" "$PWD/forks.py" 200 >forks.out &&
	read forked failure <forks.out &&
	test "$failure" = EAGAIN &&
	test $forked -lt 64
'
test_expect_success CPUS 'a job sees only its cpuset: one core of the node' '
	run0 -n1 -c1 -o cpu-affinity=off sh -c "sed -n \"s/^Cpus_allowed_list:[[:space:]]*//p\" \
		/proc/self/status >cpus.out; sh $PWD/cg.sh cpuset.cpus.effective >effective.out" &&
	test_debug "cat cpus.out effective.out" &&
	test_cmp cpus.out effective.out &&
	test $(flux python -c "from flux.idset import IDset; print(len(IDset(\"$(cat cpus.out)\")))") -eq 1
'
test_expect_success 'an admin who requires device confinement gets the job failed' '
	sdexec_set_config required "$(printf "[sdexec]\ncontainment-required = [\"DevicePolicy\"]")" &&
	sdexec_wait_until sh -c "flux module stats sdexec | jq -e \".containment.required == [\\\"DevicePolicy\\\"]\"" &&
	id=$(submit0 -n1 -c1 true) &&
	job_exception $id >required.out &&
	grep "DevicePolicy not enforced: unified: systemd" required.out
'
test_expect_success 'required dropped again: the drained rank back, jobs run' '
	sdexec_set_config required &&
	sdexec_wait_until sh -c "flux module stats sdexec | jq -e \".containment.required == []\"" &&
	flux resource drain -no {ranks} | xargs -r flux resource undrain &&
	run0 -n1 -c1 true
'
test_expect_success 'no unit is left' '
	sdexec_check_no_units
'
test_done
