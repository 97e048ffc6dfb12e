#!/bin/bash
# Compare flux-core's C sdexec module with flux-sdexec's Python one.
#
# Usage: bench/compare.sh [bench.py options, e.g. --runs 40 --jobs 200 --json out.json,
#        --order ours,C, --rounds 2 (ABBA; raise BENCH_TIMEOUT), --profile ours (py-spy
#        the module during one extra cat run; needs py-spy on PATH)]
#
# Starts ONE `flux start --test-size=2` instance with [exec] service = "sdexec" and, for each
# module in turn (C first), loads it on both ranks (plus sdbus for C), measures launch latency,
# cat throughput (line and raw mode), 32/200 concurrent launches, module CPU and RSS and a
# 200-job burst, unloads it, and prints a table (bench/chart.py draws --json output).
#
# Environment: C_MODULE, PY_MODULE (module paths), BENCH_TIMEOUT (seconds for the whole
# instance, default 330), FILE_MB (size of the cat file, default 20), USAGE (ours'
# `[sdexec] usage`: jobs, all or none; unset: the module's default, jobs).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
C_MODULE=${C_MODULE:-/usr/local/lib/flux/modules/sdexec.so}
PY_MODULE=${PY_MODULE:-$top/flux_sdexec/modules/sdexec.py}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-330}
FILE_MB=${FILE_MB:-20}

die() { echo "compare.sh: $*" >&2; exit 1; }

command -v flux >/dev/null || die "flux not found on PATH"
[ -r "$C_MODULE" ] || die "C module $C_MODULE not found"
[ -r "$PY_MODULE" ] || die "Python module $PY_MODULE not found"
C_MODULE=$(readlink -f "$C_MODULE")
PY_MODULE=$(readlink -f "$PY_MODULE")

# A systemd user instance and its bus (both modules talk to it).
if [ -x "$top/t/start-user-systemd.sh" ]; then
    eval "$("$top/t/start-user-systemd.sh")"
fi
systemctl --user is-system-running >/dev/null 2>&1 ||
    [ -n "$(systemctl --user is-system-running 2>/dev/null)" ] ||
    die "no systemd user instance answers (XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-unset})"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sdexec-bench.XXXXXX")
flux_pid=
cleanup() {
    rc=$?
    trap - EXIT INT TERM
    # `timeout` leads its own process group: flux start, the brokers, bench.py and its clients.
    if [ -n "$flux_pid" ] && kill -0 -- "-$flux_pid" 2>/dev/null; then
        echo "compare.sh: stopping the instance (process group $flux_pid)" >&2
        kill -TERM "$flux_pid" 2>/dev/null || true # timeout passes it on to flux start
        for _ in $(seq 1 ${STOP_TIMEOUT:-45}0); do
            kill -0 -- "-$flux_pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 -- "-$flux_pid" 2>/dev/null; then
            echo "compare.sh: instance still up after ${STOP_TIMEOUT:-45}s, killing it" >&2
            kill -KILL -- "-$flux_pid" 2>/dev/null || true
        fi
    fi
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The config: run job shells through sdexec. systemd.enable stays off so that rc1 loads
# neither sdbus nor sdexec; the benchmark loads each module itself.
mkdir -p "$tmp/conf"
cat >"$tmp/conf/exec.toml" <<'EOF'
[exec]
service = "sdexec"
EOF
if [ -n "${USAGE:-}" ]; then
    printf '[sdexec]\nusage = "%s"\n' "$USAGE" >"$tmp/conf/sdexec.toml"
    echo "compare.sh: ours with [sdexec] usage = \"$USAGE\""
fi

# The cat file: FILE_MB MB (10^6 bytes) of 76-character lines (77 bytes with the newline).
flux python - "$tmp/lines.txt" "$FILE_MB" <<'EOF'
import base64, os, sys
path, mb = sys.argv[1], int(sys.argv[2])
nlines = mb * 1000000 // 77
block = base64.b64encode(os.urandom(57 * 1000))  # 76000 characters
with open(path, "wb") as f:
    for i in range(0, nlines, 1000):
        n = min(1000, nlines - i)
        f.write(b"".join(block[j * 76:(j + 1) * 76] + b"\n" for j in range(n)))
        block = block[76:] + block[:76]
EOF
echo "compare.sh: $(stat -c %s "$tmp/lines.txt") bytes in $tmp/lines.txt" >&2

# Which code is measured (the tree may be changing under us).
echo "compare.sh: $(flux version | head -1 | tr -s ' \t' ' ')"
echo "compare.sh: C module $C_MODULE sha256 $(sha256sum <"$C_MODULE" | cut -c1-12)"
pkg=$(dirname "$(dirname "$PY_MODULE")")
echo "compare.sh: ours $PY_MODULE; $(basename "$pkg")/*.py sha256" \
    "$(find "$pkg" -name '*.py' -not -path '*/__pycache__/*' | sort | xargs cat | sha256sum |
        cut -c1-12); git $(git -C "$top" describe --always --dirty 2>/dev/null || echo n/a)"

echo "compare.sh: flux start --test-size=2 (timeout ${BENCH_TIMEOUT}s)" >&2
timeout --kill-after=20 "$BENCH_TIMEOUT" \
    flux start --test-size=2 --config-path="$tmp/conf" \
    flux python "$here/bench.py" \
    --c-module "$C_MODULE" --py-module "$PY_MODULE" --file "$tmp/lines.txt" "$@" &
flux_pid=$!
set +e
wait "$flux_pid"
rc=$?
set -e
flux_pid=
[ $rc -eq 124 ] && echo "compare.sh: the instance timed out after ${BENCH_TIMEOUT}s" >&2

left=$(systemctl --user list-units --all --no-legend --plain '*shell*' 2>/dev/null || true)
if [ -n "$left" ]; then
    echo "compare.sh: units named *shell* in the user manager after the run (bench.py checked" \
        "this run's jobs itself; these may belong to other Flux instances on the host):" >&2
    echo "$left" >&2
fi
exit $rc
