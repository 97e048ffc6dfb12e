#!/bin/sh

test_description='A node'"'"'s systemd manager killed and started again under load

Guest jobs run on every node (bgexec): one on node0 and one on node2 that end by
themselves, one on node1 and one on all 3 nodes that would run for minutes. node1'"'"'s
systemd manager of the flux user is SIGKILLed (by its pid) and started again. The jobs on
node0 and node2 complete untouched; node1'"'"'s running jobs end (not a hang: the new manager
does not have their units, sdexec has the IMP kill their processes and answers each with
an error naming the lost unit, so the job'"'"'s exception names node1);
sdexec on node1 reconnects to the new manager and runs jobs again; no unit is left.'

. "$(dirname "$0")/sharness-nodes.sh"

N=1  # the node whose manager is restarted
manager_gone() {
	! node_alive $1
}
# stop_session_bus N: the session bus of node N's dead manager, by its pid (systemd would
# stop all of user@.service; the jobs' processes are left here for sdexec to end).
stop_session_bus() {
	for p in $(cat /sys/fs/cgroup/unified/$(node_slice $1)/user-$(id -u $SITE_USER).slice/user@$(id -u $SITE_USER).service/session.slice/dbus.service/cgroup.procs); do
		kill -TERM $p || return 1
	done
}
reconnects() {
	owner flux sdexec status -o json | jq ".ranks[] | select(.rank == $1) | .reconnects"
}

test_expect_success 'bgexec: job-exec launches new jobs with it' '
	site_method bgexec
'
test_expect_success 'load: jobs on node0 and node2 (25 s), on node1 and on 3 nodes (300 s)' '
	a0=$(guest_job -n1 --requires=host:node0 sleep 25) &&
	a2=$(guest_job -n1 --requires=host:node$LAST sleep 25) &&
	b=$(guest_job -n1 --requires=host:node$N sleep 300) &&
	c=$(guest_job -N$SITE_SIZE -n$SITE_SIZE sleep 300) &&
	test $(shells_of $N $b | wc -l) -eq 1 &&
	test $(shells_of $N $c | wc -l) -eq 1
'
# The manager killed is this harness's own, of node1, in node1's namespaces (not the
# machine's shared user manager that /tmp/sdexec-systemd.lock guards).
test_expect_success "node$N's manager SIGKILLed and started again" '
	mp=$(node_manager_pid $N) &&
	kill -KILL $mp &&
	site_wait_until_t manager_gone $mp &&
	stop_session_bus $N &&
	rm "$SITE_STATE/node$N/manager.pid" &&  # its zombie may linger: pid 1 here reaps late
	node_do $N manager_up &&
	test "$(node_manager_pid $N)" != $mp
'
test_expect_success "node$N's running jobs end, not a hang, with an exception naming node$N" '
	for id in $b $c; do
		owner flux job wait-event -t $T $id clean &&
		! owner flux job status -v $id 2>status.$id &&
		test_debug "cat status.$id" &&
		owner flux job eventlog $id >eventlog.$id &&
		test_debug "cat eventlog.$id" &&
		grep "exception.*node$N (rank $N): the systemd manager restarted without" \
			eventlog.$id || return 1
	done
'
test_expect_success 'the jobs on node0 and node2 complete untouched, exit 0' '
	owner flux job status $a0 $a2 &&
	test -z "$(owner flux job eventlog $a0 | grep exception)" &&
	test -z "$(owner flux job eventlog $a2 | grep exception)"
'
test_expect_success "sdexec on node$N reconnected to the new manager" '
	test "$(reconnects $N)" -ge 1 &&
	node_user $N $SITE_USER flux dmesg | grep "sdexec.info\[$N\]: reconnected to systemd"
'
test_expect_success "no unit, no job process left on node$N" '
	site_wait_until_t no_node_shells $N &&
	site_wait_until_t no_job_procs $N
'
test_expect_success "jobs run on node$N again, and on all nodes" '
	test "$(guest1 timeout $T flux run -N1 --requires=host:node$N hostname)" = node$N &&
	test_expect_code 5 guest1 timeout $T flux run -N$SITE_SIZE sh -c "exit 5"
'
test_expect_success 'cleanup: back to the site config' '
	site_reset_config
'
test_site_leaves_nothing

test_done
