"""OTLP/HTTP trace export requests, as the OpenTelemetry SDKs and the Collector send them to ``/v1/traces``.

A request body is an ``ExportTraceServiceRequest``, encoded as protobuf (``application/x-protobuf``) or in
OTLP's JSON encoding (``application/json``), optionally gzip-compressed (``Content-Encoding: gzip``). Both
are turned into the OTLP/JSON shape the oracle reads from files (hex trace and span ids, as the OTLP/JSON
encoding has them), then cut by trace: the monitor keeps each trace apart until it can be judged.

Pure functions over bytes and plain data; errors are :class:`BodyError` with the HTTP status the OTLP
specification gives for them (400 malformed, 413 too large, 415 unsupported media type).
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..oracle._read.telemetry import id_to_hex
from ..support import safejson

Json = Any

PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"

_HEX_TRACE = re.compile(r"^[0-9a-f]{32}$")
_HEX_SPAN = re.compile(r"^[0-9a-f]{16}$")
_ID_FIELDS: Final = ("traceId", "spanId", "parentSpanId")


class BodyError(ValueError):
    """A request body the monitor refuses: ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` header, lowercased, without parameters."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def inflate(body: bytes, encoding: str | None, max_bytes: int) -> bytes:
    """The body with its ``Content-Encoding`` undone, never more than ``max_bytes`` (a gzip bomb is a 413)."""
    enc = (encoding or "identity").strip().lower()
    if enc in ("", "identity"):
        return body
    if enc != "gzip":
        raise BodyError(415, f"Content-Encoding {encoding!r} is not supported (use gzip or none)")
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise BodyError(400, f"the gzip body cannot be decompressed: {exc}") from None
    if len(out) > max_bytes or d.unconsumed_tail:
        raise BodyError(413, f"the decompressed body is larger than {max_bytes} bytes (--max-body-bytes)")
    if not d.eof:
        raise BodyError(400, "the gzip body is truncated")
    return out


def decode(body: bytes, content_type: str | None, *, max_bytes: int) -> list[Json]:
    """The ``resourceSpans`` of a request, in the OTLP/JSON shape with hex ids."""
    kind = media_type(content_type)
    if kind == JSON:
        try:
            doc = safejson.loads(body, limits=safejson.Limits(max_bytes=max_bytes))
        except safejson.JsonInputError as exc:
            raise BodyError(400, f"the body is not JSON: {exc.message()}") from None
        if not isinstance(doc, dict):
            raise BodyError(400, "the body must be a JSON object (an ExportTraceServiceRequest)")
        rs = doc.get("resourceSpans", [])
        if not isinstance(rs, list):
            raise BodyError(400, "resourceSpans: must be a list")
        return _ids_to_hex(rs, base64_ok=True)
    if kind == PROTOBUF:
        return _from_protobuf(body)
    raise BodyError(415, f"Content-Type {content_type!r} is not supported: send {PROTOBUF} or {JSON}")


def _from_protobuf(body: bytes) -> list[Json]:
    try:
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    except ImportError:  # pragma: no cover - the monitor extra is missing
        raise BodyError(415, "protobuf bodies need the opentelemetry-proto package: pip install "
                             "'loopspec[monitor]' (or send application/json)") from None
    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(body)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise BodyError(400, f"the body is not an ExportTraceServiceRequest in protobuf: {exc}") from None
    return [_resource_spans(rs) for rs in req.resource_spans]


# The OTLP/JSON encoding of the messages, written out: protobuf's generic json_format spent 400 µs a span
# (benchmarks/monitor_speed.py); this is the same mapping for the trace messages only (lowerCamelCase names,
# 64-bit integers as decimal strings, enums as integers, ids as hex, other bytes as base64, default values
# left out), and tests/test_monitor.py checks it against json_format on real spans.


def _resource_spans(rs: Any) -> Json:
    out: dict[str, Json] = {}
    if rs.HasField("resource"):
        out["resource"] = _attributed(rs.resource, {})
    out["scopeSpans"] = [_scope_spans(ss) for ss in rs.scope_spans]
    if rs.schema_url:
        out["schemaUrl"] = rs.schema_url
    return out


def _scope_spans(ss: Any) -> Json:
    out: dict[str, Json] = {}
    if ss.HasField("scope"):
        sc = ss.scope
        scope: dict[str, Json] = {}
        if sc.name:
            scope["name"] = sc.name
        if sc.version:
            scope["version"] = sc.version
        out["scope"] = _attributed(sc, scope)
    out["spans"] = [_span(s) for s in ss.spans]
    if ss.schema_url:
        out["schemaUrl"] = ss.schema_url
    return out


def _attributed(m: Any, out: dict[str, Json]) -> dict[str, Json]:
    if len(m.attributes):
        out["attributes"] = [_kv(kv) for kv in m.attributes]
    if m.dropped_attributes_count:
        out["droppedAttributesCount"] = m.dropped_attributes_count
    return out


def _kv(kv: Any) -> Json:
    return {"key": kv.key, "value": _any(kv.value)} if kv.HasField("value") else {"key": kv.key}


def _any(v: Any) -> Json:
    which = v.WhichOneof("value")
    if which == "string_value":
        return {"stringValue": v.string_value}
    if which == "int_value":
        return {"intValue": str(v.int_value)}
    if which == "bool_value":
        return {"boolValue": v.bool_value}
    if which == "double_value":
        return {"doubleValue": v.double_value}
    if which == "array_value":
        return {"arrayValue": {"values": [_any(x) for x in v.array_value.values]} if len(v.array_value.values)
                else {}}
    if which == "kvlist_value":
        return {"kvlistValue": {"values": [_kv(x) for x in v.kvlist_value.values]} if len(v.kvlist_value.values)
                else {}}
    if which == "bytes_value":
        return {"bytesValue": base64.b64encode(v.bytes_value).decode()}
    return {}


def _span(s: Any) -> Json:
    out: dict[str, Json] = {}
    if s.trace_id:
        out["traceId"] = s.trace_id.hex()
    if s.span_id:
        out["spanId"] = s.span_id.hex()
    if s.trace_state:
        out["traceState"] = s.trace_state
    if s.parent_span_id:
        out["parentSpanId"] = s.parent_span_id.hex()
    if s.flags:
        out["flags"] = s.flags
    if s.name:
        out["name"] = s.name
    if s.kind:
        out["kind"] = s.kind
    if s.start_time_unix_nano:
        out["startTimeUnixNano"] = str(s.start_time_unix_nano)
    if s.end_time_unix_nano:
        out["endTimeUnixNano"] = str(s.end_time_unix_nano)
    _attributed(s, out)
    if len(s.events):
        out["events"] = [_event(e) for e in s.events]
    if s.dropped_events_count:
        out["droppedEventsCount"] = s.dropped_events_count
    if len(s.links):
        out["links"] = [_link(link) for link in s.links]
    if s.dropped_links_count:
        out["droppedLinksCount"] = s.dropped_links_count
    if s.HasField("status"):
        st: dict[str, Json] = {}
        if s.status.message:
            st["message"] = s.status.message
        if s.status.code:
            st["code"] = s.status.code
        out["status"] = st
    return out


def _event(e: Any) -> Json:
    out: dict[str, Json] = {}
    if e.time_unix_nano:
        out["timeUnixNano"] = str(e.time_unix_nano)
    if e.name:
        out["name"] = e.name
    return _attributed(e, out)


def _link(link: Any) -> Json:
    out: dict[str, Json] = {}
    if link.trace_id:
        out["traceId"] = link.trace_id.hex()
    if link.span_id:
        out["spanId"] = link.span_id.hex()
    if link.trace_state:
        out["traceState"] = link.trace_state
    _attributed(link, out)
    if link.flags:
        out["flags"] = link.flags
    return out


def _ids_to_hex(resource_spans: list[Json], *, base64_ok: bool) -> list[Json]:
    """Ids as lowercase hex, whether they came as hex (OTLP/JSON) or base64 (the protobuf JSON mapping).
    A value that is neither is left as it is: the span is then rejected by :func:`by_trace`."""
    for rs in resource_spans:
        for ss in (rs.get("scopeSpans") or []) if isinstance(rs, dict) else []:
            for sp in (ss.get("spans") or []) if isinstance(ss, dict) else []:
                if not isinstance(sp, dict):
                    continue
                for f in _ID_FIELDS:
                    v = sp.get(f)
                    if isinstance(v, str) and v:
                        sp[f] = _hex(v, 32 if f == "traceId" else 16, base64_ok)
    return resource_spans


def _hex(v: str, digits: int, base64_ok: bool) -> str:
    low = v.lower()
    if len(low) == digits and all(c in "0123456789abcdef" for c in low):
        return low
    if base64_ok:  # the protobuf JSON mapping: decoded as `loopspec check` decodes it
        got = id_to_hex(v, digits)
        if got is not None and len(got) == digits:
            return got
    return v


@dataclass
class Cut:
    """A request cut by trace: each trace's spans as OTLP/JSON ``resourceSpans`` fragments (resource and
    scope kept), whether its root span (no parent) is among them, and what was rejected and why."""

    traces: dict[str, list[Json]] = field(default_factory=dict)
    spans: dict[str, int] = field(default_factory=dict)
    roots: set[str] = field(default_factory=set)
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def accepted(self) -> int:
        return sum(self.spans.values())

    def reject(self, reason: str, n: int = 1) -> None:
        self.rejected += n
        self.reasons[reason] = self.reasons.get(reason, 0) + n


def by_trace(resource_spans: list[Json]) -> Cut:
    """Cut ``resourceSpans`` by trace id. A span without a valid trace or span id is rejected (OTLP's
    partial success), as is anything that is not a span object."""
    cut = Cut()
    for rs in resource_spans:
        if not isinstance(rs, dict):
            cut.reject("resourceSpans entry is not an object")
            continue
        resource = rs.get("resource", {})
        for ss in rs.get("scopeSpans") or []:
            if not isinstance(ss, dict) or not isinstance(ss.get("spans", []), list):
                cut.reject("scopeSpans entry is not an object with a list of spans")
                continue
            scope = ss.get("scope", {})
            per: dict[str, list[Json]] = {}
            for sp in ss.get("spans") or []:
                if not isinstance(sp, dict):
                    cut.reject("span is not an object")
                    continue
                tid, sid = sp.get("traceId"), sp.get("spanId")
                if not (isinstance(tid, str) and _HEX_TRACE.match(tid) and tid != "0" * 32):
                    cut.reject("traceId missing or not a 16-byte id")
                    continue
                if not (isinstance(sid, str) and _HEX_SPAN.match(sid) and sid != "0" * 16):
                    cut.reject("spanId missing or not an 8-byte id")
                    continue
                per.setdefault(tid, []).append(sp)
                if not sp.get("parentSpanId"):
                    cut.roots.add(tid)
            for tid, spans in per.items():
                frag = {"resource": resource, "scopeSpans": [{"scope": scope, "spans": spans}]}
                cut.traces.setdefault(tid, []).append(frag)
                cut.spans[tid] = cut.spans.get(tid, 0) + len(spans)
    return cut


def success_body(kind: str, rejected: int, message: str) -> tuple[bytes, str]:
    """An ``ExportTraceServiceResponse``: empty, or a partial success with the rejected count (OTLP/HTTP)."""
    if kind == PROTOBUF:
        if not rejected:
            return b"", PROTOBUF
        inner = _varint_field(1, rejected) + _bytes_field(2, message.encode())
        return _bytes_field(1, inner), PROTOBUF
    if not rejected:
        return b"{}", JSON
    return safejson.dumps({"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": message}}).encode(), JSON


def status_body(kind: str, code: int, message: str) -> tuple[bytes, str]:
    """A ``google.rpc.Status`` (the body OTLP/HTTP gives a refused request), in the request's encoding."""
    if kind == PROTOBUF:
        return _varint_field(1, code) + _bytes_field(2, message.encode()), PROTOBUF
    return safejson.dumps({"code": code, "message": message}).encode(), JSON


#: google.rpc.Code values used in refusals
INVALID_ARGUMENT: Final = 3
RESOURCE_EXHAUSTED: Final = 8
UNAVAILABLE: Final = 14


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _bytes_field(number: int, value: bytes) -> bytes:
    return _varint((number << 3) | 2) + _varint(len(value)) + value


def document(fragments: list[Json]) -> bytes:
    """One trace's fragments as one OTLP/JSON line (what the OTLP file exporter writes), for the oracle. They
    were read within the input limits already (JSON) or are protobuf's own values, so the plain encoder
    serves (the safe one re-walks every value: a quarter of the time of judging a small trace)."""
    return json.dumps({"resourceSpans": fragments}, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode() + b"\n"


def header(headers: Mapping[str, str], name: str) -> str | None:
    for k, v in headers.items():
        if k.lower() == name.lower():
            return v
    return None
