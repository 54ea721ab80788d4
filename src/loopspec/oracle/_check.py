"""Checking files: detect the input format, run the right driver, collect records and the summary.

Input formats (``--input-format``):

* ``ledger`` — the engine's run ledger (NDJSON, one event a line, runs interleaved; streamed);
* ``trace`` — ``loopspec-trace/1`` documents, judged by the fuzzer's judge itself;
* ``openai-chat`` / ``openai-responses`` / ``anthropic`` — transcripts (``openai-responses`` also reads
  the Agents SDK's ``to_input_list()``);
* ``pydantic-ai`` / ``langchain`` — framework message histories (``ModelMessagesTypeAdapter`` JSON,
  ``messages_to_dict``), read like transcripts;
* ``otlp-json`` / ``otel-console`` — OpenTelemetry traces (OTLP/JSON lines, the SDK console
  exporter's JSON), grouped into runs by trace and agent invocation;
* ``auto`` (default) — decided per file from its first line: a ledger event (an object with ``run``
  and a ledger ``type``) means a ledger, a ``loopspec-trace/1`` object a trace file, an object with
  ``resourceSpans`` OTLP/JSON, a span as the console exporter prints it (``context.trace_id``) console
  JSON; anything else is a transcript file, whose format is decided from the first conversation that
  shows tool use (or the shape of a framework history).

Transcript and trace files may be one JSON document (a conversation, a JSON array of
conversations, or — for transcripts — a bare array of messages / items), or NDJSON with one
document per line. The rule: when the first non-blank line is a JSON value on its own, the file is
NDJSON; otherwise the whole file is one document.
"""

from __future__ import annotations

import io
import itertools
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from ..judge.trace import judge
from ..judge.verdict import TRACE_FORMAT, TraceError, default_spec
from ..spec.loader import Spec
from ..support import safejson
from . import _histories, _telemetry
from ._locate import Located, loads_located
from ._records import MAX_ERRORS_SHOWN, InputError, RunRecord, Summary
from ._stream import DEFAULT_OPTIONS, LedgerStream, Options, read_lines
from ._tables import EVENT_TYPES, tables_for
from ._transcripts import (
    ASSUMPTION,
    FORMATS,
    IMPORTERS,
    LABELS,
    WITNESSED,
    TranscriptError,
    check_items,
    conversation_body,
    detect_format,
    formats_shown,
    is_conversation,
)

Json = Any

TELEMETRY_FORMATS: Final = ("otlp-json", "otel-console")
INPUT_FORMATS: Final = ("auto", "ledger", "trace", *FORMATS, *_histories.FORMATS, *TELEMETRY_FORMATS)

_IMPORTERS: Final = {**IMPORTERS, **_histories.IMPORTERS}
_WITNESSED: Final = {**WITNESSED, **_histories.WITNESSED}

#: Most spans one telemetry file may hold (a file's spans are grouped into runs in memory: about 2 KB a
#: span with message content); past it the file is refused with an error — split the export by trace.
MAX_SPANS: Final = 250_000

#: Said when a transcript or trace file that is one JSON document is past the size limit.
_NDJSON_HINT: Final = ("; a transcript or trace file that is one JSON document must fit the limit too: write one "
                       "conversation or trace a line (NDJSON)")


@dataclass
class FileResult:
    records: list[RunRecord] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)  # the first MAX_ERRORS_SHOWN (summary counts all)
    summary: Summary = field(default_factory=Summary)

    def add_error(self, e: InputError) -> None:
        if len(self.errors) < MAX_ERRORS_SHOWN:
            self.errors.append(e)


def _open(path: str) -> IO[bytes]:
    if path == "-":
        return sys.stdin.buffer
    return open(path, "rb")


