#!/bin/sh

test_description='Multi-user jobs through our sdexec (bgexec): job-exec stop-timer options

A job submitted as another user (a guest) makes job-exec run its shell through
the IMP, and over sdexec ask for Type=notify, KillMode=process,
TimeoutStopUSec=infinity and its stop timer (exec.sdexec-stop-timer-sec and
-signal). Without flux-security, the guest is an instance-owner handle with
FLUX_HANDLE_USERID and a sign-none J, and the IMP is t/fake-imp.py. Checks the
properties on the unit, exit codes through the IMP, escalation SIGTERM ->
configured signal when the IMP lingers after STOPPING=1, and EDEADLK (a job
exception, the rank drained) when it never exits. t0009 runs the same with
bulk-exec.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_extra_config exec.toml <<-EOF
	[exec]
	service = "sdexec"
	method = "bgexec"
	imp = "$SDEXEC_SRCDIR/t/fake-imp.py"
	sdexec-stop-timer-sec = 1
	sdexec-stop-timer-signal = 10
	EOF

sdexec_under_flux 2 jobs
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"
. "$SDEXEC_SRCDIR/t/lib/sharness-multiuser.sh"

# shell_unit RANK ID: bgexec labels a multi-user job's shells imp-shell-<rank>-<jobid>.
shell_unit() {
	echo "imp-shell-$1-$(flux job id --to=f58plain "$2")-$1:$SDEXEC_INSTANCE.service"
}

test_multiuser_jobs

test_done
