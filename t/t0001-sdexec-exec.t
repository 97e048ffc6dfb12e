#!/bin/sh

test_description='flux exec --service sdexec runs commands as systemd units

Runs under flux start --test-size=2 with our conf.d/sdexec.toml, so rc1
loads our Python sdexec. Covers exit codes, byte-exact stdio, the unit
environment and properties, and option errors (stop timer, signals,
disconnects, stats, reloads and access control: t0042).'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_under_flux 2

. "$SDEXEC_SRCDIR/t/lib/sharness-exec.sh"

test_expect_success 'rc1 loaded our sdexec module on every rank' '
	flux module list -l >modules.0 &&
	flux exec -r 1 flux module list -l >modules.1 &&
	grep "^sdexec .* $SDEXEC_MODULE\$" modules.0 &&
	grep "^sdexec .* $SDEXEC_MODULE\$" modules.1
'
test_expect_success 'our module logged its unit naming when it loaded' '
	flux dmesg >dmesg.0 &&
	grep "sdexec.info\[0\]: units named <label>:$SDEXEC_INSTANCE.service" dmesg.0 &&
	flux exec -r 1 flux dmesg >dmesg.1 &&
	grep "sdexec.info\[1\]: units named <label>:$SDEXEC_INSTANCE.service" dmesg.1
'
test_expect_success 'true succeeds on all ranks' '
	$sdexec true
'
test_expect_success 'false fails with exit code 1' '
	test_expect_code 1 $sdexec -r 0 false &&
	test_expect_code 1 $sdexec -r 1 false
'
test_expect_success 'exit codes 3 and 255 pass through' '
	test_expect_code 3 $sdexec -r 0 sh -c "exit 3" &&
	test_expect_code 255 $sdexec -r 1 sh -c "exit 255"
'
test_expect_success 'a missing command exits 127 naming the systemd error' '
	test_expect_code 127 $sdexec -r 0 /nonexistent/command 2>missing.err &&
	test_debug "cat missing.err" &&
	grep "/nonexistent/command: unit process could not be started (systemd error 203" \
		missing.err
'
test_expect_success 'stdout and stderr are delivered byte for byte' '
	printf "out one\n\tout  two \n" >expected.out &&
	printf "err one\nerr two\n" >expected.err &&
	$sdexec -r 1 sh -c "cat expected.out; cat expected.err >&2" \
		>actual.out 2>actual.err &&
	test_cmp expected.out actual.out &&
	test_cmp expected.err actual.err
'
test_expect_success 'non-UTF-8 output survives' '
	printf "\377\376" >binary.expected &&
	$sdexec -r 0 printf "\377\376" >binary.out &&
	cmp binary.expected binary.out
'
# NUL bytes are left out: flux exec prints output with "%.*s" and stops at
# a NUL, with flux-core's own rexec service as well.
test_expect_success 'random binary data survives stdout' '
	head -c 200000 /dev/urandom | tr -d "\\000" >random.bin &&
	$sdexec -r 1 cat random.bin >random.out &&
	cmp random.bin random.out
'
test_expect_success '10000 lines of stdout arrive complete and in order' '
	seq 10000 >seq.expected &&
	$sdexec -r 0 seq 10000 >seq.out &&
	test_cmp seq.expected seq.out
'
test_expect_success 'stdin is delivered to the unit' '
	seq 1000 >stdin.expected &&
	$sdexec -r 1 cat <stdin.expected >stdin.out &&
	test_cmp stdin.expected stdin.out
'
test_expect_success 'binary stdin round-trips' '
	$sdexec -r 0 cat <random.bin >random-stdin.out &&
	cmp random.bin random-stdin.out
'
test_expect_success 'a long line without newline at EOF survives' '
	head -c 300000 /dev/zero | tr "\0" x >long.expected &&
	$sdexec -r 0 cat long.expected >long.out &&
	cmp long.expected long.out
'
test_expect_success 'lines followed by a partial line survive' '
	{ seq 3 && printf "no newline"; } >partial.expected &&
	$sdexec -r 1 cat partial.expected >partial.out &&
	cmp partial.expected partial.out
'
test_expect_success 'stdout_LINE_BUFFER=false delivers identical bytes' '
	$sdexec -r 0 --setopt=stdout_LINE_BUFFER=false seq 10000 >raw.out &&
	test_cmp seq.expected raw.out &&
	$sdexec -r 0 --setopt=stdout_LINE_BUFFER=false \
		cat partial.expected >raw-partial.out &&
	cmp partial.expected raw-partial.out
'
test_expect_success 'FLUX_URI in the unit is the local broker URI' '
	$sdexec -r 0 printenv FLUX_URI >uri.0 &&
	$sdexec -r 1 printenv FLUX_URI >uri.1 &&
	flux getattr local-uri >local-uri.0 &&
	flux exec -r 1 flux getattr local-uri >local-uri.1 &&
	test_cmp local-uri.0 uri.0 &&
	test_cmp local-uri.1 uri.1 &&
	! test_cmp uri.0 uri.1
'
test_expect_success 'environment names containing () are dropped' '
	env "BAD_FUNC()=x" SDEXEC_TEST_VAR=kept $sdexec -r 0 env >env.out &&
	grep "^SDEXEC_TEST_VAR=kept\$" env.out &&
	! grep "BAD_FUNC" env.out
'
test_expect_success 'SDEXEC_PROP_MemoryHigh=1G is set on the unit' '
	name=$(unit memhigh) &&
	$sdexec -r 0 --setopt=SDEXEC_NAME=$name \
		--setopt=SDEXEC_PROP_MemoryHigh=1G \
		systemctl --user show -p MemoryHigh $name >memhigh.out &&
	echo MemoryHigh=1073741824 >memhigh.expected &&
	test_cmp memhigh.expected memhigh.out
'
test_expect_success 'a bad MemoryHigh value fails naming the option' '
	test_must_fail $sdexec -r 0 --setopt=SDEXEC_PROP_MemoryHigh=zzz \
		true 2>memzzz.err &&
	grep "SDEXEC_PROP_MemoryHigh: error setting property" memzzz.err
'
test_expect_success 'a bad KillMode value fails naming the option' '
	test_must_fail $sdexec -r 1 --setopt=SDEXEC_PROP_KillMode=zzz \
		true 2>killmode.err &&
	grep "SDEXEC_PROP_KillMode: error setting property" killmode.err
'
test_expect_success 'a bad AllowedCPUs value fails naming the option' '
	test_must_fail $sdexec -r 0 --setopt=SDEXEC_PROP_AllowedCPUs=x \
		true 2>cpus.err &&
	grep "SDEXEC_PROP_AllowedCPUs: error setting property" cpus.err
'
test_expect_success 'an unknown SDEXEC_ option fails naming it' '
	test_must_fail $sdexec -r 0 --setopt=SDEXEC_FOO=1 true 2>foo.err &&
	grep "SDEXEC_FOO" foo.err
'
test_expect_success 'SDEXEC_NAME that is not a unit name is rejected' '
	test_must_fail $sdexec -r 0 --setopt=SDEXEC_NAME=bad/name.service \
		true 2>badname.err &&
	grep "invalid unit name" badname.err
'

test_expect_success 'no unit of this instance is left' '
	sdexec_check_no_units
'
test_done
