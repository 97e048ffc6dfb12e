"""What this host's user manager can never enforce, known at load, and what it does to a check.

On a unified (cgroup v2 only) host systemd's *user* manager attaches no device program
(systemd#23198): every constrained job asked for DevicePolicy=closed and failed its post-start
check under ``enforce``, and job-exec drained the rank. Such constraints are now known at load
(``unenforceable``); under ``enforce`` one of them found not enforced is counted as
``unenforceable`` and the job runs, unless ``sdexec.containment-required`` names it. The fake
trees are cgroup_trees.py's; hybrid and legacy mount a v1 devices hierarchy, where nothing
changes.
"""

from pathlib import Path

import pytest

from flux_sdexec.broker import containment_check, device_programs
from flux_sdexec.containment import cgroups, enforcement, unenforceable
from flux_sdexec.containment.enforcement import (
    ENFORCED,
    NOT_CHECKABLE,
    NOT_ENFORCED,
    USER_MANAGER_DEVICES,
    PostStartCheck,
    Verdict,
)
from flux_sdexec.containment.unenforceable import NO_V1_DEVICES, UNENFORCEABLE

from cgroup_trees import GIB, PID, Tree, refused
from stubs import StubLog

DEVICES = {"DeviceAllow": USER_MANAGER_DEVICES, "DevicePolicy": USER_MANAGER_DEVICES}
# what the default mapper asks of a job shell with one core and a MemoryMax to scale
WANTED = {"AllowedCPUs": "0", "MemoryMax": "4G", "DevicePolicy": "closed"}
DEVICE_REASON = f"unified: {USER_MANAGER_DEVICES}"


# ---- the pure set ----


def test_unified_user_manager_never_applies_device_policies():
    """Unified, no v1 devices hierarchy, a user manager: both device constraints, each with
    the reason the verdicts give."""
    assert unenforceable.unenforceable(cgroups.UNIFIED, v1_devices=False) == DEVICES


@pytest.mark.parametrize("layout", [cgroups.HYBRID, cgroups.LEGACY])
def test_a_v1_devices_hierarchy_applies_them(layout):
    """Hybrid and legacy with the v1 devices controller mounted: nothing is unenforceable
    (the user manager writes devices.list; the check reads it)."""
    assert unenforceable.unenforceable(layout, v1_devices=True) == {}


@pytest.mark.parametrize("layout", [cgroups.HYBRID, cgroups.LEGACY])
def test_v1_layouts_without_a_devices_hierarchy(layout):
    """No devices controller mounted on a v1 layout: no manager can apply a device policy."""
    assert unenforceable.unenforceable(layout, v1_devices=False) == {
        "DeviceAllow": NO_V1_DEVICES,
        "DevicePolicy": NO_V1_DEVICES,
    }


def test_roots_user_manager_applies_device_policies_on_unified():
    """Root's user manager attaches BPF device programs on v2 (an unprivileged one cannot):
    nothing is unenforceable there; each start's verdict reads the program back."""
    assert unenforceable.unenforceable(cgroups.UNIFIED, False, privileged=True) == {}


def test_a_system_manager_or_an_unknown_layout_has_none():
    """The system manager attaches device programs on v2; a layout not known (mountinfo
    unreadable) claims nothing."""
    assert unenforceable.unenforceable(cgroups.UNIFIED, False, user_manager=False) == {}
    assert unenforceable.unenforceable("unknown", False) == {}


def test_classify_marks_only_unenforceable_constraints_not_required():
    """A NOT_ENFORCED verdict of a constraint in the set becomes UNENFORCEABLE (reason and
    hierarchy kept); a required one, another constraint, or another outcome is unchanged."""
    verdicts = [
        Verdict("MemoryMax", NOT_ENFORCED, "unified: v2 memory.max is max, expected 4G", "v2"),
        Verdict("DeviceAllow", NOT_ENFORCED, DEVICE_REASON, "v2"),
        Verdict("DevicePolicy", NOT_ENFORCED, DEVICE_REASON, "v2"),
        Verdict("AllowedCPUs", ENFORCED, "unified: v2 cpuset.cpus.effective is 0", "v2"),
    ]
    assert unenforceable.classify(verdicts, DEVICES, required=("DeviceAllow",)) == [
        verdicts[0],
        verdicts[1],
        Verdict("DevicePolicy", UNENFORCEABLE, DEVICE_REASON, "v2"),
        verdicts[3],
    ]
    imp = [Verdict("DevicePolicy", NOT_CHECKABLE, f"unified: {enforcement.IMP_DEVICES}", "v2")]
    assert unenforceable.classify(imp, DEVICES) == imp
    assert unenforceable.classify(verdicts, {}) == verdicts


