#!/bin/sh

test_description='flux exec --service sdexec: stopping, signals, stats, reloads, access

Runs under flux start --test-size=2 with our conf.d/sdexec.toml, so rc1
loads our Python sdexec. Covers the stop timer, signals and disconnects,
stats, config reload, module reload, access control and requests no D-Bus
string can carry.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_under_flux 2

command -v jq >/dev/null 2>&1 && test_set_prereq JQ

. "$SDEXEC_SRCDIR/t/lib/sharness-exec.sh"

# A command that keeps running and says "ready" on stderr. Output is sent
# only after "started", so once the client has written it (stderr is not
# buffered) the client knows the pid and forwards signals.
ready_then_sleep='echo ready >&2; exec sleep 120'

# Stop timer. The unit stops by itself after RuntimeMaxUSec (1s), systemd
# sends SIGTERM and, with TimeoutStopUSec=infinity, never escalates; so a
# process ignoring SIGTERM keeps the unit deactivating until sdexec's stop
# timer (armed on deactivating) acts: SIGTERM, then SIGKILL (or
# SDEXEC_STOP_TIMER_SIGNAL), then EDEADLK.
stop_opts="--setopt=SDEXEC_PROP_RuntimeMaxUSec=1000000 \
	--setopt=SDEXEC_PROP_TimeoutStopUSec=infinity"

test_expect_success 'without a stop timer a TERM-ignoring unit stays deactivating' '
	name=$(unit nostoptimer) &&
	{ $sdexec -r 0 --setopt=SDEXEC_NAME=$name $stop_opts \
		sh -c "trap \"\" TERM; $ready_then_sleep" 2>nostop.out & } &&
	pid=$! &&
	sdexec_wait_for_file nostop.out &&
	sdexec_wait_until sdexec_unit_is $name deactivating &&
	systemctl --user kill --signal=KILL $name &&
	test_expect_code 137 wait $pid
'
test_expect_success 'stop timer sends SIGTERM, then SIGKILL' '
	name=$(unit stoptimer) &&
	test_expect_code 137 timeout 60 \
		$sdexec -r 1 --setopt=SDEXEC_NAME=$name $stop_opts \
		--setopt=SDEXEC_PROP_KillMode=process \
		--setopt=SDEXEC_STOP_TIMER_SEC=1 \
		sh -c "trap \"echo TERM >>terms\" TERM; while :; do sleep 0.1; done" &&
	printf "TERM\nTERM\n" >terms.expected &&
	test_cmp terms.expected terms
'
test_expect_success 'SDEXEC_STOP_TIMER_SIGNAL replaces SIGKILL' '
	test_expect_code 138 timeout 60 \
		$sdexec -r 0 $stop_opts \
		--setopt=SDEXEC_STOP_TIMER_SEC=1 \
		--setopt=SDEXEC_STOP_TIMER_SIGNAL=10 \
		sh -c "trap \"\" TERM; exec sleep 120"
'
test_expect_success 'stop timer gives up with EDEADLK when the unit will not stop' '
	name=$(unit deadlock) &&
	test_when_finished "systemctl --user kill --signal=KILL $name" &&
	test_must_fail timeout 60 $sdexec -r 0 --setopt=SDEXEC_NAME=$name \
		--setopt=SDEXEC_PROP_TimeoutStopUSec=infinity \
		--setopt=SDEXEC_STOP_TIMER_SEC=1 \
		sh -c "trap \"\" TERM; sleep 120 >/dev/null 2>&1 & exit 0" \
		2>deadlock.err &&
	test_debug "cat deadlock.err" &&
	grep "SIGKILL timeout, unit may still be active" deadlock.err &&
	test "$(sdexec_unit_state $name)" = deactivating
'
test_expect_success 'the abandoned unit goes away once its process is killed' '
	sdexec_wait_unit_gone $(unit deadlock)
'

test_expect_success 'SIGTERM to flux exec is forwarded to the unit' '
	{ $sdexec -r 1 sh -c "$ready_then_sleep" 2>sigterm.out & } &&
	pid=$! &&
	sdexec_wait_for_file sigterm.out &&
	kill -TERM $pid &&
	test_expect_code 143 wait $pid
'
test_expect_success 'a disconnected client has its unit stopped' '
	name=$(unit disconnect) &&
	{ $sdexec -r 1 --setopt=SDEXEC_NAME=$name sh -c "$ready_then_sleep" \
		2>disconnect.out & } &&
	pid=$! &&
	sdexec_wait_for_file disconnect.out &&
	test "$(sdexec_unit_state $name)" = active &&
	kill -9 $pid &&
	sdexec_wait_unit_gone $name
'
test_expect_success JQ 'module stats list a running unit' '
	name=$(unit stats) &&
	{ $sdexec -r 0 --setopt=SDEXEC_NAME=$name sh -c "$ready_then_sleep" \
		2>stats.out & } &&
	pid=$! &&
	sdexec_wait_for_file stats.out &&
	flux module stats sdexec >stats.json &&
	test_debug "cat stats.json" &&
	jq -e --arg u "$name" ".procs[\$u].state == \"active.running\"" stats.json &&
	kill -TERM $pid &&
	test_expect_code 143 wait $pid &&
	flux module stats sdexec >stats-after.json &&
	jq -e --arg u "$name" ".procs[\$u] == null" stats-after.json
