# flux-sdexec: `flux sdexec status/units/map` tests shared by t0014 (2 brokers) and t0015 (4).
# Source after sharness-sdexec.sh and sharness-jobs.sh, inside the instance (bgexec job
# shells, constrained resources), then call test_sdexec_cli.

# flux finds the command of this checkout first, as a site finds the installed one
FLUX_EXEC_PATH_PREPEND=$SDEXEC_SRCDIR/cmd
export FLUX_EXEC_PATH_PREPEND
SIZE=$(flux getattr size)
LAST=$((SIZE - 1))

# status_json: `flux sdexec status -o json` (its exit status ignored)
status_json() {
	flux sdexec status -o json >status.json
	jq . status.json >/dev/null
}
# policy_everywhere POLICY: every rank's sdexec applies POLICY
policy_everywhere() {
	status_json && jq -e "all(.ranks[]; .policy == \"$1\")" status.json >/dev/null
}
set_policy() {
	sdexec_set_config policy "$(printf "[sdexec]\ncontainment-check = \"%s\"" "$1")" &&
	sdexec_wait_until policy_everywhere "$1"
}
# all_checked CONSTRAINT: every rank counted CONSTRAINT in a start (the check runs once the
# job shell's pid is known)
all_checked() {
	for r in $(seq 0 $LAST); do
		flux exec -r $r flux module stats sdexec |
			jq -e ".containment.constraints.$1 // empty" >/dev/null || return 1
	done
}
# rows FILE: the table rows of status or units output (the header and status's notes,
# "rank[s] IDSET (HOSTS): ...", dropped)
rows() {
	sed -n '2,$p' "$1" | grep -v '^ranks\{0,1\} ' || true
}
unit_pid() {
	systemctl --user show -p MainPID --value "$1"
}
sdexec_rank_ok() {
	flux exec -r "$1" flux module stats sdexec | jq -e .version >/dev/null
}

