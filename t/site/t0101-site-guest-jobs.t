#!/bin/sh

test_description='Guest jobs in the site instance, through the real IMP

The system instance `sys` owned by the flux user (make site-up) runs two guests jobs,
on 1 and 2 brokers, with bulk-exec and with bgexec: each job runs as its submitter (uid, gid,
supplementary groups, HOME, working directory), with its output and exit code, in units of
the flux user'"'"'s non-root systemd manager named as job-exec names multi-user shells; none is
left afterwards. Guests cannot use sdexec; the flux user sees it with flux sdexec.'

. "$(dirname "$0")/sharness-site.sh"

# whoami_job N NODES: what a guest job sees of itself, one line per node.
whoami_job() {
	as_guest $1 timeout $T flux run -N$2 sh -c \
		"echo \$(id -u) \$(id -g) \$(id -G | tr \" \" ,) \$HOME \$(pwd)"
}
# expected N NODES: what guest N is, the same NODES times.
expected() {
	_u=$(eval echo \$G$1)
	for _i in $(seq $2); do
		echo "$(id -u $_u) $(id -g $_u) $(id -G $_u | tr " " ,) $(site_home $_u) $(site_home $_u)"
	done
}

test_expect_success 'the instance is the system instance, owned by the flux user' '
	test "$(owner flux getattr security.owner)" = "$(id -u $SITE_USER)" &&
	owner flux getattr broker.sd-notify &&
	test "$(owner flux getattr size)" = "$SITE_SIZE" &&
	owner flux dmesg | grep "sdexec.info\[0\]: units named <label>:sys.service"
'
# one broker per node: the manager's private socket; brokers sharing a node (this site):
# the user bus, which filters signals by unit
test_expect_success 'its sdexec reaches the flux user manager, which runs as the flux user' '
	if test "$SITE_SIZE" -gt 1; then via="the user bus"; else
		via="$(site_runtime_dir)/systemd/private"; fi &&
	owner flux dmesg | grep "sdexec.info\[0\]: systemd reached through $via" &&
	pid=$(cat $SITE_STATE/manager.pid | cut -d" " -f1) &&
	test "$(ps -o uid= -p $pid | tr -d " ")" = "$(id -u $SITE_USER)"
'
for method in bulk-exec bgexec; do
	test_expect_success "$method: job-exec launches new jobs with it" '
		site_method $method
	'
	for n in 1 2; do
		for nodes in 1 2; do
			test_expect_success "$method: guest $n, $nodes node(s): runs as the guest" '
				whoami_job $n $nodes >who.out &&
				expected $n $nodes >who.exp &&
				test_cmp who.exp who.out
			'
		done
		test_expect_success "$method: guest $n: exit codes and output through the IMP" '
			as_guest $n timeout $T flux run -N2 sh -c "echo out-\$(flux getattr rank); exit 7" \
				>out 2>err; test $? -eq 7 &&
			sort out >out.sorted && printf "out-0\nout-1\n" >out.exp &&
			test_cmp out.exp out.sorted &&
			test_expect_code 0 as_guest $n timeout $T flux run -N2 true
		'
	done
	test_expect_success "$method: a running guest job is in units of the flux manager" '
		id=$(guest1 flux submit -N2 sleep 300) &&
		guest1 flux job wait-event -t $T -p exec $id shell.start &&
		f=$(owner flux job id --to=f58plain $id) &&
		if test $method = bulk-exec; then
			printf "imp-shell-0-$f.service\nimp-shell-1-$f.service\n" >units.exp
		else
			printf "imp-shell-0-$f-0:sys.service\nimp-shell-1-$f-1:sys.service\n" >units.exp
		fi &&
		shell_units_of $id | sort >units.out &&
		test_cmp units.exp units.out &&
		for u in $(cat units.out); do
			test "$(user_systemctl show -p Type --value $u)" = notify &&
			test "$(user_systemctl show -p KillMode --value $u)" = process &&
			pid=$(user_systemctl show -p MainPID --value $u) &&
			test "$(cat /proc/$pid/comm)" = flux-imp || return 1
		done &&
		owner flux sdexec units >sdexec-units.out &&
		test_debug "cat sdexec-units.out" &&
		test $(grep -c "$(owner flux job id --to=f58 $id)" sdexec-units.out) -eq 2 &&
		guest1 flux cancel $id &&
		guest1 flux job wait-event -t $T $id clean &&
		site_wait_until_t no_shell_units_of $id
	'
done

test_expect_success 'a guest cannot call sdexec (EPERM), nor list its units' '
	test_must_fail guest2 flux exec --service sdexec -r 0 true 2>exec.err &&
	grep "requires owner credentials" exec.err &&
	test_must_fail guest2 flux sdexec units 2>units.err &&
	test_debug "cat units.err" &&
	grep "requires owner credentials" units.err &&
	test_must_fail guest2 flux sdexec status
'
test_expect_success 'the flux user: flux sdexec status, both ranks ok' '
	owner flux sdexec status -o json >status.json &&
	test_debug "cat status.json" &&
	owner flux sdexec status >status.out &&
	grep "^ok  *$SITE_SIZE " status.out
'
test_expect_success 'cleanup: back to the site config' '
	site_reset_config
'
test_site_leaves_nothing

test_done
