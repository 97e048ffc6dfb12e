"""Output chunking (one line per message in line mode) and the retained tail of a waitable."""

from flux_sdexec.broker.output import OutputBuffer
from flux_sdexec.core.retained import RetainedOutput


def test_line_mode_one_line_per_chunk():
    """Several lines in one read become one chunk each; a partial line waits."""
    buf = OutputBuffer()
    assert buf.feed(b"a\nbb\ncc") == [b"a\n", b"bb\n"]
    assert buf.used == 2
    assert buf.feed(b"c\n") == [b"ccc\n"]
    assert buf.feed(b"x") == []
    assert buf.eof() == b"x"
    assert buf.eof() == b""


def test_line_mode_only_newline_splits():
    """\\r and other separators stay inside a line."""
    assert OutputBuffer().feed(b"a\rb\x0bc\n") == [b"a\rb\x0bc\n"]


def test_full_buffer_flushes_partial_line():
    """A partial line that fills the buffer is sent as is."""
    buf = OutputBuffer(size=4)
    assert buf.feed(b"ab") == []
    assert buf.free == 2
    assert buf.feed(b"cd") == [b"abcd"]
    assert buf.used == 0


def test_raw_mode_passes_reads_through():
    """Raw mode: each read is one chunk, newlines or not."""
    buf = OutputBuffer(line_mode=False)
    assert buf.feed(b"a\nb\nc") == [b"a\nb\nc"]
    assert buf.eof() == b""


def test_retained_output_keeps_newest_within_limit():
    """Oldest objects go first until the total fits; order is kept."""
    kept = RetainedOutput(limit=10)
    for i in range(5):
        kept.add({"data": f"{i}bcd\n"}, 5)
    assert kept.items == [{"data": "3bcd\n"}, {"data": "4bcd\n"}]


def test_retained_output_single_oversized_object_kept():
    """One object over the limit is kept whole rather than dropping everything."""
    kept = RetainedOutput(limit=4)
    kept.add({"data": "x" * 10}, 10)
    assert kept.items == [{"data": "x" * 10}]
