#!/bin/sh

test_description='a unit that ends while the session bus is down keeps its exit code

Under flux start --test-size=2 both brokers share one systemd user manager, and
sdexec takes the signals of its units over the session bus. The IMP of a multi-user
job sends STOPPING=1 when its job shell exits, so its unit ends inactive, and
systemd unloads an inactive unit, exit status included, as soon as nothing
refers to it; a killed bus drops the references sdexec takes over it
(Unit.Ref). Here a stand-in of the IMP (Type=notify, READY=1, STOPPING=1,
exit 0) ends while the bus is down and sdexec, stopped by its pid, has not yet
read that it ended. Once sdexec runs again, the foreground exec and the
waitable one must end with exit code 0 (before issue 24 systemd had forgotten
the unit, and both ended with "unknown to systemd after the reconnect"), and
nothing of theirs may stay loaded. The bus daemon is found by pid (asked of
the bus), killed, and activated again through dbus.socket; SIGCONT always
follows the SIGSTOP.

Disturbs the user manager for everyone: run under flock /tmp/sdexec-systemd.lock.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_under_flux 2

# stand_in LABEL [OPTION...]: run the stand-in gated by file LABEL on rank 1, labelled LABEL
stand_in() {
	_label=$1 && shift &&
	$sdexec -r 1 --label=$_label "$@" --setopt=SDEXEC_PROP_Type=notify \
		/usr/bin/python3 "$SDEXEC_SRCDIR/t/fixtures/stopping.py" "$(pwd)/$_label" 0
}
unit_of() {
	echo "$1-1:$SDEXEC_INSTANCE.service"
}
sdexec_pid() {
	flux exec -r 1 sh -c 'pgrep -P $(flux getattr broker.pid) -f "sdexec\.py\$"'
}
bus_pid() {
	busctl --user call org.freedesktop.DBus /org/freedesktop/DBus \
		org.freedesktop.DBus GetConnectionUnixProcessID s org.freedesktop.DBus |
		awk '$1 == "u" {print $2}'
}
bus_answers() {
	busctl --user status >/dev/null 2>&1
}
pid_gone() {
	! kill -0 "$1" 2>/dev/null
}
# ended UNIT: systemd has seen UNIT end: unloaded, or inactive (systemctl asks over the
# private socket)
ended() {
	test "$(systemctl --user show -p LoadState --value "$1")" = not-found ||
	test "$(systemctl --user show -p ActiveState --value "$1")" = inactive
}
# ends_while_bus_down LABEL: with rank 1's sdexec stopped and the bus killed, let the
# stand-in LABEL end and wait until systemd has seen it end; then resume sdexec.
ends_while_bus_down() {
	sdexec_wait_until sdexec_unit_is $(unit_of $1) active &&
	MODULE_PID=$(sdexec_pid) && test -n "$MODULE_PID" &&
	BUS_PID=$(bus_pid) && test -n "$BUS_PID" &&
	kill -STOP $MODULE_PID &&
	test_when_finished "kill -CONT $MODULE_PID 2>/dev/null || :" &&
	kill -KILL $BUS_PID &&
	sdexec_wait_until pid_gone $BUS_PID &&
	systemctl --user reset-failed dbus.service &&
	touch $1 &&
	sdexec_wait_until ended $(unit_of $1) &&
	kill -CONT $MODULE_PID
}

test_expect_success 'a foreground exec whose unit ended while the bus was down: exit 0' '
	{ stand_in fg >fg.out 2>fg.err; echo $? >fg.rc; } &
	ends_while_bus_down fg &&
	sdexec_wait_for_file fg.rc &&
	test_debug "cat fg.err; flux exec -r 1 flux dmesg | grep -i \"bus\|reconnect\|unknown\"" &&
	test "$(cat fg.rc)" = 0 &&
	test_must_be_empty fg.err
'
test_expect_success 'a waitable exec whose unit ended while the bus was down: wait says 0' '
	stand_in bg --bg --waitable >bg.pid &&
	ends_while_bus_down bg &&
	{ $sproc_wait -r 1 bg 2>bg.err; echo $? >bg.rc; } &&
	test_debug "cat bg.err" &&
	test "$(cat bg.rc)" = 0 &&
	test_must_be_empty bg.err
'
# set_unload POLICY: [systemd] sdexec-unload in this instance's sdexec.toml, reloaded
set_unload() {
	sed -i -e "/^#*sdexec-unload *=/d" -e "s/^sdexec-debug *=.*/&\nsdexec-unload = $1/" \
		"$SDEXEC_CONF_DIR/sdexec.toml" &&
	flux config reload &&
	flux config get | jq -S . >config.want &&
	sdexec_wait_until sdexec_rank1_config_is config.want
}
# of_label LABEL: rank 1's unit of LABEL, its keeper and its accounting slice, if loaded
of_label() {
	systemctl --user list-units --all --plain --no-legend "$1-1:*" "$1?x2d1:*" \
		"app-sdexec-$1?x2d1:*"
}
none_of() {
	test -z "$(of_label "$1")"
}
reload() {
	flux exec -r 1 flux module remove sdexec &&
	flux exec -r 1 flux module load $SDEXEC_MODULE
}
test_expect_success 'an ended unit handed over by an unload is adopted; its wait says 0' '
	stand_in ho --bg --waitable >ho.pid &&
	sdexec_wait_until sdexec_unit_is $(unit_of ho) active &&
	touch ho &&
	sdexec_wait_until ended $(unit_of ho) &&
	reload &&
	test_expect_code 0 $sproc_wait -r 1 ho &&
	sdexec_wait_until none_of ho
'
test_expect_success 'an ended unit nobody waited for: a stop-all unload leaves none of it' '
	test_when_finished "set_unload \\\"keep-waitable\\\"" &&
	set_unload "\"stop-all\"" &&
	stand_in left --bg --waitable >left.pid &&
	sdexec_wait_until sdexec_unit_is $(unit_of left) active &&
	touch left &&
	sdexec_wait_until ended $(unit_of left) &&
	! none_of left &&
	reload &&
	of_label left >left.units &&
	test_debug "cat left.units" &&
	test_must_be_empty left.units
'
test_expect_success 'the bus is back and no unit of this instance is left' '
	sdexec_wait_until bus_answers &&
	sdexec_check_no_units
'
test_done
