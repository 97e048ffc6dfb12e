#!/bin/sh

test_description='Containment of guest jobs under the non-root manager, on this hybrid host

The flux user'"'"'s manager is not root: its units get a unified cgroup of their own but none in
the v1 controller hierarchies, so MemoryMax and TasksMax are not enforced, and sdexec says so
with the reason (no v1 cgroup of the unit'"'"'s own); a 200 MB job under MemoryMax=50M runs to
the end. Under "enforce" a constrained job fails with EIO and drains its rank; under "warn" it
runs. The device policy is applied by the real IMP (BPF on the unit'"'"'s cgroup), which sdexec
cannot see (not-checkable): a device node outside DeviceAllow is refused to the job (EPERM),
one in [sdexec] allowed-devices is not.'

. "$(dirname "$0")/sharness-site.sh"

DEV=/dev/sdexec-site-t0103  # a char device no driver serves: ENXIO when allowed, EPERM when not
BIG='b = bytearray(200 << 20); b[::4096] = b"x" * (len(b) // 4096); print("allocated")'

# verdict C FIELD: the rank-0 containment stats of constraint C, FIELD (e.g. last_reason).
verdict() {
	owner flux module stats sdexec | jq -r ".containment.constraints.$1.\"$2\""
}

test_expect_success 'the site constrains jobs, with containment-check = warn' '
	owner flux config get | jq -e ".exec.\"sdexec-constrain-resources\" == true" &&
	owner flux config get | jq -e ".sdexec.\"containment-check\" == \"warn\""
'
test_expect_success 'MemoryMax=50M, TasksMax=20 for every job' '
	site_set_config props "[exec.sdexec-properties]
MemoryMax = \"50M\"
TasksMax = \"20\""
'
test_expect_success 'warn: a 200 MB guest job runs to the end (MemoryMax not enforced)' '
	guest1 timeout $T flux run -N1 python3 -c "$BIG" >big.out &&
	grep allocated big.out
'
test_expect_success 'MemoryMax: not-enforced, the unit has no v1 memory cgroup' '
	test "$(verdict MemoryMax not-enforced)" -ge 1 &&
	test "$(verdict MemoryMax enforced)" -eq 0 &&
	verdict MemoryMax last_reason >reason.out &&
	test_debug "cat reason.out" &&
	grep "hybrid: v1 memory.limit_in_bytes not read: the unit has no v1 memory cgroup" reason.out
'
test_expect_success 'TasksMax: not-enforced, the unit has no v1 pids cgroup' '
	test "$(verdict TasksMax not-enforced)" -ge 1 &&
	test "$(verdict TasksMax enforced)" -eq 0 &&
	verdict TasksMax last_reason | grep "hybrid: v1 pids.max not read: the unit has no v1 pids cgroup"
'
test_expect_success 'the guest job ran with only a unified cgroup of its unit' '
	guest2 timeout $T flux run -N1 cat /proc/self/cgroup >cgroup.out &&
	test_debug "cat cgroup.out" &&
	grep -E "^0::/$SITE_SLICE/user-$(id -u $SITE_USER).slice/user@$(id -u $SITE_USER).service/app.slice/(app-sdexec.slice/[^/]+/)?imp-shell-" cgroup.out &&
	! grep -E "^[0-9]+:memory:.*imp-shell" cgroup.out &&
	! grep -E "^[0-9]+:pids:.*imp-shell" cgroup.out
'
test_expect_success 'flux sdexec status lists them as not enforced, with the reason' '
	owner flux sdexec status >status.out; test $? -le 1 &&
	test_debug "cat status.out" &&
	grep "MemoryMax" status.out && grep "TasksMax" status.out &&
	grep "the unit has no v1 memory cgroup" status.out
'
first_seen() {
	owner flux dmesg | grep -c "MemoryMax not-enforced: .* (first seen)"
}
test_expect_success 'warn logged the reason once, not again for the next job' '
	n=$(first_seen) &&
	test $n -ge 1 &&
	guest2 timeout $T flux run -N1 true &&
	test $(first_seen) -eq $n
'
test_expect_success 'enforce: a constrained guest job fails (EIO: constraint check failed), rank drained' '
	site_set_config policy "[sdexec]
containment-check = \"enforce\"" &&
	id=$(guest2 flux submit -N1 true) &&
	guest2 flux job wait-event -t $T $id clean &&
	guest2 flux job eventlog $id >eventlog.out &&
	test_debug "cat eventlog.out" &&
	grep "exception type=\"exec\"" eventlog.out &&
	grep "not enforced" eventlog.out &&
	owner flux resource drain -n -o "{ranks} {reason}" >drain.out &&
	test_debug "cat drain.out" &&
	grep "sdexec constraint check failed on .* for job" drain.out &&
	site_wait_until_t no_shell_units_of $id
'
test_expect_success 'warn again: the rank undrained, the job runs' '
	site_set_config policy &&
	owner flux resource undrain $(drained) &&
	test -z "$(drained)" &&
	guest2 timeout $T flux run -N1 echo ran >ran.out &&
	grep ran ran.out
'
test_expect_success 'devices: the IMP applies DevicePolicy (sdexec: not-checkable)' '
	site_set_config props &&
	mknod -m 0666 $DEV c 240 0 &&
	test_must_fail guest1 cat $DEV 2>plain.err &&
	grep "No such device or address" plain.err &&
	test_must_fail guest1 timeout $T flux run -N1 cat $DEV 2>job.err &&
	test_debug "cat job.err" &&
	grep "Operation not permitted" job.err &&
	test "$(verdict DevicePolicy not-checkable)" -ge 1 &&
	verdict DevicePolicy last_reason | grep "applied by the IMP"
'
test_expect_success 'devices: a node in allowed-devices is let through by the IMP' '
	site_set_config devices "[sdexec]
allowed-devices = [\"$DEV rw\"]" &&
	test_must_fail guest1 timeout $T flux run -N1 cat $DEV 2>job.err &&
	test_debug "cat job.err" &&
	grep "No such device or address" job.err
'
test_expect_success 'cleanup: back to the site config' '
	rm -f $DEV &&
	site_reset_config
'
test_site_leaves_nothing

test_done