def iter_check_file(path: str, *, input_format: str = "auto", options: Options = DEFAULT_OPTIONS,
                    spec: Spec | None = None, summary: Summary | None = None,
                    on_open: Callable[[IO[bytes]], None] | None = None) -> Iterator[RunRecord | InputError]:
    """Check one file; yields run records and input errors as they come. ``summary`` is updated.
    ``on_open`` is given the opened file (the command line's progress line reads its position)."""
    spec = spec or default_spec()
    summary = summary if summary is not None else Summary()
    summary.files += 1
    name = path
    try:
        fh = _open(path)
    except FileNotFoundError:
        summary.input_errors += 1
        yield InputError(name, None, "no such file")
        return
    except IsADirectoryError:
        summary.input_errors += 1
        yield InputError(name, None, "is a directory, not a file")
        return
    except OSError as exc:
        summary.input_errors += 1
        yield InputError(name, None, f"cannot read: {exc.strerror}")
        return
    if on_open is not None:
        on_open(fh)
    try:
        for item in _check_open(fh, name, input_format, options, spec, summary):
            if isinstance(item, InputError):
                summary.input_errors += 1
            else:
                summary.add(item)
            yield item
    except OSError as exc:
        summary.input_errors += 1
        yield InputError(name, None, f"cannot read: {exc.strerror or exc}")
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()


def check_file(path: str, *, input_format: str = "auto", options: Options = DEFAULT_OPTIONS,
               spec: Spec | None = None) -> FileResult:
    res = FileResult()
    for item in iter_check_file(path, input_format=input_format, options=options, spec=spec, summary=res.summary):
        if isinstance(item, InputError):
            res.add_error(item)
        else:
            res.records.append(item)
    return res


def _first_line(lines: Iterator[tuple[int, bytes | None, str | None]]) -> tuple[int, bytes | None, str | None] | None:
    for n, raw, err in lines:
        if raw is None or raw.strip():
            return n, raw, err
    return None


def _chain(first: tuple[int, bytes | None, str | None],
           rest: Iterator[tuple[int, bytes | None, str | None]]) -> Iterator[tuple[int, bytes | None, str | None]]:
    yield first
    yield from rest


def _check_open(fh: IO[bytes], name: str, fmt: str, opts: Options, spec: Spec,
                summary: Summary) -> Iterator[RunRecord | InputError]:
    limits = opts.limits
    lines = read_lines(fh, opts.max_line)
    first = _first_line(lines)
    early: list[InputError] = []  # over-long lines before the first readable one
    while first is not None and first[1] is None:
        early.append(InputError(name, first[0], first[2] or "unreadable line"))
        first = _first_line(lines)
    if first is None:
        if early:
            if len(early) == 1 and fmt != "ledger":
                e = early[0]
                early[0] = InputError(e.file, e.line, e.message + _NDJSON_HINT)
            yield from early
        else:
            yield InputError(name, None, "the file is empty")
        return
    n, raw, _err = first
    doc: Json = None
    one_line = False
    if raw is not None:
        try:
            doc = safejson.loads(raw, limits=limits)
            one_line = True
        except safejson.JsonInputError:
            one_line = False
    peeked: list[tuple[int, bytes | None, str | None]] = []
    if fmt == "auto":
        fmt = _kind_of(doc) if one_line else ""
        if not fmt:  # the first line is not JSON on its own: look a few lines further for ledger events
            for item in lines:
                peeked.append(item)
                if item[1] is not None and item[1].strip():
                    try:
                        k = _kind_of(safejson.loads(item[1], limits=limits))
                    except safejson.JsonInputError:
                        k = ""
                    if k == "ledger":
                        fmt = "ledger"
                        break
                if len(peeked) >= 8:
                    break
            fmt = fmt or "transcript"
    if fmt == "ledger":
        stream = LedgerStream(spec, name, opts)
        if fh.seekable():
            fh.seek(0)  # the stream reads (and reports) the over-long lines again
            src: IO[bytes] = fh
        else:  # stdin: put back the lines read to decide the format
            yield from early
            src = _Prepend([first[1] or b"\n"] + [x[1] or b"\n" for x in peeked], fh)
        try:
            yield from stream.run(src, 1 if fh.seekable() else n)
        finally:
            summary.events += stream.events
        return
    yield from early
    # documents: NDJSON (one per line) or one document for the whole file
    docs = _documents(first, itertools.chain(peeked, lines), one_line, name, opts,
                      doc if one_line else None)
    if fmt in ("transcript", *TELEMETRY_FORMATS):
        head = next(docs, None)
        if head is None:
            return
        docs = _chain(head, docs)  # type: ignore[arg-type]
        if fmt == "transcript" and isinstance(head, _Doc):
            fmt = _telemetry_kind(head.value) or fmt
        if fmt in TELEMETRY_FORMATS:
            yield from _check_telemetry(docs, name, fmt, opts, spec, summary)  # type: ignore[arg-type]
            return
    if fmt == "trace":
        yield from _check_traces(docs, name, spec, summary)
        return
    yield from _check_transcripts(docs, name, None if fmt == "transcript" else fmt, opts, spec, summary)


