#!/bin/sh

test_description='Upgrading sdexec under running bgexec jobs

Runs under flux start --test-size=2 with [exec] service = "sdexec", method =
"bgexec". The upgrade procedure of doc/guide/recovery.md (remove job-exec, reload sdexec
on every rank, load job-exec) while jobs run: a clean unload while the
instance runs leaves waitable units for the next sdexec, which adopts them,
and job-exec reattaches. Also: a job that ends while sdexec is unloaded,
two reloads in a row, [systemd] sdexec-unload = "stop-all", instance
shutdown (every unit stops), and a bulk-exec job (foreground) during a reload
(wait answers left unread by a departing client: t0043).'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_bgexec_jobs_under_flux 2

# gated_job NAME RANK CODE: a job on RANK that waits for file NAME, prints
# "out-NAME", and exits CODE; its id is written to NAME.id.
gated_job() {
	flux submit --flags=debug -t 2m -n1 --requires=rank:$2 \
		sh -c "while ! test -e $1; do sleep 0.1; done; echo out-$1; exit $3" >$1.id &&
	wait_event $(cat $1.id) start &&
	wait_event $(cat $1.id) recoverable -p exec &&
	sdexec_wait_until unit_active $(bgexec_unit $2 $(cat $1.id))
}
# upgrade: the procedure of doc/guide/recovery.md.
upgrade() {
	flux module remove job-exec &&
	flux exec -r all flux module reload $SDEXEC_MODULE &&
	flux module load job-exec
}
# reattached N NAME...: job-exec has finished reattaching the gated jobs NAME... N times
# (removing job-exec while it reattaches makes it fail the job itself: not our doing).
reattached() {
	_ra_n=$1
	shift
	for _ra_job in "$@"; do
		wait_event $(cat $_ra_job.id) debug.exec-reattach-finish -c $_ra_n || return 1
	done
}
# no_guard [INSTANCE]: no guard unit of handed-over units is loaded.
no_guard() {
	test -z "$(sdexec_list_units "sdexec-guard-*-${1:-$SDEXEC_INSTANCE}.service")"
}
clear_logs() {
	flux exec -r all flux dmesg -C
}
# logged RANK PATTERN: the number of lines of RANK's broker log matching PATTERN.
logged() {
	flux exec -r $1 flux dmesg | grep -c -- "$2"
}
# check_job NAME CODE: the gated job NAME ended with CODE, no exception, and
# flux job attach shows its output.
check_job() {
	_cj_id=$(cat $1.id) &&
	wait_event $_cj_id clean &&
	test_expect_code $2 flux job status $_cj_id &&
	flux job eventlog $_cj_id >$1.eventlog &&
	test_debug "cat $1.eventlog" &&
	! grep exception $1.eventlog &&
	test_expect_code $2 timeout "$T" flux job attach $_cj_id >$1.out &&
	echo out-$1 >$1.expected &&
	test_cmp $1.expected $1.out
}

test_job_setup bgexec

# each test starts once the units of the jobs before it are gone (the answer grace)
test_expect_success 'the upgrade procedure while 4 jobs run' '
	sdexec_check_no_units &&
	clear_logs &&
	gated_job a 0 0 &&
	gated_job b 0 3 &&
	gated_job c 1 5 &&
	gated_job d 1 7 &&
	upgrade &&
	test $(logged 0 "left running for the next sdexec: shell-0-") -eq 2 &&
	test $(logged 1 "left running for the next sdexec: shell-1-") -eq 2 &&
	test $(logged 0 "adopted shell-0-.* (active.running") -eq 2 &&
	test $(logged 1 "adopted shell-1-.* (active.running") -eq 2 &&
	for j in a b c d; do
		wait_event $(cat $j.id) debug.exec-reattach-finish || return 1
	done
'
test_expect_success 'all 4 jobs end with their own exit code, output, no exception' '
	touch a b c d &&
	check_job a 0 &&
	check_job b 3 &&
	check_job c 5 &&
	check_job d 7
'
test_expect_success 'no unit of the instance is left, nor a guard' '
	sdexec_check_no_units &&
	no_guard
'

test_expect_success 'two reloads in a row, a job ending while sdexec is unloaded' '
	sdexec_check_no_units &&
	clear_logs &&
	gated_job e 0 2 &&
	gated_job f 1 4 &&
	upgrade &&
	reattached 1 e f &&
	upgrade &&
	reattached 2 e f &&
	test $(logged 0 "left running for the next sdexec: shell-0-") -eq 2 &&
	test $(logged 1 "left running for the next sdexec: shell-1-") -eq 2 &&
	flux module remove job-exec &&
	flux exec -r all flux module remove sdexec &&
	touch f &&
	sdexec_wait_until sdexec_unit_is $(bgexec_unit 1 $(cat f.id)) failed &&
	flux exec -r all flux module load $SDEXEC_MODULE &&
	flux exec -r 1 flux dmesg | grep "adopted shell-1-.* (failed.failed" &&
	flux module load job-exec &&
	check_job f 4 &&
	touch e &&
	check_job e 2 &&
	sdexec_check_no_units &&
	no_guard
'

