#!/bin/sh

test_description='what each job used and why it died: flux sdexec usage, OOM kills

Two brokers, [exec] service = "sdexec". Where the usage is read from (flux sdexec status):
learning before any unit exited, then the unit where systemd keeps an exited unit'"'"'s
figures (systemd 257: then no accounting slice while a job runs), else a slice of the job
shell'"'"'s own, with the reason. Either way a 200 MB, 2 s CPU burn reports CPU within 5% of
/usr/bin/time -f %U+%S inside the same job (user CPU within 5% of %U where the slice splits
it) and peak memory within 10% of %M (where the layout gives peak memory), a 2-node job two
rows and a total, a running job rising CPU; the raw record is flux job info JOBID
sdexec-usage.RANK. Under MemoryMax=50M a 200 MB job prints the oom exception (rank, count,
limit) and reports oom_kills >= 1 and a peak near 50M; a job whose child is OOM-killed but
exits 0 stays successful on cgroup v1, and on v2 (systemd stops the unit at an OOM kill,
OOMPolicy=stop) its shell ends with result oom-kill. flux exec --service sdexec: no figures
by default; with [sdexec] usage = "all", the figures at debug level in flux dmesg and in the
sdexec.wait answer. A job shell that ended before an sdexec reload keeps the record written
at its exit (the next sdexec looks it up rather than writing one of nulls over it). No unit
or slice is left.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_extra_config exec.toml <<-EOF
	[exec]
	service = "sdexec"
	EOF

sdexec_under_flux 2 jobs
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"

export FLUX_EXEC_PATH_PREPEND="$SDEXEC_SRCDIR/cmd"
SPIN="x = 0
for i in range(1000000): x += i"  # a little CPU: every figure of its record above 0
# Busy until canceled (at most 10 minutes): under TCG a fixed short burn can end before the
# first `flux sdexec usage` answers.
BURN_UNTIL_CANCELED="import time
t = time.time()
while time.time() - t < 600: pass"

# usage_of ID RANK FIELD: one figure of a rank's record, raw (null if none).
usage_of() {
	flux job info "$1" sdexec-usage.$2 | jq -r ".$3"
}
# usage_source: where rank 0 reads job shells'"'"' usage (unit, slice, learning), then its note.
usage_source() {
	flux sdexec status -o json | jq -r ".ranks[0] | \"\(.usage) \(.usage_note)\""
}
# V1_MEMORY: the memory controller is on a v1 hierarchy (an OOM kill does not stop the unit)
grep -E " - cgroup [^ ]+ [^ ]*[,]memory([, ]|$)" /proc/self/mountinfo >/dev/null &&
	test_set_prereq V1_MEMORY
# within A B PERCENT: A is within PERCENT% of B.
within() {
	echo "$1 $2 $3" | awk "{d = \$1 - \$2; if (d < 0) d = -d; exit !(d <= \$2 * \$3 / 100)}"
}

test_expect_success 'before any unit exited, the usage source is learnt (slices meanwhile)' '
	usage_source >source0.out &&
	test_debug "cat source0.out" &&
	test "$(cat source0.out)" = "learning slice (learning: no unit has exited since load)"
'
test_expect_success 'a job records every figure of its rank in the job KVS directory' '
	id=$(flux submit python3 -c "$SPIN") &&
	flux job wait-event -t $T $id clean &&
	flux job info $id sdexec-usage.0 >rec.json &&
	test_debug "cat rec.json" &&
	jq -e ".rank == 0 and .result == \"success\" and .status == 0 and .wall_s > 0" rec.json &&
	jq -e ".cpu_s > 0" rec.json &&
	for figure in cpu_user_s tasks_peak memory_peak; do
		jq -e "(.$figure > 0) or (.null_reasons.$figure | length > 0)" rec.json || return 1
	done
'
# The first unit that exited told where usage is read from: systemd 252 (this machine) keeps
# no figure of an exited unit; systemd 257 (Debian 13) does.
test_expect_success 'after the first exit, flux sdexec status says the usage source' '
	usage_source >source.out &&
	flux sdexec status >status.out &&
	test_debug "cat source.out status.out" &&
	case "$(cat source.out)" in
	"unit null") test_set_prereq UNIT_SOURCE ;;
	"slice slice: systemd reports no "*" of an exited unit"*)
		test_set_prereq SLICE_SOURCE &&
		grep "usage source: slice: systemd reports no" status.out ;;
	*) false ;;
	esac
