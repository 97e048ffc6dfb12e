#!/bin/sh

test_description='a job'"'"'s usage gathered up the overlay tree, shown by flux jobs

Three brokers in a chain (tbon.topo=kary:1: rank 2 under rank 1 under rank 0), [exec]
service = "sdexec". Each rank'"'"'s record goes to its parent'"'"'s sdexec, merged there with
the ranks below it: rank 0 receives one message per job from its child, writes the job'"'"'s
record (a KVS key per rank) and posts its totals as a memo. flux jobs -o shows them, with
the shipped format (conf.d/flux-jobs.toml) too; they are the sum and the max of the rows of
flux sdexec usage, and each rank'"'"'s row is its own: peak memory within 10% of /usr/bin/time
of its command on every rank, CPU within 5% on rank 2 (two hops down), which alone burns. A job
on ranks 1 and 2 alone is gathered the same way. flux sdexec usage --watch shows a running
job'"'"'s CPU% and ends with it; a running job'"'"'s rows are gathered on demand the same way,
down the tree and back, one request per child.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_extra_config exec.toml <<-EOF
	[exec]
	service = "sdexec"
	EOF

sdexec_under_flux 3 jobs -- -Stbon.topo=kary:1
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"

export FLUX_EXEC_PATH_PREPEND="$SDEXEC_SRCDIR/cmd"
# burn.sh: each task touches (100 + 50 * rank) MiB under /usr/bin/time, which writes its user
# and system CPU and max RSS (KiB) to time.<rank>; rank 2 (the deepest) burns ~3 s of CPU
# first (long enough that the job shell's own CPU, counted in the rank's figure, stays near 3%
# under TCG too), the others none: under TCG a guest's vCPUs take turns on one host thread,
# where three burns took three times as long. BURN_STEPS=0: no burn. The job waits up to 3T
# (under TCG on a host running three guests a burn of three took over T: 180 s there). The
# ranks end far apart, so the burn jobs run with exit-timeout=none: the shell's default raises
# a fatal exception 30 s after the first task exits and kills the rest.
BURN_WAIT=$((T * 3))
burn_submit() {
	flux submit -o exit-timeout=none --cwd="$PWD" "$@" ./burn.sh
}
cat >burn.sh <<-'EOF'
	#!/bin/sh
	steps=0
	[ "$FLUX_TASK_RANK" = 2 ] && steps=${BURN_STEPS:-43000000}
	exec /usr/bin/time -f "%U %S %M" -o time.$FLUX_TASK_RANK python3 -c "
	x = 0
	for i in range($steps): x += i
	b = bytearray((100 + 50 * $FLUX_TASK_RANK) << 20)"
	EOF
chmod +x burn.sh

# within A B PERCENT: A is within PERCENT% of B.
within() {
	echo "$1 $2 $3" | awk "{d = \$1 - \$2; if (d < 0) d = -d; exit !(d <= \$2 * \$3 / 100)}"
}
gather_stats() {
	flux module stats sdexec | jq -c ".\"usage-gather\""
}

test_expect_success 'the brokers are a chain: rank 1 under 0, rank 2 under 1' '
	flux python -c "import flux, json
