"""Keeper slices (adapters/systemd/keepers.py): which units get one, and its name."""

from flux_sdexec.adapters.systemd.keepers import keeper_name, keeper_of, with_keeper

NOTIFY = [("ExecStart", "a(sasb)", []), ("Type", "s", "notify")]


def test_a_notify_unit_wants_its_keeper_which_is_part_of_it():
    props, aux, keeper = with_keeper("job-1:sys.service", NOTIFY)
    assert keeper == "job\\x2d1:sys.slice"  # "-" nests slices: escaped as systemd does
    assert props == NOTIFY + [("Wants", "as", [keeper])]
    assert aux == [
        (
            keeper,
            [
                ("PartOf", ("as", ["job-1:sys.service"])),
                ("Description", ("s", "keeps job-1:sys.service")),
            ],
        )
    ]


def test_other_types_get_no_keeper():
    for props in ([("Type", "s", "exec")], [("Type", "s", "oneshot")], []):
        assert with_keeper("a:sys.service", props) == (props, [], None)


def test_a_name_too_long_for_systemd_gets_no_keeper():
    unit = "a-" * 100 + ":sys.service"  # 212 characters; each "-" takes 4 in the keeper
    assert keeper_name(unit) is None
    assert with_keeper(unit, NOTIFY) == (NOTIFY, [], None)


def test_an_adopted_unit_names_its_keeper_among_its_wants():
    unit = "job-1:sys.service"
    assert keeper_of(unit, {"Wants": ["job\\x2d1:sys.slice"]}) == "job\\x2d1:sys.slice"
    assert keeper_of(unit, {"Wants": ["other.slice"]}) is None
    assert keeper_of(unit, {}) is None
