"""Reading OpenTelemetry spans: OTLP/JSON files and the OpenTelemetry SDK console exporter's JSON.

Two file shapes, one :class:`~loopspec.oracle._items.Span`:

* **OTLP/JSON** (``otlp-json``): what the OTLP file exporter (``opentelemetry-exporter-otlp-json-file``)
  and the Collector's file exporter write — one ``ExportTraceServiceRequest`` a line
  (``{"resourceSpans": [{"resource", "scopeSpans": [{"scope", "spans": [...]}]}]}``), attribute values
  as ``AnyValue`` (``stringValue``, ``intValue`` as a decimal string, ...), ids as hex, times in
  nanoseconds (``startTimeUnixNano``, a decimal string);
* **console** (``otel-console``): what ``ConsoleSpanExporter`` prints — ``ReadableSpan.to_json()``,
  one indented object per span, one after the other (``context.trace_id`` / ``span_id`` as ``0x``
  hex, ``parent_id``, ISO 8601 ``start_time``, a plain ``attributes`` object).

The spans go on to the group stage (:mod:`loopspec.oracle._group.telemetry`), which makes runs of them.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Final

from .._items import Span, TelemetryError, TranscriptError
from .._records import InputError
from .documents import Doc

Json = Any

#: Most spans one telemetry file may hold (a file's spans are grouped into runs in memory: about 2 KB a
#: span with message content); past it the file is refused with an error — split the export by trace.
MAX_SPANS: Final = 250_000


def _need(cond: bool, where: str, message: str, line: int) -> None:
    if not cond:
        raise TelemetryError(where, message, line)


def any_value(v: Json, where: str, line: int, depth: int = 0) -> Json:
    """An OTLP ``AnyValue`` as a plain value."""
    _need(isinstance(v, dict), where, "an attribute value must be an object (AnyValue)", line)
    _need(depth < 32, where, "attribute values nested too deeply", line)
    if "stringValue" in v:
        return v["stringValue"]
    if "boolValue" in v:
        return v["boolValue"]
    if "intValue" in v:
        iv = v["intValue"]
        if isinstance(iv, str) and re.fullmatch(r"-?\d{1,20}", iv):
            return int(iv)
        _need(isinstance(iv, int) and not isinstance(iv, bool), f"{where}.intValue",
              "must be an integer (or its decimal string)", line)
        return iv
    if "doubleValue" in v:
        return v["doubleValue"]
    if "bytesValue" in v:
        return v["bytesValue"]
    if "arrayValue" in v:
        arr = (v["arrayValue"] or {}).get("values", []) if isinstance(v["arrayValue"], dict) else None
        _need(isinstance(arr, list), f"{where}.arrayValue.values", "must be a list", line)
        return [any_value(x, f"{where}.arrayValue.values[{k}]", line, depth + 1) for k, x in enumerate(arr)]
    if "kvlistValue" in v:
        kv = (v["kvlistValue"] or {}).get("values", []) if isinstance(v["kvlistValue"], dict) else None
        _need(isinstance(kv, list), f"{where}.kvlistValue.values", "must be a list", line)
        return _key_values(kv, f"{where}.kvlistValue.values", line, depth + 1)
    return None  # an empty AnyValue


def _key_values(kvs: Json, where: str, line: int, depth: int = 0) -> dict[str, Json]:
    _need(isinstance(kvs, list), where, "must be a list of {key, value}", line)
    out: dict[str, Json] = {}
    for k, kv in enumerate(kvs):
        _need(isinstance(kv, dict) and isinstance(kv.get("key"), str), f"{where}[{k}]",
              "an attribute must be {\"key\": string, \"value\": AnyValue}", line)
        out[kv["key"]] = any_value(kv.get("value", {}), f"{where}[{k}].value", line, depth)
    return out


def _nanos(v: Json, where: str, line: int) -> int:
    if isinstance(v, str) and re.fullmatch(r"\d{1,20}", v):
        return int(v)
    _need(isinstance(v, int) and not isinstance(v, bool) and v >= 0, where,
          "must be a time in nanoseconds (an integer or its decimal string)", line)
    return int(v)


_HEX = re.compile(r"(0x)?[0-9a-fA-F]{1,64}")


def id_to_hex(v: str, digits: int) -> str | None:
    """A trace id (``digits`` 32) or span id (16) as lowercase hex, whether it came as hex (OTLP/JSON, the console
    exporter's ``0x…``) or base64 (the protobuf JSON mapping of OTLP, as ``json_format.MessageToJson`` writes
    bytes fields); None when it is neither. Base64 of 16 or 8 bytes always ends in ``=``, so it is never
    mistaken for hex. Shared with ``loopspec monitor``'s OTLP/HTTP intake."""
    low = v.lower()
    if low.startswith("0x"):
        low = low[2:]
    if _HEX.fullmatch(low) is not None and "=" not in v:
        return low
    if v.endswith("="):
        try:
            raw = base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            return None
        if len(raw) * 2 == digits:
            return raw.hex()
    return None


def _hex_id(v: Json, where: str, line: int, *, digits: int, optional: bool = False) -> str | None:
    if optional and (v is None or v == ""):
        return None
    got = id_to_hex(v, digits) if isinstance(v, str) else None
    _need(got is not None, where, f"must be a hex id (or the {digits // 2} bytes of one in base64)", line)
    return got


