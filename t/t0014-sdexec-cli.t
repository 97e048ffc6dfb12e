#!/bin/sh

test_description='flux sdexec status, units and map on two brokers

[exec] runs job shells through our sdexec with bgexec (labelled, waitable shells)
and sdexec-constrain-resources, so each shell is a constrained start; the policy
is warn. See t/lib/sharness-cli.sh for the tests.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_extra_config exec.toml <<-EOF
	[exec]
	service = "sdexec"
	method = "bgexec"
	sdexec-constrain-resources = true
	EOF

sdexec_under_flux 2 jobs
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"
. "$SDEXEC_SRCDIR/t/lib/sharness-cli.sh"

test_sdexec_cli
test_done
