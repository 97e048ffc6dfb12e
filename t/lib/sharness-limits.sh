# flux-sdexec: what this machine's kernel enforces, probed outside sdexec (t0011, t0013, t0016).
# Source inside the instance, after sharness-sdexec.sh (it writes helper scripts into the
# trash directory). Sets LAYOUT (unified, hybrid or legacy, read from the mounts
# independently of sdexec) and PY; `limits_probe NAME...` sets a prereq per limit the
# kernel enforces on a probe unit of the user manager, and says why when it does not:
#   memory   MEMORY_KILLS    MemoryMax=50M kills a 200M allocation
#   tasks    TASKS_LIMITED   TasksMax=5 makes fork fail (EAGAIN)
#   cpu      CPU_QUOTA       CPUQuota=20% is in the cpu controller (quota 20000 of 100000)
#   devices  KMSG, DEVICES_CLOSED   /dev/kmsg opens here; DevicePolicy=closed denies it
#   cpuset   CPUSET_APPLIED  AllowedCPUs=0 narrows the affinity to CPU 0
# and V1_MEMORY when the memory controller is on a v1 hierarchy. containment, count, counted
# and field read the containment stats of rank 0's sdexec.

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

# flux's interpreter itself, not a wrapper script that forks (pyenv's shims do) under TasksMax.
PY=$(flux python -c "import sys; print(sys.executable)")

if grep -q " - cgroup2 " /proc/self/mountinfo; then
	if grep -E " - cgroup [^ ]+ [^ ]*(cpu|memory|pids)" /proc/self/mountinfo >/dev/null; then
		LAYOUT=hybrid
	else
		LAYOUT=unified
	fi
else
	LAYOUT=legacy
fi
# V1_MEMORY: the memory controller is on a v1 hierarchy (MemoryHigh has no equivalent there)
grep -E " - cgroup [^ ]+ [^ ]*[,]memory([, ]|$)" /proc/self/mountinfo >/dev/null &&
	test_set_prereq V1_MEMORY

# probe PROPERTY CMD...: CMD in a transient unit of the user manager, outside sdexec
# (collected afterwards, failed or not; bounded).
probe() {
	_probe_p=$1
	shift
	timeout 60 systemd-run --user --wait --pipe --quiet --collect -p "$_probe_p" "$@"
}

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


limits_probe() {
	say "cgroup layout: $LAYOUT"
	for _limit in "$@"; do
		case $_limit in
		memory)
			if probe MemoryMax=50M "$PY" -c "bytearray(200 << 20)" >/dev/null 2>&1; then
				say "skip reason: MemoryMax is not enforced here (200M allocated under 50M)"
			else
				test_set_prereq MEMORY_KILLS
			fi
			;;
		tasks)
			probe TasksMax=5 "$PY" "$PWD/forks.py" 10 >probe-forks.out 2>&1
			if test "$(cut -d" " -f2 probe-forks.out)" = EAGAIN; then
				test_set_prereq TASKS_LIMITED
			else
				say "skip reason: TasksMax is not enforced here (TasksMax=5: $(cat probe-forks.out))"
			fi
			;;
		cpu)
			probe CPUQuota=20% sh "$PWD/cpu.sh" >probe-cpu.out 2>&1
			if test "$(cut -d" " -f2 probe-cpu.out)" = 20000; then
				test_set_prereq CPU_QUOTA
			else
				say "skip reason: CPUQuota=20% is not in a cpu controller ($(cat probe-cpu.out))"
			fi
			;;
		devices)
			if ! (exec 3</dev/kmsg) 2>/dev/null; then
				say "skip reason: /dev/kmsg cannot be opened here: no device policy can be observed"
				continue
			fi
			test_set_prereq KMSG
			probe DevicePolicy=closed sh -c "(exec 3</dev/kmsg) 2>/dev/null || echo denied" \
				>probe-devices.out 2>&1
			if test "$(cat probe-devices.out)" = denied; then
				test_set_prereq DEVICES_CLOSED
			else
				say "DevicePolicy=closed is not applied here (/dev/kmsg opens under it)"
			fi
			;;
		cpuset)
			probe AllowedCPUs=0 sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status \
				>probe-cpuset.out 2>&1
			if test "$(cat probe-cpuset.out)" = 0; then
				test_set_prereq CPUSET_APPLIED
			else
				say "AllowedCPUs=0 is not applied here (affinity $(cat probe-cpuset.out))"
			fi
			;;
		esac
	done
}
