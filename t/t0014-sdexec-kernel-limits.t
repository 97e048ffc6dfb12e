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

sdexec_extra_config t0014.toml <<-EOF
	[exec]
	service = "sdexec"
	sdexec-properties = { MemoryMax = "50M", TasksMax = "20", CPUQuota = "20%" }

	[sdexec]
	containment-check = "warn"
	EOF

sdexec_under_flux 1 jobs
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"

# containment: the containment object of sdexec's stats.
containment() {
	flux module stats sdexec | jq -c .containment
}
# count CONSTRAINT OUTCOME / counted CONSTRAINT OUTCOME N
count() {
	containment | jq ".constraints.$1[\"$2\"] // 0"
}
counted() {
	test $(count "$1" "$2") -ge "$3"
}
# field CONSTRAINT KEY: one key of a constraint's stats, raw.
field() {
	containment | jq -r ".constraints.$1.$2"
}
# probe PROPERTY CMD...: CMD in a transient unit of the user manager, outside sdexec
# (collected afterwards, failed or not; bounded).
probe() {
	_probe_p=$1
	shift
	timeout 60 systemd-run --user --wait --pipe --quiet --collect -p "$_probe_p" "$@"
}

# The interpreter itself, not a wrapper script that forks (pyenv's shims do) under TasksMax.
PY=$(python3 -c "import sys; print(sys.executable)")

# The layout, from the mounts (independently of sdexec's reading of them).
if grep -q " - cgroup2 " /proc/self/mountinfo; then
	if grep -E " - cgroup [^ ]+ [^ ]*(cpu|memory|pids)" /proc/self/mountinfo >/dev/null; then
		LAYOUT=hybrid
	else
		LAYOUT=unified
	fi
else
	LAYOUT=legacy
fi
say "cgroup layout: $LAYOUT"

# forks.py N: fork up to N sleeping children, stop at the first failure; print how many
# were forked and the errno name of the failure (or none); then kill and reap them all.
cat >forks.py <<-EOF
	import errno, os, signal, sys, time
	children, failure = [], "none"
	for _ in range(int(sys.argv[1])):
	    try:
	        pid = os.fork()
	    except OSError as exc:
	        failure = errno.errorcode[exc.errno]
	        break
	    if pid == 0:
	        time.sleep(60)
	        os._exit(0)
	    children.append(pid)
	for pid in children:
	    os.kill(pid, signal.SIGKILL)
	    os.waitpid(pid, 0)
	print(len(children), failure)
	EOF
# cpu.sh: spin for half a second, then print the CPU quota of this process's cgroup as
# the kernel keeps it ("v1 QUOTA PERIOD THROTTLED" or "v2 QUOTA PERIOD THROTTLED").
cat >cpu.sh <<-'EOF'
	timeout 0.5 sh -c 'while :; do :; done'
	v1=$(awk -F: '{ n = split($2, c, ","); for (i = 1; i <= n; i++) if (c[i] == "cpu") print $3 }' /proc/self/cgroup)
	mnt=$(awk '{ for (i = 1; $i != "-"; i++); if ($(i + 1) == "cgroup") { n = split($(i + 3), o, ",");
		for (j = 1; j <= n; j++) if (o[j] == "cpu") print $5 } }' /proc/self/mountinfo)
	if test -n "$v1" && test -r "$mnt$v1/cpu.cfs_quota_us"; then
		d=$mnt$v1
		echo v1 $(cat $d/cpu.cfs_quota_us) $(cat $d/cpu.cfs_period_us) \
			$(awk '$1 == "nr_throttled" { print $2 }' $d/cpu.stat)
		exit 0
	fi
	v2=$(sed -n 's/^0:://p' /proc/self/cgroup)
	mnt=$(awk '{ for (i = 1; $i != "-"; i++); if ($(i + 1) == "cgroup2") print $5 }' /proc/self/mountinfo)
	if test -r "$mnt$v2/cpu.max"; then
		echo v2 $(cat $mnt$v2/cpu.max) $(awk '$1 == "nr_throttled" { print $2 }' $mnt$v2/cpu.stat)
	fi
	EOF

if probe MemoryMax=50M "$PY" -c "bytearray(200 << 20)" >/dev/null 2>&1; then
	say "skip reason: MemoryMax is not enforced here (200M allocated under MemoryMax=50M)"
else
	test_set_prereq MEMORY_KILLS
fi
probe TasksMax=5 "$PY" "$PWD/forks.py" 10 >probe-forks.out 2>&1
if test "$(cut -d" " -f2 probe-forks.out)" = EAGAIN; then
	test_set_prereq TASKS_LIMITED
else
	say "skip reason: TasksMax is not enforced here (under TasksMax=5: $(cat probe-forks.out))"
fi
probe CPUQuota=20% sh "$PWD/cpu.sh" >probe-cpu.out 2>&1
if test "$(cut -d" " -f2 probe-cpu.out)" = 20000; then
	test_set_prereq CPU_QUOTA
else
	say "skip reason: CPUQuota=20% is not in this machine's cpu controller ($(cat probe-cpu.out))"
fi
if (exec 3</dev/kmsg) 2>/dev/null; then
	test_set_prereq KMSG
else
	say "skip reason: /dev/kmsg cannot be opened here, so a device policy cannot be observed"
fi
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
		*) grep -x "$LAYOUT: v1 cpuset.cpus not read: the unit has no cgroup of its own in the v1 cpuset hierarchy; systemd applies AllowedCPUs only on cgroup v2" cpus.reason ;;
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
		grep -x "$LAYOUT: v1 devices.list allows [0-9]* entries, not every device" device.read
	else
		test $(count DevicePolicy not-enforced) -eq 1 &&
		field DevicePolicy last_reason | grep "^$LAYOUT: "
	fi
'
test_expect_success 'no unit is left' '
	sdexec_check_no_units
'
test_done