def test_an_unenforceable_verdict_fails_nothing_and_is_what_the_job_is_told():
    """failure() ignores UNENFORCEABLE; not_applied() is the job's memo."""
    verdicts = unenforceable.classify(
        [
            Verdict("AllowedCPUs", ENFORCED, "unified: v2 cpuset.cpus.effective is 0", "v2"),
            Verdict("DevicePolicy", NOT_ENFORCED, DEVICE_REASON, "v2"),
        ],
        DEVICES,
    )
    assert enforcement.failure(verdicts) is None
    assert unenforceable.not_applied(verdicts) == {"DevicePolicy": DEVICE_REASON}


def test_required_conflicts():
    """The required constraints this host never enforces, with why."""
    assert unenforceable.required_conflicts(("MemoryMax", "DevicePolicy"), DEVICES) == {
        "DevicePolicy": USER_MANAGER_DEVICES
    }
    assert unenforceable.required_conflicts(("DevicePolicy",), {}) == {}


def test_the_tally_counts_the_outcome_apart():
    """Stats have an ``unenforceable`` count per constraint beside the other three."""
    tally = enforcement.Tally()
    tally.add([Verdict("DevicePolicy", UNENFORCEABLE, DEVICE_REASON, "v2")])
    entry = tally.stats()["DevicePolicy"]
    assert {o: entry[o] for o in enforcement.OUTCOMES} == {
        ENFORCED: 0,
        NOT_ENFORCED: 0,
        NOT_CHECKABLE: 0,
        UNENFORCEABLE: 1,
    }
    assert entry["last_reason"] == DEVICE_REASON


# ---- the host's set, read at load ----


def test_host_set_from_each_layouts_mounts(tmp_path):
    """Unified: the device constraints; hybrid and legacy with v1 devices: none; a hybrid
    host without the devices hierarchy: the device constraints; no mountinfo: none."""
    got = {}
    for layout in (cgroups.UNIFIED, cgroups.HYBRID, cgroups.LEGACY):
        tree = Tree(tmp_path / layout, layout)
        got[layout] = containment_check.host_unenforceable(str(tree.proc), privileged=False)
    assert got == {cgroups.UNIFIED: DEVICES, cgroups.HYBRID: {}, cgroups.LEGACY: {}}
    bare = Tree(tmp_path / "bare", cgroups.HYBRID)
    mountinfo = bare.proc / "self" / "mountinfo"
    lines = mountinfo.read_text().splitlines()
    mountinfo.write_text("\n".join(x for x in lines if not x.endswith(",devices")) + "\n")
    assert containment_check.host_unenforceable(str(bare.proc), privileged=False) == {
        "DeviceAllow": NO_V1_DEVICES,
        "DevicePolicy": NO_V1_DEVICES,
    }
    assert containment_check.host_unenforceable(str(tmp_path / "nowhere")) == {}


# ---- the checker under each policy ----


class Memos:
    """The checker's memo hook: what it was called with."""

    def __init__(self):
        self.calls = []

    def __call__(self, unit, constraints):
        self.calls.append((unit, constraints))


def checker(
    tree, policy="enforce", required=(), programs=device_programs.attached, privileged=False
):
    """A checker of ``tree``'s host (an unprivileged manager unless ``privileged``);
    ``programs``: the BPF query."""
    log, memos = StubLog(), Memos()
    c = containment_check.ContainmentChecker(
        log, policy, required, str(tree.proc), memos, privileged, programs
    )
    return c, log, memos


def constrained(**wanted):
    return PostStartCheck(dict(WANTED, **wanted), constrained=True)


@pytest.fixture
def v2(unified):
    """A unified tree where the kernel holds the job's cpuset and memory cap."""
    unified.write("v2", **{"cpuset.cpus.effective": "0", "memory.max": str(4 * GIB)})
    return unified


def test_enforce_unified_job_runs_and_the_device_policy_is_counted_apart(v2):
    """The defect: a constrained job on unified asking DevicePolicy=closed ran no more.
    Now it runs; the stats count DevicePolicy as unenforceable and say why, the set and the
    (empty) required list; the log names it once; the job is told."""
    c, log, memos = checker(v2)
    assert c.check(PID, constrained(), v2.name) is None
    stats = c.stats()
    assert stats["unenforceable"] == DEVICES and stats["required"] == []
    entry = stats["constraints"]["DevicePolicy"]
    assert (entry[UNENFORCEABLE], entry[NOT_ENFORCED]) == (1, 0)
    assert stats["constraints"]["MemoryMax"][ENFORCED] == 1
    assert log.at("warning") == [
        f"{v2.name}: DevicePolicy unenforceable: {DEVICE_REASON} (first seen)"
    ]
    assert log.at("error") == []
    assert memos.calls == [(v2.name, {"DevicePolicy": DEVICE_REASON})]


