"""Reading JSON documents: the conversations, traces and telemetry exports of a file, one :class:`Doc` each.

Transcript, trace and telemetry files may be one JSON document (a conversation, a JSON array of
conversations, or — for transcripts — a bare array of messages / items), NDJSON with one document per
line, or JSON values written one after the other (the console exporter). The rule: when the first
non-blank line is a JSON value on its own, the file is NDJSON; otherwise the whole file is one document
(or values one after the other). The detect stage has read the file's head (:class:`~._detect.Head`);
:func:`documents` goes on from there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from ...judge.verdict import TRACE_FORMAT
from ...support import safejson
from .. import _json
from .._options import Options
from .._records import InputError
from .locate import Located, loads_located
from .transcripts import is_conversation

Json = Any

Line = tuple[int, bytes | None, str | None]

#: Said when a transcript or trace file that is one JSON document is past the size limit.
NDJSON_HINT: Final = ("; a transcript or trace file that is one JSON document must fit the limit too: write one "
                      "conversation or trace a line (NDJSON)")


@dataclass
class Doc:
    value: Json
    line: int
    located: Located | None
    number: int  # 1-based position among the file's conversations


def _chain(first: Line, rest: Iterator[Line]) -> Iterator[Line]:
    yield first
    yield from rest


def documents(first: Line, lines: Iterator[Line], one_line: bool, name: str, opts: Options,
              first_doc: Json = None, *, whole: bool = False) -> Iterator[Doc | InputError]:
    """The file's documents from its first non-blank line on. ``first_doc``: the first line's value when
    ``one_line`` (NDJSON), or — with ``whole`` — the value of the whole document, already parsed by the
    detect stage from the same lines."""
    limits = opts.limits
    if one_line:
        k = 0
        for n, raw, err in _chain(first, lines):
            if raw is None:
                yield InputError(name, n, err or "unreadable line")
                continue
            if not raw.strip():
                continue
            if n == first[0] and first_doc is not None:
                value = first_doc
            else:
                try:
                    value = safejson.loads(raw, limits=limits)
                except safejson.JsonInputError as exc:
                    yield InputError(name, n, exc.message())
                    continue
            k += 1
            yield from _expand(Located(value, {}, "", n), n, k)
        return
    # one document spread over lines
    buf = bytearray(first[1] or b"")
    for n, raw, err in lines:
        if raw is None:
            yield InputError(name, n, f"{err} (in a document that spans the file)")
            return
        buf += raw
        if len(buf) > limits.max_bytes:
            yield InputError(name, first[0], f"a single JSON document larger than {limits.max_bytes} bytes (the limit; "
                                             f"--max-line-bytes raises it){NDJSON_HINT}")
            return
    data = bytes(buf)
    del buf
    start = first[0]
    if whole and first_doc is not None:
        value = first_doc
    else:
        try:
            value = safejson.loads(data, limits=limits)
        except safejson.JsonInputError as exc:
            if exc.reason.startswith("not JSON: Extra data"):  # JSON values one after another (console exporter)
                yield from _concatenated(data.decode("utf-8"), start, name)
                return
            line = exc.line + start - 1 if exc.line is not None else None
            yield InputError(name, line, exc.message())
            return
    loc = loads_located(data.decode("utf-8"), start, value)
    del data
    yield from _expand(loc, start, 1)


def _concatenated(text: str, start: int, name: str) -> Iterator[Doc | InputError]:
    k = 0
    try:
        for line, value in iter_concatenated(text, start):
            if isinstance(value, ValueError):
                yield InputError(name, line, f"not JSON: {_reason(value)}")
                return
            k += 1
            yield Doc(value, line, None, k)
    except RecursionError:
        yield InputError(name, None, "not JSON: nested too deeply")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, safejson.JsonInputError):
        return exc.message().removeprefix("not JSON: ")
    msg = getattr(exc, "msg", None) or str(exc)
    return str(msg).splitlines()[0] if msg else type(exc).__name__


def _expand(loc: Located, line: int, k: int) -> Iterator[Doc]:
    doc = loc.doc
    if isinstance(doc, list) and doc and not is_conversation(doc) and all(is_conversation(d) or (
            isinstance(d, dict) and d.get("format") == TRACE_FORMAT) for d in doc):
        for j, d in enumerate(doc):
            yield Doc(d, loc.line(d) if isinstance(d, dict) else line, loc, k + j)
        return
    yield Doc(doc, line, loc, k)


def iter_concatenated(text: str, first_line: int = 1) -> Iterator[tuple[int, Json] | tuple[int, ValueError]]:
    """JSON values written one after the other (the console exporter's output): (line, value) pairs;
    a value that does not parse ends the iteration with (the line of the error, error). The standard library's scanner
    only finds where each value ends; the value itself is parsed by the oracle's loader (its limits and
    messages)."""
    dec = json.JSONDecoder(parse_constant=_no_constant)
    pos, n = 0, len(text)
    line = first_line
    ws = re.compile(r"\s*")
    while True:
        m = ws.match(text, pos)
        assert m is not None
        line += text.count("\n", pos, m.end())
        pos = m.end()
        if pos >= n:
            return
        try:
            _, end = dec.raw_decode(text, pos)
        except RecursionError:
            yield line, ValueError("nested too deeply")
            return
        except ValueError as exc:  # where the scanner stopped
            at = getattr(exc, "lineno", None)
            yield (first_line + at - 1 if isinstance(at, int) else line), exc
            return
        try:
            value = _json.loads(text[pos:end])
        except ValueError as exc:
            yield line, exc
            return
        yield line, value
        line += text.count("\n", pos, end)
        pos = end


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")

