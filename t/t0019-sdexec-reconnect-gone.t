#!/bin/sh

test_description='sdexec catches up on a unit systemd stopped and forgot while it was away

Runs under flux start --test-size=1. sdexec stops a unit (a foreground exec that
finished, a bgexec record released after its wait) whose stop takes a while: a
process left in its cgroup takes 3 s to honour SIGTERM. While the unit
deactivates, the module process is SIGSTOPped and the systemd user manager
reexecuted (daemon-reexec closes the private socket sdexec talks over); the unit
then ends and systemd forgets it with nobody to tell. Once the module runs again
it reconnects, and its catch-up reads "not-found": the foreground exec must end
(before issue 22 it hung for good) and the label of the record must be free
again. Processes are found by pid, never by name: the module is the child of
broker.pid running this checkout'"'"'s module file; SIGCONT always follows.

Disturbs the user manager for everyone: run under flock /tmp/sdexec-systemd.lock.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_under_flux 1

# module_pid: the pid of our module's process, a child of this broker.
module_pid() {
	_broker=$(flux getattr broker.pid) || return 1
	for _kid in $(cat /proc/"$_broker"/task/*/children 2>/dev/null); do
		_last=$(tr "\0" "\n" </proc/"$_kid"/cmdline | tail -n 1)
		test "$_last" = "$SDEXEC_MODULE" && echo "$_kid" && return 0
	done
	return 1
}
# deactivating: the one unit of this instance that is deactivating (empty if none).
deactivating() {
	systemctl --user list-units --all --plain --no-legend "*:$SDEXEC_INSTANCE.service" |
		awk '$3 == "deactivating" {print $1}'
}
unit_deactivating() {
	UNIT=$(deactivating) && test -n "$UNIT"
}
# label_reusable LABEL: a new waitable exec with LABEL is taken (its record is not kept).
label_reusable() {
	$sdexec -r 0 --bg --waitable --label="$1" true 2>>reuse.err
}
unit_forgotten() {
	test "$(systemctl --user show -p LoadState --value "$1")" = not-found
}
# unit_ended UNIT: forgotten, or inactive and still loaded because sdexec holds a
# reference on it (a waitable unit: the holds keep it with its status, doc/guide/recovery.md).
unit_ended() {
	unit_forgotten "$1" ||
	test "$(systemctl --user show -p ActiveState --value "$1")" = inactive
}
# away_while_unit_goes [PREDICATE]: once a unit deactivates, SIGSTOP the module, reexec
# the manager, wait until PREDICATE UNIT (default unit_forgotten), SIGCONT the module.
away_while_unit_goes() {
	sdexec_wait_until unit_deactivating &&
	MODULE_PID=$(module_pid) && test -n "$MODULE_PID" &&
	kill -STOP "$MODULE_PID" &&
	test_when_finished "kill -CONT $MODULE_PID" &&
	systemctl --user daemon-reexec &&
	{ sdexec_wait_until ${1:-unit_forgotten} "$UNIT" ||
		{ systemctl --user status "$UNIT" >&2; false; }; } &&
	kill -CONT "$MODULE_PID"
}

# the main process exits 0 at once; a child stays in the unit's cgroup and ends 3 s
# after SIGTERM (systemd sends it to the whole cgroup on StopUnit)
cat >slowstop.py <<'EOF'
import os
import signal
import time

if os.fork() == 0:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    signal.signal(signal.SIGTERM, lambda *args: (time.sleep(3), os._exit(0)))
    while True:
        signal.pause()
EOF

test_expect_success 'a foreground exec whose unit systemd forgot while sdexec was away ends' '
	{
		timeout -s KILL 40 $sdexec -r 0 /usr/bin/python3 "$PWD/slowstop.py" </dev/null >fg.out 2>fg.err
		echo $? >fg.rc
	} &
	FG=$! &&
	test_when_finished "wait $FG 2>/dev/null || :" &&
	away_while_unit_goes &&
	wait $FG &&
	test_debug "cat fg.err" &&
	test "$(cat fg.rc)" = 0 &&
	test_must_be_empty fg.out &&
	sdexec_wait_until sdexec_dmesg_has "reconnected to systemd"
'
test_expect_success 'a released bgexec record whose unit systemd forgot frees its label' '
	$sdexec -r 0 --bg --waitable --label=rel /usr/bin/python3 "$PWD/slowstop.py" &&
	sdexec_wait_until sdexec_unit_is "rel:$SDEXEC_INSTANCE.service" active &&
	flux sproc wait -s sdexec -r 0 rel &&
	away_while_unit_goes unit_ended &&
	test "$UNIT" = "rel:$SDEXEC_INSTANCE.service" &&
	{ sdexec_wait_until label_reusable rel || { tail -n 1 reuse.err; false; }; } &&
	flux sproc wait -s sdexec -r 0 rel
'
test_expect_success 'no unit of the instance is left' '
	sdexec_check_no_units
'
test_done
