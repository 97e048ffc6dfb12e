#!/bin/sh

test_description='The overlay to one node cut: its broker stopped past the overlay timeouts

The instance runs with [tbon] torpid_max = 10s, tcp_user_timeout = 20s. The last node'"'"'s
broker is SIGSTOPped (by its pid) under a running 3-node guest job.

Stopped 35 s (past both timeouts), then continued (bgexec and bulk-exec): rank 0 logs the
node unresponsive after 10 s and puts it in the broker.torpid group (what flux resource
status shows as torpid), but the node is not lost: the stopped broker'"'"'s kernel still
acknowledges the little rank 0 sends it, so the TCP user timeout never runs out. The job
runs on; its tasks, released meanwhile, end on every node and the job waits for the stopped
node'"'"'s shell: continued within the job shell'"'"'s exit-timeout (30 s from the first task'"'"'s
end, bgexec), it completes with its own exit code, with no exception; held past it
(bulk-exec), it is raised by the exit-timeout. The node is responsive again, no unit left.

Stopped while rank 0 sends it more than the sockets hold (bgexec), or stopped and then
disconnected by the admin (flux overlay disconnect, bulk-exec): the node is lost (the first
20 s or more after the stop, when the TCP user timeout runs out; the second at once), the job
is raised naming it, the other nodes'"'"' shells are stopped. Continued, the broker is told
to disconnect and leaves (cleanup, shutdown: sdexec unloaded outside the run state stops
every unit), so its shell unit and the job'"'"'s tasks there are gone; started again it
rejoins and runs jobs.'

. "$(dirname "$0")/sharness-nodes.sh"

N=$LAST  # the node whose broker is stopped
GATE=$(mktemp -d /tmp/sdexec-t0115.XXXXXX)
chmod 0755 $GATE
cleanup "rm -rf $GATE"
bp=
cleanup 'test -z "$bp" || kill -CONT $bp 2>/dev/null'

# torpid_ranks: the broker.torpid group (flux resource status shows it as torpid where the
# resource module watches the brokers; this harness forces every rank up, no system bus).
torpid_ranks() {
	owner flux python -c 'import flux
print(flux.Flux().rpc("groups.get", {"name": "broker.torpid"}).get()["members"])'
}
torpid_is() {
	test "$(torpid_ranks)" = "$1"
}
# overlay_state N: rank N's state as rank 0's overlay sees it (full, lost, ...).
overlay_state() {
	owner flux overlay status --no-pretty | sed -n "s/^ *$1 node$1: \([a-z]*\).*/\1/p"
}
overlay_is() {
	test "$(overlay_state $1)" = $2
}
job_state() {
	owner flux jobs -n -o "{state}" $1
}
broker_gone() {
	! node_alive $1
}
no_exception() {
	! owner flux job eventlog $1 | grep exception
}
# log_count TEXT: the lines of rank 0's log with TEXT.
log_count() {
	owner flux dmesg | grep -c "$1"
}
# no_tasks N: none of the jobs' task processes (sh, sleep) in node N's cgroup subtree.
no_tasks() {
	for p in $(find /sys/fs/cgroup/unified/$(node_slice $1) -name cgroup.procs \
		-exec cat {} + 2>/dev/null); do
		case $(cat /proc/$p/comm 2>/dev/null) in sh | sleep) return 1 ;; esac
	done
}
# stop_broker: SIGSTOP node N's broker, note when and what rank 0 has logged of it so far.
stop_broker() {
	unresponsive=$(log_count "broker on node$N (rank $N) has been unresponsive")
	responsive=$(log_count "broker on node$N (rank $N) is responsive now")
	bp=$(node_broker_pid $N) &&
	kill -STOP $bp &&
	stopped=$(date +%s)
}
since_stop() {
	echo $(($(date +%s) - stopped))
}
# fill_overlay: 150 events of 200 kB from rank 0, which sends each to every node: more than
# a stopped node's socket buffers hold.
fill_overlay() {
	owner flux python -c 'import flux
h = flux.Flux()
for i in range(150):
    h.event_send("t0115.fill", {"blob": "x" * 200000})'
}

