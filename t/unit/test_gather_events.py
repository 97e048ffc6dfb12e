"""The ``sdexec.usage-gather`` payload (usage/gather_events.py)."""

import errno

import pytest

from flux_sdexec.core.errors import RequestError
from flux_sdexec.usage.gather_events import RowsCame, gather_payload, parse_gather


@pytest.mark.parametrize(
    "body",
    [{}, {"id": "x", "rank": 1}, {"id": 1, "rank": 2, "rows": {"a": {}}}, {"id": 1, "rank": None}],
)
def test_a_malformed_gather_payload_is_eproto(body):
    with pytest.raises(RequestError) as info:
        parse_gather(body)
    assert info.value.errno == errno.EPROTO


def test_a_payload_sent_is_read_back_as_the_rows_that_came():
    """What a child sends up is what its parent merges: ranks as ints again, the marks and
    the correction flag kept."""
    rows, missing = {3: {"rank": 3, "cpu_user_s": 1.5}}, {4: "rank 4 lost"}
    body = gather_payload(7, 1, rows, missing, True)
    assert body["rows"] == {"3": rows[3]} and body["missing"] == {"4": "rank 4 lost"}
    assert parse_gather(body) == RowsCame(7, rows, missing, 1, True)
