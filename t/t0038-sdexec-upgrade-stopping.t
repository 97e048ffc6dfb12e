#!/bin/sh

test_description='A waitable unit that ends inactive (STOPPING=1, as the IMP) across an upgrade

The IMP of a multi-user job sends STOPPING=1 when the job is over: its unit ends
inactive, not "exited", and systemd unloads an inactive unit at once, exit status
included, unless something refers to it. Here a stand-in (Type=notify, READY=1,
STOPPING=1, then exit 0; a failed unit would stay loaded) ends before the old sdexec hands it over, or while the old
sdexec, stopped by its pid, has not yet read that it ended when its unload begins:
the next sdexec must still answer a wait with its status, and nothing may stay loaded.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_under_flux 2

# start LABEL: a waitable stand-in of the IMP on rank 1, gated by file LABEL; its pid to LABEL.pid
start() {
	$sdexec -r 1 --bg --waitable --label=$1 \
		--setopt=SDEXEC_PROP_Type=notify \
		/usr/bin/python3 "$SDEXEC_SRCDIR/t/fixtures/stopping.py" "$(pwd)/$1" 0 >$1.pid
}
pid_gone() {
	! kill -0 $(cut -d" " -f2 $1.pid) 2>/dev/null
}
unit_of() {
	echo "$1-1:$SDEXEC_INSTANCE.service"
}
sdexec_pid() {
	flux exec -r 1 sh -c 'pgrep -P $(flux getattr broker.pid) -f "sdexec\.py\$"'
}
# unloaded UNIT: systemd no longer has UNIT loaded (not merely inactive)
unloaded() {
	test "$(systemctl --user show -p LoadState --value "$1")" = not-found
}
no_guard() {
	test -z "$(sdexec_list_units "sdexec-guard-*-$SDEXEC_INSTANCE.service")"
}
reload() {
	flux exec -r 1 flux module remove sdexec &&
	flux exec -r 1 flux module load $SDEXEC_MODULE
}

test_expect_success 'a unit ended inactive, not yet waited: the next sdexec answers the wait' '
	start ended &&
	sdexec_wait_until sdexec_unit_is $(unit_of ended) active &&
	touch ended &&
	sdexec_wait_until pid_gone ended &&
	reload &&
	test_debug "flux exec -r 1 flux dmesg | grep -i \"ref\|hold\|adopt\|left running\|ended\"" &&
	test_expect_code 0 $sproc_wait -r 1 ended &&
	sdexec_wait_until unloaded $(unit_of ended) &&
	sdexec_wait_until no_guard
'
test_expect_success 'a unit ending while the old sdexec has not read it at its unload' '
	start window &&
	sdexec_wait_until sdexec_unit_is $(unit_of window) active &&
	pid=$(sdexec_pid) &&
	test -n "$pid" &&
	test_when_finished "kill -CONT $pid 2>/dev/null || :" &&
	kill -STOP $pid &&
	touch window &&
	sdexec_wait_until pid_gone window &&
	{ flux exec -r 1 flux module remove sdexec & } &&
	rmpid=$! &&
	kill -CONT $pid &&
	wait $rmpid &&
	flux exec -r 1 flux module load $SDEXEC_MODULE &&
	test_expect_code 0 $sproc_wait -r 1 window &&
	sdexec_wait_until unloaded $(unit_of window) &&
	sdexec_wait_until no_guard
'
test_expect_success 'a unit reaped while sdexec runs is not kept loaded' '
	start reaped &&
	sdexec_wait_until sdexec_unit_is $(unit_of reaped) active &&
	touch reaped &&
	test_expect_code 0 $sproc_wait -r 1 reaped &&
	sdexec_wait_until unloaded $(unit_of reaped) &&
	sdexec_check_no_units
'
test_done