'
# A 200 MB bytearray touched (zero-filled: every page), then ~2 s of CPU, under /usr/bin/time
# inside the job: on this shared 2-core machine one command's CPU varies by up to ~7% between
# runs (contention), so the figures are checked against the same run.
WORK="b = bytearray(200 << 20)
x = 0
for i in range(43000000): x += i"
test_expect_success 'a 200 MB burn: CPU within 5% of %U+%S (a slice: user, %U), peak 10% of %M' '
	id=$(flux submit --cwd="$PWD" /usr/bin/time -f "%U %S %M" -o work.out python3 -c "$WORK") &&
	flux job wait-event -t $T $id clean &&
	cpu=$(usage_of $id 0 cpu_s) &&
	user=$(usage_of $id 0 cpu_user_s) &&
	peak=$(usage_of $id 0 memory_peak) &&
	memo=$(flux jobs -no "{user.sdexec.cpu}" $id) &&
	flux sdexec usage $id >work.usage &&
	echo "time $(cat work.out); sdexec cpu $cpu user $user (memo $memo) peak $peak" &&
	read time_user time_sys rss <work.out &&
	within "$cpu" "$(echo "$time_user $time_sys" | awk "{print \$1 + \$2}")" 5 &&
	within "$memo" "$cpu" 0.01 &&
	if test_have_prereq SLICE_SOURCE; then
		within "$user" "$time_user" 5
	else
		test "$user" = null
	fi &&
	grep -E "^ *JOBID +RANK +HOST +CPU +USER" work.usage &&
	if test "$peak" = null; then
		usage_of $id 0 null_reasons.memory_peak | grep .
	else
		within $((peak / 1024)) "$rss" 10
	fi
'
test_expect_success UNIT_SOURCE 'read from the unit: no accounting slice while the job runs' '
	id=$(flux submit sleep 300) &&
	test_when_finished "flux cancel $id || :" &&
	flux job wait-event -t $T -p exec $id shell.start &&
	plain=$(flux job id --to=f58plain $id) &&
	unit=$(systemctl --user list-units --all --plain --no-legend "*$plain*.service" |
		awk "{print \$1}") &&
	test -n "$unit" &&
	systemctl --user show -p Slice --value "$unit" >slice.out &&
	systemctl --user list-units --all --no-legend "app-sdexec*" >slices.out &&
	test_debug "cat slice.out slices.out" &&
	test "$(cat slice.out)" = app.slice &&
	! grep -F "$plain" slices.out &&
	flux cancel $id &&
	flux job wait-event -t $T $id clean &&
	flux job info $id sdexec-usage.0 |
		jq -e ".cpu_user_s == null and .tasks_peak == null and .cpu_s > 0"
'
test_expect_success 'a 2-node job shows two rows and a total; -o json agrees' '
	id=$(flux submit -N2 python3 -c "$SPIN") &&
	flux job wait-event -t $T $id clean &&
	flux sdexec usage $id >two.out &&
	test_debug "cat two.out" &&
	test "$(awk "\$2 ~ /^[01]\$/ {print \$2}" two.out | tr "\n" " ")" = "0 1 " &&
	grep " total " two.out &&
	flux sdexec usage -o json $id >two.json &&
	jq -e ".[] | (.ranks | length) == 2 and .total.ranks == 2" two.json &&
	jq -e ".[] | .total.cpu_s - ([.ranks[].cpu_s] | add) | fabs < 0.00001" two.json
'
test_expect_success 'a running job shows rising CPU figures' '
	id=$(flux submit python3 -c "$BURN_UNTIL_CANCELED") &&
	test_when_finished "flux cancel $id || :" &&
	flux job wait-event -t $T -p exec $id shell.start &&
	flux sdexec usage -o json $id | jq -e ".[].ranks[0].result == null" &&
	first=$(flux sdexec usage -o json $id | jq ".[].total.cpu_s") &&
	rising() {
		now=$(flux sdexec usage -o json $id | jq ".[].total.cpu_s") &&
		echo "$now $first" | awk "{exit !(\$1 >= \$2 + 0.5)}"
	} &&
	sdexec_wait_until rising &&
	flux sdexec usage $id | grep running
