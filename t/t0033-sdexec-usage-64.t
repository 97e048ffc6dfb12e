#!/bin/sh

test_description='a 64-rank job'"'"'s usage gathered up a 64-broker tree

flux start --test-size=64 on this one node (tbon.topo kary:32: ranks 1-32 under rank 0,
33-63 under rank 1), [exec] service = "sdexec". A 64-rank job'"'"'s record is complete at rank
0 (64 rows, the memo) within 1 s of its last shell'"'"'s exit (the latest of the ranks'"'"'
"usage {...}" debug lines, logged when each sdexec reads the exited unit'"'"'s slice, forwarded
to rank 0'"'"'s log file by log-forward-level=7), and rank 0'"'"'s sdexec received at most one message per
child for it. A running 64-rank job'"'"'s rows are gathered on demand the same way: rank 0
asks each of its 32 children once, rank 1 its 31.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_extra_config exec.toml <<-EOF
	[exec]
	service = "sdexec"
	EOF

sdexec_under_flux 64 jobs -- -Slog-forward-level=7
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"

export FLUX_EXEC_PATH_PREPEND="$SDEXEC_SRCDIR/cmd"

gather_stats() {
	flux module stats sdexec | jq -c ".\"usage-gather\""
}
# exits_seen PLAIN: when each sdexec read an exited shell of job PLAIN, one epoch time a line
# (the broker log file, where rank 0 writes what every rank forwards).
exits_seen() {
	grep "sdexec\.debug.*shell-[0-9]*-$1\.service: usage {" "$SDEXEC_OUTER_TRASH/broker.log" |
		flux python -c "
import sys, datetime
for line in sys.stdin:
    stamp = \" \".join(line.split()[:5])
    t = datetime.datetime.strptime(stamp, \"%b %d %H:%M:%S.%f UTC %Y\")
    print(t.replace(tzinfo=datetime.timezone.utc).timestamp())"
}
# event_time ID NAME: the timestamp of event NAME in job ID's eventlog.
event_time() {
	flux job eventlog -f json "$1" | jq -s "[.[] | select(.name == \"$2\")][0].timestamp"
}

test_expect_success 'rank 0 has 32 children' '
	flux python -c "import flux, json
print(json.dumps(flux.Flux().rpc(\"overlay.topology\", {\"rank\": 0}).get()))" >topo.json &&
	test $(jq ".children | length" topo.json) -eq 32
'
test_expect_success 'a 64-rank job: its record is complete within 1 s of its last shell'"'"'s exit' '
	gather_stats >before.json &&
	id=$(flux submit -N64 -n64 --cwd="$PWD" sh -c "date +%s.%N >end.\$FLUX_TASK_RANK") &&
	flux job wait-event -t $T $id clean &&
	flux jobs -no "{user.sdexec.ranks}" $id >ranks.out &&
	test "$(cat ranks.out)" = 64 &&
	test $(ls end.* | wc -l) -eq 64 &&
	task_end=$(cat end.* | sort -n | tail -1) &&
	exits_seen $(flux job id --to=f58plain $id) >exits &&
	test $(wc -l <exits) -eq 64 &&
	last=$(sort -n exits | tail -1) &&
	finish=$(event_time $id finish) &&
	memo=$(flux job eventlog -f json $id |
		jq -s "[.[] | select(.name == \"memo\" and .context.sdexec.ranks == 64)][0].timestamp") &&
	echo "last task end $task_end, last shell exit $last, memo of 64 ranks $memo," \
		"finish event $finish" &&
	echo "$memo $last" | awk "{exit !(\$1 - \$2 < 1)}"
'
test_expect_success 'every rank has its row in the job KVS directory' '
	flux sdexec usage -o json $id >rows.json &&
	jq -e ".[] | (.ranks | length) == 64 and ([.ranks[] | select(.missing)] | length) == 0" \
		rows.json
'
test_expect_success 'rank 0 received one message per child for the job' '
	gather_stats >after.json &&
	test_debug "cat before.json after.json" &&
	test $(jq -s ".[1].\"messages-in\" - .[0].\"messages-in\"" before.json after.json) -eq 32 &&
	jq -e ".\"most-from-one-child\" == 1 and .waiting == 0" after.json
'
test_expect_success 'a running 64-rank job: every rank live, one ask per child' '
	gather_stats >before.json &&
	flux exec -r 1 flux module stats sdexec | jq -c ".\"usage-gather\"" >before1.json &&
	id=$(flux submit -N64 -n64 sleep 300) &&
	flux job wait-event -t $T -p exec $id shell.start &&
	flux sdexec usage -t 20 -o json $id >live.json &&
	jq -e "[.[].ranks[] | select(.running)] | length == 64" live.json &&
	gather_stats >after.json &&
	flux exec -r 1 flux module stats sdexec | jq -c ".\"usage-gather\"" >after1.json &&
	test_debug "cat before.json after.json before1.json after1.json" &&
	test $(jq -s ".[1].\"live-asked-down\" - .[0].\"live-asked-down\"" before.json after.json) -eq 32 &&
	test $(jq -s ".[1].\"live-asked-down\" - .[0].\"live-asked-down\"" before1.json after1.json) -eq 31 &&
	flux cancel $id &&
	flux job wait-event -t $T $id clean
'
test_done