def otlp_spans(doc: Json, where: str, line: int, order: int = 0) -> list[Span]:
    """The spans of one ``ExportTraceServiceRequest`` in OTLP/JSON."""
    _need(isinstance(doc, dict) and isinstance(doc.get("resourceSpans"), list), where,
          'expected an OTLP/JSON trace request: {"resourceSpans": [...]}', line)
    out: list[Span] = []
    for r, rs in enumerate(doc["resourceSpans"]):
        w = f"{where}resourceSpans[{r}]"
        _need(isinstance(rs, dict), w, "must be an object", line)
        scopes = rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", []))  # the latter: OTLP before 0.15
        _need(isinstance(scopes, list), f"{w}.scopeSpans", "must be a list", line)
        for s, ss in enumerate(scopes):
            ws = f"{w}.scopeSpans[{s}]"
            _need(isinstance(ss, dict) and isinstance(ss.get("spans", []), list), ws,
                  'must be an object with "spans": [...]', line)
            for k, sp in enumerate(ss.get("spans", [])):
                wp = f"{ws}.spans[{k}]"
                _need(isinstance(sp, dict), wp, "a span must be an object", line)
                name = sp.get("name", "")
                _need(isinstance(name, str), f"{wp}.name", "must be a string", line)
                status = sp.get("status") or {}
                _need(isinstance(status, dict), f"{wp}.status", "must be an object", line)
                code = status.get("code")
                out.append(Span(
                    trace=_hex_id(sp.get("traceId"), f"{wp}.traceId", line, digits=32) or "",
                    span=_hex_id(sp.get("spanId"), f"{wp}.spanId", line, digits=16) or "",
                    parent=_hex_id(sp.get("parentSpanId"), f"{wp}.parentSpanId", line, digits=16, optional=True),
                    name=name,
                    start=_nanos(sp.get("startTimeUnixNano", 0), f"{wp}.startTimeUnixNano", line),
                    end=_nanos(sp.get("endTimeUnixNano", 0), f"{wp}.endTimeUnixNano", line),
                    attrs=_key_values(sp.get("attributes", []), f"{wp}.attributes", line),
                    error=code in (2, "STATUS_CODE_ERROR"),
                    path=wp, line=line, order=order + len(out)))
    return out


def iso_nanos(v: Json, where: str, line: int) -> int:
    _need(isinstance(v, str), where, "must be an ISO 8601 time", line)
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)?", v)
    _need(m is not None, where, f"must be an ISO 8601 time, got {v!r:.40}", line)
    assert m is not None
    try:
        base = datetime.fromisoformat(m.group(1) + (m.group(3) or "Z").replace("Z", "+00:00"))
    except ValueError:
        raise TelemetryError(where, f"not a valid time: {v!r:.40}", line) from None
    frac = (m.group(2) or "").ljust(9, "0")
    return int(base.timestamp()) * 1_000_000_000 + int(frac or 0)


def console_span(doc: Json, where: str, line: int, order: int = 0) -> Span:
    """One span as ``ConsoleSpanExporter`` prints it (``ReadableSpan.to_json()``)."""
    _need(isinstance(doc, dict), where, "a span must be an object", line)
    ctx = doc.get("context")
    _need(isinstance(ctx, dict), f"{where}.context", 'missing (a console span has "context": {trace_id, span_id})',
          line)
    name = doc.get("name", "")
    _need(isinstance(name, str), f"{where}.name", "must be a string", line)
    attrs = doc.get("attributes") or {}
    _need(isinstance(attrs, dict), f"{where}.attributes", "must be an object", line)
    status = doc.get("status") or {}
    _need(isinstance(status, dict), f"{where}.status", "must be an object", line)
    return Span(
        trace=_hex_id(ctx.get("trace_id"), f"{where}.context.trace_id", line, digits=32) or "",
        span=_hex_id(ctx.get("span_id"), f"{where}.context.span_id", line, digits=16) or "",
        parent=_hex_id(doc.get("parent_id"), f"{where}.parent_id", line, digits=16, optional=True),
        name=name,
        start=iso_nanos(doc.get("start_time"), f"{where}.start_time", line),
        end=iso_nanos(doc.get("end_time") or doc.get("start_time"), f"{where}.end_time", line),
        attrs=dict(attrs), error=status.get("status_code") == "ERROR", path=where, line=line, order=order)


def read_spans(docs: Iterator[Doc | InputError], name: str, fmt: str) -> Iterator[Span | InputError]:
    """Every span of the file's documents, in file order (``order`` numbers them), and an input error for
    each span or document that cannot be read; past :data:`MAX_SPANS` spans, an error ends the file."""
    count = 0
    for d in docs:
        if isinstance(d, InputError):
            yield d
            continue
        values = d.value if fmt == "otel-console" and isinstance(d.value, list) else [d.value]
        for k, v in enumerate(values):
            line = d.located.line(v) if d.located is not None and isinstance(v, dict) else d.line
            try:
                if fmt == "otlp-json":
                    got = otlp_spans(v, "", line, count)
                    count += len(got)
                    yield from got
                else:
                    where = "$" if v is d.value else f"$[{k}]"
                    yield console_span(v, where, line, count)
                    count += 1
            except TranscriptError as exc:
                yield InputError(name, exc.line or line, f"{exc.where}: {exc.message}")
        if count > MAX_SPANS:
            yield InputError(name, d.line, f"more than {MAX_SPANS} spans in one file: split it by trace")
            return
