#!/bin/sh

test_description='flux sdexec upgrade under running guest jobs of 1 to 3 nodes

A new version of the module (a copy of this checkout'"'"'s package at another path, its
version string changed) is installed while guest jobs of 1, 2 and 3 nodes run on the 3 nodes
and more are queued. With bgexec, flux sdexec upgrade reloads sdexec on every node (a new
module process on each), job-exec reattaches the running jobs, the queued ones start after,
every job completes with its own exit code and no exception, among them a 3-node job whose
rank 2 was done before the upgrade, each with one complete usage record, no unit is left on
any node,
and flux sdexec status shows the new version and module file on every node. With bulk-exec
running jobs, whose shells would end with job-exec, the upgrade refuses naming them and
changes nothing; they complete with their own codes.'

. "$(dirname "$0")/sharness-nodes.sh"

upgrade="flux sdexec upgrade --timeout 120"
NEW=$(mktemp -d /tmp/sdexec-t0114.XXXXXX)
cleanup "rm -rf $NEW"

# sdexec_pids: sdexec's module process on each node, "nodeN PID" lines.
sdexec_pids() {
	for n in $(seq 0 $LAST); do
		p=$(node_user $n $SITE_USER sh -c \
			'pgrep -P $(flux getattr broker.pid) -f "sdexec\.py\$"') &&
		echo "node$n $p" || return 1
	done
}
# submit_mix N SECONDS: N guest jobs, alternately of each guest, of 3, 2 and 1 nodes (the
# first three fill the 6 cores), each running about SECONDS and exiting with its own code;
# "GUEST ID CODE" lines in mix.codes.
submit_mix() {
	: >mix.codes &&
	for i in $(seq 1 $1); do
		g=$((i % 2 + 1)) &&
		code=$((i % 5 + 1)) &&
		nodes=$((3 - (i - 1) % 3)) &&
		id=$(as_guest $g flux submit -N$nodes -n$nodes -t 5m \
			sh -c "sleep $(($2 + i % 3)); exit $code") &&
		echo "$g $id $code" >>mix.codes || return 1
	done
}
# A 3-node job whose rank 2 exits 4 at once while ranks 0 and 1 wait for $GATE/go (bounded);
# its id in done2.id. (issue 47: job-exec reattaching asks every rank, the finished one too)
GATE=$(mktemp -d /tmp/sdexec-t0114-gate.XXXXXX)
chmod 755 $GATE
cleanup "rm -rf $GATE"
submit_done2() {
	guest1 flux submit -N3 -n3 -t 5m sh -c "test \$FLUX_TASK_RANK -eq 2 && exit 4; n=0; \
		while ! test -e $GATE/go && test \$n -lt 1800; do sleep 0.1; n=\$((n + 1)); done" \
		>done2.id &&
	owner flux job wait-event -q -t $T -p exec $(cat done2.id) recoverable
}
# rank_2_past_grace: job done2's rank 2 shell ended and its answer grace (2 s) is over: its
# unit is let go (flux-core's C module forgets it), or node 2's sdexec says it keeps it.
rank_2_past_grace() {
	_f=$(owner flux job id --to=f58plain $(cat done2.id)) &&
	{ test -z "$(shells_of 2 $(cat done2.id))" ||
	node_user 2 $SITE_USER flux dmesg | grep -q "shell-2-$_f\[.*kept while job"; }
}
# complete_record ID: job ID's usage record has a row of each of its ranks, none missing,
# and its memo counts them all.
complete_record() {
	_n=$(owner flux jobs -no "{nnodes}" $1) &&
	owner flux sdexec usage -o json $1 >$1.usage &&
	owner flux jobs -no "{user.sdexec.ranks} {user.sdexec.missing}" $1 >$1.memo &&
	read _ranks _missing <$1.memo &&
	jq -e "[.[].ranks[] | select(.missing | not)] | length == $_n" $1.usage >/dev/null &&
	test "$_ranks" = "$_n" && test -z "$_missing" || { cat $1.usage $1.memo; return 1; }
}
# a 3-node job among the running ones, for the units check below
running_3node() {
	owner flux jobs -f running -A -n -o "{nnodes} {id}" | awk '$1 == 3 {print $2; exit}'
}

test_expect_success 'a new version of the module installed at another path' '
	tar -C "$SITE_SRCDIR" --exclude=__pycache__ -cf - flux_sdexec | tar -C $NEW -xf - &&
	sed -i "s/^__version__ = \"\(.*\)\"/__version__ = \"\1+t0114\"/" \
		$NEW/flux_sdexec/_version.py &&
	chmod -R a+rX $NEW &&
	grep "+t0114" $NEW/flux_sdexec/_version.py
