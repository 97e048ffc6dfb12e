#!/bin/sh

test_description='A node'"'"'s broker killed under a running 3-node job, then started again

With bgexec and bulk-exec, a guest job runs on 3 nodes; the last node'"'"'s broker is
SIGKILLed (by its pid). The job ends with an exception naming the lost node; the shell unit
on that node does not outlive the broker (its sdexec, losing the broker, stops it and has the
IMP kill the job'"'"'s processes, which the flux user'"'"'s manager cannot signal); the other
nodes'"'"' shells are stopped. The job'"'"'s usage record is written all the same, the lost
node'"'"'s rank marked missing (its parent saw it lost), within the bound (CHECK_S after the
other ranks'"'"' records). The broker started again rejoins, and 3-node jobs run.'

. "$(dirname "$0")/sharness-nodes.sh"

broker_gone() {
	! node_alive $1
}

for method in bgexec bulk-exec; do
	test_expect_success "$method: job-exec launches new jobs with it" '
		site_method $method
	'
	test_expect_success "$method: a 3-node guest job runs, one shell unit per node" '
		id=$(guest_job -N3 sleep 300) &&
		for n in $(seq 0 $LAST); do
			test $(shells_of $n $id | wc -l) -eq 1 || return 1
		done
	'
	test_expect_success "$method: node$LAST's broker SIGKILLed: the job ends naming node$LAST" '
		bp=$(node_broker_pid $LAST) &&
		kill -KILL $bp &&
		site_wait_until_t broker_gone $bp &&
		job_exception $id >note &&
		test_debug "cat note" &&
		grep "node$LAST" note
	'
	test_expect_success "$method: no shell unit, no job process left on node$LAST" '
		site_wait_until_t no_node_shells $LAST &&
		site_wait_until_t no_job_procs $LAST
	'
	test_expect_success "$method: the other nodes' shells are stopped" '
		for n in $(seq 0 $((LAST - 1))); do
			site_wait_until_t no_node_shells $n &&
			site_wait_until_t no_job_procs $n || return 1
		done
	'
	test_expect_success "$method: the usage record has node$LAST's rank missing, the others'" '
		site_wait_until_t owner flux job info $id sdexec-usage.$LAST >/dev/null 2>&1 &&
		owner flux job info $id sdexec-usage.$LAST >missing.json &&
		test_debug "cat missing.json" &&
		jq -e ".rank == $LAST and (.missing | test(\"rank $LAST (lost|offline)\"))" missing.json &&
		for n in $(seq 0 $((LAST - 1))); do
			owner flux job info $id sdexec-usage.$n | jq -e ".rank == $n and .cpu_user_s != null" ||
				return 1
		done &&
		owner flux sdexec usage $id | grep "missing: rank $LAST"
	'
	test_expect_success "$method: node$LAST's broker started again rejoins" '
		"$NODES_SH" broker-up $LAST &&
		"$NODES_SH" broker-ready $LAST &&
		site_wait_until_t all_avail
	'
	test_expect_success "$method: 3-node jobs run again, exit codes right" '
		guest1 timeout $T flux run -N3 hostname | sort >hosts &&
		seq -f "node%g" 0 $LAST >hosts.exp &&
		test_cmp hosts.exp hosts &&
		test_expect_code 3 guest1 timeout $T flux run -N3 sh -c "exit 3"
	'
done
test_expect_success 'cleanup: back to the site config' '
	site_reset_config
'
test_site_leaves_nothing

test_done
