"""Request validation (errno and text a client sees) and response encoding."""

import base64
import errno
import json
import random

import pytest

from flux_sdexec.core import protocol, responses
from flux_sdexec.core.errors import RequestError


def req(**cmd):
    base = {"cmdline": ["/bin/true"], "env": {}, "opts": {}}
    base.update(cmd)
    return {"cmd": base, "flags": 3}


def test_parse_foreground():
    """A streaming request with stdout|stderr captures both, line-buffered, 4 MiB."""
    r = protocol.parse_exec(req(label="x", cwd="/tmp"), streaming=True)
    assert (r.background, r.streams, r.label, r.cwd) == (False, ("stdout", "stderr"), "x", "/tmp")
    assert r.line_buffer == {"stdout": True, "stderr": True}
    assert r.bufsize == {"stdout": 4194304, "stderr": 4194304}
    assert (r.stop_timer_sec, r.stop_signal) == (None, 9)


def test_parse_background_captures_both_streams():
    """Background mode always captures stdout and stderr, whatever the flags say."""
    p = req()
    p["flags"] = 16
    r = protocol.parse_exec(p, streaming=False)
    assert (r.background, r.waitable, r.streams) == (True, True, ("stdout", "stderr"))


@pytest.mark.parametrize(
    "payload, streaming, code, text",
    [
        ("nope", True, errno.EPROTO, "malformed exec request"),
        ({"flags": 3}, True, errno.EPROTO, "needs cmd"),
        ({"cmd": {}, "flags": "3"}, True, errno.EPROTO, "needs cmd"),
        (req(cmdline=[]), True, errno.EPROTO, "cmdline must be"),
        (req(cmdline=["a", 1]), True, errno.EPROTO, "cmdline must be"),
        (req(env={"A": 1}), True, errno.EPROTO, "env must be"),
        (req(opts={"A": None}), True, errno.EPROTO, "opts must be"),
        (req(cwd=5), True, errno.EPROTO, "cwd must be"),
        (req(opts={"SDEXEC_NAMEX": "a"}), True, errno.EINVAL, "unknown sdexec option"),
        (req(opts={"stdout_LINE_BUFFER": "maybe"}), True, errno.EINVAL, "expected true or false"),
        (req(opts={"stderr_BUFSIZE": "-1"}), True, errno.EINVAL, "invalid size"),
        (req(opts={"SDEXEC_STOP_TIMER_SEC": "1.5"}), True, errno.EINVAL, "expected an integer"),
        (req(opts={"SDEXEC_STOP_TIMER_SIGNAL": "99"}), True, errno.EINVAL, "signal number"),
        (req(opts={"SDEXEC_TEST_EXPECTED_CPUS": "x"}), True, errno.EINVAL, "not an idset"),
        ({**req(), "flags": 4}, True, errno.EINVAL, "auxiliary channels"),
        ({**req(), "flags": 16}, True, errno.EINVAL, "only supported in background"),
        ({**req(), "flags": 8}, True, errno.EINVAL, "unsupported subprocess flags 0x8"),
        ({**req(), "flags": 8}, False, errno.EINVAL, "write-credit flag"),
        ({**req(), "local_flags": 1}, False, errno.EINVAL, "stdio-fallthrough"),
        ({**req(), "flags": 64}, False, errno.EINVAL, "unsupported subprocess flags 0x40"),
    ],
)
def test_bad_exec_requests(payload, streaming, code, text):
    """Each malformed request gets one clear error with the right errno."""
    with pytest.raises(RequestError) as info:
        protocol.parse_exec(payload, streaming)
    assert info.value.errno == code
    assert text in str(info.value)


def test_channel_flag_ignored_in_background():
    """RFC 42: the channel flag is ignored in background mode."""
    assert protocol.parse_exec({**req(), "flags": 4}, streaming=False).background


def test_negative_stop_timer_means_off():
    """A negative SDEXEC_STOP_TIMER_SEC disables the timer, as job-exec may send."""
    r = protocol.parse_exec(req(opts={"SDEXEC_STOP_TIMER_SEC": "-1"}), True)
    assert r.stop_timer_sec is None