class _Prepend(io.RawIOBase):
    """A byte stream that yields ``head`` (lines already read) before the rest of ``fh``."""

    def __init__(self, head: list[bytes], fh: IO[bytes]) -> None:
        self.head = list(reversed(head))
        self.fh = fh

    def readline(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        if self.head:
            return self.head.pop()
        return self.fh.readline(size if size is not None else -1)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False


def _kind_of(doc: Json) -> str:
    if isinstance(doc, dict):
        typ = doc.get("type")
        if isinstance(typ, str) and typ in EVENT_TYPES and "run" in doc:
            return "ledger"
        if doc.get("format") == TRACE_FORMAT:
            return "trace"
        return _telemetry_kind(doc) or "transcript"
    return "transcript"


def _telemetry_kind(doc: Json) -> str | None:
    if _telemetry.is_otlp(doc):
        return "otlp-json"
    if _telemetry.is_console_span(doc) or (isinstance(doc, list) and doc and _telemetry.is_console_span(doc[0])):
        return "otel-console"
    return None


@dataclass
class _Doc:
    value: Json
    line: int
    located: Located | None
    number: int  # 1-based position among the file's conversations


def _documents(first: tuple[int, bytes | None, str | None], lines: Iterator[tuple[int, bytes | None, str | None]],
               one_line: bool, name: str, opts: Options, first_doc: Json = None) -> Iterator[_Doc | InputError]:
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
                                             f"--max-line-bytes raises it){_NDJSON_HINT}")
            return
    data = bytes(buf)
    del buf
    start = first[0]
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


def _concatenated(text: str, start: int, name: str) -> Iterator[_Doc | InputError]:
    k = 0
    try:
        for line, value in _telemetry.iter_concatenated(text, start):
            if isinstance(value, ValueError):
                yield InputError(name, line, f"not JSON: {_reason(value)}")
                return
            k += 1
            yield _Doc(value, line, None, k)
    except RecursionError:
        yield InputError(name, None, "not JSON: nested too deeply")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, safejson.JsonInputError):
        return exc.message().removeprefix("not JSON: ")
    msg = getattr(exc, "msg", None) or str(exc)
    return str(msg).splitlines()[0] if msg else type(exc).__name__


def _expand(loc: Located, line: int, k: int) -> Iterator[_Doc]:
    doc = loc.doc
    if isinstance(doc, list) and doc and not is_conversation(doc) and all(is_conversation(d) or (
            isinstance(d, dict) and d.get("format") == TRACE_FORMAT) for d in doc):
        for j, d in enumerate(doc):
            yield _Doc(d, loc.line(d) if isinstance(d, dict) else line, loc, k + j)
        return
    yield _Doc(doc, line, loc, k)


def _check_traces(docs: Iterator[_Doc | InputError], name: str, spec: Spec,
                  summary: Summary) -> Iterator[RunRecord | InputError]:
    for d in docs:
        if isinstance(d, InputError):
            yield d
            continue
        trace = d.value
        rid = trace.get("id") if isinstance(trace, dict) and isinstance(trace.get("id"), str) else f"trace-{d.number}"
        n_events = len(trace.get("events", [])) if isinstance(trace, dict) and isinstance(trace.get("events"), list) \
            else 0
        summary.events += n_events
        try:
            verdict = judge(trace, spec=spec)
        except TraceError as exc:
            yield RunRecord(name, rid, "trace", "unreadable", n_events, (d.line, d.line),
                            error=f"{exc.where}: {exc.message}", error_line=d.line)
            continue
        v = verdict.violation
        rec = RunRecord(name, rid, "trace", "conforms" if v is None else "violates", n_events, (d.line, d.line),
                        dict(verdict.expected), {}, v)
        if v is not None:
            rec.at = {"event": None, "seq": None, "line": d.line, "observedTransition": None}
        yield rec