def test_enforce_any_other_constraint_not_enforced_still_fails(v2):
    """MemoryMax not in force fails the exec as before, DevicePolicy or not."""
    v2.write("v2", **{"memory.max": "max"})
    c, _, memos = checker(v2)
    problem = c.check(PID, constrained(), v2.name)
    assert problem == (
        f"MemoryMax not enforced: unified: v2 memory.max is max, expected 4G ({4 * GIB} bytes)"
    )
    assert memos.calls == []


def test_required_fails_the_exec_and_says_so_at_load(v2):
    """containment-required = ["DevicePolicy"]: the load logs an error that every constrained
    job will fail, and each does, with today's text; nothing is memoed."""
    c, log, memos = checker(v2, required=("DevicePolicy",))
    assert log.at("error") == [
        "containment: DevicePolicy is required (sdexec.containment-required) but never"
        f" enforced on this host ({USER_MANAGER_DEVICES}): every constrained job asking for"
        " it will fail (the default mapper asks for DevicePolicy whenever it maps a job)"
    ]
    assert c.check(PID, constrained(), v2.name) == f"DevicePolicy not enforced: {DEVICE_REASON}"
    assert c.stats()["required"] == ["DevicePolicy"]
    assert c.stats()["constraints"]["DevicePolicy"][NOT_ENFORCED] == 1
    assert memos.calls == []


def test_reconfigure_reads_the_host_again_and_logs_the_conflict(v2):
    """configure() at reload applies policy and required list, reads the host's set again,
    and logs a conflict only where it makes jobs fail (enforce)."""
    c, log, _ = checker(v2, policy="warn", required=("DevicePolicy",))
    assert log.at("error") == []
    c.configure("enforce", ("DeviceAllow",))
    assert (c.policy, c.required, c.unenforceable) == ("enforce", ("DeviceAllow",), DEVICES)
    assert [line.split(" is required")[0] for line in log.at("error")] == [
        "containment: DeviceAllow"
    ]


def test_warn_and_client_properties(v2):
    """Under warn the job runs and is told too; a client's own properties (no
    SDEXEC_R_LOCAL) are counted but never memoed."""
    c, _, memos = checker(v2, policy="warn")
    assert c.check(PID, constrained(), v2.name) is None
    assert c.check(PID, PostStartCheck(dict(WANTED), constrained=False), v2.name) is None
    assert memos.calls == [(v2.name, {"DevicePolicy": DEVICE_REASON})]
    assert c.stats()["constraints"]["DevicePolicy"][UNENFORCEABLE] == 2


def test_hybrid_is_unchanged(hybrid):
    """On this machine's layout the set is empty: a devices.list that allows everything
    fails the exec under enforce exactly as before."""
    hybrid.write("devices", **{"devices.list": "a *:* rwm"})
    c, log, memos = checker(hybrid)
    assert c.stats()["unenforceable"] == {}
    spec = PostStartCheck({"DevicePolicy": "closed"}, constrained=True)
    assert c.check(PID, spec, hybrid.name) == (
        "DevicePolicy not enforced: hybrid: v1 devices.list allows every device (a *:* rwm)"
    )
    assert memos.calls == [] and log.at("error") == []


# ---- what containment-required fails closed on ----

TOP = Path(__file__).resolve().parents[2]
IMP_UNIT = "imp-shell-0-fA.service"


def fail_closed_docs():
    """The containment-required entry of the man page and the guide's Fail-closed item."""
    man = (TOP / "doc" / "man5" / "flux-config-sdexec.rst").read_text()
    guide = (TOP / "doc" / "guide" / "containment.md").read_text()
    entry = man.split("\nsdexec.containment-required\n", 1)[1].split("\nsdexec.", 1)[0]
    item = guide.split("- **Fail-closed**", 1)[1].split("\n\n", 1)[0]
    return " ".join(entry.split()), " ".join(item.split())


def test_required_fails_closed_on_not_enforced_only_and_the_docs_say_so(tmp_path):
    """containment-required fails an exec on a NOT_ENFORCED verdict only: a NOT_CHECKABLE
    one runs the job, required or not. The cases: a multi-user (imp-shell-…) unit's device
    policy sdexec cannot see, a process found in no cgroup of its unit. The man page and the
    guide say which verdicts fail closed and name both cases."""
    required = ("DevicePolicy", "MemoryMax", "AllowedCPUs")
    imp = Tree(tmp_path / "imp", cgroups.UNIFIED, v2_controllers="cpuset memory", unit=IMP_UNIT)
    imp.write("v2", **{"cpuset.cpus.effective": "0", "memory.max": str(4 * GIB)})
    c, _, memos = checker(imp, required=required)
    assert c.check(PID, constrained(), IMP_UNIT) is None
    assert c.stats()["constraints"]["DevicePolicy"][NOT_CHECKABLE] == 1
    outside = Tree(tmp_path / "outside", cgroups.UNIFIED)
    (outside.proc / str(PID) / "cgroup").write_text("0::/init.scope\n")
    c, _, memos = checker(outside, required=required)
    assert c.check(PID, constrained(), outside.name) is None
    assert {n: e[NOT_CHECKABLE] for n, e in c.stats()["constraints"].items()} == dict.fromkeys(
        required, 1
    )
    assert memos.calls == []
    for text in fail_closed_docs():
        for words in ("not-enforced", "not-checkable", "imp-shell-", "in no cgroup of its unit"):
            assert words in text, f"{words!r} not in: {text}"