'
test_expect_success 'bulk-exec: running jobs, the upgrade refuses naming them, nothing changed' '
	site_method bulk-exec &&
	sdexec_pids >pids.before &&
	submit_mix 3 8 &&
	site_wait_until_t running 3 &&
	test_must_fail owner $upgrade --module $NEW/flux_sdexec/modules/sdexec.py \
		>refused.out 2>refused.err &&
	test_debug "cat refused.out refused.err" &&
	grep "refusing to upgrade: these running jobs would end" refused.err &&
	while read g id code; do
		grep "$(owner flux job id --to=f58 $id) (bulk-exec)" refused.err || return 1
	done <mix.codes &&
	grep "nothing was changed" refused.err &&
	sdexec_pids >pids.after &&
	test_cmp pids.before pids.after &&
	check_mix &&
	site_wait_until_t no_shell_units_left
'
test_expect_success 'bgexec: 12 jobs of 3, 2 and 1 nodes: 3 run on the 6 cores, 9 queued' '
	site_method bgexec &&
	submit_mix 12 10 &&
	site_wait_until_t running 3 &&
	id3=$(running_3node) && test -n "$id3" &&
	owner flux job wait-event -t $T -p exec $id3 shell.start &&
	for n in $(seq 0 $LAST); do
		test $(shells_of $n $id3 | wc -l) -eq 1 || return 1
	done
'
test_expect_success 'bgexec: a 3-node job whose rank 2 is done before the upgrade' '
	submit_done2 &&
	site_wait_until_t rank_2_past_grace
'
test_expect_success 'bgexec: flux sdexec upgrade to the new module on every node' '
	sdexec_pids >pids.before &&
	owner $upgrade --module $NEW/flux_sdexec/modules/sdexec.py >upgrade.out 2>upgrade.err &&
	test_debug "cat upgrade.out upgrade.err" &&
	grep "upgrade: sdexec reloaded from $NEW/flux_sdexec/modules/sdexec.py on $SITE_SIZE rank(s)" \
		upgrade.out &&
	grep "upgrade: jobs reattached by job-exec: [1-9]" upgrade.out &&
	sdexec_pids >pids.after &&
	test_debug "cat pids.before pids.after" &&
	test $(wc -l <pids.after) -eq $SITE_SIZE &&
	! grep -x -f pids.before pids.after
'
test_expect_success 'bgexec: every job completes with its own exit code, no exception' '
	check_mix
'
test_expect_success 'bgexec: the job with rank 2 done before ends with its code 4' '
	touch $GATE/go &&
	id=$(cat done2.id) &&
	owner flux job wait-event -q -t $T $id clean &&
	owner flux job eventlog $id >done2.eventlog &&
	test_debug "cat done2.eventlog" &&
	! grep exception done2.eventlog &&
	test_expect_code 4 owner flux job status $id
'
test_expect_success 'bgexec: each job across the upgrade has one complete usage record' '
	complete_record $(cat done2.id) &&
	while read g id code; do
		complete_record $id || return 1
	done <mix.codes
'
test_expect_success 'no shell unit left on any node' '
	site_wait_until_t no_shell_units_left
'
test_expect_success 'flux sdexec status: the new version and module file on every node' '
	owner flux sdexec status >status.out &&
	test_debug "cat status.out" &&
	grep "^ok  *$SITE_SIZE  *0-$LAST  *node\[0-$LAST\]  *[^ ]*+t0114 .* $NEW/flux_sdexec/modules/sdexec.py\$" \
		status.out &&
	owner flux sdexec status -o json >status.json &&
	jq -r ".ranks[] | \"\(.host) \(.version) \(.module)\"" status.json >modules &&
	for n in $(seq 0 $LAST); do
		echo "node$n $(sed -n "s/^__version__ = \"\(.*\)\"/\1/p" $NEW/flux_sdexec/_version.py) $NEW/flux_sdexec/modules/sdexec.py"
	done >modules.exp &&
	test_cmp modules.exp modules
'
test_expect_success '3-node jobs of both methods run on the new module' '
	test_expect_code 3 guest2 timeout $T flux run -N3 sh -c "exit 3" &&
	site_method bulk-exec &&
	test_expect_code 4 guest1 timeout $T flux run -N3 sh -c "exit 4"
'
test_expect_success 'back to the checkout'"'"'s module (upgrade with no running jobs)' '
	site_method bgexec &&
	owner $upgrade --module $SITE_SRCDIR/flux_sdexec/modules/sdexec.py >back.out &&
	test_debug "cat back.out" &&
	owner flux sdexec status -o json | jq -r ".ranks[].module" | sort -u >module &&
	echo $SITE_SRCDIR/flux_sdexec/modules/sdexec.py >module.exp &&
	test_cmp module.exp module
'
test_expect_success 'cleanup: back to the site config' '
	site_reset_config
'
test_site_leaves_nothing

test_done
