"""The containment policy pieces: which properties are checked, failure text, tally, config.

The verdicts over cgroup trees of each layout are in test_cgroup_paths.py, test_cgroup_unified.py,
test_cgroup_hybrid.py and test_cgroup_legacy.py."""

import pytest

from flux_sdexec import config
from flux_sdexec.containment import enforcement
from flux_sdexec.containment.enforcement import (
    ENFORCED,
    NOT_CHECKABLE,
    NOT_ENFORCED,
    UNENFORCEABLE,
    PostStartCheck,
)
from flux_sdexec.core.errors import RequestError
from flux_sdexec.core.protocol import ExecRequest


def request(**opts):
    return ExecRequest(cmdline=["true"], env={}, opts=opts, r_local=opts.get("SDEXEC_R_LOCAL"))


def test_post_start_check_takes_only_containment_properties():
    req = request(
        SDEXEC_R_LOCAL="{}",
        SDEXEC_PROP_AllowedCPUs="0",
        SDEXEC_PROP_Description="x",
        SDEXEC_PROP_MemoryMax="1G",
        SDEXEC_PROP_TasksMax="5",
        SDEXEC_PROP_CPUQuota="20%",
    )
    assert enforcement.post_start_check(req, debug=False) == PostStartCheck(
        {"AllowedCPUs": "0", "MemoryMax": "1G", "TasksMax": "5", "CPUQuota": "20%"},
        constrained=True,
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
        "AllowedCPUs": {
            ENFORCED: 2,
            NOT_ENFORCED: 0,
            NOT_CHECKABLE: 0,
            UNENFORCEABLE: 0,
            "last_reason": "",
            "hierarchy": "none",
            "last_read": "",
        },
        "MemoryMax": {
            ENFORCED: 0,
            NOT_ENFORCED: 2,
            NOT_CHECKABLE: 0,
            UNENFORCEABLE: 0,
            "last_reason": "memory.max unavailable",
            "hierarchy": "none",
            "last_read": "memory.max unavailable",
        },
    }


def test_tally_keeps_the_hierarchy_that_decided_last():
    tally = enforcement.Tally()
    tally.add([enforcement.Verdict("TasksMax", ENFORCED, "hybrid: v1 pids.max is 5", "v1:pids")])
    entry = tally.stats()["TasksMax"]
    assert (entry["hierarchy"], entry["last_read"], entry["last_reason"]) == (
        "v1:pids",
        "hybrid: v1 pids.max is 5",
        "",
    )


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


@pytest.mark.parametrize(
    "conf, required",
    [
        ({}, ()),
        ({"sdexec": {"containment-required": []}}, ()),
        (
            {"sdexec": {"containment-required": ["DevicePolicy", "MemoryMax", "DevicePolicy"]}},
            ("DevicePolicy", "MemoryMax"),
        ),
    ],
)
def test_containment_required(conf, required):
    """sdexec.containment-required: constraint names, each once, in order (default none)."""
    assert config.containment_required(conf) == required


@pytest.mark.parametrize(
    "value, text",
    [
        (
            ["MemoryMax", "Foo"],
            "sdexec.containment-required[1]: 'Foo' is not a containment constraint (one of "
            + ", ".join(enforcement.CONSTRAINTS)
            + ")",
        ),
        ([5], "sdexec.containment-required[0]: 5 is not a containment constraint (one of "),
        (
            "DevicePolicy",
            "sdexec.containment-required must be an array of constraint names: got"
            " 'DevicePolicy'",
        ),
    ],
)
def test_bad_containment_required_is_refused(value, text):
    """An unknown name is refused naming the entry, like the other keys; so is a non-array."""
    with pytest.raises(RequestError) as exc:
        config.containment_required({"sdexec": {"containment-required": value}})
    assert exc.value.strerror.startswith(text)
