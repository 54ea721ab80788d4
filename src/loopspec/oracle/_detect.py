"""Detecting a file's format: the first stage. It reads the head of the file and says what the file holds.

Formats (``--input-format``):

* ``ledger`` — the engine's run ledger (NDJSON, one event a line, runs interleaved; streamed);
* ``trace`` — ``loopspec-trace/1`` documents, judged by the fuzzer's judge itself;
* ``openai-chat`` / ``openai-responses`` / ``anthropic`` — transcripts (``openai-responses`` also reads
  the Agents SDK's ``to_input_list()``);
* ``pydantic-ai`` / ``langchain`` — framework message histories (``ModelMessagesTypeAdapter`` JSON,
  ``messages_to_dict``), read like transcripts;
* ``otlp-json`` / ``otel-console`` — OpenTelemetry traces (OTLP/JSON lines, the SDK console
  exporter's JSON), grouped into runs by trace and agent invocation;
* ``openai-agents-trace`` — the OpenAI Agents SDK's own tracing: the traces and spans it exports
  (``trace.export()`` / ``span.export()`` a line, or its exporter's ``{"data": [...]}`` payloads), grouped
  into runs like telemetry;
* ``auto`` (default) — decided per file from its first document: a ledger event (an object with ``run``
  and a ledger ``type``) means a ledger, a ``loopspec-trace/1`` object a trace file, an object with
  ``resourceSpans`` OTLP/JSON, an Agents SDK trace or span (``"object": "trace" | "trace.span"``, alone, in
  an array or in ``{"data": [...]}``) the Agents SDK's tracing, a span as the console exporter prints it (``context.trace_id``, alone or
  in an array) console JSON; anything else is a transcript file (``transcript``), whose format is decided
  conversation by conversation as it is read (:func:`~loopspec.oracle._read.transcripts.conversations`).

When the first non-blank line is a JSON value on its own, the file is NDJSON and that line decides;
otherwise a few more lines are looked at for ledger events (a ledger whose first line is damaged), and
then the whole file is one document (or JSON values one after the other, as the console exporter writes
them), whose first value decides. :func:`detect` returns the :class:`Head`: the format, and every line it
read, for the read stage to go on from.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Final

from ..judge.verdict import TRACE_FORMAT
from ..support import safejson
from ._options import Options
from ._read.agents_trace import is_agents_trace
from ._tables import EVENT_TYPES

Json = Any

Line = tuple[int, bytes | None, str | None]

#: Lines looked at for a ledger event when the first line is not JSON on its own.
_SNIFF: Final = 8

#: (line number, the line or None, an error or None) of what the loader's line reader gives.
_LINE: Final = operator.itemgetter(0, 1, 2)


@dataclass
class Head:
    """What the detect stage read of a file, and what it decided."""

    format: str  # a format of INPUT_FORMATS but "auto", or "transcript" (decided per conversation)
    first: Line | None  # the first non-blank line (None: the file holds none)
    early: list[Line] = field(default_factory=list)  # lines that could not be read before it
    peeked: list[Line] = field(default_factory=list)  # lines read after it
    lines: Iterator[Line] = field(default_factory=lambda: iter(()))  # the rest of the file
    one_line: bool = False  # the first line is a JSON value on its own: NDJSON
    doc: Json = None  # the first line's value (NDJSON) or the whole document's (``whole``)
    whole: bool = False  # ``doc`` is the value of the whole file, read as one document


def detect(fh: IO[bytes], fmt: str, opts: Options) -> Head:
    """Read the head of ``fh`` and decide its format (``fmt``: ``auto``, or the format given)."""
    limits = opts.limits
    lines = map(_LINE, safejson.iter_lines(fh, limits=limits))  # (no frame of this module: read pulls from it)
    head = Head(fmt, None, lines=lines)
    first = _first_line(lines)
    while first is not None and first[1] is None:
        head.early.append(first)
        first = _first_line(lines)
    head.first = first
    if first is None:
        return head
    raw = first[1]
    assert raw is not None
    try:
        head.doc = safejson.loads(raw, limits=limits)
        head.one_line = True
    except safejson.JsonInputError:
        head.one_line = False
    if fmt != "auto":
        return head
    if head.one_line:
        head.format = kind_of(head.doc)
        return head
    for item in lines:  # the first line is not JSON on its own: look a few lines further for ledger events
        head.peeked.append(item)
        if item[1] is not None and item[1].strip():
            try:
                k = kind_of(safejson.loads(item[1], limits=limits))
            except safejson.JsonInputError:
                k = ""
            if k == "ledger":
                head.format = "ledger"
                return head
        if len(head.peeked) >= _SNIFF:
            break
    head.format = "transcript"
    _whole_document(head, limits)
    return head


def _first_line(lines: Iterator[Line]) -> Line | None:
    for n, raw, err in lines:
        if raw is None or raw.strip():
            return n, raw, err
    return None


def _whole_document(head: Head, limits: safejson.Limits) -> None:
    """The file is one document (or values one after the other): read the rest of it and let its first value
    decide between telemetry and a transcript. What cannot be read is left for the read stage to report."""
    assert head.first is not None
    size = len(head.first[1] or b"")
    for item in head.peeked:
        if item[1] is None:
            return
        size += len(item[1])
    for item in head.lines:
        head.peeked.append(item)
        if item[1] is None:
            return
        size += len(item[1])
        if size > limits.max_bytes:
            return
    data = b"".join([head.first[1] or b""] + [x[1] or b"" for x in head.peeked])
    try:
        head.doc = safejson.loads(data, limits=limits)
        head.whole = True
    except safejson.JsonInputError as exc:
        if not exc.reason.startswith("not JSON: Extra data"):
            return
        try:  # JSON values one after another (the console exporter): the first one decides
            text = data.decode("utf-8")
            first, _ = json.JSONDecoder().raw_decode(text, len(text) - len(text.lstrip()))
        except (ValueError, RecursionError):
            return
        head.format = telemetry_kind(first) or head.format
        return
    head.format = telemetry_kind(head.doc) or head.format


def kind_of(doc: Json) -> str:
    """The format a file's first document shows: ledger, trace, otlp-json, otel-console or transcript."""
    if isinstance(doc, dict):
        typ = doc.get("type")
        if isinstance(typ, str) and typ in EVENT_TYPES and "run" in doc:
            return "ledger"
        if doc.get("format") == TRACE_FORMAT:
            return "trace"
    return telemetry_kind(doc) or "transcript"


def telemetry_kind(doc: Json) -> str | None:
    if is_otlp(doc):
        return "otlp-json"
    if is_agents_trace(doc):
        return "openai-agents-trace"
    if is_console_span(doc) or (isinstance(doc, list) and doc and is_console_span(doc[0])):
        return "otel-console"
    return None


def is_otlp(doc: Json) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("resourceSpans"), list)


def is_console_span(doc: Json) -> bool:
    return (isinstance(doc, dict) and isinstance(doc.get("context"), dict) and "trace_id" in doc["context"]
            and "name" in doc)
