"""Reading the OpenAI Agents SDK's own tracing: the traces and spans it exports (not OpenTelemetry).

The SDK records a trace per workflow and spans inside it, each exported as a plain object — what its
``BackendSpanExporter`` posts to OpenAI (``{"data": [trace.export(), span.export(), ...]}``) and what a
tracing processor of one's own writes with ``trace.export()`` / ``span.export()`` (one object a line):

* a trace: ``{"object": "trace", "id": "trace_…", "workflow_name", "group_id", "metadata"}``;
* a span: ``{"object": "trace.span", "id": "span_…", "trace_id", "parent_id", "started_at", "ended_at",
  "span_data": {"type": …}, "error": null | {"message", "data"}}`` (source, openai-agents 0.24.0,
  ``agents/tracing/spans.py``: ``"object": "trace.span",``).

Accepted shapes: one item a line, the exporter's ``{"data": [...]}`` payloads (a line each, or one document), or
a JSON array of items. Each span becomes a :class:`~loopspec.oracle._items.Span` with the GenAI names the group
stage reads (:mod:`loopspec.oracle._group.telemetry`), so the SDK's traces are grouped and judged like the
OpenTelemetry ones:

* ``agent`` → an agent invocation, ``handoff`` (``from_agent``, ``to_agent``) → a handoff: the agent a handoff
  starts continues the same run (the group stage follows handoffs), so **a run is a Runner run**, whatever
  agents it hands off to;
* ``task`` and ``turn`` (custom spans: one ``Runner`` run, one turn of it) → steps inside the run;
* ``generation`` (Chat Completions models) → a model call with its ``input`` and ``output`` messages;
* ``response`` (Responses models) → a model call whose messages are not recorded (the span exports only
  ``response_id`` and ``usage``);
* ``function`` → a tool execution: ``name``, ``input`` (the arguments' JSON), ``output``, failed when ``error``
  is set; no call id is recorded;
* ``guardrail``, ``mcp_tools`` and other custom spans → steps.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Final

from .._items import Span, TelemetryError, TranscriptError
from .._records import InputError
from .documents import Doc
from .telemetry import MAX_SPANS, iso_nanos

Json = Any

#: The ``object`` of the items the SDK exports.
OBJECTS: Final = ("trace", "trace.span")


def is_item(doc: Json) -> bool:
    return isinstance(doc, dict) and doc.get("object") in OBJECTS and isinstance(doc.get("id"), str)


def is_agents_trace(doc: Json) -> bool:
    """An exported item, the exporter's ``{"data": [item, ...]}`` payload, or an array of items."""
    if is_item(doc):
        return True
    if isinstance(doc, dict) and isinstance(doc.get("data"), list) and doc["data"]:
        return is_item(doc["data"][0])
    return isinstance(doc, list) and bool(doc) and is_item(doc[0])


def _need(cond: bool, where: str, message: str, line: int) -> None:
    if not cond:
        raise TelemetryError(where, message, line)


def _str(v: Json) -> str | None:
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False, default=str)


def _attributes(data: dict[str, Json]) -> dict[str, Json]:
    """The span data as the GenAI attributes the group stage reads."""
    typ = data.get("type")
    if typ == "agent":
        name = data.get("name")
        return {"gen_ai.operation.name": "invoke_agent", "agents.span_type": typ,
                **({"gen_ai.agent.name": name} if isinstance(name, str) else {})}
    if typ == "handoff":
        return {"gen_ai.operation.name": "handoff", "agents.span_type": typ,
                **{k: data[k] for k in ("from_agent", "to_agent") if isinstance(data.get(k), str)}}
    if typ == "generation":
        out: dict[str, Json] = {"gen_ai.operation.name": "chat", "agents.span_type": typ}
        if isinstance(data.get("input"), list):
            out["gen_ai.input.messages"] = data["input"]
        if isinstance(data.get("output"), list):
            out["gen_ai.output.messages"] = data["output"]
        return out
    if typ == "response":
        return {"gen_ai.operation.name": "chat", "agents.span_type": typ}
    if typ == "function":
        out = {"gen_ai.operation.name": "execute_tool", "agents.span_type": typ, "gen_ai.tool.name": data.get("name")}
        if "input" in data:
            out["gen_ai.tool.call.arguments"] = _str(data["input"])
        if data.get("output") is not None:
            out["gen_ai.tool.call.result"] = _str(data["output"])
        return out
    return {"agents.span_type": typ if isinstance(typ, str) else ""}


def item_span(doc: Json, where: str, line: int, order: int) -> Span | None:
    """One exported item as a span (None: a trace object, which holds no operation)."""
    _need(isinstance(doc, dict), where, "an item must be an object", line)
    obj = doc.get("object")
    _need(obj in OBJECTS, f"{where}.object", f'must be "trace" or "trace.span", got {obj!r:.40}', line)
    if obj == "trace":
        return None
    sid, tid, parent = doc.get("id"), doc.get("trace_id"), doc.get("parent_id")
    _need(isinstance(sid, str) and sid != "", f"{where}.id", "must be the span's id (a string)", line)
    _need(isinstance(tid, str) and tid != "", f"{where}.trace_id", "must be the trace's id (a string)", line)
    _need(parent is None or isinstance(parent, str), f"{where}.parent_id", "must be a span id or null", line)
    data = doc.get("span_data")
    _need(isinstance(data, dict) and isinstance(data.get("type"), str), f"{where}.span_data",
          'must be an object with "type"', line)
    start = iso_nanos(doc.get("started_at"), f"{where}.started_at", line) if doc.get("started_at") else 0
    end = iso_nanos(doc.get("ended_at"), f"{where}.ended_at", line) if doc.get("ended_at") else start
    err = doc.get("error")
    _need(err is None or isinstance(err, dict), f"{where}.error", "must be null or {message, data}", line)
    typ = data["type"]
    name = data.get("name") if isinstance(data.get("name"), str) else typ
    return Span(trace=tid, span=sid, parent=parent or None, name=name, start=start, end=end,
                attrs=_attributes(data), error=err is not None, path=where, line=line, order=order)


def read_items(docs: Iterator[Doc | InputError], name: str) -> Iterator[Span | InputError]:
    """Every span of the file's items, in file order, and an input error for each item that cannot be read; past
    :data:`~loopspec.oracle._read.telemetry.MAX_SPANS` spans, an error ends the file."""
    count = 0
    for d in docs:
        if isinstance(d, InputError):
            yield d
            continue
        v = d.value
        if isinstance(v, dict) and not is_item(v) and isinstance(v.get("data"), list):
            items, base = v["data"], "$.data"
        elif isinstance(v, list):
            items, base = v, "$"
        else:
            items, base = [v], None
        for k, it in enumerate(items):
            line = d.located.line(it) if d.located is not None and isinstance(it, dict) else d.line
            where = "$" if base is None else f"{base}[{k}]"
            try:
                s = item_span(it, where, line, count)
            except TranscriptError as exc:
                yield InputError(name, exc.line or line, f"{exc.where}: {exc.message}")
                continue
            if s is not None:
                count += 1
                yield s
        if count > MAX_SPANS:
            yield InputError(name, d.line, f"more than {MAX_SPANS} spans in one file: split it by trace")
            return