# ---- a multi-user unit: what the IMP attached, where the kernel says ----


def imp_tree(root, layout=cgroups.UNIFIED):
    """An imp-shell unit whose main process, the IMP, is in a cgroup of its own below the
    unit's (``job``): where the IMP attaches its device program."""
    tree = Tree(root, layout, v2_controllers="cpuset memory", unit=IMP_UNIT)
    (tree.unit["v2"] / "job").mkdir()
    lines = (tree.proc / str(PID) / "cgroup").read_text().splitlines()
    lines = [x + "/job" if x.startswith("0::") else x for x in lines]
    (tree.proc / str(PID) / "cgroup").write_text("\n".join(lines) + "\n")
    return tree


def answers(unit, job):
    """The BPF query answering ``unit`` for the unit's cgroup and ``job`` for the IMP's
    (None: refused)."""

    def query(path):
        count = {IMP_UNIT: unit, "job": job}[Path(path).name]
        return refused(path) if count is None else count

    return query


def test_an_imp_shell_unit_is_checked_where_the_bpf_query_answers(tmp_path):
    """An imp-shell unit is no longer exempt by its name where the kernel says what the IMP
    attached (the query on the unit's cgroup and on the IMP's own cgroup below it): no
    program on either is not-enforced, and a required DevicePolicy fails the exec saying
    so; a program on the IMP's cgroup is enforced; only a query the kernel does not answer
    leaves the name's not-checkable."""
    wanted = {"DevicePolicy": "closed"}
    imp = imp_tree(tmp_path / "unified")
    none = "unified: no BPF device program is attached to the unit's cgroup or the IMP's below it"
    assert imp.verdicts(wanted, answers(0, 0)) == {"DevicePolicy": (NOT_ENFORCED, none, "v2")}
    one = "unified: v2 BPF device programs attached to the unit's cgroup and the IMP's below it: 1"
    assert imp.verdicts(wanted, answers(0, 1)) == {"DevicePolicy": (ENFORCED, one, "v2")}
    assert imp.verdicts(wanted, answers(0, None)) == {
        "DevicePolicy": (NOT_CHECKABLE, f"unified: {enforcement.IMP_DEVICES}", "v2")
    }
    imp.write("v2", **{"cpuset.cpus.effective": "0", "memory.max": str(4 * GIB)})
    c, _, _ = checker(imp, required=("DevicePolicy",), programs=answers(0, 0))
    assert c.check(PID, constrained(), IMP_UNIT) == f"DevicePolicy not enforced: {none}"
    c, _, _ = checker(imp, required=("DevicePolicy",), programs=answers(0, 1))
    assert c.check(PID, constrained(), IMP_UNIT) is None
    hybrid = imp_tree(tmp_path / "hybrid", cgroups.HYBRID)
    hybrid.write("devices", **{"devices.list": "a *:* rwm"})
    assert hybrid.verdicts(wanted, answers(0, 0)) == {
        "DevicePolicy": (
            NOT_ENFORCED,
            "hybrid: v1 devices.list allows every device (a *:* rwm), and no BPF device"
            " program is attached to the unit's cgroup or the IMP's below it",
            "v1:devices",
        )
    }
    hybrid_one = one.replace("unified", "hybrid")
    assert hybrid.verdicts(wanted, answers(1, 0)) == {"DevicePolicy": (ENFORCED, hybrid_one, "v2")}


# ---- a BPF query the kernel refused ----


def test_a_refused_bpf_query_is_the_reason_under_roots_manager(v2):
    """Root's manager (nothing unenforceable): a BPF query the kernel refused fails the exec
    naming the refused query, not the unprivileged user manager's systemd#23198; under an
    unprivileged manager that stays the reason, and the job runs without its policy."""
    c, _, memos = checker(v2, programs=refused, privileged=True)
    assert c.check(PID, constrained(), v2.name) == (
        "DevicePolicy not enforced: unified: the BPF program query was refused (EPERM):"
        " device policy cannot be verified"
    )
    assert memos.calls == []
    c, _, memos = checker(v2, programs=refused)
    assert c.check(PID, constrained(), v2.name) is None
    assert memos.calls == [(v2.name, {"DevicePolicy": DEVICE_REASON})]