'
# set_sdexec_debug VALUE: edit sdexec-debug in the instance's config file.
set_sdexec_debug() {
	sed -i "s/^sdexec-debug *=.*/sdexec-debug = $1/" "$SDEXEC_CONF_DIR/sdexec.toml" &&
	grep -q "^sdexec-debug = $1\$" "$SDEXEC_CONF_DIR/sdexec.toml"
}
restore_config() {
	set_sdexec_debug false && flux config reload
}

test_expect_success 'config reload rejects a non-boolean sdexec-debug' '
	test_when_finished restore_config &&
	set_sdexec_debug 42 &&
	test_must_fail flux config reload 2>reload.err &&
	test_debug "cat reload.err" &&
	grep "Expected true or false" reload.err &&
	$sdexec -r 0 true
'
test_expect_success 'sdexec works after the failed reload was reverted' '
	$sdexec true
'
test_expect_success 'config reload can turn on sdexec-debug' '
	name=$(unit debug) &&
	test_when_finished restore_config &&
	set_sdexec_debug true &&
	flux config reload &&
	$sdexec -r 0 --setopt=SDEXEC_NAME=$name true &&
	flux dmesg | grep "sdexec.debug\[0\]: start $name"
'
test_expect_success 'flux module reload of our module path keeps it working' '
	flux module reload $SDEXEC_MODULE &&
	flux module list -l | grep "^sdexec .* $SDEXEC_MODULE\$" &&
	test $(flux dmesg | grep -c "sdexec.info\[0\]: units named") -ge 2 &&
	$sdexec -r 0 true
'
test_expect_success 'flux module remove and load work on rank 1' '
	flux exec -r 1 flux module remove sdexec &&
	test_must_fail $sdexec -r 1 true &&
	flux exec -r 1 flux module load $SDEXEC_MODULE &&
	flux exec -r 1 flux module list -l | grep "^sdexec .* $SDEXEC_MODULE\$" &&
	$sdexec -r 1 true
'
test_expect_success 'a guest gets EPERM from every sdexec request' '
	(
		export FLUX_HANDLE_USERID=$(($(id -u) + 1)) &&
		export FLUX_HANDLE_ROLEMASK=0x2 &&
		test_expect_code 126 $sdexec -r 0 true 2>guest-exec.err &&
		test_must_fail $sproc_ps -r 0 2>guest-ps.err &&
		test_must_fail $sproc_kill -r 0 15 1 2>guest-kill.err &&
		test_must_fail flux module stats sdexec 2>guest-stats.err
	) &&
	test_debug "cat guest-*.err" &&
	grep "owner credentials" guest-exec.err &&
	grep "Errno 1\]" guest-ps.err &&
	grep "Errno 1\]" guest-kill.err &&
	grep "owner credentials" guest-stats.err
'
test_expect_success 'the owner is still allowed after the guest attempts' '
	$sdexec -r 0 true
'
test_expect_success 'a request routed from rank 1 to rank 0 is refused' '
	test_expect_code 126 flux exec -r 1 $sdexec -r 0 true 2>remote.err &&
	grep "Remote sdexec requests are not allowed on rank 0" remote.err
'
# A Python client can send a lone surrogate (json.dumps escapes it as \ud800, which
# json.loads takes back), which no D-Bus string can carry: refused with EINVAL, once
# (issue 22 finding 6; that the budget never answers it a second time is for
# t/unit/test_calls.py to show).
cat >surrogate.py <<'EOF'
import json
import sys

import flux
from flux.constants import FLUX_RPC_STREAMING

where = sys.argv[1]
cmd = {"cmdline": ["/bin/echo", "x"], "env": {}, "opts": {}, "channels": []}
if where == "argv":
    cmd["cmdline"][1] = "\ud800"
elif where == "env":
    cmd["env"]["X"] = "\ud800"
else:
    cmd["opts"]["SDEXEC_PROP_Description"] = "\ud800"
payload = json.dumps({"cmd": cmd, "flags": 0})  # ASCII: flux's own encoding would refuse it
f = flux.Flux().rpc("sdexec.exec", payload, 0, FLUX_RPC_STREAMING)
try:
    sys.exit(f"answered: {f.get()}")
except OSError as exc:
    print(exc.errno, exc.strerror)
EOF
for where in argv env property; do
	test_expect_success "a lone surrogate in the $where gets one EINVAL" "
		flux python surrogate.py $where >surrogate.out &&
		test_debug 'cat surrogate.out' &&
		grep '^22 StartTransientUnit: .* surrogates not allowed' surrogate.out
	"
done
test_expect_success 'no unit of this instance is left' '
	sdexec_check_no_units
'
test_done
