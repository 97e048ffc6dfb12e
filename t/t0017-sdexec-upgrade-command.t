#!/bin/sh

test_description='flux sdexec upgrade: the whole upgrade procedure as one command

Runs under flux start --test-size=2 with [exec] service = "sdexec", method =
"bgexec", the command from this checkout (FLUX_EXEC_PATH_PREPEND). Under running
1- and 2-node jobs, some still in their startup window, it completes them all with
their own exit codes and leaves no unit; with bulk-exec jobs running it refuses and
changes nothing, and --force goes on, saying which jobs end; a failed reload brings
service back; a module reached through a symlinked directory upgrades and the report says
which file each rank runs.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_bgexec_jobs_under_flux 2

FLUX_EXEC_PATH_PREPEND=$SDEXEC_SRCDIR/cmd
export FLUX_EXEC_PATH_PREPEND
upgrade="flux sdexec upgrade --timeout 60"

# sdexec_pid RANK: the pid of sdexec's module process on broker RANK.
sdexec_pid() {
	flux exec -r $1 sh -c 'pgrep -P $(flux getattr broker.pid) -f "sdexec\.py\$"'
}
# pids: sdexec's module process on each rank, one line each.
pids() {
	sdexec_pid 0 && sdexec_pid 1
}
# scheduling_started: the default queue schedules.
scheduling_started() {
	flux queue status | grep -x "Scheduling is started"
}
# no_unit_of_bulk_job ID: nothing systemd has is named after job ID's shell on rank 1 (bulk-exec
# names its units verbatim, "shell-1-<f58plain>.service": no instance in the name).
no_unit_of_bulk_job() {
	_plain=$(flux job id --to=f58plain $1) &&
	_left=$(systemctl --user list-units --all --plain --no-legend \
		"shell-1-$_plain.service" "app-sdexec-shell\\x2d1\\x2d${_plain}_*.slice") &&
	test -z "$_left"
}
# job_exec_method M: job-exec is loaded, with method M.
job_exec_method() {
	flux module stats job-exec | jq -e ".method == \"$1\""
}

test_job_setup bgexec

test_expect_success 'flux sdexec upgrade --help describes it' '
	flux sdexec upgrade --help >help.out &&
	grep -- "--module PATH" help.out &&
	grep -- "--force" help.out &&
	grep -- "--timeout" help.out
'
test_expect_success 'a module file that does not exist: refused, nothing changed' '
	pids >pids.before &&
	test_expect_code 1 $upgrade --module /nonexistent/sdexec.py 2>nofile.err &&
	test_debug "cat nofile.err" &&
	grep "no such module file: /nonexistent/sdexec.py (nothing was changed)" nofile.err &&
	pids >pids.after &&
	test_cmp pids.before pids.after &&
	scheduling_started
'

# submit_mix N: N jobs, 1- and 2-node, each sleeping under 1.5s and exiting with its own
# code; ids in mix.ids, expected codes in mix.codes ("ID CODE" lines).
submit_mix() {
	: >mix.codes &&
	for i in $(seq 1 $1); do
		code=$((i % 4)) &&
		nodes=$((i % 3 == 0 ? 2 : 1)) &&
		id=$(flux submit -N$nodes -n$nodes -t 2m \
			sh -c "sleep 0.$((i % 10 + 3)); exit $code") &&
		echo "$id $code" >>mix.codes || return 1
	done
}
# check_mix: every job of mix.codes is inactive with its own exit code and no exception.
check_mix() {
	while read id code; do
		wait_event $id clean &&
		test_expect_code $code flux job status $id &&
		flux job eventlog $id >$id.eventlog &&
		! grep exception $id.eventlog || { cat $id.eventlog; return 1; }
	done <mix.codes
}

test_expect_success 'flux sdexec upgrade under 16 jobs in flight (some in startup) completes them all' '
	pids >pids.before &&
	submit_mix 16 &&
	$upgrade >upgrade.out 2>upgrade.err &&
	test_debug "cat upgrade.out upgrade.err" &&
	grep "upgrade: sdexec reloaded from $SDEXEC_MODULE on 2 rank(s)" upgrade.out &&
	grep "upgrade: queues stopped and started again: (default)" upgrade.out &&
	grep "upgrade: scheduling was held for [0-9.]*s" upgrade.out &&
	pids >pids.after &&
	! grep -x -f pids.before pids.after &&
	scheduling_started &&
	job_exec_method bgexec &&
	check_mix &&
	sdexec_check_no_units
'