def test_unit_environment_filters_names():
    """FLUX_URI is set; () names, names not ASCII and systemd's own variables are dropped."""
    env = {
        "A": "1",
        "f()": "x",
        "1X": "y",
        "\u00e9T\u00c9": "z",
        "A\n": "n",
        "NOTIFY_SOCKET": "s",
        "INVOCATION_ID": "i",
        "FLUX_URI": "old",
    }
    assert protocol.unit_environment(env, "local:///x") == ["A=1", "FLUX_URI=local:///x"]


def test_output_encoder_utf8_binary_and_eof():
    """UTF-8 data is a JSON string; other bytes are base64; EOF-only has no data."""
    enc = responses.OutputEncoder("stderr", "1", 42)
    assert json.loads(enc.data("é\x00\n".encode())) == {
        "type": "output",
        "pid": 42,
        "io": {"stream": "stderr", "rank": "1", "data": "é\x00\n"},
    }
    raw = json.loads(enc.data(b"\xff\xfe", eof=True))["io"]
    assert base64.b64decode(raw["data"]) == b"\xff\xfe"
    assert (raw["encoding"], raw["eof"]) == ("base64", True)
    assert json.loads(enc.eof())["io"] == {"stream": "stderr", "rank": "1", "eof": True}


def test_parse_write():
    """stdin data is decoded (base64 too); other streams and bad payloads are refused."""
    io = {
        "stream": "stdin",
        "rank": "0",
        "data": base64.b64encode(b"\x00x").decode(),
        "encoding": "base64",
        "eof": True,
    }
    assert protocol.parse_write({"matchtag": 3, "io": io}) == (3, b"\x00x", True)
    with pytest.raises(RequestError) as info:
        protocol.parse_write({"matchtag": 3, "io": {"stream": "stdout", "data": ""}})
    assert info.value.errno == errno.EINVAL
    with pytest.raises(RequestError):
        protocol.parse_write({"io": {}})


def test_parse_kill_and_list_entry():
    """kill takes pid, signum and an optional label; list entries have exactly four keys."""
    assert protocol.parse_kill({"pid": -1, "signum": 9, "label": "L"}) == (-1, "L", 9)
    with pytest.raises(RequestError):
        protocol.parse_kill({"pid": 1, "signum": 0})
    assert responses.list_entry(7, "sh", None, True) == {
        "pid": 7,
        "cmd": "sh",
        "label": "",
        "state": "Z",
    }


def test_wait_result_omits_empty_output():
    """output is left out when nothing was retained."""
    assert responses.wait_result(0, []) == {"status": 0}


def _reference_output(stream, rank, pid, chunk, eof):
    """The output message built the slow way: decode, then a JSON encoder (UTF-8 out)."""
    io = responses.io_object(stream, rank, chunk, eof)
    msg = {"type": "output", "pid": pid, "io": io}
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("eof", [False, True])
def test_output_encoder_bytes_fast_path_is_byte_identical(eof):
    """Printable ASCII lines (the fast path) and everything else (quotes, backslashes,
    tabs, DEL, UTF-8, bytes that are not UTF-8, a partial last line) encode to exactly
    the bytes of the decode-and-escape path."""
    enc = responses.OutputEncoder("stdout", "0", 7)
    rng = random.Random(13)
    alphabet = list(b'ab ~!"\\\t\x7f\n\xff') + ["é".encode()]
    chunks = [b"hello world\n", b"x" * 5000 + b"\n", b"no newline", b'"q"\n', b"\\\n", b"\n"]
    for _ in range(500):
        parts = [rng.choice(alphabet) for _ in range(rng.randrange(1, 40))]
        chunks.append(b"".join(bytes([c]) if isinstance(c, int) else c for c in parts))
    for chunk in chunks:
        assert enc.data(chunk, eof) == _reference_output("stdout", "0", 7, chunk, eof), chunk


def test_parse_units_payloads():
    """sdexec.units takes {} or {"all": bool}: anything else is EPROTO, a non-bool all EINVAL."""
    assert protocol.parse_units({}) is False
    assert protocol.parse_units({"all": True}) is True
    for bad in (None, [], "all", {"all": True, "ranks": "0"}):
        with pytest.raises(RequestError) as e:
            protocol.parse_units(bad)
        assert e.value.errno == errno.EPROTO
    with pytest.raises(RequestError) as e:
        protocol.parse_units({"all": 1})
    assert e.value.errno == errno.EINVAL
