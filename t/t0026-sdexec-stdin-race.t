#!/bin/sh

test_description='stdin forwarded to a process that already exited is not an error

flux exec forwards stdin (and its EOF) with sdexec.write; after a fast command the
write often arrives once the process is gone. That is logged at debug level only,
so it never shows among the broker errors (make demo).'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_under_flux 2

cat >late-write.py <<-EOF
import flux
from flux.constants import FLUX_RPC_NORESPONSE

io = {"stream": "stdin", "rank": 0, "eof": True}
flux.Flux().rpc("sdexec.write", {"matchtag": 424242, "io": io}, 0, FLUX_RPC_NORESPONSE)
EOF

test_expect_success 'a write for a process that is gone is logged at debug level' '
	flux python late-write.py &&
	sdexec_wait_until sdexec_dmesg_has \
		"sdexec.debug\[0\]: sdexec.write: subprocess no longer exists" &&
	! flux dmesg | grep "sdexec.err.*sdexec.write"
'
test_expect_success 'fast commands with stdin forwarded log no sdexec error' '
	for i in 1 2 3 4 5 6 7 8 9 10; do
		echo input | $sdexec -r all hostname >/dev/null || return 1
	done &&
	flux dmesg >race.dmesg &&
	flux exec -r 1 flux dmesg >>race.dmesg &&
	! grep "sdexec.err" race.dmesg
'
# make demo's first commands, with the broker errors on stderr as make demo shows them
test_expect_success 'a demo instance prints no sdexec.err line' '
	flux start --test-size=2 --config-path="$SDEXEC_CONF_DIR" sh -c "
		flux exec --service sdexec -r all hostname &&
		flux exec --service sdexec -r 0 sh -c \"echo out; exit 3\"
	" >demo.out 2>demo.err;
	test_debug "cat demo.err" &&
	grep -c . demo.out &&
	! grep "sdexec.err" demo.err
'
test_expect_success 'no unit of this instance is left' '
	sdexec_check_no_units
'
test_done
