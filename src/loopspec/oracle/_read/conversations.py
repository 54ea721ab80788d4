"""Reading a file's conversations (transcripts and framework histories): each :class:`~._documents.Doc` is read
into a :class:`~loopspec.oracle._items.Conversation` in the format it shows.

With ``--input-format`` every conversation is read in that format (one that shows another is refused). Else
a framework history is told by its shape, a transcript by what it shows unmistakably (a conversation that
mixes formats is refused); a conversation that shows nothing decisive (no tool use) is read in the format of
the file's first conversation that shows one, so it waits until one does — and with none, any importer
agrees (nothing uses tools), Chat Completions is used.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any, Final

from .._items import Conversation, TranscriptError
from .._records import InputError
from . import histories
from .documents import Doc
from .transcripts import IMPORTERS, LABELS, conversation_body, detect_format, formats_shown

Json = Any

_IMPORTERS: Final = {**IMPORTERS, **histories.IMPORTERS}

#: How each format is called in messages, histories included.
_NAMES: Final[Mapping[str, str]] = {**LABELS, "pydantic-ai": "pydantic-ai messages", "langchain": "LangChain messages"}


def conversations(docs: Iterator[Doc | InputError], name: str, fmt: str | None) -> Iterator[Conversation | InputError]:
    """The file's conversations in file order (and its input errors); ``fmt``: the format given, or None."""
    base = os.path.basename(name) if name != "-" else "stdin"
    file_fmt: str | None = None  # the format of the file's first conversation that shows one
    pending: list[Doc] = []  # conversations seen before the format showed (all need the same importer)

    def cid_of(d: Doc) -> str:
        doc = d.value
        return doc["id"] if isinstance(doc, dict) and isinstance(doc.get("id"), str) else f"{base}#{d.number}"

    def one(d: Doc, f: str) -> Conversation:
        cid = cid_of(d)
        body = conversation_body(d.value)
        if body is None:
            return Conversation(cid, f, d.line, 0, None,
                                f"not a conversation: expected an object with \"messages\" (or OpenAI Responses "
                                f"\"input\"/\"output\" items), or a list of messages (read as {_NAMES[f]})", d.line)
        key, entries = body
        where = key or "$"
        loc = d.located
        line_of = loc.line if loc is not None else (lambda o: d.line)
        try:
            items = _IMPORTERS[f](entries, where, line_of)
        except TranscriptError as exc:
            return Conversation(cid, f, d.line, len(entries), None, f"{exc.where}: {exc.message}",
                                exc.line or d.line)
        return Conversation(cid, f, d.line, len(entries), items)

    def refused(d: Doc, f: str, why: str) -> Conversation:
        body = conversation_body(d.value)
        return Conversation(cid_of(d), f, d.line, len(body[1]) if body is not None else 0, None, why, d.line)

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
        f = histories.detect_format(d.value)
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
