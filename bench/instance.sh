# Sourced by bench/compare.sh and bench/soak.sh (after `set -euo pipefail`, with `name` set to
# the script's name for messages): the modules to compare, a systemd user instance, a temporary
# directory removed on exit, the instance's config in $tmp/conf, and two functions:
# bench_which prints which code is measured, bench_run PROGRAM ARGS... runs
# `flux python PROGRAM --c-module C --py-module PY ARGS...` as the initial program of one
# `flux start --test-size=2` instance, stopped after BENCH_TIMEOUT seconds, and returns its rc.
#
# Environment: C_MODULE, PY_MODULE (module paths), BENCH_TIMEOUT (seconds for one instance,
# default 330), USAGE (ours' `[sdexec] usage`: jobs, all or none; unset: the module's
# default, jobs), STOP_TIMEOUT (seconds an instance may take to stop once told, 45).

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
C_MODULE=${C_MODULE:-/usr/local/lib/flux/modules/sdexec.so}
PY_MODULE=${PY_MODULE:-$top/flux_sdexec/modules/sdexec.py}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-330}

die() { echo "$name: $*" >&2; exit 1; }

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
    # `timeout` leads its own process group: flux start, the brokers, the program and its clients.
    if [ -n "$flux_pid" ] && kill -0 -- "-$flux_pid" 2>/dev/null; then
        echo "$name: stopping the instance (process group $flux_pid)" >&2
        kill -TERM "$flux_pid" 2>/dev/null || true # timeout passes it on to flux start
        for _ in $(seq 1 ${STOP_TIMEOUT:-45}0); do
            kill -0 -- "-$flux_pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 -- "-$flux_pid" 2>/dev/null; then
            echo "$name: instance still up after ${STOP_TIMEOUT:-45}s, killing it" >&2
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
# neither sdbus nor sdexec; the program loads each module itself.
mkdir -p "$tmp/conf"
cat >"$tmp/conf/exec.toml" <<'TOML'
[exec]
service = "sdexec"
TOML
if [ -n "${USAGE:-}" ]; then
    printf '[sdexec]\nusage = "%s"\n' "$USAGE" >"$tmp/conf/sdexec.toml"
    echo "$name: ours with [sdexec] usage = \"$USAGE\""
fi

# Which code is measured (the tree may be changing under us).
bench_which() {
    echo "$name: $(flux version | head -1 | tr -s ' \t' ' ')"
    echo "$name: C module $C_MODULE sha256 $(sha256sum <"$C_MODULE" | cut -c1-12)"
    pkg=$(dirname "$(dirname "$PY_MODULE")")
    echo "$name: ours $PY_MODULE; $(basename "$pkg")/*.py sha256" \
        "$(find "$pkg" -name '*.py' -not -path '*/__pycache__/*' | sort | xargs cat | sha256sum |
            cut -c1-12); git $(git -C "$top" describe --always --dirty 2>/dev/null || echo n/a)"
}

bench_run() {
    local program=$1 rc left
    shift
    echo "$name: flux start --test-size=2 (timeout ${BENCH_TIMEOUT}s)" >&2
    timeout --kill-after=20 "$BENCH_TIMEOUT" \
        flux start --test-size=2 --config-path="$tmp/conf" \
        flux python "$program" --c-module "$C_MODULE" --py-module "$PY_MODULE" "$@" &
    flux_pid=$!
    set +e
    wait "$flux_pid"
    rc=$?
    set -e
    flux_pid=
    [ $rc -eq 124 ] && echo "$name: the instance timed out after ${BENCH_TIMEOUT}s" >&2
    left=$(systemctl --user list-units --all --no-legend --plain '*shell*' 2>/dev/null || true)
    if [ -n "$left" ]; then
        echo "$name: units named *shell* in the user manager after the run (the program" \
            "checked this run's jobs itself; these may belong to other Flux instances):" >&2
        echo "$left" >&2
    fi
    return $rc
}