# The tasks released while the node is stopped: continued within the job shell's exit-timeout
# (30 s from the first task's exit), the job completes; held past it, the job is raised.
for fate in "bgexec continued" "bulk-exec held"; do
	set -- $fate
	method=$1 fate=$2
	test_expect_success "$method: job-exec launches new jobs with it" '
		site_method $method
	'
	test_expect_success "$method: a 3-node job, node$N's broker stopped: torpid after 10 s" '
		rm -f $GATE/go &&
		id=$(guest_job -N3 -n3 sh -c "while ! test -e $GATE/go; do sleep 0.1; done; exit 3") &&
		stop_broker &&
		site_wait_until_t torpid_is $N &&
		test $(since_stop) -ge 10 &&
		test $(log_count "broker on node$N (rank $N) has been unresponsive") -gt $unresponsive
	'
	# the fault lasts 35 s: a sleep on purpose, bounded
	test_expect_success "$method: stopped 35 s (both timeouts past): not lost, the job runs" '
		left=$((35 - $(since_stop))) &&
		{ test $left -le 0 || sleep $left; } &&
		overlay_is $N full &&
		test "$(job_state $id)" = RUN &&
		no_exception $id
	'
	test_expect_success "$method: tasks released: they end, the job waits for node$N" '
		touch $GATE/go &&
		for n in $(seq 0 $((N - 1))); do
			site_wait_until_t no_tasks $n || return 1
		done &&
		test "$(job_state $id)" = RUN &&
		no_exception $id
	'
	if test $fate = continued; then
	test_expect_success "$method: node$N continued: the job completes, exit 3, no exception" '
		kill -CONT $bp &&
		bp= &&
		guest1 flux job wait-event -t $T $id clean &&
		test_expect_code 3 guest1 flux job status $id &&
		no_exception $id
	'
	else
	test_expect_success "$method: node$N held on: the job raised 30 s after its first task ended" '
		owner flux job wait-event -t $T $id exception >exception &&
		test_debug "cat exception" &&
		grep "exit-timeout=30s has expired" exception &&
		kill -CONT $bp &&
		bp= &&
		guest1 flux job wait-event -t $T $id clean
	'
	fi
	test_expect_success "$method: node$N responsive again, not lost, no unit left" '
		site_wait_until_t torpid_is "" &&
		test $(log_count "broker on node$N (rank $N) is responsive now") -gt $responsive &&
		overlay_is $N full &&
		site_wait_until_t no_node_shells $N
	'
done
# The two cuts: rank 0 sends the stopped node more than its sockets hold (the TCP user
# timeout runs out 20 s or more after the stop), or the admin disconnects the torpid node.
cut_by_fill() {
	fill_overlay &&
	site_wait_until_t overlay_is $N lost &&
	echo "lost $(since_stop) s after the stop" &&
	test $(since_stop) -ge 20 &&
	owner flux dmesg | grep "node$N (rank $N) failed"
}
cut_by_disconnect() {
	site_wait_until_t torpid_is $N &&
	owner flux overlay disconnect $N &&
	overlay_is $N lost
}
for cut in "bgexec fill" "bulk-exec disconnect"; do
	set -- $cut
	method=$1 how=$2
	test_expect_success "$method: job-exec launches new jobs with it" '
		site_method $method
	'
	test_expect_success "$method: node$N stopped, cut by $how: lost, the job raised naming it" '
		id=$(guest_job -N3 -n3 sleep 300) &&
		stop_broker &&
		cut_by_$how &&
		job_exception $id >note &&
		test_debug "cat note" &&
		grep "node$N" note
	'
	test_expect_success "$method: the other nodes' shells and tasks are stopped" '
		for n in $(seq 0 $((N - 1))); do
			site_wait_until_t no_node_shells $n &&
			site_wait_until_t no_job_procs $n || return 1
		done
	'
	test_expect_success "$method: node$N continued: its broker leaves, no unit, no task left" '
		kill -CONT $bp &&
		site_wait_until_t broker_gone $bp &&
		bp= &&
		site_wait_until_t no_node_shells $N &&
		site_wait_until_t no_job_procs $N
	'
	test_expect_success "$method: node$N's broker started again rejoins, 3-node jobs run" '
		"$NODES_SH" broker-up $N &&
		"$NODES_SH" broker-ready $N &&
		site_wait_until_t overlay_is $N full &&
		test_expect_code 3 guest1 timeout $T flux run -N3 sh -c "exit 3"
	'
done
test_expect_success 'cleanup: back to the site config' '
	site_reset_config
'
test_site_leaves_nothing

test_done
