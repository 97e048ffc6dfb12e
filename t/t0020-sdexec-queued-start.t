#!/bin/sh

test_description='sdexec and a start job systemd queued

Runs under flux start --test-size=2 with our conf.d/sdexec.toml. A unit whose
start job waits (its slice is ordered after a unit whose ExecStartPre sleeps)
is loaded and inactive, with no process yet: an unload, or a client that
leaves, must not let that start run later unwatched (issue 22 finding 5).'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_under_flux 2

# job_queued UNIT: systemd has a job queued for UNIT. unloaded UNIT: systemd forgot UNIT.
job_queued() {
	test -n "$(systemctl --user show -p Job --value "$1")"
}
unloaded() {
	test "$(systemctl --user show -p LoadState --value "$1")" = not-found
}
# block NAME: NAME.slice (no "-" in NAME: a slice named a-b.slice would sit in a.slice, left
# active after it), whose start waits behind NAME-pre.service (its ExecStartPre
# sleeps) until that is stopped (unblock NAME). cleanup NAME UNIT: both gone, and UNIT.
block() {
	systemd-run --user --no-block --unit=$1-pre.service \
		-p ExecStartPre="/bin/sleep 120" /bin/true &&
	busctl --user call org.freedesktop.systemd1 /org/freedesktop/systemd1 \
		org.freedesktop.systemd1.Manager StartTransientUnit "ssa(sv)a(sa(sv))" \
		$1.slice replace 1 After as 1 $1-pre.service 0
}
unblock() {
	systemctl --user stop $1-pre.service &&
	sdexec_wait_until sdexec_unit_is $1.slice active
}
cleanup() {
	systemctl --user stop $1-pre.service $1.slice $2
	systemctl --user reset-failed $1-pre.service $2 2>/dev/null
	true
}

# Left queued, the start runs after sdexec has gone and, with RemainAfterExit,
# the unit stays loaded for good: unload cancels it.
test_expect_success 'module remove cancels a start job still queued' '
	u=queued-unload:$SDEXEC_INSTANCE.service &&
	blk=blk_$SDEXEC_INSTANCE &&
	test_when_finished "cleanup $blk $u; flux exec -r 1 flux module load $SDEXEC_MODULE" &&
	block $blk &&
	{ $sdexec -r 1 --setopt=SDEXEC_NAME=$u --setopt=SDEXEC_PROP_Slice=$blk.slice \
		true 2>queued.err & } &&
	qpid=$! &&
	sdexec_wait_until job_queued $u &&
	flux exec -r 1 flux module remove sdexec &&
	test_must_fail wait $qpid &&
	test_debug "cat queued.err" &&
	grep unloading queued.err &&
	! job_queued $u &&
	unloaded $u &&
	unblock $blk &&
	unloaded $u
'
# A foreground client that leaves is SIGKILLed; with its start still queued there
# is nothing to kill yet: the process is killed once it runs, not left to run on.
test_expect_success 'a client gone while its start is queued: killed once it runs' '
	u=queued-gone:$SDEXEC_INSTANCE.service &&
	blk=blk2_$SDEXEC_INSTANCE &&
	test_when_finished "cleanup $blk $u" &&
	block $blk &&
	{ $sdexec -r 1 --setopt=SDEXEC_NAME=$u --setopt=SDEXEC_PROP_Slice=$blk.slice \
		sleep 300 & } &&
	qpid=$! &&
	sdexec_wait_until job_queued $u &&
	kill -9 $qpid &&
	unblock $blk &&
	sdexec_wait_until unloaded $u
'
test_expect_success 'sdexec runs on rank 1 as before' '
	$sdexec -r 1 true
'
test_expect_success 'no unit of this instance is left' '
	sdexec_check_no_units
'
test_done
