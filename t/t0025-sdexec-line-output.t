#!/bin/sh

test_description='line-mode output reaches flux exec one line per message

flux exec --label-io prints its "RANK: " prefix once per output callback, and
libsubprocess hands it everything buffered per callback: each line must come
in its own message or lines lose their prefix (doc/dev/design.md, "Output, one line per message").
Runs under flux start --test-size=3 with our module on every rank.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_under_flux 3

# check_labeled FILE RANKS EXPECTED: every line of FILE is "R: <line>" for a rank
# in RANKS, and each rank's lines, prefix removed, are EXPECTED in order.
check_labeled() {
	! grep -v "^[0-9]*: " "$1" >"$1.unlabeled" &&
	for r in $2; do
		sed -n "s/^$r: //p" "$1" >"$1.$r" &&
		cmp "$3" "$1.$r" || return 1
	done
}

test_expect_success '100,000 lines from 3 ranks arrive complete, in order, each prefixed once' '
	seq 100000 >seq.expected &&
	$sdexec -r all --label-io seq 100000 >seq.out &&
	test $(wc -l <seq.out) -eq 300000 &&
	check_labeled seq.out "0 1 2" seq.expected
'
test_expect_success 'lines of 1 byte are each prefixed' '
	yes "" | head -n 20000 >empty.expected &&
	$sdexec -r all --label-io sh -c "yes \"\" | head -n 20000" >empty.out &&
	test $(wc -l <empty.out) -eq 60000 &&
	check_labeled empty.out "0 1 2" empty.expected
'
test_expect_success 'lines of 64 KiB are each prefixed' '
	head -c 65535 /dev/zero | tr "\0" y >line64k &&
	echo >>line64k &&
	cat line64k line64k line64k line64k line64k >big.expected &&
	$sdexec -r 1 --label-io cat big.expected >big.out &&
	test $(wc -l <big.out) -eq 5 &&
	check_labeled big.out 1 big.expected
'
test_expect_success 'a line longer than the buffer arrives whole, in buffer-sized pieces' '
	{ echo first && head -c 300000 /dev/zero | tr "\0" z && echo && echo last; } \
		>long.expected &&
	$sdexec -r 2 --setopt=stdout_BUFSIZE=65536 cat long.expected >long.out &&
	cmp long.expected long.out
'
test_expect_success 'a partial last line is flushed at EOF, prefixed' '
	printf "one\ntwo\nno newline" >partial.in &&
	$sdexec -r 0 --label-io cat partial.in >partial.out &&
	printf "0: one\n0: two\n0: no newline" >partial.expected &&
	cmp partial.expected partial.out
'
test_expect_success 'a waitable process flooding output keeps a tail within 8 KiB' '
	$sdexec -r 1 --bg --waitable --label=flood seq 1 300000 &&
	$sproc_wait -r 1 --output flood >flood.out &&
	test $(wc -c <flood.out) -le 8192 &&
	test $(($(wc -c <flood.out) + 7)) -gt 8192 &&
	seq 1 300000 | tail -n $(wc -l <flood.out) >flood.expected &&
	test_cmp flood.expected flood.out
'
test_expect_success 'no unit of this instance is left' '
	sdexec_check_no_units
'
test_done
