#!/bin/sh

test_description='One broker per node: unit names, each node its own systemd, flux sdexec status

The system instance sys on 3 nodes (make site-up NODES=3), each broker in its own mount
and UTS namespace with its own systemd manager of the flux user: the taskmap says one broker
per node, so no unit name carries a rank suffix; each node'"'"'s manager has only that node'"'"'s
units; a 3-node guest job has one shell unit per node; flux sdexec status folds the nodes
into one row with their hostlist and units lists every node'"'"'s shells.'

. "$(dirname "$0")/sharness-nodes.sh"

test_expect_success 'each broker is on its own node, one broker per node in the taskmap' '
	for n in $(seq 0 $LAST); do
		test "$(node_enter $n hostname)" = node$n &&
		test "$(node_user $n $SITE_USER flux getattr rank)" = $n &&
		test "$(node_user $n $SITE_USER flux getattr hostname)" = node$n || return 1
	done &&
	test "$(owner flux getattr broker.mapping)" = "[[0,$SITE_SIZE,1,1]]" &&
	test "$(owner flux resource list -s free -no {nodelist})" = "node[0-$LAST]"
'
test_expect_success 'each node has its own /run/user/<uid> tmpfs and manager' '
	for n in $(seq 0 $LAST); do
		node_enter $n findmnt -n -o FSTYPE /run/user/$(id -u $SITE_USER) >fstype &&
		echo tmpfs >fstype.exp && test_cmp fstype.exp fstype &&
		pid=$(node_manager_pid $n) &&
		cg=/$(node_slice $n)/user-$(id -u $SITE_USER).slice/user@$(id -u $SITE_USER).service &&
		test "$(node_systemctl $n show -p ControlGroup --value)" = $cg &&
		grep "^0::$cg/init.scope\$" /proc/$pid/cgroup &&
		test "$(ps -o user= -p $pid)" = $SITE_USER &&
		echo $pid >>managers || return 1
	done &&
	test $(sort -u managers | wc -l) -eq $SITE_SIZE
'
test_expect_success 'sdexec on every rank: units named <label>:sys.service, no rank suffix' '
	for n in $(seq 0 $LAST); do
		node_user $n $SITE_USER flux dmesg >dmesg.$n &&
		grep "sdexec.info\[$n\]: units named <label>:sys.service" dmesg.$n || return 1
	done
'
test_expect_success 'bgexec: job-exec launches new jobs with it' '
	site_method bgexec
'
test_expect_success 'a 3-node guest job: one shell unit per node, no rank suffix' '
	id=$(guest_job -N3 sleep 300) &&
	f=$(owner flux job id --to=f58plain $id) &&
	for n in $(seq 0 $LAST); do
		echo "imp-shell-$n-$f:sys.service" >units.exp &&
		shells_of $n $id >units.out &&
		test_cmp units.exp units.out || return 1
	done
'
test_expect_success 'systemctl --user list-units *:sys.service on a node: only its own units' '
	for n in $(seq 0 $LAST); do
		node_units $n "*:sys.service" >sys.$n &&
		test_debug "cat sys.$n" &&
		echo "imp-shell-$n-$f:sys.service" >sys.exp &&
		test_cmp sys.exp sys.$n || return 1
	done
'
test_expect_success 'flux sdexec status: one row, 3 ranks, hostlist node[0-2]' '
	owner flux sdexec status >status.out &&
	test_debug "cat status.out" &&
	grep -c "^ok " status.out >rows &&
	echo 1 >rows.exp && test_cmp rows.exp rows &&
	grep "^ok  *$SITE_SIZE  *0-$LAST  *node\[0-$LAST\] " status.out &&
	owner flux sdexec status -o json | jq -c "[.ranks[].host]" >hosts &&
	seq -f "node%g" 0 $LAST | jq -R . | jq -cs . >hosts.exp &&
	test_cmp hosts.exp hosts
'
test_expect_success 'flux sdexec units: every node'"'"'s shell' '
	owner flux sdexec units >units.all &&
	test_debug "cat units.all" &&
	for n in $(seq 0 $LAST); do
		grep "^ *$n imp-shell-$n-$f:sys.service .* running " units.all || return 1
	done
'
test_expect_success 'the job cancelled: no shell unit left on any node' '
	guest1 flux cancel $id &&
	guest1 flux job wait-event -t $T $id clean &&
	site_wait_until_t no_shell_units_left
'
test_expect_success 'bulk-exec: a 3-node job, one shell unit per node, exit code' '
	site_method bulk-exec &&
	id=$(guest_job -N3 sleep 300) &&
	f=$(owner flux job id --to=f58plain $id) &&
	for n in $(seq 0 $LAST); do
		echo "imp-shell-$n-$f.service" >units.exp &&
		shells_of $n $id >units.out &&
		test_cmp units.exp units.out || return 1
	done &&
	guest1 flux cancel $id &&
	test_expect_code 7 guest1 timeout $T flux run -N3 sh -c "exit 7"
'
test_expect_success 'cleanup: back to the site config' '
	site_reset_config
'
test_site_leaves_nothing

test_done
