"""The hardened loader (loopspec.support.safejson): the limits, one error type naming where, and the same
answer — value or error message — whichever JSON parser is installed."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopspec.support import safejson as sj

PARSERS = ["json", "orjson"] if sj._ORJSON_LOADS is not None else ["json"]


@pytest.fixture(params=PARSERS)
def parser(request: pytest.FixtureRequest) -> Iterator[str]:
    before = sj.parser()
    sj.use_parser(request.param)
    yield request.param
    sj.use_parser(before)


def _outcome(data: bytes | str) -> str:
    try:
        return "ok " + repr(sj.loads(data))
    except sj.JsonInputError as exc:
        return "error " + str(exc)


REFUSED = {
    b"1e400": "overflows a double",
    b"-1e400": "overflows a double",
    b'{"t": 1E999}': "overflows a double",
    b"NaN": "NaN is not JSON",
    b"[Infinity]": "Infinity is not JSON",
    b"-Infinity": "-Infinity is not JSON",
    b"1" + b"0" * 30: "an integer of 31 digits",
    b"-" + b"9" * 21: "an integer of 21 digits",
    b"[" * 129 + b"]" * 129: "nested more than 128 levels",
    b"[" * 5000 + b"]" * 5000: "nested more than 128 levels",
    b"[" * 200_000: "nested more than 128 levels",
    b'{"a":' * 129 + b"1" + b"}" * 129: "nested more than 128 levels",
    b'"\\ud800"': "lone UTF-16 surrogate",
    b'["\\udfff", 1]': "lone UTF-16 surrogate",
    b'{"\\ud800": 1}': "lone UTF-16 surrogate",
    b"\xff": "not UTF-8: byte 0xff",
    b'{"a": "\xed\xa0\x80"}': "not UTF-8",  # an encoded surrogate
    b'"\xc0\xaf"': "not UTF-8",  # overlong
    b"\xef\xbb\xbf{}": "byte order mark",
    b"\xff\xfe{\x00}\x00": "UTF-16",
    b"": "nothing but whitespace",
    b"  \n ": "nothing but whitespace",
    b"[1,2": "not JSON: Expecting ',' delimiter",
    b"{}{}": "not JSON: Extra data",
    b"'a'": "not JSON",
    b'"a\x00"': "not JSON: Invalid control character",
}


@pytest.mark.parametrize("data", list(REFUSED), ids=[repr(k)[:40] for k in REFUSED])
def test_refused_with_the_reason(parser: str, data: bytes) -> None:
    with pytest.raises(sj.JsonInputError) as exc:
        sj.loads(data)
    assert REFUSED[data] in str(exc.value)
    assert "\n" not in str(exc.value)


ACCEPTED = {
    b"18446744073709551615": 18446744073709551615,
    b"-9223372036854775808": -9223372036854775808,
    b"99999999999999999999": 99999999999999999999,  # 20 digits: the limit
    b"[" * 128 + b"]" * 128: None,
    b'"\\ud83d\\ude00"': "\U0001f600",
    b'{"x": "\\\\ud800"}': {"x": "\\ud800"},  # an escaped backslash, then text
    b"1e308": 1e308,
    b"1e-400": 0.0,
    b"-0": 0,
    b'{"a":1,"a":2}': {"a": 2},
    b" {} \r\n": {},
}


@pytest.mark.parametrize("data", list(ACCEPTED), ids=[repr(k)[:40] for k in ACCEPTED])
def test_accepted_within_the_limits(parser: str, data: bytes) -> None:
    v = sj.loads(data)
    if ACCEPTED[data] is not None:
        assert v == ACCEPTED[data] and type(v) is type(ACCEPTED[data])


def test_errors_name_file_line_and_column() -> None:
    with pytest.raises(sj.JsonInputError) as exc:
        sj.parse_line(b'{"a": [1, 2,, 3]}', file="runs.ndjson", line=57)
    assert str(exc.value) == "runs.ndjson:57: not JSON: Expecting value (column 13)"
    with pytest.raises(sj.JsonInputError) as exc:
        sj.loads(b'{\n "a": 1,\n "b": 1e999\n}')
    assert (exc.value.line, exc.value.column) == (3, 7)


def test_a_line_or_document_past_the_size_limit() -> None:
    lim = sj.Limits(max_bytes=1024, flag="--max-line-bytes")
    with pytest.raises(sj.JsonInputError, match=r"longer than 1024 bytes \(the limit; --max-line-bytes raises it\)"):
        sj.parse_line(b"[" + b"1," * 600 + b"1]", limits=lim, file="f", line=3)
    lines = list(sj.iter_lines(io.BytesIO(b'{"a": 1}\n' + b"x" * 5000 + b"\n[]\n"), limits=lim))
    assert [(n, raw) for n, raw, _, _ in lines] == [(1, b'{"a": 1}\n'), (2, None), (3, b"[]\n")]
    assert lines[1][3] == b"x" * 1025 and "longer than 1024 bytes" in (lines[1][2] or "")


def test_files(tmp_path: Path) -> None:
    p = tmp_path / "doc.json"
    p.write_bytes(b"\xef\xbb\xbf" + b'{"a": [1,\n 2]}')
    assert sj.load_json(p) == {"a": [1, 2]}  # a BOM at the start of a file is skipped
    p.write_bytes(b'{"a":\n [1,\n "\xff"]}')
    with pytest.raises(sj.JsonInputError) as exc:
        sj.load_json(p)
    assert str(exc.value) == f"{p}:3: not UTF-8: byte 0xff cannot start or continue a character (column 3)"
    with pytest.raises(sj.JsonInputError, match="no such file"):
        sj.load_json(tmp_path / "missing.json")
    with pytest.raises(sj.JsonInputError, match="is a directory"):
        sj.load_json(tmp_path)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2000)
    with pytest.raises(sj.JsonInputError, match="larger than 1000 bytes"):
        sj.load_json(big, limits=sj.Limits(max_bytes=1000))


def test_toml_under_the_same_limits(tmp_path: Path) -> None:
    p = tmp_path / "b.toml"
    p.write_text("a = 1\n[s]\nx = [[1]]\n")
    assert sj.load_toml(p) == {"a": 1, "s": {"x": [[1]]}}
    for text, needle in [("a = " + "[" * 3000 + "]" * 3000, "nested more than 128 levels"),
                         ("a = " + "[" * 200 + "]" * 200, "nested more than 128 levels"),
                         ("a = inf", "not finite"), ("a = nan", "not finite"),
                         ("a = " + "9" * 5000, "an integer of 5000 digits"),
                         ("a = " + "9" * 30, "more than 20 digits"),
                         ("a = 1\nb = = 2", "not valid TOML")]:
        p.write_text(text)
        with pytest.raises(sj.JsonInputError, match=needle) as exc:
            sj.load_toml(p)
        assert str(exc.value).startswith(str(p)), str(exc.value)
    p.write_text("a = 1\nb = = 2\n")
    with pytest.raises(sj.JsonInputError) as exc:
        sj.load_toml(p)
    assert exc.value.line == 2
    p.write_bytes(b"a = '\xff'")
    with pytest.raises(sj.JsonInputError, match="not UTF-8"):
        sj.load_toml(p)


def test_dumps_is_strict_and_terminal_safe() -> None:
    with pytest.raises(ValueError):
        sj.dumps({"x": float("nan")})
    text = sj.dumps({"id": "a\x1b[2J\x9b\u202eb\n"})
    assert json.loads(text) == {"id": "a\x1b[2J\x9b\u202eb\n"}
    assert not any(ch in text for ch in "\x1b\x9b\u202e\n")


# -- both parsers, one answer ------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**22), max_value=10**22)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=4), kids, max_size=4),
    max_leaves=12,
)

_pieces = st.sampled_from([b"[", b"]", b"{", b"}", b",", b":", b'"', b"\\", b"\\u", b"d800", b"1e400", b"-",
                           b"0", b"9" * 19, b"9" * 21, b"NaN", b"Infinity", b"\xff", b"\xc3", b"\xef\xbb\xbf",
                           b" ", b"\n", b"\x00", b"e", b".", b"true", b"null", b"\\ud83d\\ude00"])


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    base = json.dumps(draw(_json_values)).encode()
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(base)))
        j = draw(st.integers(i, min(len(base), i + 4)))
        base = base[:i] + draw(_pieces) + base[j:]
    return base


@pytest.mark.skipif(len(PARSERS) < 2, reason="orjson is not installed")
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated())
def test_orjson_and_the_standard_library_agree(data: bytes) -> None:
    before = sj.parser()
    try:
        sj.use_parser("orjson")
        fast = _outcome(data)
        sj.use_parser("json")
        slow = _outcome(data)
    finally:
        sj.use_parser(before)
    assert fast == slow, data
