#!/bin/sh
test_description='our sdexec-mapper: lookups pending across a disconnect or an unload, allowed-devices

Two brokers, [exec] sdexec-constrain-resources = true, so rc1 loads our
sdexec-mapper. A mapper that waits for a gate file holds a lookup pending:
sdexec serves others meanwhile, and a client that leaves or an unload ends
the request with nothing started. A device node created under /dev after
start is in the next lookup (as root); a bad allowed-devices is refused.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"
. "$SDEXEC_SRCDIR/t/lib/sharness-mapper.sh"

mapper_config t0044

sdexec_under_flux 2 jobs
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"

test "$(id -u)" = 0 && test_set_prereq ROOT  # mknod under /dev
mapper_test_device
mkdir site  # where the tests write their mappers (mapper-searchpath)

test_expect_success 'a mapper that waits for a gate file before answering' '
	cat >site/gated.py <<-EOF &&
	import os
	import time

	from flux_sdexec.map import HwlocMapper


	class Gated(HwlocMapper):
	    """Says it was asked (file entered), then answers once file gate exists."""

	    def map(self, R, extra_properties=None):
	        with open("$PWD/entered", "w") as f:
	            f.write("asked")
	        deadline = time.monotonic() + $T
	        while not os.path.exists("$PWD/gate") and time.monotonic() < deadline:
	            time.sleep(0.05)
	        os.unlink("$PWD/entered")
	        return super().map(R, extra_properties)
	EOF
	sdexec_set_config mapper "$(printf "[sdexec]\nmapper = \"gated.Gated\"\nmapper-searchpath = \"%s\"" "$PWD/site")" &&
	touch gate &&
	lookup 0 "$(r_local 0 0)" >gated.out &&
	jq -e .AllowedCPUs gated.out &&
	rm gate
'
# start_pending NAME: a constrained exec on rank 0 whose lookup is now pending
start_pending() {
	$sdexec -r 0 --setopt=SDEXEC_NAME=$1.service --setopt=SDEXEC_R_LOCAL="$(r_local 0 0)" \
		true >$1.out 2>$1.err &
	echo $! >$1.pid &&
	sdexec_wait_for_file entered
}
test_expect_success 'sdexec serves others while a lookup is pending' '
	start_pending pending &&
	$sdexec -r 0 echo served >served.out &&
	echo served >served.expected &&
	test_cmp served.expected served.out
'
test_expect_success 'the client disconnects: its request ends, nothing is started' '
	kill -9 $(cat pending.pid) &&
	touch gate &&
	sdexec_wait_until sdexec_dmesg_has "pending.service\|lookup answered after" &&
	sdexec_dmesg_has "lookup answered after its request ended" &&
	! sdexec_dmesg_has "pending.service" &&
	test -z "$(sdexec_list_units pending.service)" &&
	rm gate
'
test_expect_success 'sdexec unloads while a lookup is pending: ENOSYS, nothing started' '
	sdexec_wait_until test ! -e entered &&
	start_pending unloading &&
	flux module remove sdexec &&
	test_must_fail wait $(cat unloading.pid) &&
	test_debug "cat unloading.err" &&
	grep "sdexec module is unloading" unloading.err &&
	touch gate &&
	flux module load $SDEXEC_MODULE &&
	test -z "$(sdexec_list_units unloading.service)" &&
	rm gate
'
test_expect_success ROOT 'a char device created under /dev after start is in the next lookup' '
	sdexec_set_config mapper &&
	lookup 0 "$(r_local 0 0)" >before.out &&
	jq -e ".DeviceAllow == \"/dev/null rw\"" before.out &&
	mknod $TESTDEV c 1 3 &&
	lookup 0 "$(r_local 0 0)" >after.out &&
	jq -e ".DeviceAllow == \"/dev/null rw,$TESTDEV rw\"" after.out &&
	mapper_stats 0 | jq -c .config.allowed_devices >devices.out &&
	echo "[\"/dev/null rw\",\"$TESTDEV rw\"]" >devices.expected &&
	test_cmp devices.expected devices.out
'
test_expect_success 'flux config reload refuses a bad allowed-devices; the old value stays' '
	printf "[sdexec]\nallowed-devices = [\"/etc/passwd\"]\n" >"$SDEXEC_CONF_DIR/zz-bad.toml" &&
	test_must_fail flux config reload 2>reload.err &&
	test_debug "cat reload.err" &&
	grep "sdexec-mapper: sdexec.allowed-devices\[0\]: .*/etc/passwd.* is not a path under /dev/" \
		reload.err &&
	mapper_stats 0 | jq -c .config.allowed_device_patterns >patterns.out &&
	echo "[\"/dev/null\",\"$PATTERN\"]" >patterns.expected &&
	test_cmp patterns.expected patterns.out &&
	rm "$SDEXEC_CONF_DIR/zz-bad.toml" &&
	flux config reload &&
	rm $TESTDEV
'
test_expect_success 'no unit of this instance is left' '
	sdexec_check_no_units
'
test_done
