#!/bin/bash
# Our usage gather against every rank committing its own row, at 64 brokers.
#
# Usage: flock /tmp/sdexec-systemd.lock bench/gather_vs_commits.sh [REPS] [--lost]
# Environment: SIZE (brokers, default 64), OUT (JSON lines, default a temporary file),
# TIMEOUT (seconds for the instance, default 900).
#
# One `flux start --test-size=SIZE` with this checkout's sdexec loaded by rc1, as the flux
# tier does it (t/lib/sharness-sdexec.sh: conf.d/sdexec.toml rendered, resources forced up,
# [exec] service = "sdexec"); bench/gather_vs_commits.py runs inside it. Afterwards any unit
# of the instance still loaded (a killed broker's job shell, with --lost) is stopped.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
SIZE=${SIZE:-64}
TIMEOUT=${TIMEOUT:-900}
OUT=${OUT:-$(mktemp "${TMPDIR:-/tmp}/gather-vs-commits.XXXXXX")}
reps=${1:-3}
shift || true

eval "$("$top/t/start-user-systemd.sh")"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gather-vs-commits.XXXXXX")
conf=$tmp/conf
mkdir -p "$conf"
sed -e "s|^sdexec\.module *=.*|sdexec.module = \"$top/flux_sdexec/modules/sdexec.py\"|" \
    -e "s|^sdexec-mapper\.module *=.*|sdexec-mapper.module = \"$top/flux_sdexec/modules/sdexec-mapper.py\"|" \
    "$top/conf.d/sdexec.toml" >"$conf/sdexec.toml"
printf '[modules]\nresource.args = ["monitor-force-up"]\n' >"$conf/test-resources.toml"
printf '[exec]\nservice = "sdexec"\n' >"$conf/exec.toml"

stop_leftovers() {
    local inst units
    inst=$(cat "$tmp/instance" 2>/dev/null || true)
    if [ -n "$inst" ]; then
        units=$(systemctl --user list-units --all --plain --no-legend | awk '{print $1}' |
            grep -F "$inst" || true)
        if [ -n "$units" ]; then
            echo "gather_vs_commits.sh: stopping what the instance left: $units" >&2
            # shellcheck disable=SC2086
            systemctl --user stop $units || true
            systemctl --user reset-failed $units 2>/dev/null || true
        fi
    fi
    rm -rf "$tmp"
}
trap stop_leftovers EXIT

export PYTHONPATH=$top${PYTHONPATH:+:$PYTHONPATH}
echo "gather_vs_commits.sh: git $(git -C "$top" describe --always --dirty), $SIZE brokers," \
    "$reps repetitions, JSON lines in $OUT" >&2
timeout --kill-after=30 "$TIMEOUT" flux start --test-size="$SIZE" --config-path="$conf" \
    -Slog-filename="$tmp/broker.log" -Slog-stderr-level=1 \
    flux python "$here/gather_vs_commits.py" --conf-dir "$conf" --reps "$reps" \
    --out "$OUT" --instance-file "$tmp/instance" "$@"