def _check_transcripts(docs: Iterator[_Doc | InputError], name: str, fmt: str | None, opts: Options, spec: Spec,
                       summary: Summary) -> Iterator[RunRecord | InputError]:
    rules = tables_for(spec).rules
    all_rules = tables_for(spec).rule_ids
    base = os.path.basename(name) if name != "-" else "stdin"
    file_fmt: str | None = None  # the format of the file's first conversation that shows one
    pending: list[_Doc] = []  # conversations seen before the format showed (all need the same importer)

    def cid_of(d: _Doc) -> str:
        doc = d.value
        return doc["id"] if isinstance(doc, dict) and isinstance(doc.get("id"), str) else f"{base}#{d.number}"

    def one(d: _Doc, f: str) -> RunRecord:
        doc = d.value
        cid = cid_of(d)
        body = conversation_body(doc)
        if body is None:
            return RunRecord(name, cid, f, "unreadable", 0, (d.line, d.line),
                             error=f"not a conversation: expected an object with \"messages\" (or OpenAI Responses "
                                   f"\"input\"/\"output\" items), or a list of messages (read as {LABELS[f]})",
                             error_line=d.line)
        key, entries = body
        where = key or "$"
        loc = d.located
        line_of = (lambda o: loc.line(o)) if loc is not None else (lambda o: d.line)
        summary.events += len(entries)
        try:
            items = _IMPORTERS[f](entries, where, line_of)
        except TranscriptError as exc:
            return RunRecord(name, cid, f, "unreadable", len(entries), (d.line, d.line),
                             error=f"{exc.where}: {exc.message}", error_line=exc.line or d.line)
        last = max([d.line] + [it.line for it in items])
        tv = check_items(f, cid, items, len(entries), rules, allow_incomplete=opts.allow_incomplete)
        w = _WITNESSED[f]
        checks = {"verified": [r for r, how in w.items() if how == "verified"],
                  "assumed": [r for r, how in w.items() if how == "assumed"],
                  "notWitnessed": [r for r in all_rules if r not in w and r != "R0"]}
        summ = {"calls": tv.calls, "results": tv.results}
        if tv.violation is None:
            return RunRecord(name, cid, f, "conforms", tv.events, (d.line, last), summ, checks)
        return RunRecord(name, cid, f, "violates", tv.events, (d.line, last), summ, checks, tv.violation,
                         {"event": tv.item_pos, "path": tv.path, "line": tv.line},
                         {"events": tv.item_pos, "steps": tv.steps})

    def refused(d: _Doc, f: str, why: str) -> RunRecord:
        body = conversation_body(d.value)
        n = len(body[1]) if body is not None else 0
        summary.events += n
        return RunRecord(name, cid_of(d), f, "unreadable", n, (d.line, d.line), error=why, error_line=d.line)

    for d in docs:
        if isinstance(d, InputError):
            yield d
            continue
        shown = formats_shown(d.value)
        if fmt is not None:  # --input-format: every conversation is read in that format
            other = [(f, w) for f, w in shown.items() if f != fmt] if fmt in LABELS else []
            if other:
                f2, w2 = other[0]
                yield refused(d, fmt, f"{w2} is {LABELS[f2]}, but --input-format is {fmt} ({LABELS[fmt]})")
            else:
                yield one(d, fmt)
            continue
        f = _histories.detect_format(d.value)
        if f is None and len(shown) > 1:
            (f1, w1), (f2, w2) = list(shown.items())[:2]
            yield refused(d, f1, f"mixes {LABELS[f1]} ({w1}) and {LABELS[f2]} ({w2}) messages: a conversation is "
                                 "in one format")
            continue
        f = f or next(iter(shown), None) or file_fmt or detect_format(d.value)
        if f is None:
            pending.append(d)  # no tool use and nothing else decisive: read as the file's other conversations
            continue
        if file_fmt is None:
            file_fmt = f
            for p in pending:
                yield one(p, f)
            pending.clear()
        yield one(d, f)
    for p in pending:  # no conversation showed its format: none uses tools, so any importer agrees
        yield one(p, "openai-chat")


