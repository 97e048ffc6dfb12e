#!/bin/sh

test_description='sdexec unit names (design: Unit Naming)

Runs under flux start --test-size=2 with our conf.d/sdexec.toml. Units are
<label>[-<rank>]:<instance>.service; label-less units use 13 characters of
a UUID instead of the label; the instance part is t + 8 hex digits of rank
0 broker.uuid for a test instance and f<f58 jobid> for a nested one; the
rank is added only where a node hosts more than one broker.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

# "jobs": the nested-instance test runs a Flux job.
sdexec_under_flux 2 jobs

# Command run in a unit to print the unit's own name (from its cgroup).
own_unit='sed -n "s|^0::.*/||p" /proc/self/cgroup'

# names FILE...: sorted unit names, one a line, from list-units output.
names() {
	awk '{print $1}' "$@" | sort
}

test_expect_success 'the instance part is t + 8 hex digits of rank 0 broker.uuid' '
	uuid0=$(flux getattr broker.uuid) &&
	inst=t$(echo $uuid0 | cut -c1-8) &&
	echo "$inst" | grep "^t[0-9a-f]\{8\}\$" &&
	flux dmesg | grep "sdexec.info\[0\]: units named <label>:$inst.service"
'
test_expect_success 'rank 1 uses rank 0 uuid, not its own' '
	uuid1=$(flux exec -r 1 flux getattr broker.uuid) &&
	test "$(echo $uuid1 | cut -c1-8)" != "$(echo $uuid0 | cut -c1-8)" &&
	flux exec -r 1 flux dmesg >dmesg.1 &&
	grep "sdexec.info\[1\]: units named <label>:$inst.service" dmesg.1
'
test_expect_success 'a labeled unit is <label>-<rank>:<instance>.service' '
	$sdexec -r 0 --label=lab sh -c "$own_unit" >lab.0 &&
	$sdexec -r 1 --label=lab sh -c "$own_unit" >lab.1 &&
	echo "lab-0:$inst.service" >lab.0.expected &&
	echo "lab-1:$inst.service" >lab.1.expected &&
	test_cmp lab.0.expected lab.0 &&
	test_cmp lab.1.expected lab.1
'
test_expect_success 'one label runs on both ranks at once' '
	$sdexec --bg --label=pair sleep 120 &&
	sdexec_list_units "pair-*" | sort >pair.out &&
	printf "pair-0:$inst.service\npair-1:$inst.service\n" >pair.expected &&
	test_cmp pair.expected pair.out &&
	$sproc_kill -r 0 9 pair &&
	$sproc_kill -r 1 9 pair &&
	sdexec_wait_unit_gone pair-0:$inst.service &&
	sdexec_wait_unit_gone pair-1:$inst.service
'
test_expect_success 'a label-less unit is <uuid13>-<rank>:<instance>.service' '
	$sdexec -r 0 sh -c "$own_unit" >nolabel.0 &&
	$sdexec -r 1 sh -c "$own_unit" >nolabel.1 &&
	test_debug "cat nolabel.0 nolabel.1" &&
	grep -x "[0-9a-f]\{8\}-[0-9a-f]\{4\}-0:$inst\.service" nolabel.0 &&
	grep -x "[0-9a-f]\{8\}-[0-9a-f]\{4\}-1:$inst\.service" nolabel.1
'
test_expect_success 'label-less names differ between runs' '
	$sdexec -r 0 sh -c "$own_unit" >nolabel.0.again &&
	! test_cmp nolabel.0 nolabel.0.again
'
test_expect_success 'the instance glob lists exactly this instance units' '
	$sdexec -r 0 --bg --label=g1 sleep 120 &&
	$sdexec -r 1 --bg --label=g2 sleep 120 &&
	$sdexec -r 0 --bg --setopt=SDEXEC_NAME=foreign-$inst.service sleep 120 &&
	sdexec_list_units "*:$inst.service" | sort >glob.out &&
	printf "g1-0:$inst.service\ng2-1:$inst.service\n" >glob.expected &&
	test_cmp glob.expected glob.out &&
	test "$(sdexec_unit_state foreign-$inst.service)" = active