# sdexec_pid RANK: the pid of sdexec's module process on broker RANK.
sdexec_pid() {
	flux exec -r $1 sh -c 'pgrep -P $(flux getattr broker.pid) -f "sdexec\.py\$"'
}
# The answer to job-exec's parked wait goes out before sdexec hears that job-exec left:
# sdexec is stopped (by its pid) while job-exec is removed and the shell exits, so that
# it finds both the exit and the disconnect when it resumes.
test_expect_success 'a shell that exits while job-exec is removed completes after it is back' '
	clear_logs &&
	gated_job h 1 6 &&
	pid=$(sdexec_pid 1) &&
	test -n "$pid" &&
	test_when_finished "kill -CONT $pid" &&
	kill -STOP $pid &&
	flux module remove job-exec &&
	touch h &&
	sdexec_wait_until sdexec_unit_is $(bgexec_unit 1 $(cat h.id)) failed &&
	kill -CONT $pid &&
	flux module load job-exec &&
	check_job h 6 &&
	flux exec -r 1 flux dmesg >h.dmesg &&
	test_debug "grep shell-1- h.dmesg" &&
	sdexec_check_no_units
'

# set_unload VALUE: [systemd] sdexec-unload in the instance config file.
set_unload() {
	sed -i -e "/^#*sdexec-unload *=/d" -e "s/^sdexec-debug *=.*/&\nsdexec-unload = $1/" \
		"$SDEXEC_CONF_DIR/sdexec.toml" &&
	grep -q "^sdexec-unload = $1\$" "$SDEXEC_CONF_DIR/sdexec.toml"
}
test_expect_success 'config reload refuses a bad sdexec-unload, saying what is allowed' '
	test_when_finished "set_unload \\\"keep-waitable\\\" && flux config reload" &&
	set_unload "\"stop-some\"" &&
	test_must_fail flux config reload 2>reload.err &&
	test_debug "cat reload.err" &&
	grep "sdexec-unload must be \"keep-waitable\" or \"stop-all\", got .stop-some." reload.err
'
test_expect_success 'with sdexec-unload = "stop-all" a reload stops the waitable units' '
	test_when_finished "set_unload \\\"keep-waitable\\\" && flux config reload" &&
	set_unload "\"stop-all\"" &&
	flux config reload &&
	clear_logs &&
	gated_job g 1 0 &&
	upgrade &&
	test $(logged 1 "left running for the next sdexec") -eq 0 &&
	wait_event $(cat g.id) clean &&
	flux job eventlog $(cat g.id) >g.eventlog &&
	grep exception g.eventlog &&
	sdexec_check_no_units
'

test_expect_success 'instance shutdown stops waitable units still running' '
	cat >shutdown.sh <<-EOT &&
	flux exec --service sdexec -r 0 --bg --waitable --label=left0 sleep 300
	flux exec --service sdexec -r 1 --bg --waitable --label=left1 sleep 300
	flux dmesg | sed -n "s/.*units named <label>:\\(.*\\)\\.service (glob.*/\\1/p" \
		| head -1 >nested.instance
	systemctl --user list-units --plain --no-legend "*:\$(cat nested.instance).service" \
		>nested.before
	EOT
	flux start --test-size=2 --config-path="$SDEXEC_CONF_DIR" \
		-Slog-filename=nested.log sh -e shutdown.sh &&
	test_debug "cat nested.before nested.log" &&
	test $(grep -c "left[01]-[01]:" nested.before) -eq 2 &&
	test -z "$(sdexec_list_units "*:$(cat nested.instance).service")" &&
	! grep "left running for the next sdexec" nested.log &&
	grep "broker state finalize): stopping every unit" nested.log
'

test_expect_success 'sdexec removed for good while jobs run: its units stop with the instance' '
	cat >forgood.sh <<-EOT &&
	flux exec --service sdexec -r 0 --bg --waitable --label=kept0 sleep 300
	flux exec --service sdexec -r 1 --bg --waitable --label=kept1 sleep 300
	flux dmesg | sed -n "s/.*units named <label>:\\(.*\\)\\.service (glob.*/\\1/p" \
		| head -1 >forgood.instance
	inst=\$(cat forgood.instance)
	flux exec -r all flux module remove sdexec
	systemctl --user list-units --plain --no-legend "*:\$inst.service" >forgood.kept
	systemctl --user list-units --plain --no-legend "sdexec-guard-*-\$inst.service" \
		>forgood.guards
	EOT
	flux start --test-size=2 --config-path="$SDEXEC_CONF_DIR" \
		-Slog-filename=forgood.log sh -e forgood.sh &&
	test_debug "cat forgood.kept forgood.guards" &&
	test $(grep -c "^kept[01]-[01]:.* active running" forgood.kept) -eq 2 &&
	test $(wc -l <forgood.guards) -eq 2 &&
	sdexec_wait_until sdexec_no_units_left $(cat forgood.instance) &&
	sdexec_wait_until no_guard $(cat forgood.instance)
'

# job-exec words sdexec's ENOSYS ("sdexec module is unloading") as "not loaded"
test_expect_success 'a bulk-exec job during an sdexec reload ends with ENOSYS' '
	test_when_finished "flux module reload job-exec" &&
	flux module reload job-exec method=bulk-exec &&
	id=$(flux submit -N1 --requires=rank:1 sleep 300) &&
	wait_event $id start &&
	flux exec -r 1 flux module reload $SDEXEC_MODULE &&
	wait_event $id clean &&
	flux job eventlog $id >bulk.eventlog &&
	test_debug "cat bulk.eventlog" &&
	grep "exception type=\"exec\".*sdexec service is not loaded on .* (rank 1)" bulk.eventlog
'
test_expect_success 'no unit of the instance is left at the end' '
	sdexec_check_no_units
'

test_done
