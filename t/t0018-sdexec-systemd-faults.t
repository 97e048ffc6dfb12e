#!/bin/sh

test_description='sdexec when systemd reexecutes or stalls

Runs under flux start --test-size=2 with [exec] service = "sdexec", method =
"bgexec". Faults go to the systemd user manager found by pid (asked of the
session bus), never by name: daemon-reexec (which closes the private socket
sdexec talks over) and SIGSTOP, always undone by SIGCONT from a watchdog
process whose exit trap sends it. A start whose reply is lost to a reexec,
or that outlives its call deadline, completes; an exec fails only when
[sdexec] systemd-timeout runs out, saying what systemd last did, and its
unit is stopped once systemd resumes; a burst of jobs through repeated
daemon-reexecs all end with their own exit codes. No unit is left.

These faults disturb every user of the systemd user manager: prove runs the
flux tier one script at a time, so nothing else of make check runs meanwhile.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_bgexec_jobs_under_flux 2

# systemd_pid: the user manager's pid, as the session bus knows it.
systemd_pid() {
	busctl --user call org.freedesktop.DBus /org/freedesktop/DBus \
		org.freedesktop.DBus GetConnectionUnixProcessID s org.freedesktop.systemd1 |
		awk '$1 == "u" {print $2}'
}
# freeze SECONDS: SIGSTOP the user manager; a watchdog SIGCONTs it from its exit trap
# after at most SECONDS, or at once when thaw kills it.
freeze() {
	SD_PID=$(systemd_pid) && test -n "$SD_PID" || return 1
	sh -c 'sleep "$1" & s=$!
		trap "kill $s 2>/dev/null; kill -CONT $0; exit" TERM INT HUP
		trap "kill -CONT $0" EXIT
		wait $s' "$SD_PID" "$1" &
	WATCHDOG=$!
	kill -STOP "$SD_PID"
}
thaw() {
	kill "$WATCHDOG" 2>/dev/null
	wait "$WATCHDOG"
	kill -CONT "$SD_PID" &&
	timeout 30 systemctl --user show -p Version >/dev/null
}
# logged PATTERN: the number of lines of rank 0's broker log matching PATTERN.
logged() {
	flux dmesg | grep -c -- "$1" || true
}
timeout_config() {
	sdexec_set_config timeout "$(printf "[sdexec]\nsystemd-timeout = \"%s\"" "$1")"
}

test_job_setup bgexec

test_expect_success 'systemd-timeout: the default is 300s; a duration sets it' '
	flux module stats sdexec | jq -e ".\"systemd-timeout\" == 300" &&
	timeout_config 2m &&
	flux module stats sdexec | jq -e ".\"systemd-timeout\" == 120"
'
test_expect_success 'systemd-timeout: a bad value is refused by config reload, the old one kept' '
	test_must_fail timeout_config soon 2>reload.err &&
	test_debug "cat reload.err" &&
	grep "sdexec.systemd-timeout must be a duration above zero like \"5m\" or \"300s\": got .soon." \
		reload.err &&
	flux module stats sdexec | jq -e ".\"systemd-timeout\" == 120" &&
	test_must_fail timeout_config 0s &&
	flux module stats sdexec | jq -e ".\"systemd-timeout\" == 120" &&
	sdexec_set_config timeout
'
# A reexec closes the connection; a start sent just before is then often lost with
# it (systemd never read it: sent again) or answered into the closed socket (the unit
# is there: carried on). Ten rounds make at least one such start very likely.
# No ";" in the command: systemd 252 writes it as "\;" into the transient unit file and,
# re-reading the file after a reexec, runs a still-queued start with "\;" (doc/guide/differences.md).
test_expect_success 'starts whose reply is lost to a daemon-reexec complete (10 rounds)' '
	before=$(logged "StartTransientUnit sent again\|unit was loaded, no reply") &&
	for i in 1 2 3 4 5 6 7 8 9 10; do
		{ $sdexec -r 0 sh -c "echo out-$i && exit $i" >r$i.out 2>r$i.err; echo $? >r$i.rc; } &
		systemctl --user daemon-reexec &
		wait || return 1
	done &&
	for i in 1 2 3 4 5 6 7 8 9 10; do
		test_debug "cat r$i.err" &&
		test "$(cat r$i.rc)" = $i && echo out-$i >r$i.expected &&
		test_cmp r$i.expected r$i.out || return 1
	done &&
	flux dmesg | grep -E "sent again|looking the unit up|reconnected" >rounds.log;
	test_debug "cat rounds.log" &&
	test "$(logged "StartTransientUnit sent again\|unit was loaded, no reply")" -gt $before &&
	sdexec_check_no_units
'
# call_deadline_passed N: more than N starts outlived their call deadline (5s at 20s).
call_deadline_passed() {
	test "$(logged "no reply to StartTransientUnit within 5s")" -gt "$1"
}
test_expect_success 'a start sent while systemd is stopped past the call deadline completes' '
	timeout_config 20s &&
	before=$(logged "no reply to StartTransientUnit within 5s") &&
	freeze 60 || return 1
	test_when_finished thaw &&
	{ $sdexec -r 0 sh -c "echo out-b; exit 5" >b.out 2>b.err; echo $? >b.rc; } &
	sdexec_wait_until call_deadline_passed $before &&
	thaw &&
	sdexec_wait_for_file b.rc &&
	test_debug "cat b.err" &&
	test "$(cat b.rc)" = 5 &&
	echo out-b >b.expected &&
	test_cmp b.expected b.out &&
	sdexec_check_no_units
'
# sweeping_done: the sweeper holds nothing (the unit and its accounting slice, each swept in
# its own round once systemd answers again)
sweeping_done() {
	flux module stats sdexec | jq -e ".sweeping == []" >/dev/null
}
test_expect_success 'with systemd-timeout below the stall the exec fails, saying why; no unit left' '
	timeout_config 2s &&
	freeze 60 || return 1
	test_when_finished thaw &&
	test_when_finished "sdexec_set_config timeout" &&
	test_expect_code 1 $sdexec -r 0 sh -c "echo never" >c.out 2>c.err &&
	test_debug "cat c.err" &&
	grep "systemd-timeout (2s) ran out: no reply to StartTransientUnit" c.err &&
	flux module stats sdexec | jq -e ".sweeping | length > 0" &&
	thaw &&
	sdexec_wait_until sdexec_dmesg_has "gone after" &&
	sdexec_wait_until sweeping_done &&
	test_must_be_empty c.out &&
	sdexec_check_no_units
'
test_expect_success 'a burst of bgexec jobs through repeated daemon-reexecs: every job its own code' '
	for i in $(seq 1 24); do
		n=$((i % 2 + 1)) &&
		flux submit -N$n -n$n -t 2m sh -c "sleep 0.$((i % 10)); exit $((i % 4))" \
			>>burst.ids || return 1
	done &&
	for i in $(seq 1 8); do
		systemctl --user daemon-reexec && sleep 0.5 || return 1
	done &&
	i=0 &&
	for id in $(cat burst.ids); do
		i=$((i + 1)) &&
		wait_event $id clean &&
		flux job eventlog $id >$id.eventlog &&
		{ ! grep exception $id.eventlog || { cat $id.eventlog; return 1; }; } &&
		test_expect_code $((i % 4)) flux job status $id || return 1
	done &&
	sdexec_check_no_units
'
test_expect_success 'no unit of the instance is left, none failed' '
	sdexec_check_no_units &&
	test -z "$(systemctl --user list-units --failed --plain --no-legend "*:$SDEXEC_INSTANCE.service")"
'
test_done