# A job held in its startup window: its shells' user rc waits for a gate file (bounded).
# The shell globs the rc path, so it goes where no space is (the trash directory has one).
SLOW_RC=$(mktemp -d /tmp/sdexec-t0017.XXXXXX)/slow.lua
cleanup "rm -rf \"${SLOW_RC%/slow.lua}\""
cat >$SLOW_RC <<-'EOT'
local n = 0
while not io.open("startup.gate") and n < 600 do os.execute("sleep 0.1"); n = n + 1 end
EOT
test_expect_success 'a 2-node job in its startup window holds the upgrade until recoverable' '
	id=$(flux submit -N2 -n2 -o userrc=$SLOW_RC sh -c "sleep 2; exit 2") &&
	wait_event $id start &&
	{ $upgrade >startup.out 2>&1 & } &&
	upid=$! &&
	sdexec_wait_until grep -q "waiting for 1 job(s) in their startup window: $id" startup.out &&
	! flux job wait-event -q -p exec $id recoverable -t 0.1 &&
	! grep "job-exec removed" startup.out &&
	touch startup.gate &&
	wait $upid &&
	test_debug "cat startup.out" &&
	grep "upgrade: jobs reattached by job-exec: 1 ($id)" startup.out &&
	wait_event $id clean &&
	test_expect_code 2 flux job status $id &&
	! flux job eventlog $id | grep exception &&
	sdexec_check_no_units
'

test_expect_success 'with a bulk-exec job running it refuses, saying which, and changes nothing' '
	flux module reload job-exec method=bulk-exec &&
	job_exec_method bulk-exec &&
	id=$(flux submit -N1 --requires=rank:1 sleep 300) &&
	wait_event $id start &&
	pids >pids.before &&
	test_expect_code 1 $upgrade >refuse.out 2>refuse.err &&
	test_debug "cat refuse.out refuse.err" &&
	grep "refusing to upgrade: these running jobs would end" refuse.err &&
	grep "$id (bulk-exec)" refuse.err &&
	grep "nothing was changed" refuse.err &&
	pids >pids.after &&
	test_cmp pids.before pids.after &&
	scheduling_started &&
	job_exec_method bulk-exec &&
	flux jobs -n -o "{state}" $id | grep -x RUN &&
	echo $id >bulk.id
'
test_expect_success '--force goes on, saying which jobs end; job-exec keeps its method' '
	test_when_finished "flux module reload job-exec" &&
	id=$(cat bulk.id) &&
	$upgrade --force >force.out 2>force.err &&
	test_debug "cat force.out force.err" &&
	grep "upgrade: --force: these jobs will end: $id (bulk-exec)" force.out &&
	grep "upgrade: jobs ended (--force): $id (bulk-exec)" force.out &&
	wait_event $id clean &&
	sdexec_wait_until no_unit_of_bulk_job $id &&
	flux job eventlog $id | grep "exception type=\"exec\"" &&
	scheduling_started &&
	job_exec_method bulk-exec
'

test_expect_success 'a reload that fails brings service back: old module, job-exec, queues' '
	job_exec_method bgexec &&
	echo "raise SystemExit(\"broken on purpose\")" >broken.py &&
	id=$(flux submit -N2 -n2 sh -c "sleep 1; exit 3") &&
	wait_event $id start &&
	test_expect_code 1 $upgrade --module "$PWD/broken.py" >broken.out 2>broken.err &&
	test_debug "cat broken.out broken.err" &&
	grep "load $PWD/broken.py on rank 1: loader (module-python-exec) exited" broken.err &&
	grep "restored: sdexec loaded from $SDEXEC_MODULE on rank 0" broken.err &&
	grep "restored: sdexec loaded from $SDEXEC_MODULE on rank 1" broken.err &&
	! grep "restoring:" broken.err &&
	grep "restored: job-exec loaded" broken.err &&
	grep "restored: queues started" broken.err &&
	flux exec -r all flux module list -l >modules.out &&
	test $(grep -c "^sdexec .* $SDEXEC_MODULE\$" modules.out) -eq 2 &&
	scheduling_started &&
	job_exec_method bgexec &&
	wait_event $id clean &&
	test_expect_code 3 flux job status $id &&
	sdexec_check_no_units
'