print(json.dumps(flux.Flux().rpc(\"overlay.topology\", {\"rank\": 0}).get()))" >topo.json &&
	jq -e ".children[0].rank == 1 and .children[0].children[0].rank == 2" topo.json
'
test_expect_success 'a 3-rank job: flux jobs -o shows its CPU and peak memory' '
	gather_stats >stats-before.json &&
	id=$(burn_submit -N3 -n3) &&
	flux job wait-event -t $BURN_WAIT $id clean &&
	flux jobs -no "{user.sdexec.cpu} {user.sdexec.maxmem} {user.sdexec.maxmem_rank} {user.sdexec.ranks}" \
		$id >memo.out &&
	test_debug "cat memo.out" &&
	read cpu maxmem rank ranks <memo.out &&
	test "$ranks" = 3 && test "$rank" = 2 && test "$maxmem" -gt 0
'
test_expect_success 'the memo is the sum and the max of the rows of flux sdexec usage' '
	flux sdexec usage $id &&
	flux sdexec usage -o json $id >rows.json &&
	jq -e ".[].ranks | length == 3" rows.json &&
	sum=$(jq "[.[].ranks[].cpu_s] | add" rows.json) &&
	max=$(jq "[.[].ranks[].memory_peak] | max" rows.json) &&
	echo "memo cpu $cpu maxmem $maxmem, rows sum $sum max $max" &&
	within "$cpu" "$sum" 0.001 &&
	test "$maxmem" = "$max"
'
test_expect_success 'each row is its rank'"'"'s: /usr/bin/time'"'"'s peak (10%), the burner'"'"'s CPU (5%)' '
	burned=$(jq ".[].ranks[] | select(.rank == 2) | .cpu_s" rows.json) &&
	for r in 0 1 2; do
		read utime stime rss <time.$r &&
		cpu_r=$(jq ".[].ranks[] | select(.rank == $r) | .cpu_s" rows.json) &&
		peak_r=$(jq ".[].ranks[] | select(.rank == $r) | .memory_peak" rows.json) &&
		echo "rank $r: time %U %S $utime $stime %M $rss KiB; sdexec $cpu_r s, $peak_r bytes" &&
		within $((peak_r / 1024)) "$rss" 10 &&
		if [ $r = 2 ]; then
			within "$cpu_r" "$(echo "$utime $stime" | awk "{print \$1 + \$2}")" 5
		else
			echo "$cpu_r $burned" | awk "{exit !(\$1 < \$2 / 4)}"
		fi || return 1
	done
'
test_expect_success 'rank 0 received one message for the job, from its one child' '
	gather_stats >stats-after.json &&
	test_debug "cat stats-before.json stats-after.json" &&
	test $(jq -s ".[1].\"messages-in\" - .[0].\"messages-in\"" stats-before.json stats-after.json) -eq 1 &&
	jq -e ".\"most-from-one-child\" == 1 and .waiting == 0" stats-after.json &&
	test $(flux exec -r 1 flux module stats sdexec | jq ".\"usage-gather\".\"messages-out\"") -ge 1
'
test_expect_success 'the job eventlog has the memo' '
	flux job eventlog $id | grep "memo sdexec=" &&
	flux job eventlog $id | grep -c "memo sdexec=.*\"cpu\"" >memos &&
	test $(cat memos) -eq 1
'
test_expect_success 'the shipped format: flux jobs -o sdexec' '
	mkdir -p xdg/flux &&
	cp "$SDEXEC_SRCDIR/conf.d/flux-jobs.toml" xdg/flux/ &&
	XDG_CONFIG_HOME=$PWD/xdg flux jobs -a -o sdexec >preset.out &&
	test_debug "cat preset.out" &&
	grep "$(flux job id --to=f58 $id).* $maxmem " preset.out
'
test_expect_success 'a job on ranks 1 and 2 only is gathered and written the same way' '
	id2=$(burn_submit -N2 --requires=rank:1-2 --env=BURN_STEPS=0) &&
	flux job wait-event -t $BURN_WAIT $id2 clean &&
	flux jobs -no "{user.sdexec.ranks} {user.sdexec.maxmem_rank}" $id2 >two.out &&
	test_debug "cat two.out" &&
	test "$(cat two.out)" = "2 2" &&
	flux job info $id2 sdexec-usage.1 | jq -e ".rank == 1 and .cpu_s > 0"
'
live_asked() {
	flux exec -r $1 flux module stats sdexec | jq -r ".\"usage-gather\".\"live-asked\" + 100 * .\"usage-gather\".\"live-asked-down\""
}
test_expect_success 'a running job'"'"'s rows are gathered down and up the tree, one ask per child' '
	id4=$(flux submit -N3 -n3 sleep 300) &&
	flux job wait-event -t $T -p exec $id4 shell.start &&
	before="$(live_asked 0) $(live_asked 1) $(live_asked 2)" &&
	flux sdexec usage -o json $id4 >live.json &&
	test_debug "cat live.json" &&
	jq -e "[.[].ranks[] | select(.running)] | length == 3" live.json &&
	after="$(live_asked 0) $(live_asked 1) $(live_asked 2)" &&
	echo "$before -> $after" &&
	set -- $before $after &&
	test $(($4 - $1)) -eq 101 && test $(($5 - $2)) -eq 101 && test $(($6 - $3)) -eq 1
'
test_expect_success 'sdexec.usage-live refuses a bad job id or wait with EPROTO and stays up' '
	live_rpc() {
		flux python -c "import flux, json, sys
try:
    flux.Flux().rpc(\"sdexec.usage-live\", json.loads(sys.argv[1]), 0).get()
except OSError as e:
    print(e.errno, e.strerror); sys.exit(1)" "$1"
	} &&
	test_must_fail live_rpc "{\"jobid\": \"nojob\"}" >bad1.out &&
	test_must_fail live_rpc "{\"jobid\": \"$(flux job id --to=f58plain $id4)\", \"wait\": 0}" >bad2.out &&
	test_debug "cat bad1.out bad2.out" &&
	grep "^71 .*not an f58plain id" bad1.out &&
	grep "^71 .*wait must be in" bad2.out &&
	flux sdexec usage -o json $id4 >still.json &&
	jq -e "[.[].ranks[] | select(.running)] | length == 3" still.json
'
test_expect_success 'the running job is cancelled; its record is complete' '
	flux cancel $id4 &&
	flux kvs get --waitcreate $(flux job id --to=kvs $id4).sdexec-usage.2 &&
	flux sdexec usage -o json $id4 >done.json &&
	test_debug "cat done.json" &&
	jq -e "[.[].ranks[] | select(.running or .missing)] | length == 0" done.json &&
	jq -e "[.[].ranks[]] | length == 3" done.json
'
test_expect_success 'flux sdexec usage --watch shows CPU% of a running job and ends with it' '
	id3=$(flux submit -N3 -n3 python3 -c "import os, time
t = time.time()
while not os.path.exists(\"burn.stop\") and time.time() - t < 600:
    for i in range(1000000): pass") &&
	test_when_finished "touch burn.stop" &&
	flux job wait-event -t $T -p exec $id3 shell.start &&
	{ flux sdexec usage --watch -i 1 $id3 >watch.out & } &&
	watch=$! &&
	busy() {
		awk "\$4 ~ /^[0-9.]+\$/ && \$4 > 10 {busy = 1} END {exit !busy}" watch.out
	} &&
	sdexec_wait_until busy &&
	touch burn.stop &&
	wait $watch &&
	test_debug "cat watch.out" &&
	grep -q "CPU%" watch.out &&
	tail -4 watch.out >last.out &&
	test $(grep -c " success\$" last.out) -eq 3

'
test_done
