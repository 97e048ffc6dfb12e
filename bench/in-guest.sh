#!/bin/sh
# bench/in-guest.sh COMMAND [ARG...]: run a benchmark inside a v2 guest (scripts/vm/run.sh), under
# root's user manager as systemd starts it there (lingering, as t/v2/tier.sh does), after a line
# naming the guest's Debian, kernel and systemd. For example, bench/compare.sh under TCG with
# smaller counts and a longer bound (TCG runs CPU-bound work 10-15x slower):
#
#   V2_RELEASE=trixie scripts/vm/run.sh --timeout 3600 -- bench/in-guest.sh \
#       env BENCH_TIMEOUT=3000 FILE_MB=2 bench/compare.sh --runs 20 --job-runs 5 --jobs 100 \
#       --burst-timeout 1200
loginctl enable-linger root && systemctl start user@0.service || exit 1
export XDG_RUNTIME_DIR=/run/user/0 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/0/bus
echo "bench: Debian $(cat /etc/debian_version), $(uname -r), $(systemctl --version | head -1)," \
    "$(nproc) CPUs"
exec "$@"
