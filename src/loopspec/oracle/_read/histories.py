"""Framework message histories: pydantic-ai's ``ModelMessagesTypeAdapter`` JSON and LangChain's
``messages_to_dict``. (The Agents SDK's ``RunResult.to_input_list()`` is a list of Responses items and is
read by the ``openai-responses`` importer.)

Shapes (source: the pinned versions' serializers):

* **pydantic-ai** — a list of ``{"kind": "request", "parts": [...]}`` and
  ``{"kind": "response", "parts": [...]}``; request parts ``user-prompt``, ``system-prompt``,
  ``tool-return`` (``tool_name``, ``content``, ``tool_call_id``, ``outcome``: ``success`` or not) and
  ``retry-prompt`` (an error answer to ``tool_call_id``: the call's arguments did not validate or the
  tool asked for a retry); response parts ``tool-call`` (``tool_name``, ``args``: an object, its JSON
  text, or null for none, ``tool_call_id``) and ``text``.
* **LangChain** — a list of ``{"type": "human" | "ai" | "tool" | "system", "data": {...}}``; ``ai``
  messages carry ``tool_calls`` (``name``, ``args`` object, ``id``) and ``invalid_tool_calls`` (calls
  whose arguments did not parse: ``args`` is the raw text); ``tool`` messages ``tool_call_id``,
  ``content`` and ``status`` (``success`` | ``error``).

Both record whether a result is an error (pydantic-ai ``outcome`` / ``retry-prompt``, LangChain
``status``), so the judge verifies R2, R6 and R7 from them (:data:`~loopspec.oracle._judge.conversation.WITNESSED`).
"""

from __future__ import annotations

from typing import Any, Final

from ...core import rules as core
from .._items import Call, Item, LineOf, Result, TranscriptError
from .transcripts import _parse_args

Json = Any

FORMATS: Final = ("pydantic-ai", "langchain")

_LC_TYPES: Final = frozenset({"human", "ai", "tool", "system", "chat", "function", "AIMessageChunk",
                              "HumanMessageChunk", "ToolMessageChunk", "SystemMessageChunk"})


def _need(cond: bool, where: str, message: str, line: int | None = None) -> None:
    if not cond:
        raise TranscriptError(where, message, line)


def is_pydantic_ai(entries: Json) -> bool:
    return (isinstance(entries, list) and bool(entries) and all(
        isinstance(e, dict) and e.get("kind") in ("request", "response") and isinstance(e.get("parts"), list)
        for e in entries))


def is_langchain(entries: Json) -> bool:
    return (isinstance(entries, list) and bool(entries) and all(
        isinstance(e, dict) and isinstance(e.get("type"), str) and e.get("type") in _LC_TYPES
        and isinstance(e.get("data"), dict) for e in entries))


def detect_format(doc: Json) -> str | None:
    if is_pydantic_ai(doc):
        return "pydantic-ai"
    if is_langchain(doc):
        return "langchain"
    return None


def import_pydantic_ai(messages: Json, base: str, line_of: LineOf) -> list[Item]:
    _need(isinstance(messages, list), base, "expected a list of model messages")
    items: list[Item] = []
    for k, m in enumerate(messages):
        where = f"{base}[{k}]"
        _need(isinstance(m, dict), where, "a model message must be an object", line_of(messages))
        line = line_of(m)
        kind = m.get("kind")
        parts = m.get("parts")
        _need(kind in ("request", "response"), f"{where}.kind", f"expected request or response, got {kind!r}", line)
        _need(isinstance(parts, list), f"{where}.parts", "expected a list", line)
        if kind == "response":
            calls = []
            for j, p in enumerate(parts):
                if isinstance(p, dict) and p.get("part_kind") == "tool-call":
                    args = p.get("args")
                    if args is None:
                        args = {}  # pydantic-ai: no arguments means {}
                    parsed, ok = _parse_args(args)
                    calls.append(Call(p.get("tool_call_id"), p.get("tool_name"), parsed, ok, f"{where}.parts[{j}]",
                                      line_of(p)))
            items.append(Item("proposal" if calls else "final", k, where, line, calls))
            continue
        user = False
        for j, p in enumerate(parts):
            if not isinstance(p, dict):
                continue
            pk = p.get("part_kind")
            w = f"{where}.parts[{j}]"
            if pk == "tool-return":
                _need("tool_call_id" in p, f"{w}.tool_call_id", "missing (a tool return answers one call id)", line)
                outcome = p.get("outcome", "success")
                items.append(Item("result", k, w, line_of(p), result=Result(
                    p.get("tool_call_id"), p.get("content"), outcome != "success", w, line_of(p))))
            elif pk == "retry-prompt" and p.get("tool_name") is not None:
                items.append(Item("result", k, w, line_of(p), result=Result(
                    p.get("tool_call_id"), p.get("content"), True, w, line_of(p))))
            elif pk == "user-prompt":
                user = True
        if user:
            items.append(Item("user", k, where, line))
    return items


def import_langchain(messages: Json, base: str, line_of: LineOf) -> list[Item]:
    _need(isinstance(messages, list), base, "expected a list of messages (messages_to_dict)")
    items: list[Item] = []
    for k, m in enumerate(messages):
        where = f"{base}[{k}]"
        _need(isinstance(m, dict) and isinstance(m.get("data"), dict), where,
              'a message must be {"type": ..., "data": {...}}', line_of(messages))
        line = line_of(m)
        typ, data = m.get("type"), m["data"]
        if typ in ("human", "HumanMessageChunk", "chat"):
            items.append(Item("user", k, where, line))
        elif typ in ("ai", "AIMessageChunk"):
            calls = []
            tcs = data.get("tool_calls") or []
            _need(isinstance(tcs, list), f"{where}.data.tool_calls", "expected a list", line)
            for j, tc in enumerate(tcs):
                _need(isinstance(tc, dict), f"{where}.data.tool_calls[{j}]", "a tool call must be an object", line)
                args = tc.get("args")
                calls.append(Call(tc.get("id"), tc.get("name"), args, isinstance(args, dict) and core.is_json(args),
                                  f"{where}.data.tool_calls[{j}]", line_of(tc)))
            bad = data.get("invalid_tool_calls") or []
            _need(isinstance(bad, list), f"{where}.data.invalid_tool_calls", "expected a list", line)
            for j, tc in enumerate(bad):
                if isinstance(tc, dict):  # arguments that did not parse into an object: still a call the model made
                    calls.append(Call(tc.get("id"), tc.get("name"), tc.get("args"), False,
                                      f"{where}.data.invalid_tool_calls[{j}]", line_of(tc)))
            items.append(Item("proposal" if calls else "final", k, where, line, calls))
        elif typ in ("tool", "ToolMessageChunk", "function"):
            _need("tool_call_id" in data, f"{where}.data.tool_call_id", "missing (a tool message answers one call id)",
                  line)
            status = data.get("status", "success")
            items.append(Item("result", k, where, line, result=Result(
                data.get("tool_call_id"), data.get("content"), status == "error", where, line)))
        # system messages carry no turn
    return items


IMPORTERS: Final = {"pydantic-ai": import_pydantic_ai, "langchain": import_langchain}
