#!/bin/bash
# Fan-out across brokers that share one systemd manager, C module vs ours.
#
# Usage: bench/fanout.sh [SIZE...] (default 8 16 32 64); environment: RUNS (timed launches
# per round, default 5), ORDER (default C,ours,ours,C), C_MODULE, PY_MODULE, OUT (a file
# that collects one JSON line per size).
#
# For each SIZE: `flux start --test-size=SIZE` (every broker on this host, one user manager),
# bench/fanout.py loads each module on every rank in turn and times
# `flux exec --service sdexec -r all true`; a table of medians and ratios follows.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
C_MODULE=$(readlink -f "${C_MODULE:-/usr/local/lib/flux/modules/sdexec.so}")
PY_MODULE=$(readlink -f "${PY_MODULE:-$top/flux_sdexec/modules/sdexec.py}")
RUNS=${RUNS:-5}
ORDER=${ORDER:-C,ours,ours,C}
OUT=${OUT:-$(mktemp "${TMPDIR:-/tmp}/sdexec-fanout.XXXXXX")}
sizes=${*:-8 16 32 64}

[ -x "$top/t/start-user-systemd.sh" ] && eval "$("$top/t/start-user-systemd.sh")"
# the flux_sdexec package of the module measured (PY_MODULE may be another checkout's)
export PYTHONPATH=$(dirname "$(dirname "$(dirname "$PY_MODULE")")")${PYTHONPATH:+:$PYTHONPATH}
echo "fanout.sh: ours $PY_MODULE (git $(git -C "$(dirname "$PY_MODULE")" describe --always --dirty 2>/dev/null || echo n/a))" >&2

for n in $sizes; do
    # under the machine-wide lock of the fault tests: a stalled manager is no measurement
    flock /tmp/sdexec-systemd.lock timeout --kill-after=20 1200 flux start --test-size="$n" \
        flux python "$here/fanout.py" --c-module "$C_MODULE" --py-module "$PY_MODULE" \
        --runs "$RUNS" --order "$ORDER" >>"$OUT" || echo "fanout.sh: size $n failed" >&2
done

python3 "$here/fanout_table.py" "$OUT"
echo "fanout.sh: rows in $OUT" >&2
