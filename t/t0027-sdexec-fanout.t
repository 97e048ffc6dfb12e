#!/bin/sh

test_description='brokers sharing one systemd manager see only their own units

Under flux start --test-size=4 every broker runs on this host, with one user
manager. Each module reaches systemd over the bus, whose daemon filters
signals by unit: the signals of units it never tracked that reach a module
stay at the bus daemon NameAcquired, however many units the others run.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_under_flux 4

command -v jq >/dev/null 2>&1 && test_set_prereq JQ

# signals_of RANK: the signals object of that rank's module stats
signals_of() {
	flux exec -r "$1" flux module stats sdexec | jq -c .signals
}

test_expect_success JQ 'each module filters per unit' '
	for r in 0 1 2 3; do
		signals_of $r | jq -e ".filter == \"per-unit\"" || return 1
	done
'
test_expect_success JQ '20 launches on all ranks bring no other unit signal to any module' '
	for i in $(seq 20); do
		$sdexec -r all true </dev/null || return 1
	done &&
	for r in 0 1 2 3; do
		signals_of $r >signals.$r &&
		test_debug "cat signals.$r" &&
		jq -e "(.untracked | type) == \"number\" and .untracked <= 1" signals.$r || return 1
	done
'
test_expect_success 'no unit of this instance is left' '
	sdexec_check_no_units
'
test_done