'

# nested.sh OWN_UNIT PREFIX: the initial program of a nested instance (a Flux
# job running flux start with our config); writes what it sees to PREFIX.*
cat >nested.sh <<'EOF'
set -e
flux getattr jobid-path >$2.jobid-path
flux module list -l | grep "^sdexec " >$2.modules
flux dmesg | grep "units named" >$2.dmesg
flux exec --service sdexec --label=nest sh -c "$1" >$2.labeled
flux exec --service sdexec sh -c "$1" >$2.nolabel
EOF

# A second, independent top-level instance (size 1) runs beside this one:
# its units carry its own instance part, no rank, and neither instance glob
# sees the other one's units (g1 and g2 above are still running). It runs
# in a UTF-8 locale, so the nested instance it starts has jobid-path /ƒ<f58>.
cat >solo.sh <<'EOF'
set -e
inst=t$(flux getattr broker.uuid | cut -c1-8)
echo "$inst" >solo.inst
flux dmesg | grep "units named" >solo.dmesg
flux exec --service sdexec --label=solo sh -c "$1" >solo.labeled
flux exec --service sdexec sh -c "$1" >solo.nolabel
flux exec --service sdexec --bg --label=solo-bg sleep 120
systemctl --user list-units --all --plain --no-legend "*:$inst.service" >solo.glob
systemctl --user list-units --all --plain --no-legend "*:$2.service" >solo.outer
flux sproc kill --service sdexec 9 solo-bg
jobid=$(flux submit -n1 flux start --config-path="$3" sh ./nested.sh "$1" utf8)
flux job attach $jobid
flux job id --to=f58plain $jobid >utf8.f58
EOF
test_expect_success 'run a size-1 instance (UTF-8 locale) beside this one' '
	LC_ALL=C.UTF-8 timeout 120 flux start --test-size=1 \
		--config-path="$SDEXEC_CONF_DIR" \
		sh ./solo.sh "$own_unit" "$inst" "$SDEXEC_CONF_DIR" &&
	solo=$(cat solo.inst) &&
	test "$solo" != "$inst"
'
test_expect_success 'size-1 instance: our module, named by its own uuid' '
	grep "units named <label>:$solo.service" solo.dmesg
'
test_expect_success 'size-1 instance: units carry no rank suffix' '
	echo "solo:$solo.service" >solo.labeled.expected &&
	test_cmp solo.labeled.expected solo.labeled &&
	grep -x "[0-9a-f]\{8\}-[0-9a-f]\{4\}:$solo\.service" solo.nolabel
'
test_expect_success 'each instance glob sees only its own instance units' '
	echo "solo-bg:$solo.service" >solo.glob.expected &&
	names solo.glob >solo.glob.names &&
	test_cmp solo.glob.expected solo.glob.names &&
	names solo.outer >solo.outer.names &&
	test_cmp glob.expected solo.outer.names
'
test_expect_success 'stop the glob test units' '
	$sproc_kill -r 0 9 g1 &&
	$sproc_kill -r 1 9 g2 &&
	systemctl --user kill --signal=KILL foreign-$inst.service &&
	sdexec_wait_unit_gone g1-0:$inst.service &&
	sdexec_wait_unit_gone g2-1:$inst.service &&
	sdexec_wait_unit_gone foreign-$inst.service
'

# A nested instance: a Flux job of this instance runs flux start with the
# same config. Its jobid-path is /f<f58 jobid> here (sharness runs in the C
# locale), rendered as is; it has one broker per node, so no rank suffix.
test_expect_success 'run a nested instance as a job of this instance' '
	jobid=$(flux submit -n1 flux start --config-path="$SDEXEC_CONF_DIR" \
		sh ./nested.sh "$own_unit" ascii) &&
	timeout 120 flux job attach $jobid &&
	f58=$(flux job id --to=f58plain $jobid) &&
	echo "$f58" | grep "^f[1-9A-HJ-NP-Za-km-z]*\$" &&
	echo "/$f58" >ascii.jobid-path.expected &&
	test_cmp ascii.jobid-path.expected ascii.jobid-path
