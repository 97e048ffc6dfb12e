#!/bin/sh

test_description='A 3-node guest job'"'"'s usage, gathered up the tree to its memo

With bgexec and bulk-exec, a guest job on 3 nodes burns about a second of CPU per node under
/usr/bin/time. Each node'"'"'s sdexec reads its shell'"'"'s slice (in its own non-root manager)
and the rows go up the overlay to rank 0, which writes the record and the memo: flux jobs -o
shows the job'"'"'s CPU, the sum of the rows of flux sdexec usage, each row within 5% of what
/usr/bin/time measured on its node. Peak memory is the largest row'"'"'s, and within 10% of
/usr/bin/time'"'"'s where the layout gives it (this machine'"'"'s hybrid layout gives a non-root
manager no memory figures: both are then empty).'

. "$(dirname "$0")/sharness-nodes.sh"

# within A B PERCENT: A is within PERCENT% of B.
within() {
	echo "$1 $2 $3" | awk "{d = \$1 - \$2; if (d < 0) d = -d; exit !(d <= \$2 * \$3 / 100)}"
}
# /usr/bin/time's "%U %S %M" of each task, after its label: "RANK: USER SYS MAXRSS_KIB". On
# stdout: the job shell sends a task's stderr on as it comes (time writes a field at a time),
# its stdout a line at a time.
BURN='/usr/bin/time -f "%U %S %M" /usr/bin/python3 -c "
x = 0
for i in range(20000000): x += i
b = bytearray(100 << 20)" 2>&1'

for method in bgexec bulk-exec; do
	test_expect_success "$method: job-exec launches new jobs with it" '
		site_method $method
	'
	test_expect_success "$method: a 3-node job burns CPU; flux jobs -o shows its usage" '
		guest1 timeout $T flux run -N3 -n3 --label-io sh -c "$BURN" >time.out &&
		id=$(guest1 flux job last) &&
		owner flux job wait-event -t $T $id clean &&
		owner flux jobs -no "{user.sdexec.ranks} {user.sdexec.cpu} {user.sdexec.maxmem}" \
			$id >memo.out &&
		test_debug "cat time.out memo.out" &&
		read ranks cpu maxmem <memo.out &&
		test "$ranks" = 3
	'
	test_expect_success "$method: the memo is the sum and the max of the rows" '
		owner flux sdexec usage -o json $id >rows.json &&
		owner flux sdexec usage $id &&
		jq -e "[.[].ranks[] | select(.missing | not)] | length == 3" rows.json &&
		sum=$(jq "[.[].ranks[] | .cpu_user_s + .cpu_sys_s] | add" rows.json) &&
		max=$(jq -r "[.[].ranks[].memory_peak | values] | max // empty" rows.json) &&
		echo "memo cpu $cpu maxmem ${maxmem:-empty}; rows sum $sum max ${max:-empty}" &&
		within "$cpu" "$sum" 0.001 &&
		test "${maxmem:-}" = "${max:-}"
	'
	test_expect_success "$method: each row is within 5% (CPU) and 10% (peak) of /usr/bin/time" '
		for r in 0 1 2; do
			set -- $(sed -n "s/^$r: \([0-9.]* [0-9.]* [0-9]*\)\$/\1/p" time.out) &&
			test $# -eq 3 &&
			row=$(jq -c ".[].ranks[] | select(.rank == $r)" rows.json) &&
			cpu_r=$(echo "$row" | jq ".cpu_user_s + .cpu_sys_s") &&
			peak_r=$(echo "$row" | jq -r ".memory_peak // empty") &&
			echo "rank $r: time %U+%S $1+$2 %M $3 KiB; sdexec $cpu_r s, ${peak_r:-no} peak" &&
			within "$cpu_r" "$(echo "$1 $2" | awk "{print \$1 + \$2}")" 5 &&
			{ test -z "$peak_r" || within $((peak_r / 1024)) "$3" 10; } || return 1
		done
	'
done
test_expect_success 'cleanup: back to the site config' '
	site_reset_config
'
test_site_leaves_nothing

test_done