def assumption_notes(input_kind: str) -> dict[str, str]:
    from ._records import LEDGER_ASSUMPTIONS

    if input_kind == "ledger":
        return dict(LEDGER_ASSUMPTIONS)
    if input_kind in _WITNESSED:
        return {r: ASSUMPTION for r, how in _WITNESSED[input_kind].items() if how == "assumed"}
    if input_kind in TELEMETRY_FORMATS:
        return {r: ASSUMPTION for r in ("R6", "R7")}
    return {}


def _check_telemetry(docs: Iterator[_Doc | InputError], name: str, fmt: str, opts: Options, spec: Spec,
                     summary: Summary) -> Iterator[RunRecord | InputError]:
    """Read every span of the file (a trace's spans may be anywhere in it), group them into runs and check
    each run's conversation and executions."""
    spans: list[_telemetry.Span] = []
    for d in docs:
        if isinstance(d, InputError):
            yield d
            continue
        values = d.value if fmt == "otel-console" and isinstance(d.value, list) else [d.value]
        for v in values:
            line = d.located.line(v) if d.located is not None and isinstance(v, dict) else d.line
            try:
                if fmt == "otlp-json":
                    spans += _telemetry.otlp_spans(v, "", line, len(spans))
                else:
                    where = "$" if v is d.value else f"$[{values.index(v)}]"
                    spans.append(_telemetry.console_span(v, where, line, len(spans)))
            except TranscriptError as exc:
                yield InputError(name, exc.line or line, f"{exc.where}: {exc.message}")
        if len(spans) > MAX_SPANS:
            yield InputError(name, d.line, f"more than {MAX_SPANS} spans in one file: split it by trace")
            return
    summary.events += len(spans)
    t = tables_for(spec)
    for run in _telemetry.group_runs(spans):
        lines = (min(s.line for s in run.spans), max(s.line for s in run.spans))
        agent = _telemetry._attr(run.agent, "agent.name") if run.agent is not None else None
        try:
            ri = _telemetry.run_items(run)
        except TranscriptError as exc:
            yield RunRecord(name, run.id, fmt, "unreadable", len(run.spans), lines,
                            error=f"{exc.where}: {exc.message}", error_line=exc.line or lines[0])
            continue
        tools = ri.tools if ri.tools is not None else (ri.schemas or None)
        tv = check_items(fmt, run.id, ri.items, len(run.spans), t.rules, allow_incomplete=True, tools=tools,
                         allow_list=ri.tools is not None)
        checks = _telemetry.run_checks(ri.recorded, ri.tools, ri.schemas, t.rule_ids)
        summ: dict[str, Json] = {"calls": tv.calls, "results": tv.results, "executions": tv.executions}
        if isinstance(agent, str):
            summ["agent"] = agent
        summ["recorded"] = ri.recorded
        if ri.notes:
            summ["notes"] = ri.notes
        if tv.violation is None:
            yield RunRecord(name, run.id, fmt, "conforms", len(run.spans), lines, summ, checks)
            continue
        yield RunRecord(name, run.id, fmt, "violates", len(run.spans), lines, summ, checks, tv.violation,
                        {"event": tv.item_pos, "path": tv.path, "line": tv.line}, {"events": tv.item_pos,
                                                                                   "steps": tv.steps})


def read_text_input(data: bytes, name: str = "<memory>", **kw: Any) -> FileResult:
    """Check in-memory bytes (tests, notebooks)."""
    res = FileResult()
    spec = kw.pop("spec", None) or default_spec()
    opts = kw.pop("options", Options())
    fmt = kw.pop("input_format", "auto")
    res.summary.files += 1
    for item in _check_open(io.BytesIO(data), name, fmt, opts, spec, res.summary):
        if isinstance(item, InputError):
            res.summary.input_errors += 1
            res.add_error(item)
        else:
            res.summary.add(item)
            res.records.append(item)
    return res


def paths_exist(paths: list[str]) -> list[str]:
    return [p for p in paths if p != "-" and not Path(p).exists()]
