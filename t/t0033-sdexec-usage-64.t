#!/bin/sh

test_description='a 64-rank job'"'"'s usage gathered up a 64-broker tree

flux start --test-size=64 on this one node (tbon.topo kary:32: ranks 1-32 under rank 0,
33-63 under rank 1), [exec] service = "sdexec". A 64-rank job'"'"'s record is complete at rank
0 (64 rows, the memo) within 1 s of its last task'"'"'s end (each task writes the time it
ends; its shell exits right after), and rank 0'"'"'s sdexec received at most one message per
child for it.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_extra_config exec.toml <<-EOF
	[exec]
	service = "sdexec"
	EOF

sdexec_under_flux 64 jobs
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"

export FLUX_EXEC_PATH_PREPEND="$SDEXEC_SRCDIR/cmd"

gather_stats() {
	flux module stats sdexec | jq -c ".\"usage-gather\""
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
test_expect_success 'a 64-rank job: its record is complete within 1 s of its last task'"'"'s end' '
	gather_stats >before.json &&
	id=$(flux submit -N64 -n64 --cwd="$PWD" sh -c "date +%s.%N >end.\$FLUX_TASK_RANK") &&
	flux job wait-event -t $T $id clean &&
	flux jobs -no "{user.sdexec.ranks}" $id >ranks.out &&
	test "$(cat ranks.out)" = 64 &&
	test $(ls end.* | wc -l) -eq 64 &&
	last=$(cat end.* | sort -n | tail -1) &&
	finish=$(event_time $id finish) &&
	memo=$(flux job eventlog -f json $id |
		jq -s "[.[] | select(.name == \"memo\" and .context.sdexec.ranks == 64)][0].timestamp") &&
	echo "last task end $last, memo of 64 ranks $memo, finish event $finish" &&
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
test_done