'
test_expect_success 'a job with no record: exit 1, said on stderr' '
	test_expect_code 1 flux sdexec usage 12345 2>none.err &&
	grep "no usage record" none.err
'
# zombie LABEL: sdexec holds the exit status of waitable process LABEL (a wait sent now is
# answered at once, and the record goes with it).
zombie() {
	flux sproc ps --service sdexec | grep -E "^ *[0-9]+ +Z +$1 "
}
test_expect_success 'by default a flux exec process has no slice, no figures' '
	flux exec -r 0 --service sdexec --bg --waitable --label=use0 true &&
	sdexec_wait_until zombie use0 &&
	flux python -c "import flux, json
print(json.dumps(flux.Flux().rpc(\"sdexec.wait\", {\"pid\": -1, \"label\": \"use0\"}).get()))" \
		>wait0.json &&
	jq -e ".status == 0 and .usage == null" wait0.json &&
	! flux dmesg | grep "use0.*usage {"
'
# From here on every unit has a slice (the flux exec processes below are read too).
test_expect_success 'flux exec --service sdexec: figures in dmesg (debug) and sdexec.wait' '
	sdexec_set_config usage "[sdexec]
usage = \"all\"" &&
	flux exec -r 0 --service sdexec --bg --waitable --label=use1 python3 -c "$SPIN" &&
	sdexec_wait_until zombie use1 &&
	flux python -c "import flux, json
print(json.dumps(flux.Flux().rpc(\"sdexec.wait\", {\"pid\": -1, \"label\": \"use1\"}).get()))" \
		>wait.json &&
	test_debug "cat wait.json" &&
	jq -e ".status == 0 and .usage.cpu_user_s > 0 and .usage.result == \"success\"" wait.json &&
	flux dmesg | grep "sdexec.debug.*use1.*usage {"
'
# A job shell that ended while job-exec was out (an upgrade): the sdexec it ended under wrote
# its job's record; the next one adopts the ended unit and must keep that record (it used to
# write one of nulls over it, the slice being unreadable then) and answer the wait with it.
# A held job stands for the job: it is active (no orphan check stops its "shell") and has a
# KVS directory.
test_expect_success 'an ended job shell adopted after a reload keeps its record, the wait has it' '
	id=$(flux submit --urgency=hold true) &&
	label=shell-0-$(flux job id --to=f58plain $id) &&
	flux exec -r 0 --service sdexec --bg --waitable --label=$label python3 -c "$SPIN" &&
	sdexec_wait_until zombie $label &&
	sdexec_wait_until flux job info $id sdexec-usage.0 >/dev/null 2>&1 &&
	flux job info $id sdexec-usage.0 | jq -S . >kept-before.json &&
	flux module reload $SDEXEC_MODULE &&
	flux python -c "import flux, json, sys
print(json.dumps(flux.Flux().rpc(\"sdexec.wait\", {\"pid\": -1, \"label\": sys.argv[1]}).get()))" \
		$label >kept-wait.json &&
	flux job info $id sdexec-usage.0 | jq -S . >kept-after.json &&
	test_debug "cat kept-before.json kept-wait.json" &&
	test_cmp kept-before.json kept-after.json &&
	jq -e ".cpu_s > 0" kept-after.json &&
	jq -S ".usage" kept-wait.json >kept-wait-usage.json &&
	jq -S "del(.rank, .host, .unit)" kept-before.json >kept-figures.json &&
	test_cmp kept-figures.json kept-wait-usage.json &&
	flux dmesg | grep "$label.*usage of job .* was recorded by the sdexec before: kept" &&
	flux cancel $id
'
test_expect_success 'under MemoryMax=50M: a 200 MB job prints the oom exception' '
	sdexec_set_config oom "[exec.sdexec-properties]
MemoryMax = \"50M\"" &&
	test_expect_code 137 flux run python3 -c "bytearray(200 << 20)" 2>oom.err &&
	test_debug "cat oom.err" &&
	grep "type=oom severity=1 rank 0 (.*): 1 task(s) killed by the OOM killer, MemoryMax=50M" \
		oom.err
'
test_expect_success 'flux sdexec usage shows oom_kills >= 1 and a peak within 10% of 50M' '
	id=$(flux job last) &&
	flux job wait-event -t $T $id clean &&
	flux sdexec usage $id &&
	flux sdexec usage -o json $id >oom.json &&
	jq -e ".[].total.oom_kills >= 1" oom.json &&
	jq -e ".[].ranks[0].memory_peak | . > 47185920 and . < 57671680" oom.json
'
# cgroup v1: the kill is the child's alone. v2: systemd's default OOMPolicy=stop stops the
# job shell'"'"'s unit at the kill (so does flux-core'"'"'s C sdexec, which sets no OOMPolicy).
test_expect_success V1_MEMORY 'a job whose child is OOM-killed but which exits 0 stays successful' '
	flux run sh -c "python3 -c \"bytearray(200 << 20)\"; exit 0" 2>child.err &&
	id=$(flux job last) &&
	grep "type=oom" child.err &&
	flux job wait-event -t $T $id clean &&
	flux jobs -no "{result}" $id | grep -x COMPLETED &&
	test $(usage_of $id 0 oom_kills) -ge 1
'
# The shell goes on a second after its child'"'"'s kill, so that systemd has stopped the unit
# for it (SIGTERM: flux run exits 143): a shell that exits within milliseconds of the kill can
# end before systemd acts on it, and then the unit source, on systemd 257, has no trace of
# the kill (the usage guide).
test_expect_success !V1_MEMORY 'a child OOM-killed on cgroup v2: the shell ends oom-kill, oom raised' '
	test_expect_code 143 flux run sh -c "python3 -c \"bytearray(200 << 20)\"; sleep 1; exit 0" \
		2>child.err &&
	id=$(flux job last) &&
	cat child.err &&
	grep "type=oom" child.err &&
	flux job wait-event -t $T $id clean &&
	flux job eventlog $id | grep "exception type=\"oom\"" &&
	test "$(usage_of $id 0 result)" = oom-kill &&
	test $(usage_of $id 0 oom_kills) -ge 1
'
test_expect_success 'the OOM tests'"'"' MemoryMax is dropped' '
	sdexec_set_config oom
'
test_expect_success 'a waitable kept across an sdexec reload: the next sdexec stops its slice' '
	flux exec -r 0 --service sdexec --bg --waitable --label=kept sleep 300 &&
	slice=$(systemctl --user show -p Slice --value "kept-0:$SDEXEC_INSTANCE.service") &&
	test_debug "echo $slice" &&
	case "$slice" in app-sdexec-kept\\x2d0:${SDEXEC_INSTANCE}_*.slice) ;; *) false ;; esac &&
	systemctl --user is-active "$slice" &&
	flux module reload $SDEXEC_MODULE &&
	systemctl --user is-active "$slice" &&
	flux sproc kill --service sdexec 9 kept &&
	test_expect_code 137 flux sproc wait --service sdexec kept &&
	sdexec_wait_until test inactive = "$(systemctl --user is-active "$slice")"
'
test_expect_success 'sdexec removed for good: the guard stops the kept units and their slices' '
	cat >forgood.sh <<-EOT &&
	flux exec --service sdexec -r 0 --bg --waitable --label=kept sleep 300
	flux dmesg | sed -n "s/.*units named <label>:\\(.*\\)\\.service (glob.*/\\1/p" \
		| head -1 >forgood.instance
	flux module remove sdexec
	systemctl --user show -p Slice --value "kept:\$(cat forgood.instance).service" \
		>forgood.slice
	systemctl --user is-active "\$(cat forgood.slice)" >forgood.kept
	EOT
	flux start --test-size=1 --config-path="$SDEXEC_CONF_DIR" sh -e forgood.sh &&
	test_debug "cat forgood.instance forgood.slice forgood.kept" &&
	test "$(cat forgood.kept)" = active &&
	gone() {
		test inactive = "$(systemctl --user is-active "$(cat forgood.slice)")"
	} &&
	sdexec_wait_until gone
'
# left_of: the units and accounting slices of this test's jobs and processes systemd still has.
left_of() {
	for id in $(flux jobs -a -no "{id.f58plain}"); do
		systemctl --user list-units --all --no-legend "shell-*-$id.service" \
			"app-sdexec-shell*${id}_*.slice"
	done
	systemctl --user list-units --all --no-legend "*:$SDEXEC_INSTANCE.service" \
		"app-sdexec-*:${SDEXEC_INSTANCE}_*.slice"
}
test_expect_success 'no unit and no accounting slice of these jobs is left' '
	sdexec_wait_until test -z "$(left_of)"
'
test_done