test_sdexec_cli() {
	test_expect_success 'status: every rank answers, alike ranks fold into one row, exit 0' '
		set_policy warn &&
		flux sdexec status >status.out &&
		test_debug "cat status.out" &&
		head -n 1 status.out | grep "^STATE *NRANKS *RANKS *HOSTS *VERSION" &&
		test $(rows status.out | wc -l) -eq 1 &&
		hosts=$(flux hostlist -u instance) &&
		rows status.out |
			grep -E "^ok +$SIZE +0-$LAST +$hosts .* warn +- +[a-z,]+ +$SDEXEC_MODULE\$"
	'
	test_expect_success 'status -o json: each rank as the module reports it, healthy' '
		status_json &&
		jq -e ".healthy == true and (.ranks | length) == $SIZE and (.groups | length) == 1" \
			status.json &&
		version=$(flux python -c "import flux_sdexec; print(flux_sdexec.__version__)") &&
		for r in $(seq 0 $LAST); do
			flux exec -r $r flux module stats sdexec >stats.$r &&
			jq -e --slurpfile s stats.$r ".ranks[$r] | .state == \"ok\" and
				.version == \"$version\" and .module == \"$SDEXEC_MODULE\" and
				.systemd == \$s[0].systemd.kind and .via == \$s[0].systemd.via and
				.reconnects == 0 and .adopted == 0 and .running == 0 and
				.unenforceable == \$s[0].containment.unenforceable" status.json || return 1
		done
	'
	test_expect_success 'map prints what flux python -m flux_sdexec.map prints, errors too' '
		flux sdexec map --cores 0 >map.out &&
		flux python -m flux_sdexec.map --cores 0 >map.expected &&
		test_cmp map.expected map.out &&
		jq -e .AllowedCPUs map.out &&
		flux sdexec map >map-all.out &&
		flux python -m flux_sdexec.map >map-all.expected &&
		test_cmp map-all.expected map-all.out &&
		test_expect_code 1 flux sdexec map --cores 9999 2>map.err &&
		test_expect_code 1 flux python -m flux_sdexec.map --cores 9999 2>map.err.expected &&
		test_cmp map.err.expected map.err
	'
	test_expect_success 'units: a running bgexec job: one shell per rank, with its job id and pid' '
		id=$(flux submit -N$SIZE -n$SIZE sleep 300) &&
		tasks_running $id &&
		f58=$(flux job id --to=f58 $id) &&
		flux sdexec units >units.out &&
		test_debug "cat units.out" &&
		head -n 1 units.out | grep "^RANK *UNIT *JOBID *STATE *PID *START *LABEL *REASON$" &&
		test $(rows units.out | wc -l) -eq $SIZE &&
		for r in $(seq 0 $LAST); do
			unit=$(bgexec_unit $r $id) &&
			label=shell-$r-$(flux job id --to=f58plain $id) &&
			rows units.out | grep -E "^ *$r +$unit +$f58 +running +$(unit_pid $unit) +[-0-9T:]+ +$label +-\$" ||
			return 1
		done
	'
	test_expect_success 'units -r IDSET: only those ranks; -o json: the same rows' '
		flux sdexec units -r $LAST >units-last.out &&
		test $(rows units-last.out | wc -l) -eq 1 &&
		rows units-last.out | grep -E "^ *$LAST +$(bgexec_unit $LAST $id) " &&
		flux sdexec units -o json >units.json &&
		jq -e "length == $SIZE and all(.[]; .jobid == \"$f58\" and .state == \"running\")" \
			units.json &&
		test_expect_code 1 flux sdexec units -r $SIZE 2>units-bad.err &&
		grep "rank $SIZE is not in this instance" units-bad.err
	'
	test_expect_success 'units --all: a unit of this instance that sdexec does not track' '
		stray=stray-$LAST:$SDEXEC_INSTANCE.service &&
		test_when_finished "systemctl --user stop $stray &&
			{ systemctl --user reset-failed $stray 2>/dev/null || :; }" &&
		systemd-run --user --quiet --unit=$stray sleep 300 &&
		flux sdexec units >units2.out &&
		! grep -F "$stray" units2.out &&
		flux sdexec units --all >units-all.out &&
		test_debug "cat units-all.out" &&
		test $(rows units-all.out | wc -l) -eq $((SIZE + 1)) &&
		rows units-all.out |
			grep -E "^ *$LAST +$stray +- +untracked \(active.running\) +- +- +stray +-\$" &&
		flux sdexec units --all -o json | jq -e "[.[] | select(.unit == \"$stray\")] | length == 1"
	'
	test_expect_success 'status under warn: each constraint not enforced with its reason, exit 0' '
		sdexec_wait_until all_checked DevicePolicy &&
		flux module stats sdexec | jq -r ".containment.constraints | to_entries[] |
			select(.value[\"not-enforced\"] > 0) | \"\(.key) not enforced: \(.value.last_reason)\"" |
			LC_ALL=C sort >reasons.expected &&
		test_debug "cat reasons.expected" &&
		grep "^AllowedCPUs not enforced: " reasons.expected &&
		flux sdexec status >status-warn.out &&
		test_debug "cat status-warn.out" &&
		test $(rows status-warn.out | wc -l) -eq 1 &&
		names=$(sed "s/ not enforced: .*//" reasons.expected | paste -sd, -) &&
		rows status-warn.out | grep -E "^ok +$SIZE +0-$LAST .* warn +$names +" &&
		sed -n "/: usage source: /d; s/^ranks 0-$LAST ([^)]*): //p" status-warn.out |
			LC_ALL=C sort >reasons.out &&
		test_cmp reasons.expected reasons.out
	'
	test_expect_success 'status under enforce: a constraint not enforced is unhealthy, exit 1' '
		set_policy enforce &&
		test_expect_code 1 flux sdexec status >status-enforce.out &&
		rows status-enforce.out | grep -E "^not-enforced +$SIZE +0-$LAST .* enforce " &&
		set_policy warn &&
		flux sdexec status
	'
	test_expect_success 'the job ends; its shell units go' '
		flux cancel $id &&
		wait_event $id clean &&
		for r in $(seq 0 $LAST); do
			sdexec_wait_unit_gone $(bgexec_unit $r $id) || return 1
		done &&
		flux sdexec units >units-none.out &&
		test -z "$(rows units-none.out)"
	'
	test_expect_success 'a silent rank: status says so after the timeout and exits 1' '
		pid=$(flux exec -r $LAST flux getattr broker.pid) &&
		test_when_finished "kill -CONT $pid" &&
		kill -STOP $pid &&
		start=$(date +%s) &&
		test_expect_code 1 flux sdexec status -t 1 >status-silent.out &&
		test $(($(date +%s) - start)) -lt 10 &&
		test_debug "cat status-silent.out" &&
		rows status-silent.out | grep -E "^unreachable +1 +$LAST " &&
		grep -F "rank $LAST (" status-silent.out | grep "unreachable: no answer within 1s" &&
		test_expect_code 1 flux sdexec units -t 1 2>units-silent.err &&
		grep "rank $LAST: no answer within 1s" units-silent.err &&
		kill -CONT $pid &&
		sdexec_wait_until flux sdexec status
	'
	test_expect_success 'sdexec.units refuses a malformed request: EPROTO, or EINVAL for all' '
		cat >units-rpc.py <<-\EOT &&
		import errno, sys, flux
		h = flux.Flux()
		for payload, code in (("[]", errno.EPROTO), ({"x": 1}, errno.EPROTO),
		                      ({"all": 1}, errno.EINVAL), (None, errno.EPROTO)):
		    try:
		        h.rpc("sdexec.units", payload, nodeid=1).get()
		        sys.exit(f"{payload!r}: answered")
		    except OSError as exc:
		        print(payload, exc.errno, exc.strerror)
		        assert exc.errno == code, (payload, exc.errno)
		EOT
		flux python units-rpc.py >units-rpc.out &&
		test_debug "cat units-rpc.out" &&
		test $(wc -l <units-rpc.out) -eq 4
	'
	test_expect_success 'waitable processes: counted running and zombie on their rank' '
		$sdexec -r 1 --bg --waitable --label=kept sleep 300 &&
		$sdexec -r 1 --bg --waitable --label=over true &&
		sdexec_wait_until sh -c "$sproc_ps -r 1 | grep -E \" Z +over\"" &&
		status_json &&
		jq -e ".ranks[1] | .tracked == 2 and .running == 1 and .zombie == 1" status.json &&
		jq -e ".groups[0] | .tracked == 2 and .running == 1 and .zombie == 1" status.json
	'
	test_expect_success 'a rank whose sdexec is unloaded: marked unloaded, exit 1' '
		flux exec -r 1 flux module remove sdexec &&
		test_expect_code 1 flux sdexec status >status-unloaded.out &&
		test_debug "cat status-unloaded.out" &&
		rows status-unloaded.out | grep -E "^unloaded +1 +1 +[^ ]+ +- +- " &&
		grep -F "rank 1 (" status-unloaded.out | grep "unloaded: sdexec is not loaded" &&
		status_json &&
		jq -e ".healthy == false and .ranks[1].state == \"unloaded\" and
			([.ranks[] | select(.state == \"ok\")] | length) == $LAST" status.json &&
		test_expect_code 1 flux sdexec units 2>units-unloaded.err &&
		grep "rank 1: no sdexec.units here (sdexec unloaded, or not ours)" units-unloaded.err
	'
	test_expect_success "flux-core's C sdexec on a rank: not ours, exit 1" '
		flux exec -r 1 flux module load sdexec &&
		test_when_finished "flux exec -r 1 flux module remove -f sdexec" &&
		test_expect_code 1 flux sdexec status >status-c.out &&
		test_debug "cat status-c.out" &&
		rows status-c.out | grep -E "^not-ours +1 +1 "
	'
	test_expect_success 'our sdexec loaded again: healthy, the waitables adopted, exit 0' '
		flux exec -r 1 flux module remove -f sdexec &&
		flux exec -r 1 flux module load $SDEXEC_MODULE &&
		sdexec_wait_until sdexec_rank_ok 1 &&
		flux sdexec status >status-end.out &&
		test_debug "cat status-end.out" &&
		rows status-end.out | grep -E "^ok +1 +1 .* 2 +1 +1 +2 +[-a-z]+ +[-A-Za-z,]+ +warn " &&
		flux sdexec units -r 1 >units-adopted.out &&
		test_debug "cat units-adopted.out" &&
		rows units-adopted.out | grep -E "^ *1 +kept-1:$SDEXEC_INSTANCE.service +- +running +[0-9]+ +[-0-9T:]+ +kept +-\$" &&
		rows units-adopted.out | grep -E "^ *1 +over-1:$SDEXEC_INSTANCE.service +- +zombie .* over +-\$" &&
		$sproc_kill -r 1 9 kept &&
		test_expect_code 137 $sproc_wait -r 1 kept &&
		$sproc_wait -r 1 over &&
		flux sdexec status
	'
	test_expect_success 'no unit is left' '
		sdexec_check_no_units
	'
}
