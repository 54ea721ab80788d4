"""The block-wise scan of ``check --jobs N`` on one file (``_split.owned_lines``) gives each process exactly
the lines the line-by-line scan gives it — the same numbers, the same bytes, over-long lines cut alike —
whatever the block size, line lengths, blank lines, escapes and a missing final newline."""

from __future__ import annotations

import io
from collections.abc import Iterator
from zlib import crc32

from hypothesis import given, settings
from hypothesis import strategies as st

from loopspec.oracle._read.lines import _FAST_PREFIX, route_key
from loopspec.oracle._split import owned_lines


def by_readline(data: bytes, me: int, ways: int, limit: int) -> Iterator[tuple[int, bytes]]:
    """The line-by-line scan (as ``LedgerStream.run`` reads a file itself): the reference."""
    fh = io.BytesIO(data)
    n = 0
    while True:
        raw = fh.readline(limit)
        if not raw:
            return
        n += 1
        key = raw[14:raw.find(b'"', 14)] if raw.startswith(_FAST_PREFIX) else route_key(raw)
        if b"\\" in key:
            key = route_key(raw)
        owned = crc32(key) % ways == me
        if owned:
            yield n, raw
        while raw and not raw.endswith(b"\n"):
            raw = fh.readline(1 << 20)


_IDS = st.sampled_from(["a", "b", "run-7", "é", 'q\\"x', "a\\u0062", "ab", "x\\\\", ""])


@st.composite
def _line(draw: st.DrawFn, limit: int) -> bytes:
    kind = draw(st.sampled_from(["fast", "fast", "fast", "other", "blank", "junk", "long", "open", "edge"]))
    rid = draw(_IDS)
    if kind == "edge":  # a line of about the limit's length (with or without its newline, it is over or not)
        head = _FAST_PREFIX + rid.encode() + b'","p":"'
        return head + b"z" * max(0, limit - len(head) + draw(st.integers(-2, 1)))
    pad = b"x" * draw(st.integers(0, 90))
    if kind == "fast":
        return _FAST_PREFIX + rid.encode() + b'","seq":1,"p":"' + pad + b'"}'
    if kind == "other":
        return b'{"seq":2, "run" : "' + rid.encode() + b'", "p":"' + pad + b'"}'
    if kind == "blank":
        return draw(st.sampled_from([b"", b"  ", b"\r"]))
    if kind == "open":  # the prefix and no closing quote
        return _FAST_PREFIX + rid.encode().replace(b'"', b"") + pad
    if kind == "long":
        return _FAST_PREFIX + rid.encode() + b'","p":"' + b"y" * draw(st.integers(100, 400)) + b'"}'
    return draw(st.binary(max_size=40)).replace(b"\n", b"")


@st.composite
def _file(draw: st.DrawFn) -> tuple[int, list[bytes]]:
    limit = draw(st.integers(60, 300))
    return limit, draw(st.lists(_line(limit), max_size=30))


@settings(max_examples=300, deadline=None)
@given(file=_file(), final_newline=st.booleans(), ways=st.integers(1, 3),
       block=st.sampled_from([1, 7, 64, 1 << 20]), bom=st.booleans())
def test_block_scan_equals_line_scan(file: tuple[int, list[bytes]], final_newline: bool, ways: int, block: int,
                                     bom: bool) -> None:
    limit, lines = file
    data = (b"\xef\xbb\xbf" if bom else b"") + b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    for me in range(ways):
        got = list(owned_lines(io.BytesIO(data), me, ways, limit, block_size=block))
        assert got == list(by_readline(data, me, ways, limit))


def test_every_line_goes_to_exactly_one_process() -> None:
    data = b"".join(_FAST_PREFIX + f'r{k % 37}","seq":{k}}}\n'.encode() for k in range(500))
    seen = sorted(n for me in range(3) for n, _ in owned_lines(io.BytesIO(data), me, 3, 1 << 16, block_size=100))
    assert seen == list(range(1, 501))


def test_the_read_position_is_told_per_block() -> None:
    data = b"".join(_FAST_PREFIX + f'r{k}","seq":1}}\n'.encode() for k in range(100))
    told: list[int] = []
    list(owned_lines(io.BytesIO(data), 0, 2, 1 << 16, tell=told.append, block_size=256))
    assert told == sorted(told) and told[-1] == len(data) and len(told) == -(-len(data) // 256)
