#!/bin/sh

test_description='flux sdexec status, units and upgrade as the flux user of the site instance

With bgexec, 8 guest jobs of two guests (1 and 2 nodes, each with its own exit code) are in
the instance while the flux user upgrades sdexec (flux sdexec upgrade): the 4 cores of the
two brokers run 3 of them (one 2-node), the others are queued. Every rank gets a new sdexec
process, job-exec reattaches the running jobs, the queued ones start after, and all of them
complete with their own exit code and no exception; no unit is left.'

. "$(dirname "$0")/sharness-site.sh"

upgrade="flux sdexec upgrade --timeout 120"

# sdexec_pids: sdexec's module process on each rank, one line each.
sdexec_pids() {
	for r in $(seq 0 $((SITE_SIZE - 1))); do
		owner flux exec -r $r sh -c 'pgrep -P $(flux getattr broker.pid) -f "sdexec\.py\$"' ||
			return 1
	done
}
# submit_mix N: N guest jobs, alternately of each guest, 1- and 2-node, running a few seconds,
# each exiting with its own code; "GUEST ID CODE" lines in mix.codes.
submit_mix() {
	: >mix.codes &&
	for i in $(seq 1 $1); do
		g=$((i % 2 + 1)) &&
		code=$((i % 5)) &&
		nodes=$((i % 3 == 0 ? 2 : 1)) &&
		id=$(as_guest $g flux submit -N$nodes -n$nodes -t 5m \
			sh -c "sleep $((i % 4 + 4)); exit $code") &&
		echo "$g $id $code" >>mix.codes || return 1
	done
}

test_expect_success 'bgexec for new jobs' '
	site_method bgexec
'
test_expect_success 'flux sdexec units as the flux user: a guest job, its shells, its pids' '
	id=$(guest1 flux submit -N2 sleep 300) &&
	guest1 flux job wait-event -t $T -p exec $id shell.start &&
	owner flux sdexec units -o json >units.json &&
	test_debug "cat units.json" &&
	owner flux sdexec units >units.out &&
	test_debug "cat units.out" &&
	test $(grep -c "imp-shell-[01]-$(owner flux job id --to=f58plain $id)-[01]:sys.service" units.out) -eq 2 &&
	guest1 flux cancel $id &&
	guest1 flux job wait-event -t $T $id clean
'
test_expect_success 'flux sdexec upgrade under 8 guest jobs (3 running): all complete' '
	sdexec_pids >pids.before &&
	submit_mix 8 &&
	site_wait_until_t running 3 &&
	owner $upgrade >upgrade.out 2>upgrade.err &&
	test_debug "cat upgrade.out upgrade.err" &&
	grep "upgrade: sdexec reloaded from $SITE_SRCDIR/flux_sdexec/modules/sdexec.py on $SITE_SIZE rank(s)" upgrade.out &&
	grep "upgrade: jobs reattached by job-exec: [1-9]" upgrade.out &&
	sdexec_pids >pids.after &&
	! grep -x -f pids.before pids.after &&
	check_mix &&
	site_wait_until_t no_shell_units_left
'
# An IMP announces STOPPING=1 when the job is over: its unit then ends inactive, not "exited"
# (RemainAfterExit does not hold it), and systemd unloads it at once with its status unless
# something refers to it. Ending while sdexec is unloaded, it must still be found by the next.
GATE=$(mktemp -d /tmp/sdexec-t0104.XXXXXX)
chmod 0755 $GATE
cleanup "rm -rf $GATE"
test_expect_success 'a guest job ending (exit 0) while sdexec is unloaded completes' '
	id=$(guest1 flux submit -N2 -n2 sh -c "while ! test -e $GATE/go; do sleep 0.1; done") &&
	guest1 flux job wait-event -t $T -p exec $id shell.start &&
	owner flux module remove job-exec &&
	owner flux exec -r all flux module remove sdexec &&
	touch $GATE/go &&
	site_wait_until_t no_guest_procs &&
	owner flux exec -r all flux module load $SITE_SRCDIR/flux_sdexec/modules/sdexec.py &&
	owner flux module load job-exec &&
	guest1 flux job wait-event -t $T $id clean &&
	guest1 flux job eventlog $id >gated.eventlog &&
	test_debug "cat gated.eventlog" &&
	! grep exception gated.eventlog &&
	test_expect_code 0 guest1 flux job status $id &&
	site_wait_until_t no_shell_units_left
'
test_expect_success 'flux sdexec status after the upgrade: every rank ok' '
	owner flux sdexec status >status.out; test $? -le 1 &&
	test_debug "cat status.out" &&
	grep "^ok  *$SITE_SIZE " status.out
'
test_expect_success 'new guest jobs run after the upgrade' '
	test_expect_code 3 guest2 timeout $T flux run -N2 sh -c "exit 3"
'
test_expect_success 'cleanup: back to the site config' '
	site_reset_config
'
test_site_leaves_nothing

test_done
