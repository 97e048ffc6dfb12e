"""The containment checker over temporary /proc and cgroup v2 trees."""

import pytest

from flux_sdexec import config, enforcement
from flux_sdexec.adapters import cgroup
from flux_sdexec.enforcement import ENFORCED, NOT_CHECKABLE, NOT_ENFORCED, PostStartCheck
from flux_sdexec.errors import RequestError
from flux_sdexec.protocol import ExecRequest

PID = 4242
GIB = 1 << 30
PAGE = 4096


@pytest.fixture
def tree(tmp_path):
    """A fake /proc for PID (cgroup v2 mounted at <tmp>/cg) and the unit's cgroup directory."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / str(PID)).mkdir()
    mount = tmp_path / "cg"
    (proc / "self" / "mountinfo").write_text(
        "25 1 0:22 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
        f"30 1 0:27 / {mount} rw,relatime - cgroup2 cgroup2 rw\n"
    )
    (proc / str(PID) / "cgroup").write_text("3:cpuset:/\n0::/app.slice/job.service\n")
    (proc / "meminfo").write_text(f"MemTotal: {16 * GIB // 1024} kB\nMemFree: 1 kB\n")
    unit = mount / "app.slice" / "job.service"
    unit.mkdir(parents=True)
    return proc, unit


def write(unit, **files):
    for name, text in files.items():
        (unit / name.replace("_", ".")).write_text(text + "\n")


def verdicts(proc, wanted, name="shell-0-fA.service"):
    return {
        v.constraint: (v.outcome, v.reason)
        for v in cgroup.check_containment(PID, wanted, name, str(proc))
    }


def test_enforced_cpuset_and_memory(tree):
    proc, unit = tree
    write(
        unit,
        cgroup_controllers="cpuset cpu memory pids",
        cpuset_cpus_effective="0-3,8",
        cpuset_mems_effective="0",
        memory_max=str(4 * GIB),
        memory_high=str(8 * GIB // 10 // PAGE * PAGE),
        memory_swap_max="max",
    )
    got = verdicts(
        proc,
        {
            "AllowedCPUs": "0,1,2,3,8",
            "AllowedMemoryNodes": "0",
            "MemoryMax": "4G",
            "MemoryHigh": "5%",
            "MemorySwapMax": "infinity",
        },
    )
    assert got == {name: (ENFORCED, "") for name in got}
    assert len(got) == 5


def test_missing_controllers_name_the_file_and_controller(tree):
    proc, unit = tree
    write(unit, cgroup_controllers="cpu pids")
    got = verdicts(proc, {"AllowedCPUs": "0-1", "AllowedMemoryNodes": "0", "MemoryMax": "1G"})
    assert got["AllowedCPUs"] == (
        NOT_ENFORCED,
        "cpuset.cpus unavailable (is cpuset controller delegated to the user instance?)",
    )
    assert got["AllowedMemoryNodes"][1].startswith("cpuset.mems unavailable")
    assert got["MemoryMax"] == (
        NOT_ENFORCED,
        "memory.max unavailable (is memory controller delegated to the user instance?)",
    )


def test_wrong_values(tree):
    proc, unit = tree
    write(
        unit,
        cgroup_controllers="cpuset memory",
        cpuset_cpus_effective="0-7",
        cpuset_mems_effective="",
        memory_max="max",
        memory_high=str(GIB),
        memory_swap_max="0",
    )
    got = verdicts(
        proc,
        {
            "AllowedCPUs": "0-1",
            "AllowedMemoryNodes": "1",
            "MemoryMax": "2G",
            "MemoryHigh": "infinity",
            "MemorySwapMax": "100M",
        },
    )
    assert got["AllowedCPUs"] == (
        NOT_ENFORCED,
        "expected 0-1 got 0-7 (is cpuset controller delegated to the user instance?)",
    )
    assert got["AllowedMemoryNodes"][1].startswith("expected 1 got (empty)")
    assert got["MemoryMax"] == (NOT_ENFORCED, "expected 2G, the kernel has max")
    assert got["MemoryHigh"] == (NOT_ENFORCED, f"expected infinity, the kernel has {GIB}")
    assert got["MemorySwapMax"] == (
        NOT_ENFORCED,
        f"expected 100M ({100 << 20} bytes), the kernel has 0",
    )


def test_vanished_cgroup_is_not_checkable(tree):
    proc, unit = tree
    unit.rmdir()
    got = verdicts(proc, {"AllowedCPUs": "0", "MemoryMax": "1G"})
    assert got == {
        "AllowedCPUs": (NOT_CHECKABLE, "the unit's cgroup is gone"),
        "MemoryMax": (NOT_CHECKABLE, "the unit's cgroup is gone"),
    }


def test_gone_process_is_not_checkable(tree):
    proc, _ = tree
    (proc / str(PID) / "cgroup").unlink()
    got = verdicts(proc, {"MemoryMax": "1G"})
    assert got == {"MemoryMax": (NOT_CHECKABLE, f"no cgroup v2 path for pid {PID}")}


def test_devices_not_enforced_by_user_manager_unless_the_imp_applies_them(tree):
    proc, unit = tree
    wanted = {"DevicePolicy": "closed", "DeviceAllow": "/dev/nvidia0 rw"}
    single = verdicts(proc, wanted, "shell-0-fA.service")
    assert single["DevicePolicy"] == (NOT_ENFORCED, enforcement.USER_MANAGER_DEVICES)
    assert single["DeviceAllow"][0] == NOT_ENFORCED
    multi = verdicts(proc, wanted, "imp-shell-0-fA.service")
    assert multi == {name: (NOT_CHECKABLE, enforcement.IMP_DEVICES) for name in wanted}


def request(**opts):
    return ExecRequest(cmdline=["true"], env={}, opts=opts, r_local=opts.get("SDEXEC_R_LOCAL"))


def test_post_start_check_takes_only_containment_properties():
    req = request(
        SDEXEC_R_LOCAL="{}",
        SDEXEC_PROP_AllowedCPUs="0",
        SDEXEC_PROP_Description="x",
        SDEXEC_PROP_MemoryMax="1G",
    )
    assert enforcement.post_start_check(req, debug=False) == PostStartCheck(
        {"AllowedCPUs": "0", "MemoryMax": "1G"}, constrained=True
    )


def test_client_properties_are_checked_but_not_constrained():
    check = enforcement.post_start_check(request(SDEXEC_PROP_MemoryHigh="50%"), debug=False)
    assert check == PostStartCheck({"MemoryHigh": "50%"}, constrained=False)


@pytest.mark.parametrize("debug, expected", [(False, None), (True, PostStartCheck({}, False, "7"))])
def test_expected_cpus_test_hook_only_in_debug(debug, expected):
    req = request(SDEXEC_TEST_EXPECTED_CPUS="7")
    req.expected_cpus = "7"
    assert enforcement.post_start_check(req, debug) == expected


def test_nothing_to_check():
    assert enforcement.post_start_check(request(SDEXEC_PROP_KillMode="process"), False) is None


def test_failure_names_the_first_unenforced_constraint():
    vs = [
        enforcement.Verdict("AllowedCPUs", ENFORCED, ""),
        enforcement.Verdict("MemoryMax", NOT_CHECKABLE, "x"),
        enforcement.Verdict("MemoryHigh", NOT_ENFORCED, "memory.high unavailable"),
    ]
    assert enforcement.failure(vs) == "MemoryHigh not enforced: memory.high unavailable"
    assert enforcement.failure(vs[:2]) is None


def test_tally_counts_and_reports_each_reason_once():
    tally = enforcement.Tally()
    bad = enforcement.Verdict("MemoryMax", NOT_ENFORCED, "memory.max unavailable")
    good = enforcement.Verdict("AllowedCPUs", ENFORCED, "")
    assert tally.add([good, bad]) == [bad]
    assert tally.add([good, bad]) == []
    assert tally.stats() == {
        "AllowedCPUs": {ENFORCED: 2, NOT_ENFORCED: 0, NOT_CHECKABLE: 0, "last_reason": ""},
        "MemoryMax": {
            ENFORCED: 0,
            NOT_ENFORCED: 2,
            NOT_CHECKABLE: 0,
            "last_reason": "memory.max unavailable",
        },
    }


@pytest.mark.parametrize(
    "conf, policy", [({}, "enforce"), ({"sdexec": {"containment-check": "warn"}}, "warn")]
)
def test_policy(conf, policy):
    assert config.containment_check(conf) == policy


@pytest.mark.parametrize("value", ["strict", 1, True, ""])
def test_bad_policy_is_refused(value):
    with pytest.raises(RequestError) as exc:
        config.containment_check({"sdexec": {"containment-check": value}})
    assert "sdexec.containment-check must be one of enforce, warn, off" in str(exc.value)
