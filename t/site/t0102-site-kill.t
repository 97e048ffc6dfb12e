#!/bin/sh

test_description='Signals reach guest jobs through the real IMP in the site instance

flux cancel (SIGTERM) and a time limit (SIGALRM): job-exec has sdexec signal the unit'"'"'s main process, the IMP
(KillMode=process), which forwards the signal to the job shell as the guest; every process of
the job is gone and no rank is drained. A task ignoring SIGTERM is SIGKILLed by its shell.
A process nothing can kill (frozen in a v1 freezer cgroup by this test, as root: a stand-in
for a task stuck in the kernel) outlives the IMP'"'"'s SIGKILL of the cgroup (SIGUSR1): sdexec'"'"'s
stop timer escalates, gives up with EDEADLK, the rank is drained, and the unit is let go once
the process ends (thawed). Run for bulk-exec and for bgexec.'

. "$(dirname "$0")/sharness-site.sh"

FREEZER=/sys/fs/cgroup/freezer/sdexec-site-t0102
test_expect_success 'short kill and sdexec stop timers' '
	site_set_config timers "[exec]
kill-timeout = \"1s\"
sdexec-stop-timer-sec = 1"
'
# task_exits ID: the signal or exit code of each task of job ID, one per line, sorted.
task_exits() {
	owner flux job eventlog -p exec "$1" >exec.eventlog &&
	test_debug "cat exec.eventlog" &&
	sed -n "s/.*shell.task-exit.* signaled=\([0-9]*\).*/signal \1/p;
		s/.*shell.task-exit.* signaled=0 exitcode=\([0-9]*\).*/exit \1/p" exec.eventlog |
		sort -u
}
# job_task_pid ID COMM: the pids of the processes named COMM in the units of job ID.
job_task_pid() {
	for u in $(shell_units_of "$1"); do
		cg=$(user_systemctl show -p ControlGroup --value $u) &&
		for p in $(cat /sys/fs/cgroup/unified$cg/cgroup.procs); do
			test "$(cat /proc/$p/comm 2>/dev/null)" = "$2" && echo $p
		done
	done
}

for method in bulk-exec bgexec; do
	test_expect_success "$method: flux cancel: SIGTERM reaches the tasks through the IMP" '
		site_method $method &&
		id=$(guest1 flux submit -N2 sleep 300) &&
		guest1 flux job wait-event -t $T -p exec $id shell.start &&
		test $(job_task_pid $id sleep | wc -l) -eq 2 &&
		guest1 flux cancel $id &&
		guest1 flux job wait-event -t $T $id clean &&
		task_exits $id >exits.out && echo "signal 15" >exits.exp &&
		test_cmp exits.exp exits.out &&
		site_wait_until_t no_shell_units_of $id &&
		site_wait_until_t no_guest_procs &&
		test -z "$(drained)"
	'
	test_expect_success "$method: a time limit: SIGALRM reaches the tasks through the IMP" '
		id=$(guest2 flux submit -N2 -t 2s sleep 300) &&
		guest2 flux job wait-event -t $T $id clean &&
		guest2 flux job eventlog $id | grep "exception type=\"timeout\"" &&
		task_exits $id >exits.out && echo "signal 14" >exits.exp &&
		test_cmp exits.exp exits.out &&
		site_wait_until_t no_shell_units_of $id &&
		site_wait_until_t no_guest_procs &&
		test -z "$(drained)"
	'
	test_expect_success "$method: a task ignoring SIGTERM is SIGKILLed, no rank drained" '
		id=$(guest1 flux submit -N2 sh -c "trap \"\" TERM; sleep 300") &&
		guest1 flux job wait-event -t $T -p exec $id shell.start &&
		site_wait_until_t test $(job_task_pid $id sleep | wc -l) -eq 2 &&
		guest1 flux cancel $id &&
		guest1 flux job wait-event -t $T $id clean &&
		task_exits $id >exits.out && echo "signal 9" >exits.exp &&
		test_cmp exits.exp exits.out &&
		site_wait_until_t no_shell_units_of $id &&
		site_wait_until_t no_guest_procs &&
		test -z "$(drained)"
	'
	test_expect_success "$method: an unkillable task: EDEADLK, the rank drained" '
		id=$(guest2 flux submit -N1 sleep 300) &&
		echo $id >stuck.id &&
		guest2 flux job wait-event -t $T -p exec $id shell.start &&
		site_wait_until_t test -n "$(job_task_pid $id sleep)" &&
		mkdir -p $FREEZER &&
		job_task_pid $id sleep >$FREEZER/cgroup.procs &&
		echo FROZEN >$FREEZER/freezer.state &&
		guest2 flux cancel $id &&
		guest2 flux job wait-event -t $T $id clean &&
		owner flux resource drain -n -o "{ranks} {reason}" >drain.out &&
		test_debug "cat drain.out" &&
		grep "^0 sdexec reports SIGKILL timeout, unit may still be active for job" drain.out &&
		owner flux dmesg | grep "sdexec.err\[0\]: $(shell_units_of $id): abandoning after" &&
		test "$(user_systemctl is-active $(shell_units_of $id))" = deactivating
	'
	test_expect_success "$method: its unit is let go once the process ends (thawed)" '
		id=$(cat stuck.id) &&
		echo THAWED >$FREEZER/freezer.state &&
		site_wait_until_t no_shell_units_of $id &&
		site_wait_until_t no_guest_procs &&
		rmdir $FREEZER &&
		owner flux resource undrain 0 &&
		test -z "$(drained)"
	'
done

test_expect_success 'cleanup: back to the site config' '
	if test -d $FREEZER; then echo THAWED >$FREEZER/freezer.state; fi &&
	site_reset_config
'
test_site_leaves_nothing

test_done