'
test_expect_success 'nested instance: our module, named by the job id' '
	grep " $SDEXEC_MODULE\$" ascii.modules &&
	grep "units named <label>:$f58.service" ascii.dmesg
'
test_expect_success 'nested instance: labeled unit is <label>:f<f58>.service' '
	echo "nest:$f58.service" >ascii.labeled.expected &&
	test_cmp ascii.labeled.expected ascii.labeled
'
test_expect_success 'nested instance: label-less unit has no rank suffix' '
	grep -x "[0-9a-f]\{8\}-[0-9a-f]\{4\}:$f58\.service" ascii.nolabel
'
test_expect_success 'nested in UTF-8: jobid-path /ƒ<f58> is rendered f<f58>' '
	f58u=$(cat utf8.f58) &&
	printf "/\306\222%s\n" "${f58u#f}" >utf8.jobid-path.expected &&
	test_cmp utf8.jobid-path.expected utf8.jobid-path &&
	grep "units named <label>:$f58u.service" utf8.dmesg &&
	echo "nest:$f58u.service" >utf8.labeled.expected &&
	test_cmp utf8.labeled.expected utf8.labeled &&
	grep -x "[0-9a-f]\{8\}-[0-9a-f]\{4\}:$f58u\.service" utf8.nolabel
'
test_expect_success 'the other instances left no unit behind' '
	sdexec_check_no_units $solo &&
	sdexec_check_no_units $f58 &&
	sdexec_check_no_units $f58u
'

test_expect_success 'a label containing a colon is rejected, naming it' '
	test_must_fail $sdexec -r 0 --label=a:b true 2>colon.err &&
	test_debug "cat colon.err" &&
	grep "label .a:b." colon.err
'
test_expect_success 'a label containing a slash is rejected, naming it' '
	test_must_fail $sdexec -r 1 --label=a/b true 2>slash.err &&
	test_debug "cat slash.err" &&
	grep "label .a/b." slash.err
'
test_expect_success 'a label that is in use is rejected' '
	$sdexec -r 0 --bg --label=dup sleep 120 &&
	test_must_fail $sdexec -r 0 --label=dup true 2>dup.err &&
	test_debug "cat dup.err" &&
	grep "command label is not unique" dup.err &&
	test "$(sdexec_unit_state dup-0:$inst.service)" = active
'
test_expect_success 'the same label is accepted on another rank' '
	$sdexec -r 1 --label=dup true
'
# dup_gone: sdexec on rank 0 no longer tracks a process labeled dup.
dup_gone() {
	! $sproc_ps -r 0 -n -o "{label}" | grep -x dup
}
test_expect_success 'the label can be used again once its unit is gone' '
	$sproc_kill -r 0 9 dup &&
	sdexec_wait_unit_gone dup-0:$inst.service &&
	sdexec_wait_until dup_gone &&
	$sdexec -r 0 --label=dup true
'
test_expect_success 'SDEXEC_NAME is used verbatim' '
	name=verbatim-$(echo $inst | cut -c2-).service &&
	$sdexec -r 1 --label=ignored --setopt=SDEXEC_NAME=$name \
		sh -c "$own_unit" >verbatim.out &&
	echo $name >verbatim.expected &&
	test_cmp verbatim.expected verbatim.out &&
	sdexec_wait_unit_gone $name
'
test_expect_success 'a name systemd already has fails the exec with its EEXIST' '
	name=foreign-$(echo $inst | cut -c2-).service &&
	systemd-run --user --quiet --unit=$name sleep 300 &&
	test_must_fail $sdexec -r 0 --setopt=SDEXEC_NAME=$name true 2>exists.err &&
	test_debug "cat exists.err" &&
	grep "Unit $name was already loaded" exists.err &&
	systemctl --user is-active $name &&
	systemctl --user stop $name &&
	test "$($sproc_ps -r 0 -n -o "{label}")" = "" &&
	$sdexec -r 0 true
'
test_expect_success 'no unit of this instance is left' '
	sdexec_check_no_units
'
test_done
