"""Reading transcripts people already have: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages.

Each importer turns one conversation into a flat list of :class:`~loopspec.oracle._items.Item` s — a user
turn, a proposal (one model response's calls), a final answer (a model response with no call), a tool
result — in conversation order; the judge (:mod:`loopspec.oracle._judge.conversation`) walks them. Which
format a conversation is in is decided here too, from what it shows (:func:`formats_shown`), and across
a file's conversations by :func:`conversations`.

Field shapes follow the providers' documented formats: Chat Completions assistant ``tool_calls``
(``id``, ``type: function``, ``function.name``, ``function.arguments`` as a JSON *string*) and
``tool`` messages (``tool_call_id``, ``content``); Responses ``function_call`` items (``call_id``,
``name``, ``arguments`` as a JSON string) and ``function_call_output`` items (``call_id``,
``output``); Anthropic ``tool_use`` content blocks (``id``, ``name``, ``input`` object) in assistant
messages and ``tool_result`` blocks (``tool_use_id``, ``content``, optional ``is_error``) in user
messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from ...core import rules as core
from .. import _json
from .._items import Call, Item, LineOf, Result, TranscriptError

Json = Any

FORMATS: Final = ("openai-chat", "openai-responses", "anthropic")


def _need(cond: bool, where: str, message: str, line: int | None = None) -> None:
    if not cond:
        raise TranscriptError(where, message, line)


def _parse_args(text: Json) -> tuple[Json, bool]:
    """Chat/Responses arguments are a JSON string; they are an arguments object only when it parses to one."""
    if isinstance(text, dict):
        return text, core.is_json(text)
    if not isinstance(text, str):
        return text, False
    try:
        v = _json.loads(text)
    except _json.JsonError:
        return text, False
    return v, isinstance(v, dict) and core.is_json(v)


def _has_text(content: Json) -> bool:
    if isinstance(content, str):
        return content.strip() != ""
    if isinstance(content, list):
        return any(isinstance(b, dict) and b.get("type") in ("text", "output_text", "input_text") for b in content)
    return False


# --------------------------------------------------------------------------------------------
# Importers
# --------------------------------------------------------------------------------------------


def import_openai_chat(messages: Json, base: str, line_of: LineOf) -> list[Item]:
    _need(isinstance(messages, list), base, "expected a list of messages")
    items: list[Item] = []
    for k, m in enumerate(messages):
        where = f"{base}[{k}]"
        _need(isinstance(m, dict), where, "a message must be an object", line_of(messages))
        line = line_of(m)
        role = m.get("role")
        _need(isinstance(role, str), f"{where}.role", "missing (a message needs a role)", line)
        if role in ("system", "developer"):
            continue
        if role == "user":
            items.append(Item("user", k, where, line))
        elif role == "assistant":
            tcs = m.get("tool_calls")
            calls: list[Call] = []
            if tcs is not None:
                _need(isinstance(tcs, list), f"{where}.tool_calls", "expected a list", line)
                for j, tc in enumerate(tcs):
                    w = f"{where}.tool_calls[{j}]"
                    _need(isinstance(tc, dict), w, "a tool call must be an object", line)
                    fn = tc.get("function")
                    _need(isinstance(fn, dict), f"{w}.function", "expected {name, arguments}", line_of(tc))
                    args, ok = _parse_args(fn.get("arguments"))
                    calls.append(Call(tc.get("id"), fn.get("name"), args, ok, w, line_of(tc)))
            elif isinstance(m.get("function_call"), dict):  # deprecated single call, without an id
                fn = m["function_call"]
                args, ok = _parse_args(fn.get("arguments"))
                calls.append(Call(None, fn.get("name"), args, ok, f"{where}.function_call", line))
            items.append(Item("proposal" if calls else "final", k, where, line, calls))
        elif role in ("tool", "function"):
            cid = m.get("tool_call_id") if role == "tool" else None
            if role == "tool":
                _need("tool_call_id" in m, f"{where}.tool_call_id", "missing (a tool message answers one call id)", line)
            items.append(Item("result", k, where, line, result=Result(cid, m.get("content"), None, where, line)))
        else:
            raise TranscriptError(f"{where}.role", f"unknown role {role!r} (Chat Completions: system, developer, "
                                  "user, assistant, tool)", line)
    return items


def import_openai_responses(entries: Json, base: str, line_of: LineOf) -> list[Item]:
    _need(isinstance(entries, list), base, "expected a list of items")
    items: list[Item] = []
    segment: Item | None = None  # the model output being collected (consecutive output items)
    for k, it in enumerate(entries):
        where = f"{base}[{k}]"
        _need(isinstance(it, dict), where, "an item must be an object", line_of(entries))
        line = line_of(it)
        typ = it.get("type", "message" if "role" in it else None)
        _need(isinstance(typ, str), f"{where}.type", "missing", line)
        if typ == "function_call":
            args, ok = _parse_args(it.get("arguments"))
            call = Call(it.get("call_id"), it.get("name"), args, ok, where, line)
            if segment is None:
                segment = Item("proposal", k, where, line)
                items.append(segment)
            segment.kind = "proposal"
            segment.calls.append(call)
        elif typ == "function_call_output":
            _need("call_id" in it, f"{where}.call_id", "missing (an output answers one call_id)", line)
            segment = None
            items.append(Item("result", k, where, line, result=Result(it.get("call_id"), it.get("output"), None,
                                                                        where, line)))
        elif typ == "message":
            role = it.get("role")
            if role == "assistant":
                if segment is None:
                    segment = Item("final", k, where, line)
                    items.append(segment)
            elif role == "user":
                segment = None
                items.append(Item("user", k, where, line))
            # system / developer messages carry no turn
        elif typ == "reasoning":
            continue
        # other item types (hosted tools, ...) are not function calls: ignored
    return items


def import_anthropic(messages: Json, base: str, line_of: LineOf) -> list[Item]:
    _need(isinstance(messages, list), base, "expected a list of messages")
    items: list[Item] = []
    for k, m in enumerate(messages):
        where = f"{base}[{k}]"
        _need(isinstance(m, dict), where, "a message must be an object", line_of(messages))
        line = line_of(m)
        role = m.get("role")
        content = m.get("content")
        _need(role in ("user", "assistant"), f"{where}.role", f"expected user or assistant, got {role!r}", line)
        blocks = content if isinstance(content, list) else []
        if role == "assistant":
            calls = []
            for j, b in enumerate(blocks):
                if isinstance(b, dict) and b.get("type") == "tool_use":
                    inp = b.get("input")
                    calls.append(Call(b.get("id"), b.get("name"), inp, isinstance(inp, dict) and core.is_json(inp),
                                      f"{where}.content[{j}]", line_of(b)))
            items.append(Item("proposal" if calls else "final", k, where, line, calls))
            continue
        other = isinstance(content, str) and content != ""
        for j, b in enumerate(blocks):
            if isinstance(b, dict) and b.get("type") == "tool_result":
                w = f"{where}.content[{j}]"
                _need("tool_use_id" in b, f"{w}.tool_use_id", "missing (a tool_result answers one tool_use id)", line)
                err = b.get("is_error")
                items.append(Item("result", k, w, line_of(b), result=Result(
                    b.get("tool_use_id"), b.get("content"), err if isinstance(err, bool) else None, w, line_of(b))))
            else:
                other = True
        if other:
            items.append(Item("user", k, where, line))
    return items


IMPORTERS: Final[Mapping[str, Callable[[Json, str, LineOf], list[Item]]]] = {
    "openai-chat": import_openai_chat,
    "openai-responses": import_openai_responses,
    "anthropic": import_anthropic,
}


# --------------------------------------------------------------------------------------------
# Detection
# --------------------------------------------------------------------------------------------


def conversation_body(doc: Json) -> tuple[str, Json] | None:
    """(key, list) of a conversation document: its messages or its Responses items."""
    if isinstance(doc, dict):
        if isinstance(doc.get("messages"), list):
            return "messages", doc["messages"]
        inp, out = doc.get("input"), doc.get("output")
        if isinstance(inp, list) or isinstance(out, list):
            return "input", (inp if isinstance(inp, list) else []) + (out if isinstance(out, list) else [])
        return None
    if isinstance(doc, list):
        return "", doc
    return None


def detect_format(doc: Json) -> str | None:
    """The format one conversation is in, when it shows (None: nothing decisive, e.g. no tool use)."""
    body = conversation_body(doc)
    if body is None:
        return None
    key, entries = body
    if key == "input":
        return "openai-responses"
    for e in entries:
        if not isinstance(e, dict):
            continue
        if e.get("type") in ("function_call", "function_call_output", "message", "reasoning"):
            return "openai-responses"
        role = e.get("role")
        if role == "tool" or "tool_calls" in e or role in ("system", "developer") or "function_call" in e:
            return "openai-chat"
        content = e.get("content")
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result")
                                             for b in content):
            return "anthropic"
    return None


#: How each format is called in messages.
LABELS: Final[Mapping[str, str]] = {"openai-chat": "OpenAI Chat Completions", "openai-responses": "OpenAI Responses",
                                    "anthropic": "Anthropic Messages"}


def formats_shown(doc: Json) -> dict[str, str]:
    """The formats a conversation shows unmistakably, each with where it first shows: Responses
    ``function_call`` / ``function_call_output`` / ``reasoning`` items (or an ``input`` list); Chat
    ``tool_calls``, ``function_call`` or a ``tool``/``function`` role; Anthropic ``tool_use`` /
    ``tool_result`` blocks. More than one means the conversation mixes formats (it is then refused:
    one conversation is in one format, whichever comes first)."""
    body = conversation_body(doc)
    if body is None:
        return {}
    key, entries = body
    shown: dict[str, str] = {}
    if key == "input":
        shown["openai-responses"] = "input"
    base = key or "$"
    for k, e in enumerate(entries):
        if not isinstance(e, dict):
            continue
        where = f"{base}[{k}]"
        typ = e.get("type")
        if typ in ("function_call", "function_call_output", "reasoning"):
            shown.setdefault("openai-responses", f"{where}: a {typ} item")
        role = e.get("role")
        if "tool_calls" in e:
            shown.setdefault("openai-chat", f"{where}.tool_calls")
        elif isinstance(e.get("function_call"), dict):
            shown.setdefault("openai-chat", f"{where}.function_call")
        elif role in ("tool", "function"):
            shown.setdefault("openai-chat", f"{where}: role {role}")
        content = e.get("content")
        if isinstance(content, list):
            for j, b in enumerate(content):
                if isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result"):
                    shown.setdefault("anthropic", f"{where}.content[{j}]: a {b['type']} block")
                    break
    return shown


def is_conversation(doc: Json) -> bool:
    body = conversation_body(doc)
    if body is None:
        return False
    key, entries = body
    if key:
        return True
    return bool(entries) and all(isinstance(e, dict) and ("role" in e or "type" in e) for e in entries)


