"""The overlay messages at rank 0 when every rank commits its own row (variant ``commits`` of
bench/gather_vs_commits.py) with no job and no sdexec: an instance that needs no systemd.

    flux start --test-size=64 flux python bench/commits_traffic.py [--reps 3] [--spread S]

Loads bench/gatherbench.py on every rank, then per repetition publishes ``gatherbench.write``
for a made-up job id while ``flux overlay trace`` runs at rank 0, and prints a JSON line:
the messages it saw, rank 0's broker CPU (the tracer's share in it), its KVS transactions and
root versions, and the time from the last rank's write to the last commit answered.
``--spread S``: rank r writes ``S * r / size`` seconds after the event (shells that end
apart), so the KVS has fewer commits to merge.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import flux

sys.path.insert(0, str(Path(__file__).resolve().parent))

from flux_cmd import run  # noqa: E402
from gather_vs_commits import HERE, ROW, OverlayTrace, delta  # noqa: E402
from procfs import cpu_seconds  # noqa: E402

FIRST_ID = 1 << 40  # made-up job ids, far above any this instance gives


def counts(h, broker):
    """Rank 0's broker CPU (its process, schedstat), KVS transactions and root versions."""
    kvs = h.rpc("kvs.stats-get", {}, nodeid=0).get()
    return {
        "cpu_broker": cpu_seconds(f"/proc/{broker}"),
        "kvs_txns": kvs.get("transaction-opcount", {}).get("commit", {}).get("count", 0),
        "kvs_roots": kvs["namespace"]["primary"]["store revision"],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--spread", type=float, default=0.0, help="rank r writes r/size of it late")
    args = ap.parse_args()
    h = flux.Flux()
    size = int(h.attr_get("size"))
    broker = int(h.attr_get("broker.pid"))
    run(["flux", "exec", "-r", "all", "flux", "module", "load", str(HERE / "gatherbench.py")], 300)
    for rep in range(args.reps):
        jobid = FIRST_ID + rep
        tracer = OverlayTrace()
        before = counts(h, broker)
        body = {"jobid": jobid, "row": ROW, "skip": [], "spread_s": args.spread}
        h.event_send("gatherbench.write", body)
        time.sleep(2 + args.spread)
        res = {"rep": rep, **tracer.stop(), **delta(before, counts(h, broker))}
        times = [h.rpc("gatherbench.times", {"jobid": jobid}, nodeid=r).get() for r in range(size)]
        answered = [t["answered"] for t in times if "answered" in t]
        res["answered"] = len(answered)
        if answered:
            last_event = max(t["event"] for t in times)
            res["ms_to_record"] = round((max(answered) - last_event) * 1e3, 1)
        print(json.dumps(res), flush=True)
    run(["flux", "exec", "-r", "all", "flux", "module", "remove", "gatherbench"], 300)


if __name__ == "__main__":
    main()