# service_back: what an interrupted upgrade must leave: sdexec from the checkout on both
# ranks, job-exec loaded with bgexec, the default queue scheduling.
service_back() {
	flux exec -r all flux module list -l >modules.out &&
	test $(grep -c "^sdexec .* $SDEXEC_MODULE\$" modules.out) -eq 2 &&
	job_exec_method bgexec &&
	scheduling_started
}
# The upgrade in the background with SIGINT at its default action (a shell's background
# job has it ignored; a terminal's Ctrl-C finds it at its default).
upgrade_bg() {
	env --default-signal=INT $upgrade >$1.out 2>$1.err &
	echo $! >$1.pid
}
test_expect_success 'SIGINT while it waits for a job in its startup window: service back' '
	rm -f startup.gate &&
	id=$(flux submit -N2 -n2 -o userrc=$SLOW_RC sh -c "exit 4") &&
	wait_event $id start &&
	upgrade_bg int &&
	sdexec_wait_until grep -q "waiting for 1 job(s) in their startup window: $id" int.out &&
	kill -INT $(cat int.pid) &&
	test_expect_code 130 wait $(cat int.pid) &&
	test_debug "cat int.out int.err" &&
	grep "flux-sdexec: upgrade: interrupted by SIGINT" int.err &&
	grep "restored: queues started" int.err &&
	! grep "restoring:" int.err &&
	service_back &&
	touch startup.gate &&
	wait_event $id clean &&
	test_expect_code 4 flux job status $id &&
	! flux job eventlog $id | grep exception
'
test_expect_success 'SIGTERM while sdexec is being removed, the removal answered late: service back' '
	id=$(flux submit -N2 -n2 sh -c "sleep 2; exit 5") &&
	wait_event $id recoverable -p exec &&
	stopped=$(sdexec_pid 1) &&
	kill -STOP $stopped &&
	test_when_finished "kill -CONT $stopped 2>/dev/null || :" &&
	upgrade_bg term &&
	sdexec_wait_until grep -q "job-exec removed" term.out &&
	kill -TERM $(cat term.pid) &&
	kill -CONT $stopped &&
	test_expect_code 143 wait $(cat term.pid) &&
	test_debug "cat term.out term.err" &&
	grep "flux-sdexec: upgrade: interrupted by SIGTERM" term.err &&
	grep "restored: sdexec loaded from $SDEXEC_MODULE on rank 1" term.err &&
	grep "restored: job-exec loaded" term.err &&
	grep "restored: queues started" term.err &&
	! grep "restoring:" term.err &&
	service_back &&
	wait_event $id clean &&
	test_expect_code 5 flux job status $id &&
	! flux job eventlog $id | grep exception &&
	sdexec_check_no_units
'

# logged_on1 PATTERN: rank 1's broker log has a line matching PATTERN.
logged_on1() {
	flux exec -r 1 flux dmesg | grep -q -- "$1"
}
test_expect_success 'a record nobody asks for goes 20 s after the upgrade announced job-exec' '
	$sdexec -r 1 --bg --waitable --label=byhand sh -c "exit 6" &&
	sdexec_wait_until logged_on1 "byhand\[[0-9]*\]: Exit 6" &&
	$upgrade >byhand.out 2>byhand.err &&
	test_debug "cat byhand.out byhand.err" &&
	logged_on1 "byhand\[[0-9]*\]: no waiter after adoption: collectable for 20s after the first" &&
	logged_on1 "byhand\[[0-9]*\]: job-exec loaded: collectable for 20s" &&
	sdexec_wait_until logged_on1 "byhand\[[0-9]*\]: not collected within 20s, let go" &&
	sdexec_check_no_units
'

# Versions side by side, the module reached through a symlinked directory (/opt/sdexec/current
# at a site): the broker lists the path as given, the module reports the file it resolved.
# In /tmp: the trash directory's name has a space.
LINKED=$(mktemp -d /tmp/sdexec-t0017-link.XXXXXX)
cleanup "rm -rf \"$LINKED\""
ln -s "$(dirname "$SDEXEC_MODULE")" "$LINKED/current"
test_expect_success 'an upgrade through a symlinked directory succeeds and says what runs' '
	id=$(flux submit -N2 -n2 sh -c "sleep 1; exit 7") &&
	wait_event $id start &&
	$upgrade --module "$LINKED/current/sdexec.py" >linked.out 2>linked.err &&
	test_debug "cat linked.out linked.err" &&
	grep "upgrade: sdexec reloaded from $LINKED/current/sdexec.py on 2 rank(s)" linked.out &&
	grep "upgrade: ranks 0-1 run $(realpath "$SDEXEC_MODULE")\$" linked.out &&
	flux exec -r all flux module list -l >linked-modules.out &&
	test $(grep -c "^sdexec .* $LINKED/current/sdexec.py\$" linked-modules.out) -eq 2 &&
	wait_event $id clean &&
	test_expect_code 7 flux job status $id &&
	! flux job eventlog $id | grep exception
'

test_expect_success 'no unit of the instance is left at the end' '
	sdexec_check_no_units
'

test_done
