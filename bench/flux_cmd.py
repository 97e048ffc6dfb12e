"""Running flux commands for the benchmark: against one broker, its attributes, loading and
unloading a module on some ranks, the kernel log.
"""

import json
import os
import subprocess
import sys
import time

from procfs import BenchError

DEVNULL = subprocess.DEVNULL


def log(text):
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


RANK_URI = {}  # rank -> local-uri, for commands aimed at one broker (see rank_uris())


def run(args, timeout=60, check=True, rank=None, **kw):
    """Run a command (against broker ``rank`` if given); return CompletedProcess."""
    if rank is not None:
        kw["env"] = dict(os.environ, FLUX_URI=RANK_URI[rank])
    kw.setdefault("stdin", DEVNULL)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    try:
        p = subprocess.run(args, timeout=timeout, text=True, **kw)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout}s: {' '.join(args)}") from None
    if check and p.returncode != 0:
        raise BenchError(f"rc={p.returncode}: {' '.join(args)}\n{p.stderr or ''}")
    return p


def rank_attrs(size):
    """{rank: (local-uri, broker.pid)}: all brokers run on this host (--test-size).

    Asked over RPC rather than with ``flux exec -r N``: flux-core 0.88's rexec logs
    "fbuf_read_watcher on stdout" errors for some multi-line outputs.
    """
    import flux

    h = flux.Flux()
    attrs = {}
    for rank in range(size):

        def get(name):
            return h.rpc("attr.get", {"name": name}, nodeid=rank).get()["value"]

        attrs[rank] = (get("local-uri"), int(get("broker.pid")))
    return attrs


def instance_brokers(size=None):
    """{rank: broker.pid} of this instance, RANK_URI filled in, once checked that job shells
    run through sdexec, that the instance has ``size`` brokers (when given) and that none of
    them has an sdexec module loaded yet."""
    conf = json.loads(run(["flux", "config", "get"]).stdout)
    if conf.get("exec", {}).get("service") != "sdexec":
        raise BenchError('[exec] service = "sdexec" is not configured')
    n = int(run(["flux", "getattr", "size"]).stdout)
    if size is not None and n != size:
        raise BenchError(f"instance size is {n}, expected {size}")
    attrs = rank_attrs(n)
    RANK_URI.update({r: a[0] for r, a in attrs.items()})
    for rank in attrs:
        if "sdexec" in loaded(rank):
            raise BenchError(f"rank {rank}: an sdexec module is already loaded")
    return {r: a[1] for r, a in attrs.items()}


def module_order(text):
    """``--order``'s value ("C,ours" or "ours,C") as a list."""
    order = text.split(",")
    if sorted(order) != ["C", "ours"]:
        raise BenchError("--order must name C and ours once each")
    return order


def exit_with(main):
    """Exit with what ``main()`` returns; a BenchError is logged and exits 2."""
    try:
        sys.exit(main())
    except BenchError as exc:
        log(f"error: {exc}")
        sys.exit(2)


# ---- module load/unload ----


def loaded(rank):
    p = run(["flux", "module", "list"], rank=rank, timeout=30)
    return {line.split()[0] for line in p.stdout.splitlines()[1:] if line.strip()}


def load_module(kind, path, ranks):
    for rank in ranks:
        if kind == "C" and "sdbus" not in loaded(rank):
            run(["flux", "module", "load", "sdbus"], rank=rank, timeout=60)
        run(["flux", "module", "load", path], rank=rank, timeout=60)
        if "sdexec" not in loaded(rank):
            raise BenchError(f"rank {rank}: sdexec not listed after loading {path}")


def unload_module(kind, ranks):
    for rank in reversed(ranks):
        run(["flux", "module", "remove", "sdexec"], rank=rank, timeout=60)
        if kind == "C":
            run(["flux", "module", "remove", "sdbus"], rank=rank, timeout=60)


def dmesg_lines(rank):
    return run(["flux", "dmesg"], rank=rank, timeout=30).stdout.splitlines()


def dmesg_problems(ranks):
    keys = (".err[", ".crit[", ".alert[", ".emerg[", ".warning[")
    return [line for r in ranks for line in dmesg_lines(r) if any(k in line for k in keys)]


def usage_sources(ranks):
    """{rank: where our sdexec reads a job shell's usage: unit, slice or learning}, from its
    ``flux module stats`` (doc/guide/usage.md)."""
    sources = {}
    for rank in ranks:
        stats = json.loads(run(["flux", "module", "stats", "sdexec"], rank=rank).stdout)
        sources[str(rank)] = (stats.get("usage-source") or {}).get("source") or "learning"
    return sources
