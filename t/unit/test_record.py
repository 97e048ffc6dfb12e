"""The usage record's schema (usage/record.py): its JSON, byte for byte, both ways.

The JSON is what ``sdexec.wait`` answers, what ``job.<id>.sdexec-usage.<rank>`` holds and
what ``flux sdexec usage`` reads, across sdexec versions: a key renamed, dropped, added or
moved fails here.
"""

import json

from flux_sdexec.containment import cgroups
from flux_sdexec.usage import cgroup_usage
from flux_sdexec.usage.record import FIGURES, KVS_DIR, UsageRecord, kvs_dir, kvs_key

# a hybrid host without the kernel log: the OOM kills unknown, with the reason
READ = {
    ("v2", "cgroup.controllers"): "\n",
    ("v2", "cpu.stat"): "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n",
    ("memory", "memory.max_usage_in_bytes"): "52690944\n",
    ("pids", "pids.peak"): "7\n",
}
OOM_WHY = (
    "hybrid: cgroup v1 counts OOM kills only in the unit's own memory cgroup, removed with "
    "the unit, and the kernel log (/dev/kmsg) is not readable"
)
WITH_REASONS = (
    '{"cpu_user_s": 2.0, "cpu_sys_s": 0.5, "memory_peak": 52690944, "tasks_peak": 7, '
    '"oom_kills": null, "wall_s": 12.346, "result": "success", "status": 0, '
    f'"null_reasons": {{"oom_kills": "{OOM_WHY}"}}, "cpu_s": 2.5}}'
)
ALL_READ = (
    '{"cpu_user_s": 2.0, "cpu_sys_s": 0.5, "memory_peak": 52690944, "tasks_peak": 7, '
    '"oom_kills": 0, "wall_s": 12.346, "result": "success", "status": 0, "cpu_s": 2.5}'
)


def read(hierarchy, name):
    return READ.get((hierarchy, name))


def test_the_fields_are_the_schema():
    """The record's fields, in the order their keys are written (``cpu_s`` came last)."""
    assert FIGURES == (
        "cpu_s",
        "cpu_user_s",
        "cpu_sys_s",
        "memory_peak",
        "tasks_peak",
        "oom_kills",
    )
    assert [f for f in UsageRecord.__dataclass_fields__] == [
        *FIGURES[1:],
        "wall_s",
        "result",
        "status",
        "null_reasons",
        "cpu_s",
    ]


def test_a_record_with_a_null_figure_carries_its_reason_in_the_json():
    rec = cgroup_usage.record(cgroups.HYBRID, read, None, 12.34567, "success", 0)
    assert json.dumps(rec.to_json()) == WITH_REASONS
    assert UsageRecord.from_json(json.loads(WITH_REASONS)) == rec


def test_a_record_with_every_figure_has_no_null_reasons_key():
    rec = cgroup_usage.record(cgroups.HYBRID, read, 0, 12.34567, "success", 0)
    assert json.dumps(rec.to_json()) == ALL_READ
    assert UsageRecord.from_json(json.loads(ALL_READ)) == rec


def test_a_slice_missing_gives_every_figure_null_with_that_reason():
    """The slice could not be read at all (where slices are is not known yet)."""
    rec = cgroup_usage.record(cgroups.UNIFIED, read, None, None, "signal", 9, missing="why")
    assert rec.to_json() == {
        "cpu_s": None,
        "cpu_user_s": None,
        "cpu_sys_s": None,
        "memory_peak": None,
        "tasks_peak": None,
        "oom_kills": None,
        "wall_s": None,
        "result": "signal",
        "status": 9,
        "null_reasons": dict.fromkeys(FIGURES, "why"),
    }
    assert UsageRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec


def test_a_running_unit_s_record_has_no_result_or_status():
    rec = cgroup_usage.record(cgroups.HYBRID, read, 0, 1.0, None, None)
    assert (rec.to_json()["result"], rec.to_json()["status"]) == (None, None)


def test_an_empty_null_reasons_read_back_is_written_back():
    """What a record holds round-trips, an empty ``null_reasons`` included."""
    written = dict(json.loads(ALL_READ), null_reasons={})
    assert UsageRecord.from_json(written).to_json() == written


def test_the_job_s_kvs_key_holds_the_record_then_where_it_was_read():
    rec = UsageRecord.from_json(json.loads(WITH_REASONS))
    placed = rec.placed(3, "node3", "shell-3-fA1.service")
    assert json.dumps(placed) == (
        WITH_REASONS[:-1] + ', "rank": 3, "host": "node3", "unit": "shell-3-fA1.service"}'
    )
    assert UsageRecord.from_json(placed) == rec
    assert KVS_DIR == "sdexec-usage"
    assert kvs_dir("0000.0001.0000.0000") == "job.0000.0001.0000.0000.sdexec-usage"
    assert kvs_key("0000.0001.0000.0000", 3) == "job.0000.0001.0000.0000.sdexec-usage.3"


def test_a_live_answer_s_process_is_the_record_then_which_process():
    rec = UsageRecord.from_json(json.loads(ALL_READ))
    live = rec.live("shell-0-fA1.service", "fA1", True)
    assert json.dumps(live) == (
        ALL_READ[:-1] + ', "unit": "shell-0-fA1.service", "jobid": "fA1", "running": true}'
    )
    assert UsageRecord.from_json(live) == rec


def test_a_key_a_record_lacks_reads_as_null():
    """A partial record (``flux sdexec usage`` reads what any rank wrote)."""
    rec = UsageRecord.from_json({"cpu_user_s": 1.0})
    assert rec.cpu_user_s == 1.0 and rec.memory_peak is None and rec.null_reasons is None
    assert rec.cpu_s is None  # a record of an sdexec before the figure
