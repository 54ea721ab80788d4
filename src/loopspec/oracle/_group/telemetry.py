"""Grouping OpenTelemetry spans into runs, and reading each run's conversation from its spans.

Spans are grouped into **runs**: by trace, then by the nearest agent-invocation ancestor
(``gen_ai.operation.name = invoke_agent``, OpenInference ``AGENT``, pydantic-ai's older ``agent run``, Logfire's
``Agent run: …``), and ordered by start time (then parents before children, then file order); an invocation that a
handoff started continues the run that handed off (:func:`_follow_handoffs`: the Agents SDK records each agent of
a run as an invocation of its own). A run's model calls
(``chat`` spans) give the conversation — the results sent back since the previous model call (in the
request's input messages) and what the model proposed (its output messages) — and its ``execute_tool``
spans the executions (:func:`run_items`). A model call whose recorded output holds no tool call has its calls
read from its output chunks when the spans record them (Mastra's ``model_chunk`` spans under its ``chat`` span,
``mastra.model_chunk.output``). Attribute names follow the OpenTelemetry GenAI semantic
conventions (``gen_ai.operation.name``, ``gen_ai.input.messages`` / ``gen_ai.output.messages`` with
``tool_call`` and ``tool_call_response`` parts, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``, ``gen_ai.tool.definitions``), and the
older or other names instrumentations still emit are read too (see :data:`ATTRIBUTE_NAMES`).

The runs go on to the judge (:mod:`loopspec.oracle._judge.conversation`, and
:mod:`loopspec.oracle._judge.telemetry` for what a run witnesses).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ...core import rules as core
from .. import _json
from .._items import Call, Execution, Item, Result, Span, TelemetryError, TelemetryRun, TranscriptError
from . import stitch as _stitch

Json = Any


def _need(cond: bool, where: str, message: str, line: int) -> None:
    if not cond:
        raise TelemetryError(where, message, line)


#: The attribute names read, current first, then older or other names still emitted (source: the
#: instrumentations named).
ATTRIBUTE_NAMES: Final[Mapping[str, tuple[str, ...]]] = {
    # GenAI semantic conventions; pydantic-ai instrumentation format 2 (deprecated, still selectable)
    "operation": ("gen_ai.operation.name",),
    "tool.name": ("gen_ai.tool.name", "tool.name"),  # OpenInference: tool.name
    "tool.call.id": ("gen_ai.tool.call.id", "tool_call.id"),
    "tool.arguments": ("gen_ai.tool.call.arguments", "tool_arguments", "input.value"),
    "tool.result": ("gen_ai.tool.call.result", "tool_response", "output.value"),
    "input.messages": ("gen_ai.input.messages",),
    "output.messages": ("gen_ai.output.messages",),
    "tool.definitions": ("gen_ai.tool.definitions",),
    "agent.name": ("gen_ai.agent.name", "agent_name", "agent.name"),
    # Mastra's AI tracing (@mastra/observability 1.17.9 through @mastra/otel-exporter 1.4.0): a model_chunk span
    # under a chat span records one chunk of the model's output; a tool-call chunk is {toolCallId, toolName,
    # toolInput} (observed: the chat span's gen_ai.output.messages then holds only an empty text part)
    "chunk.output": ("mastra.model_chunk.output",),
}

#: The operation name of an output chunk's span (Mastra: ``gen_ai.operation.name = model_chunk``).
_CHUNK: Final = "model_chunk"

_OPERATIONS: Final[Mapping[str, str]] = {
    "chat": "chat", "text_completion": "chat", "generate_content": "chat",
    "execute_tool": "tool",
    "invoke_agent": "agent",
    "handoff": "handoff",  # OpenLLMetry's Agents SDK instrumentation; the Agents SDK's own handoff spans (read so)
}
_OPENINFERENCE_KINDS: Final[Mapping[str, str]] = {"LLM": "chat", "TOOL": "tool", "AGENT": "agent"}
_NAME_PREFIXES: Final = (("chat ", "chat"), ("execute_tool ", "tool"), ("running tool", "tool"),
                         ("invoke_agent", "agent"), ("agent run", "agent"))



def _attr(s: Span, key: str) -> Json:
    for name in ATTRIBUTE_NAMES[key]:
        if name in s.attrs:
            return s.attrs[name]
    return None


def _langgraph(s: Span) -> str | None:
    """``node`` when the span is a LangGraph graph node (or runs inside one), ``graph`` when it is a graph's own
    run, from the LangChain ``metadata`` OpenInference records (observed, openinference-instrumentation-langchain
    0.1.80: ``{"ls_integration": "langgraph", "langgraph_node": "agent", ...}`` on node spans, ``{"ls_integration":
    "langgraph"}`` on the graph's)."""
    raw = s.attrs.get("metadata")
    if not isinstance(raw, str) or "langgraph" not in raw:
        return None
    md = _maybe_json(raw)
    if not isinstance(md, dict):
        return None
    if "langgraph_node" in md:
        return "node"
    return "graph" if md.get("ls_integration") == "langgraph" else None


#: Logfire's spans for the Agents SDK (``logfire.instrument_openai_agents()``): the span data's exported fields as
#: attributes, the kind told by the message template (source, logfire 5.4.0,
#: ``logfire/_internal/integrations/openai_agents.py``: ``msg_template = 'Agent run: {name!r}'``, ``'Function:
#: {name}'``, ``'Chat completion with {gen_ai.request.model!r}'``, ``'Handoff: {from_agent} → {to_agent}'``).
_LOGFIRE_AGENTS: Final = (("Agent run: ", "agent"), ("Function: ", "tool"), ("Chat completion with ", "chat"),
                          ("Responses API", "chat"), ("Handoff: ", "handoff"))


def _logfire_agents(s: Span) -> str | None:
    """The operation of a Logfire Agents SDK span, its attributes given the GenAI names this stage reads (the
    exported ``input`` / ``output`` / ``name`` fields); None for any other span."""
    tpl = s.attrs.get("logfire.msg_template")
    if not isinstance(tpl, str) or s.attrs.get("gen_ai.system") != "openai":
        return None
    what = next((w for prefix, w in _LOGFIRE_AGENTS if tpl.startswith(prefix)), None)
    a = s.attrs
    if what == "agent" and isinstance(a.get("name"), str):
        a.setdefault("gen_ai.agent.name", a["name"])
    elif what == "tool":
        for src, dst in (("name", "gen_ai.tool.name"), ("input", "gen_ai.tool.call.arguments"),
                         ("output", "gen_ai.tool.call.result")):
            if src in a:
                a.setdefault(dst, a[src])
    elif what == "chat" and tpl.startswith("Chat completion"):
        for src, dst in (("input", "gen_ai.input.messages"), ("output", "gen_ai.output.messages")):
            if src in a:
                a.setdefault(dst, a[src])
    elif what == "chat":  # the Responses model: the request's input items and the Response, as Logfire records them
        inp, resp = _maybe_json(a.get("raw_input")), _maybe_json(a.get("response"))
        if isinstance(inp, str):
            inp = [{"role": "user", "content": inp}]
        if isinstance(inp, list):
            a.setdefault("gen_ai.input.messages", _responses_as_chat(inp))
        if isinstance(resp, dict) and isinstance(resp.get("output"), list):
            a.setdefault("gen_ai.output.messages", _responses_as_chat(resp["output"]))
    return what


def _responses_as_chat(items: list[Json]) -> list[dict[str, Json]]:
    """Responses API items (a request's input, a response's output) as chat messages: a ``function_call`` an
    assistant message with one tool call, a ``function_call_output`` a tool message, a message its text."""
    out: list[dict[str, Json]] = []
    for it in items:
        if not isinstance(it, dict):
            continue
        t = it.get("type")
        if t == "function_call":
            out.append({"role": "assistant", "tool_calls": [
                {"id": it.get("call_id"), "function": {"name": it.get("name"), "arguments": it.get("arguments")}}]})
        elif t == "function_call_output":
            out.append({"role": "tool", "tool_call_id": it.get("call_id"), "content": it.get("output")})
        elif t in (None, "message") and isinstance(it.get("role"), str):
            c = it.get("content")
            if isinstance(c, list):
                c = "".join(p["text"] for p in c if isinstance(p, dict) and isinstance(p.get("text"), str))
            out.append({"role": it["role"], "content": c})
    return out


def _openinference_handoff(s: Span) -> bool:
    """OpenInference's Agents SDK handoff span: a ``TOOL`` span with no tool name, named ``handoff to <agent>``
    (source, openinference-instrumentation-openai-agents 2.6.0, ``_processor.py``: ``return f"handoff to
    {obj.span_data.to_agent}"``): the SDK switching agents, not a tool execution."""
    return s.name.startswith("handoff to ") and "tool.name" not in s.attrs


def operation(s: Span) -> str | None:
    """chat | tool | agent | handoff | None (anything else: workflow steps, graph nodes, HTTP, ...). An agent
    invocation is the run the framework made: a LangGraph graph node that OpenInference marks ``AGENT`` (the prebuilt
    ReAct agent's node is named ``agent``) is a step of its graph's run, and the graph's own span is the invocation.
    A handoff (the Agents SDK passing the conversation to another agent) is a step too: the invocation it starts
    continues the same run (:func:`_follow_handoffs`)."""
    logfire = _logfire_agents(s)
    if logfire is not None:
        return logfire
    op = s.attrs.get("gen_ai.operation.name")
    if isinstance(op, str) and op in _OPERATIONS:
        return _OPERATIONS[op]
    kind = s.attrs.get("openinference.span.kind")
    if isinstance(kind, str) and kind in _OPENINFERENCE_KINDS:
        what = _OPENINFERENCE_KINDS[kind]
        if what == "tool" and _openinference_handoff(s):
            return "handoff"
        if what == "agent" and _langgraph(s) == "node":
            return None
        return what
    if kind == "CHAIN" and _langgraph(s) == "graph":
        return "agent"
    if op is None and kind is None:
        for prefix, what in _NAME_PREFIXES:
            if s.name.startswith(prefix):
                return what
    return None


def _maybe_json(v: Json) -> Json:
    if isinstance(v, str):
        t = v.strip()
        if t[:1] in ("{", "["):
            try:
                return _json.loads(t)
            except _json.JsonError:
                return v
    return v


@dataclass
class Part:
    type: str  # text | tool_call | tool_call_response | other
    id: Json = None
    name: Json = None
    args: Json = None
    content: Json = None


@dataclass
class Message:
    role: str
    parts: list[Part] = field(default_factory=list)

    def calls(self) -> list[Part]:
        return [p for p in self.parts if p.type == "tool_call"]


def _genai_messages(raw: Json, where: str, line: int) -> list[Message] | None:
    """``gen_ai.input.messages`` / ``gen_ai.output.messages``: JSON text of [{role, parts: [...]}]."""
    v = _maybe_json(raw)
    if not isinstance(v, list):
        return None
    out = []
    for k, m in enumerate(v):
        _need(isinstance(m, dict), f"{where}[{k}]", "a message must be an object", line)
        role = m.get("role")
        parts_raw = m.get("parts")
        if not isinstance(parts_raw, list):  # older shape: {role, content, tool_calls} (chat-like)
            out.append(_chat_like(m))
            continue
        parts = []
        for p in parts_raw:
            if not isinstance(p, dict):
                continue
            t = p.get("type")
            if t == "tool_call":
                parts.append(Part("tool_call", p.get("id"), p.get("name"), p.get("arguments")))
            elif t == "tool_call_response":
                parts.append(Part("tool_call_response", p.get("id"),
                                  content=p.get("response", p.get("result"))))
            elif t == "text":
                parts.append(Part("text", content=p.get("content")))
            else:
                parts.append(Part("other"))
        out.append(Message(role if isinstance(role, str) else "", parts))
    return out


def _chat_like(m: Mapping[str, Json]) -> Message:
    role = m.get("role") if isinstance(m.get("role"), str) else ""
    parts: list[Part] = []
    content = m.get("content")
    if role == "tool":
        parts.append(Part("tool_call_response", m.get("tool_call_id", m.get("id")), content=content))
        return Message(role, parts)
    if isinstance(content, str) and content:
        parts.append(Part("text", content=content))
    tcs = _maybe_json(m.get("tool_calls"))
    if isinstance(tcs, list):
        for tc in tcs:
            if isinstance(tc, dict):
                fn = tc.get("function") if isinstance(tc.get("function"), dict) else tc
                parts.append(Part("tool_call", tc.get("id"), fn.get("name"), fn.get("arguments")))
    return Message(role, parts)


_FLAT = re.compile(r"(?P<prefix>llm\.input_messages|llm\.output_messages|gen_ai\.prompt|gen_ai\.completion)\."
                   r"(?P<i>\d+)\.(?P<rest>.+)")


def _flat_messages(attrs: Mapping[str, Json]) -> tuple[list[Message] | None, list[Message] | None]:
    """Messages flattened into indexed attributes: OpenInference ``llm.input_messages.{i}.message.*`` and
    the older ``gen_ai.prompt.{i}.*`` / ``gen_ai.completion.{i}.*`` (OpenLLMetry before the JSON
    attributes)."""
    found: dict[str, dict[int, dict[str, Json]]] = {}
    for key, val in attrs.items():
        m = _FLAT.fullmatch(key)
        if m is None:
            continue
        rest = m.group("rest")
        if rest.startswith("message."):
            rest = rest[len("message."):]
        found.setdefault(m.group("prefix"), {}).setdefault(int(m.group("i")), {})[rest] = val

    def build(msgs: dict[int, dict[str, Json]]) -> list[Message]:
        out = []
        for i in sorted(msgs):
            f = msgs[i]
            role = f.get("role") if isinstance(f.get("role"), str) else ""
            parts: list[Part] = []
            calls: dict[int, dict[str, Json]] = {}
            for k, v in f.items():
                cm = re.fullmatch(r"tool_calls\.(\d+)\.(?:tool_call\.)?(.+)", k)
                if cm:
                    calls.setdefault(int(cm.group(1)), {})[cm.group(2)] = v
            tcid = f.get("tool_call_id")
            if role == "tool" or tcid is not None:
                parts.append(Part("tool_call_response", tcid, content=f.get("content")))
            elif isinstance(f.get("content"), str) and f["content"]:
                parts.append(Part("text", content=f["content"]))
            for j in sorted(calls):
                c = calls[j]
                parts.append(Part("tool_call", c.get("id"), c.get("function.name", c.get("name")),
                                  c.get("function.arguments", c.get("arguments"))))
            out.append(Message(role, parts))
        return out

    inp = found.get("llm.input_messages") or found.get("gen_ai.prompt")
    outp = found.get("llm.output_messages") or found.get("gen_ai.completion")
    return (build(inp) if inp else None), (build(outp) if outp else None)


def chat_messages(s: Span) -> tuple[list[Message] | None, list[Message] | None, str, str]:
    """(input, output) messages of a model call (None when not recorded), and the attributes they were read
    from."""
    line = s.line
    in_key, out_key = "gen_ai.input.messages", "gen_ai.output.messages"
    inp = _genai_messages(_attr(s, "input.messages"), f"{s.path}.attributes['{in_key}']", line)
    out = _genai_messages(_attr(s, "output.messages"), f"{s.path}.attributes['{out_key}']", line)
    if inp is None or out is None:
        finp, fout = _flat_messages(s.attrs)
        flat = "llm" if any(k.startswith("llm.") for k in s.attrs) else "gen_ai"
        if inp is None and finp is not None:
            inp, in_key = finp, ("llm.input_messages" if flat == "llm" else "gen_ai.prompt")
        if out is None and fout is not None:
            out, out_key = fout, ("llm.output_messages" if flat == "llm" else "gen_ai.completion")
    return inp, out, in_key, out_key


def tool_definitions(s: Span) -> dict[str, core.ToolSchema | None] | None:
    """``gen_ai.tool.definitions`` of a model call: name -> schema (None outside R4's subset)."""
    raw = _maybe_json(_attr(s, "tool.definitions"))
    if not isinstance(raw, list):
        return None
    out: dict[str, core.ToolSchema | None] = {}
    for d in raw:
        if not isinstance(d, dict):
            continue
        fn = d.get("function") if isinstance(d.get("function"), dict) else d
        name = fn.get("name")
        if not isinstance(name, str):
            continue
        out[name] = _schema(fn.get("parameters", fn.get("input_schema")), name)
    return out


def _schema(raw: Json, name: str) -> core.ToolSchema | None:
    raw = _maybe_json(raw)
    if not isinstance(raw, dict):
        return None
    try:
        return core.parse_schema(raw, tool=name)
    except core.ToolDefinitionError:
        return None


def execution(s: Span, parent: Span | None = None) -> tuple[Execution, core.ToolSchema | None, bool]:
    """An ``execute_tool`` span as an execution; also the tool's schema when the span records it
    (OpenInference ``tool.parameters``) and whether it was recorded. ``parent`` is the span's parent, read when
    the tool span itself does not record the call (LangGraph's ``ToolNode`` step holds it)."""
    name = _attr(s, "tool.name")
    if not isinstance(name, str):
        for prefix in ("execute_tool ", "running tool: "):
            if s.name.startswith(prefix):
                name = s.name[len(prefix):]
        if not isinstance(name, str):
            name = s.name
    cid = _attr(s, "tool.call.id")
    args = _maybe_json(_attr(s, "tool.arguments"))
    known = isinstance(args, dict) and "input_str" not in args and core.is_json(args)
    result = _maybe_json(_attr(s, "tool.result"))
    err = s.error or "error.type" in s.attrs
    # the ToolMessage the tool produced: OpenLLMetry's LangChain instrumentation records it as {"output":
    # {"kwargs": {...}}}, OpenInference's as {"type": "tool", "data": {...}} (observed); its tool_call_id is the
    # call id, its status tells a failure
    msg: Json = None
    if isinstance(result, dict):
        out = result.get("output")
        if isinstance(out, dict) and isinstance(out.get("kwargs"), dict):
            msg = out["kwargs"]
        elif result.get("type") == "tool" and isinstance(result.get("data"), dict):
            msg = result["data"]
    if isinstance(msg, dict):
        if cid is None and isinstance(msg.get("tool_call_id"), str):
            cid = msg["tool_call_id"]
        if msg.get("status") == "error":
            err = True
    if parent is not None and (cid is None or not known):
        # LangGraph's ToolNode: its step span's input is {"__type": "tool_call_with_context", "tool_call": {name,
        # args, id}} (observed, OpenInference for LangChain 0.1.80, whose tool span records only the first
        # argument's value as input.value)
        pin = _maybe_json(parent.attrs.get("input.value"))
        tc = pin.get("tool_call") if isinstance(pin, dict) else None
        if isinstance(tc, dict) and tc.get("name") == name:
            if cid is None and isinstance(tc.get("id"), str):
                cid = tc["id"]
            if not known and isinstance(tc.get("args"), dict) and core.is_json(tc["args"]):
                args, known = tc["args"], True
    schema_raw = s.attrs.get("tool.parameters")
    schema = _schema(schema_raw, name) if schema_raw is not None else None
    return (Execution(cid, name, args if known else None, known, not err, s.path, s.line, s.start, s.end), schema,
            schema_raw is not None)


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    id: str
    spans: list[Span]  # the run's chat and tool spans, in order
    agent: Span | None
    all_spans: int  # spans of the run including non-GenAI ones under the agent span
    parents: dict[str, Span] = field(default_factory=dict)  # tool span id -> its parent span, when in the file
    merged: int = 0  # model calls recorded twice (a framework's span and the client's inside it), read as one
    traces: list[str] = field(default_factory=list)  # the traces stitched into this run (more than one), in order
    stitched: list[str] = field(default_factory=list)  # the evidence of each join (see .stitch)
    not_stitched: str | None = None  # why a run whose first request carries earlier rounds was not stitched
    chunks: dict[str, list[Span]] = field(default_factory=dict)  # chat span id -> its output chunks' spans, in order
    handoffs: list[str] = field(default_factory=list)  # the agents a run went through, when it handed off


def _chunks(group: Sequence[Span], index: Mapping[str, Span]) -> dict[str, list[Span]]:
    """The output-chunk spans of each chat span of a trace (their parent), in time then file order."""
    out: dict[str, list[Span]] = {}
    for s in group:
        if s.attrs.get("gen_ai.operation.name") == _CHUNK and s.parent and s.parent in index \
                and index[s.parent].op == "chat":
            out.setdefault(s.parent, []).append(s)
    for v in out.values():
        v.sort(key=lambda c: (c.start, c.order))
    return out


def chunk_calls(chunks: Sequence[Span]) -> list[tuple[Part, Span]]:
    """The tool calls a model call's output chunks record (a chunk whose output is {toolCallId, toolName,
    toolInput}), each with its chunk's span."""
    out: list[tuple[Part, Span]] = []
    for c in chunks:
        v = _maybe_json(_attr(c, "chunk.output"))
        if isinstance(v, dict) and "toolCallId" in v and "toolName" in v:
            out.append((Part("tool_call", v.get("toolCallId"), v.get("toolName"), v.get("toolInput")), c))
    return out


def _agent_of(s: Span, index: Mapping[str, Span], owner: dict[str, str | None]) -> str | None:
    """The span id of ``s``'s nearest agent-invocation ancestor (memoised in ``owner``; a parent cycle
    ends the walk)."""
    chain: list[str] = []
    seen: set[str] = set()
    cur: Span | None = s
    found: str | None = None
    while cur is not None and cur.span not in seen:
        if cur.span in owner:
            found = owner[cur.span]
            break
        seen.add(cur.span)
        chain.append(cur.span)
        if cur is not s and cur.op == "agent":
            found = cur.span
            break
        cur = index.get(cur.parent) if cur.parent else None
    for sid in chain:
        owner[sid] = found
    return found


def _chat_ancestor(s: Span, index: Mapping[str, Span]) -> Span | None:
    """The nearest chat span above ``s`` (a parent cycle ends the walk)."""
    seen: set[str] = set()
    cur = index.get(s.parent) if s.parent else None
    while cur is not None and cur.span not in seen:
        if cur.op == "chat":
            return cur
        if cur.op == "agent":
            return None
        seen.add(cur.span)
        cur = index.get(cur.parent) if cur.parent else None
    return None


def _merge_chats(spans: list[Span], index: Mapping[str, Span]) -> tuple[list[Span], int]:
    """One model call recorded twice — the agent framework's span (OpenLLMetry's Agents SDK instrumentation:
    ``openai.response``, with the input but no output) and the openai client's inside it
    (``openai.chat``) — is one model call: the outer span's place, the inner span's attributes over the
    outer's."""
    inner: dict[str, Span] = {}
    for s in spans:
        if s.op == "chat":
            outer = _chat_ancestor(s, index)
            if outer is not None and outer.span not in inner:
                inner[outer.span] = s
    if not inner:
        return spans, 0
    drop = {id(s) for s in inner.values()}
    out = []
    for s in spans:
        if id(s) in drop:
            continue
        got = inner.get(s.span) if s.op == "chat" else None
        if got is not None:
            s = Span(s.trace, s.span, s.parent, got.name, s.start, s.end, {**s.attrs, **got.attrs}, s.error or got.error,
                     got.path, got.line, s.order, "chat")
        out.append(s)
    return out, len(inner)


def _proposed_ids(s: Span) -> list[str]:
    _, out, _, _ = chat_messages(s)
    return [p.id for m in (out or []) for p in m.calls() if isinstance(p.id, str)]


def group_runs(spans: Sequence[Span]) -> list[Run]:
    """Group chat and tool spans by trace and nearest agent-invocation ancestor, in order. A tool span outside
    every agent invocation of a trace that has some joins the run whose model call proposed its call id (else
    the invocation whose time holds it): it is never a run of its own."""
    for s in spans:
        s.op = operation(s)
    by_trace: dict[str, list[Span]] = {}
    for s in spans:
        by_trace.setdefault(s.trace, []).append(s)
    runs: list[Run] = []
    for trace, group in by_trace.items():
        index = {s.span: s for s in group}
        owner: dict[str, str | None] = {}
        members: dict[str | None, list[Span]] = {}
        counts: dict[str | None, int] = {}
        for s in group:
            a = s.span if s.op == "agent" else _agent_of(s, index, owner)
            counts[a] = counts.get(a, 0) + 1
            if s.op in ("chat", "tool"):
                members.setdefault(_agent_of(s, index, owner), []).append(s)
        stray = members.get(None)
        if stray and len(members) > 1 and all(s.op == "tool" for s in stray):
            _attach(stray, members, index, execution)
            del members[None]
        handed = _follow_handoffs(group, index, owner)
        for b, a in handed.items():  # the invocation a handoff started continues the run that handed off
            members.setdefault(a, []).extend(members.pop(b, []))
            counts[a] = counts.get(a, 0) + counts.pop(b, 0)
        memo: dict[str, int] = {}
        depth = {s.span: _depth(s, index, memo) for s in group}
        chunked = _chunks(group, index)
        keys = [k for k in members if members[k]]
        for a in keys:
            ms = sorted(members[a], key=lambda s: (s.start, depth[s.span], s.order))
            ms, merged = _merge_chats(ms, index)
            rid = trace if len(keys) == 1 else f"{trace}/{a or 'no-agent'}"
            parents = {s.span: index[s.parent] for s in ms if s.op == "tool" and s.parent and s.parent in index}
            chunks = {s.span: chunked[s.span] for s in ms if s.op == "chat" and s.span in chunked}
            agents = [index[a].span] if a in index else []
            agents += [b for b, root in handed.items() if root == a]
            runs.append(Run(rid, ms, index.get(a) if a else None, counts.get(a, 0), parents, merged,
                            handoffs=[_agent_name(index[x]) for x in sorted(agents, key=lambda x: index[x].start)
                                      if x in index] if len(agents) > 1 else [],
                            chunks=chunks))
    runs.sort(key=lambda r: min(s.order for s in r.spans))
    return runs


def _agent_name(s: Span) -> str:
    name = _attr(s, "agent.name")
    return name if isinstance(name, str) else s.name


def _follow_handoffs(group: Sequence[Span], index: Mapping[str, Span], owner: dict[str, str | None]) -> dict[str, str]:
    """Agent invocations that continue another's run: the Agents SDK records each agent a run goes through as an
    invocation of its own, side by side under the run's span, and a handoff span inside the one that handed off
    (the SDK's own tracing, OpenInference, OpenLLMetry, Logfire: observed in the recordings). The invocation a
    handoff starts is the first one under the same parent that starts after the handoff did (whose agent is the
    handoff's target, when the span names it); it continues the run of the invocation holding the handoff.
    Returns invocation -> the invocation whose run it continues (the first of the chain)."""
    handoffs = sorted((s for s in group if s.op == "handoff"), key=lambda s: (s.start, s.order))
    if not handoffs:
        return {}
    agents = sorted((s for s in group if s.op == "agent"), key=lambda s: (s.start, s.order))
    cont: dict[str, str] = {}
    for h in handoffs:
        a = _agent_of(h, index, owner)
        if a is None or a not in index:
            continue
        src = index[a]
        target = next((h.attrs[k] for k in ("to_agent", "gen_ai.handoff.to_agent", "output.value")
                       if isinstance(h.attrs.get(k), str)), None)
        later = [b for b in agents if b.span != a and b.parent == src.parent and b.start >= h.start
                 and b.span not in cont and b.span not in cont.values()]
        named = [b for b in later if target is not None and _agent_name(b) == target]
        nxt = (named or later)[:1]
        if nxt:
            cont[nxt[0].span] = cont.get(a, a)
    return cont


def _attach(stray: list[Span], members: dict[str | None, list[Span]], index: Mapping[str, Span],
            read: Any) -> None:
    """Give each stray tool span to the run whose latest model call before it proposed its call id, else to the
    agent invocation whose time holds its start, else to the run that started last before it."""
    proposals: list[tuple[int, str | None, set[str]]] = []
    for a, ms in members.items():
        if a is None:
            continue
        for s in ms:
            if s.op == "chat":
                proposals.append((s.start, a, set(_proposed_ids(s))))
    proposals.sort(key=lambda p: p[0])
    for s in stray:
        x, _, _ = read(s, index.get(s.parent) if s.parent else None)
        home: str | None = None
        if isinstance(x.id, str):
            for start, a, ids in proposals:
                if start <= s.start and x.id in ids:
                    home = a
        if home is None:
            for a in members:
                ag = index.get(a) if a else None
                if ag is not None and ag.start <= s.start <= max(ag.end, ag.start):
                    home = a
        if home is None:
            before = [(p[0], p[1]) for p in proposals if p[0] <= s.start]
            home = before[-1][1] if before else next(a for a in members if a is not None)
        members[home].append(s)


def _depth(s: Span, index: Mapping[str, Span], memo: dict[str, int]) -> int:
    """How many ancestors ``s`` has in its trace (memoised; a parent cycle counts as a root)."""
    chain: list[Span] = []
    cur: Span | None = s
    base = 0
    seen: set[str] = set()
    while cur is not None:
        if cur.span in memo:
            base = memo[cur.span] + 1
            break
        if cur.span in seen:
            break
        seen.add(cur.span)
        chain.append(cur)
        cur = index.get(cur.parent) if cur.parent else None
    for k, c in enumerate(reversed(chain)):
        memo.setdefault(c.span, base + k)
    return memo[s.span]


@dataclass
class RunItems:
    items: list[Item]
    tools: dict[str, core.ToolSchema | None] | None  # the recorded allow-list with schemas
    schemas: dict[str, core.ToolSchema | None]  # per-tool schemas recorded on tool spans
    recorded: list[str]  # what the run records: messages, executions, tool definitions, ...
    notes: list[str]  # how the conversation was read where the recording was incomplete
    facts: dict[str, Any] = field(default_factory=dict)  # what the coverage of the verdict is decided from


def _call(p: Part, path: str, line: int) -> Call:
    args = p.args
    if args is None:
        args = {}
    parsed = _maybe_json(args) if isinstance(args, str) else args
    if isinstance(args, str) and not isinstance(parsed, dict):
        try:
            parsed = _json.loads(args)
        except _json.JsonError:
            parsed = args
    ok = isinstance(parsed, dict) and core.is_json(parsed)
    return Call(p.id, p.name, parsed, ok, path, line)


def _earlier(inp: list[Message]) -> int:
    """How many messages of a run's first request are earlier rounds of the conversation: everything up to the
    last user message, when an assistant or tool message comes before it or after it (the run starts
    mid-conversation); 0 when the request holds only the system prompt and the user's turn."""
    if not any(m.role in ("assistant", "tool") or any(p.type == "tool_call_response" for p in m.parts) for m in inp):
        return 0
    return len(inp)


Read = Any  # a Span -> chat_messages(span) function


def run_items(run: Run, read: Read = None) -> RunItems:
    """The conversation and executions of a run as transcript items (see _judge.conversation.check_items), and the
    facts its verdict's coverage is decided from (``RunItems.facts``)."""
    items: list[Item] = []
    chats = [s for s in run.spans if s.op == "chat"]
    tools_spans = [s for s in run.spans if s.op == "tool"]
    msgs = [(read or chat_messages)(s) for s in chats]
    recorded: list[str] = []
    notes: list[str] = []
    facts: dict[str, Any] = {"modelCalls": len(chats), "inputsMissing": sum(m[0] is None for m in msgs),
                             "outputsMissing": 0, "proposals": 0, "answered": 0, "final": False, "earlier": 0,
                             "executions": len(tools_spans), "executionIds": 0, "merged": run.merged,
                             "traces": max(1, len(run.traces)), "historyProposals": 0, "historyAnswered": 0,
                             "chunkCalls": 0}
    if any(m[0] is not None or m[1] is not None for m in msgs):
        recorded.append("messages")
    if tools_spans:
        recorded.append("executions")
    if run.handoffs:
        notes.append(f"the run hands off between agents ({' → '.join(run.handoffs)}): one run, each agent's "
                     "invocation a step of it; a handoff is carried out by the framework (no tool span)")
    if run.traces:
        notes.append(f"stitched from {len(run.traces)} traces, one model call each as the model client recorded them "
                     f"(the first is the run's start): {'; '.join(run.stitched)}")
    if run.not_stitched:
        notes.append(f"not stitched to an earlier trace: {run.not_stitched}")
    if run.merged:
        notes.append(f"{run.merged} model call(s) are recorded twice (the agent framework's span and the model "
                     "client's inside it): each is read as one call")
    defs: dict[str, core.ToolSchema | None] | None = None
    for s in chats:
        d = tool_definitions(s)
        if d is not None:
            defs = {**(defs or {}), **d}
    if defs is not None:
        recorded.append("tool definitions")
    schemas: dict[str, core.ToolSchema | None] = {}
    execs: dict[int, Execution] = {}
    for s in tools_spans:
        x, schema, has_schema = execution(s, run.parents.get(s.span))
        execs[id(s)] = x
        facts["executionIds"] += isinstance(x.id, str)
        if has_schema and isinstance(x.name, str):
            schemas[x.name] = schema
    if schemas and "tool definitions" not in recorded:
        recorded.append("tool schemas")

    chat_pos = {id(s): k for k, s in enumerate(chats)}
    open_proposal = False  # the latest proposal's results are not yet seen in a request

    def proposal(pos: int, where: str, line: int, calls: list[Part], history: bool = False,
                 at: list[tuple[str, int]] | None = None) -> None:
        nonlocal open_proposal
        items.append(Item("proposal", pos, where, line, [_call(p, *(at[j] if at else (f"{where}.tool_call[{j}]", line)))
                                                          for j, p in enumerate(calls)]))
        facts["proposals"] += 1
        facts["historyProposals"] += history
        open_proposal = True

    unknown = False  # the latest model call's output is not recorded: what it proposed is unknown
    unjudged = 0
    for pos, s in enumerate(run.spans):
        if s.op == "tool":
            if unknown:  # no proposal to match it to: judging it would invent one (or a violation)
                unjudged += 1
                continue
            items.append(Item("execution", pos, s.path, s.line, execution=execs[id(s)]))
            continue
        k = chat_pos[id(s)]
        inp, out, in_key, out_key = msgs[k]
        base = f"{s.path}.attributes"
        if k == 0:
            n = _earlier(inp) if inp is not None else 0
            if n:
                # the run starts mid-conversation: the earlier rounds its first request carries are read as a
                # transcript (what the application sent back; what ran for them is not in this run)
                facts["earlier"] = n
                for j, m in enumerate(inp):
                    where = f"{base}['{in_key}'][{j}]"
                    if m.role == "user" and any(p.type == "text" for p in m.parts):
                        items.append(Item("user", pos, where, s.line))
                        open_proposal = False
                    for p in m.parts:
                        if p.type == "tool_call_response":
                            if open_proposal:
                                facts["answered"] += 1
                                facts["historyAnswered"] += 1
                                open_proposal = False
                            items.append(Item("result", pos, where, s.line,
                                              result=Result(p.id, p.content, None, where, s.line)))
                    if m.role == "assistant":
                        if m.calls():
                            proposal(pos, where, s.line, m.calls(), history=True)
                        elif any(p.type == "text" for p in m.parts):
                            items.append(Item("final", pos, where, s.line))
                facts["history"] = {"path": f"{base}['{in_key}'][", "line": s.line}  # where those rounds are read
                notes.append(f"the run starts mid-conversation: its first model call carries {n} earlier message(s), "
                             "read as a transcript of the earlier rounds (what ran for them is not in this run)")
            else:
                items.append(Item("user", pos, f"{base}['{in_key}']", s.line))
        elif inp is None:
            if open_proposal:
                # the results sent back are in this call's input, which is not recorded (Mastra's chat spans record
                # no gen_ai.input.messages): unknown, never read as missing
                items.append(Item("unrecorded", pos, f"{base}['{in_key}']", s.line))
                open_proposal = False
                facts["unrecordedInputs"] = facts.get("unrecordedInputs", 0) + 1
        else:
            prev = msgs[k - 1][0]
            if prev is not None and len(inp) >= len(prev) and inp[:len(prev)] == prev:
                start = len(prev)  # the history grew by appending: what is new since the previous model call
            else:
                start = max((j for j, m in enumerate(inp) if m.role == "assistant"), default=-1) + 1
                if prev is not None:
                    notes.append(f"model call {k + 1}'s input does not extend the previous one's: results are read "
                                 "after its last assistant message")
            if open_proposal:
                facts["answered"] += 1
                open_proposal = False
            for j, m in enumerate(inp[start:], start=start):
                where = f"{base}['{in_key}'][{j}]"
                for p in m.parts:
                    if p.type == "tool_call_response":
                        items.append(Item("result", pos, where, s.line,
                                          result=Result(p.id, p.content, None, where, s.line)))
                if m.role == "user" and any(p.type == "text" for p in m.parts):
                    items.append(Item("user", pos, where, s.line))
        # what the model answered
        calls = [p for m in (out or []) for p in m.calls()]
        where_out = f"{base}['{out_key}']"
        at: list[tuple[str, int]] | None = None
        from_chunks = chunk_calls(run.chunks.get(s.span, ())) if not calls else []
        if from_chunks:
            calls = [p for p, _ in from_chunks]
            at = [(f"{c.path}.attributes['{ATTRIBUTE_NAMES['chunk.output'][0]}']", c.line) for _, c in from_chunks]
            facts["chunkCalls"] += 1
            notes.append(f"the calls of model call {k + 1} are read from its output chunks (the spans under it "
                         f"named {_CHUNK}: {ATTRIBUTE_NAMES['chunk.output'][0]}); its recorded output "
                         f"({out_key}) holds no tool call")
        if not calls and k + 1 < len(chats):
            nxt = msgs[k + 1][0]
            hist = _proposal_from_history(nxt, inp)
            if hist:
                calls = hist
                where_out = f"{chats[k + 1].path}.attributes['{msgs[k + 1][2]}']"
                notes.append(f"the calls of model call {k + 1} are read from the next request's history (its "
                             "recorded output holds no tool calls)")
        unknown = not calls and out is None
        if calls:
            proposal(pos, where_out, s.line, calls, at=at)
        elif out is not None:
            items.append(Item("final", pos, where_out, s.line))
            facts["final"] = True
            open_proposal = False
        else:
            facts["outputsMissing"] += 1
            if k + 1 == len(chats):
                notes.append("the last model call's output is not recorded: whether it was the final answer is "
                             "unknown")
    if unjudged:
        facts["executionsUnjudged"] = unjudged
        notes.append(f"{unjudged} execution(s) follow a model call whose output is not recorded: with no proposal to "
                     "match them to, they are not judged")
    if chats and all(m[0] is None and m[1] is None for m in msgs):
        notes.append(f"the {len(chats)} model call span(s) record no messages (content capture off, or spans that "
                     "hold none: the Agents SDK's response spans record only the response id)")
    if open_proposal:
        notes.append("the results of the last proposal are in no later model call of this run: whether each call "
                     "was answered is not recorded")
    if run.agent is not None and run.agent.error:
        notes.append(f"the invocation span ({run.agent.path}, line {run.agent.line}) ended with an error status")
    return RunItems(items, defs, schemas, recorded, notes, facts)


def _proposal_from_history(nxt: list[Message] | None, inp: list[Message] | None) -> list[Part]:
    if nxt is None:
        return []
    start = len(inp) if inp is not None and len(nxt) >= len(inp) else 0
    for m in nxt[start:]:
        if m.role == "assistant" and m.calls():
            return m.calls()
    return []




def stitch_candidates(runs: Sequence[Run]) -> list[Run]:
    """The runs that may be stitched: no agent invocation, model calls only (one model client's traces)."""
    return [r for r in runs if r.agent is None and r.spans and all(s.op == "chat" for s in r.spans)]


def conversation_keys(spans: Sequence[Span]) -> tuple[list[_stitch.Key], list[_stitch.Key]] | None:
    """For the spans of one trace that is one stitchable run: the keys of the conversation it may continue and of
    where it may be continued (:func:`.stitch.keys`); None for any other trace, and for one whose messages cannot be
    read (judged by itself, its run says why)."""
    rs = group_runs(spans)
    cands = stitch_candidates(rs)
    if len(rs) != 1 or len(cands) != 1:
        return None
    try:
        return _stitch.keys(_stitch.candidate(cands[0].id, cands[0].spans, chat_messages))
    except TranscriptError:
        return None


def stitch_runs(runs: list[Run], read: Read = None) -> list[Run]:
    """Join the runs that are one model client's traces (no agent invocation, model calls only) into conversations
    where a later request carries an earlier call's request and answer exactly (:mod:`.stitch`); the other runs are
    left as they are. A stitched run takes the place of its first trace's."""
    cand_runs = sorted(stitch_candidates(runs), key=lambda r: (r.spans[0].start, r.spans[0].order))
    if not cand_runs:
        return runs
    cands = [_stitch.candidate(r.id, r.spans, read or chat_messages) for r in cand_runs]
    got = _stitch.stitch(cands)
    for i, why in got.why_not.items():
        cand_runs[i].not_stitched = why
    replace: dict[int, Run | None] = {}
    for conv in got.conversations:
        if len(conv.runs) == 1:
            continue
        parts = [cand_runs[i] for i in conv.runs]
        first = parts[0]
        joined = Run(first.id, [s for r in parts for s in r.spans], None, sum(r.all_spans for r in parts),
                     {k: v for r in parts for k, v in r.parents.items()}, sum(r.merged for r in parts),
                     [r.id for r in parts], list(conv.evidence), first.not_stitched,
                     {k: v for r in parts for k, v in r.chunks.items()})
        replace[id(first)] = joined
        for r in parts[1:]:
            replace[id(r)] = None
    if not replace:
        return runs
    out = []
    for r in runs:
        got_r = replace.get(id(r), r)
        if got_r is not None:
            out.append(got_r)
    return out


def runs(spans: Sequence[Span]) -> Iterator[TelemetryRun]:
    """The file's runs, in the order their first span appears, each with its conversation read from its spans."""
    for run in stitch_runs(group_runs(spans)):
        lines = (min(s.line for s in run.spans), max(s.line for s in run.spans))
        agent = _attr(run.agent, "agent.name") if run.agent is not None else None
        agent = agent if isinstance(agent, str) else None
        try:
            ri = run_items(run)
        except TranscriptError as exc:
            yield TelemetryRun(run.id, len(run.spans), lines, agent, None, error=f"{exc.where}: {exc.message}",
                               error_line=exc.line or lines[0])
            continue
        stitched = {"traces": run.traces, "evidence": run.stitched} if run.traces else None
        yield TelemetryRun(run.id, len(run.spans), lines, agent, ri.items, ri.tools, ri.schemas, ri.recorded, ri.notes,
                           facts=ri.facts, stitched=stitched)
