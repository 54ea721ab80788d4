"""Stitching one-call traces into conversations.

Where only the model client is instrumented (OpenInference's or OpenLLMetry's openai instrumentation, the official
openai-v2), every model call is a trace of its own and no span says which conversation it belongs to. What ties
them is the content: a later request of the same conversation carries the earlier request's messages, then the
model's answer to it (the assistant message with its tool calls, their ids), then what was sent back (the tool
results, a new user turn). This module joins such traces into one run when — and only when — that is exact:

* **extends** — a request whose input messages begin with exactly an earlier call's input messages followed by its
  output messages (after the normalisation below) continues that call's conversation;
* **re-sends** — a request whose input messages are exactly an earlier call's input messages, made after that call
  ended, continues it when that call proposed tool calls or recorded no output: the same conversation asked the
  model again without its answer (the answer's calls were dropped, or the call failed and was retried). A call
  that ended with a final answer is not continued this way (a user may regenerate an answer: that is a new run).

A request that carries no earlier round (no assistant or tool message) starts a conversation. Of the earlier calls a
request could continue, the one matching the longest prefix of its input is taken; when two conversations match
alike, or the call it continues was already continued by another request (a fork), it is **not** stitched and its
run says why. Only the last call of a conversation (its *tip*) can be continued. Only runs without an agent
invocation whose spans are all model calls are stitched (a run an agent framework recorded is whole already).

Normalisation (what the instrumentations impose, observed in the recordings): a message is its role and its parts;
text parts compare by their exact text, and an empty or absent text is no part (an assistant message with tool
calls records ``content`` as ``""``, ``None`` or not at all); tool calls by id, name and arguments, the arguments
compared as canonical JSON whether recorded as a JSON string or an object (OpenInference records the string the
model sent, openai-v2 the parsed object); tool results by call id and content, a content that is JSON compared as
canonical JSON; any other part by its type only. Nothing else is dropped: system messages, roles, order and ids
must match exactly.

Candidates are indexed by a hash of each one's exit prefix, and each request's prefixes are hashed as one chain
(each message's hash folded into the previous), so stitching costs one pass over each request's input messages,
never a comparison of every pair of traces; a hash hit is confirmed by comparing the messages.

Pure: spans in, runs out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import _json

Json = Any
NMsg = tuple[Any, ...]


def _canon(v: Json) -> Json:
    """Canonical JSON text of a value (a JSON string is parsed first), or the value itself when it is not JSON."""
    if isinstance(v, str):
        t = v.strip()
        if t[:1] not in ("{", "["):
            return v
        try:
            v = _json.loads(t)
        except _json.JsonError:
            return v
    try:
        return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(v)


def normalise(messages: Sequence[Any]) -> tuple[NMsg, ...]:
    """Messages (``telemetry.Message``) as hashable tuples, with the normalisation of the module's docstring."""
    out: list[NMsg] = []
    for m in messages:
        parts: list[tuple[Any, ...]] = []
        for p in m.parts:
            if p.type == "text":
                if p.content is None or p.content == "":
                    continue
                parts.append(("text", p.content if isinstance(p.content, str) else _canon(p.content)))
            elif p.type == "tool_call":
                parts.append(("tool_call", p.id, p.name, _canon(p.args if p.args is not None else {})))
            elif p.type == "tool_call_response":
                parts.append(("tool_call_response", p.id, _canon(p.content)))
            else:
                parts.append((p.type,))
        out.append((m.role, tuple(parts)))
    return tuple(out)


def _chain(msgs: Sequence[NMsg]) -> list[int]:
    """The hash of every prefix: ``h[k]`` is the hash of ``msgs[:k]`` (``h[0]`` of none)."""
    h = [0]
    for m in msgs:
        h.append(hash((h[-1], m)))
    return h


def _prior_rounds(msgs: Sequence[NMsg]) -> bool:
    return any(role in ("assistant", "tool") or any(p[0] in ("tool_call", "tool_call_response") for p in parts)
               for role, parts in msgs)


@dataclass
class Exit:
    """Where a conversation may be continued: its last call's input (and output)."""

    conv: int
    run: int  # index of the run (in the candidates) whose last call this is
    kind: str  # extends | resends
    msgs: tuple[NMsg, ...]
    start: int
    end: int


@dataclass
class Conversation:
    runs: list[int] = field(default_factory=list)  # candidate indexes, in order
    evidence: list[str] = field(default_factory=list)  # one sentence per join
    tip: int = -1  # the candidate whose last call may be continued


@dataclass
class Stitched:
    """The outcome: conversations (lists of candidate indexes), and for a candidate that was not stitched although
    its first request carries earlier rounds, why."""

    conversations: list[Conversation]
    why_not: dict[int, str]


@dataclass
class Candidate:
    """A run that may be stitched: its trace, its first request's input and its last call's input and output
    (normalised; None when not recorded), whether that output proposed tool calls, and when the calls ran."""

    trace: str
    first_input: tuple[NMsg, ...] | None
    last_input: tuple[NMsg, ...] | None
    last_output: tuple[NMsg, ...] | None
    proposes: bool
    first_start: int
    last_start: int
    last_end: int


def stitch(cands: Sequence[Candidate]) -> Stitched:
    """Join candidates (in the order given: by their first call's start) into conversations."""
    index: dict[tuple[int, int], list[Exit]] = {}
    convs: list[Conversation] = []
    conv_of: dict[int, int] = {}
    why_not: dict[int, str] = {}

    def register(i: int, conv: int) -> None:
        c = cands[i]
        if c.last_input is None:
            return
        if c.last_output:
            msgs = c.last_input + c.last_output
            index.setdefault((len(msgs), _chain(msgs)[-1]), []).append(
                Exit(conv, i, "extends", msgs, c.last_start, c.last_end))
        if c.last_output is None or c.proposes:
            msgs = c.last_input
            index.setdefault((len(msgs), _chain(msgs)[-1]), []).append(
                Exit(conv, i, "resends", msgs, c.last_start, c.last_end))

    def new(i: int) -> None:
        convs.append(Conversation([i], [], i))
        conv_of[i] = len(convs) - 1
        register(i, len(convs) - 1)

    for i, c in enumerate(cands):
        inp = c.first_input
        if inp is None or not _prior_rounds(inp):
            new(i)
            continue
        h = _chain(inp)
        found: list[Exit] = []
        for k in range(len(inp), 0, -1):
            hits = index.get((k, h[k]))
            if not hits:
                continue
            ok = [e for e in hits if e.msgs == inp[:k] and e.run != i and (
                (e.kind == "extends" and e.start <= c.first_start)
                or (e.kind == "resends" and k == len(inp) and e.end <= c.first_start))]
            if ok:
                found = ok
                break
        if not found:
            new(i)
            continue
        conv_ids = sorted({e.conv for e in found})
        if len(conv_ids) > 1:
            traces = ", ".join(sorted({cands[e.run].trace for e in found}))
            why_not[i] = (f"its history matches {len(conv_ids)} earlier conversations alike (traces {traces}): it is "
                          "not stitched to either")
            new(i)
            continue
        conv = convs[conv_ids[0]]
        at_tip = [e for e in found if e.run == conv.tip]
        if not at_tip:
            e = found[0]
            why_not[i] = (f"its history continues the model call of trace {cands[e.run].trace}, which a later request "
                          f"(trace {cands[conv.tip].trace}) already continued: a fork, not stitched")
            new(i)
            continue
        e = at_tip[0]
        prev = cands[e.run]
        n_in = len(prev.last_input or ())
        if e.kind == "extends":
            rest = inp[len(e.msgs):]
            ids = [p[1] for _, parts in (prev.last_output or ()) for p in parts if p[0] == "tool_call"]
            answered = sum(1 for _, parts in rest for p in parts if p[0] == "tool_call_response")
            ev = (f"trace {c.trace}'s first request carries trace {prev.trace}'s last request ({n_in} message(s)) and "
                  f"its output ({len(e.msgs) - n_in} message(s)"
                  + (f", tool call id(s) {', '.join(str(x) for x in ids)}" if ids else "")
                  + f"), then {len(rest)} more message(s)"
                  + (f" ({answered} tool result(s))" if answered else ""))
        else:
            ev = (f"trace {c.trace}'s first request re-sends trace {prev.trace}'s last request ({n_in} message(s)) "
                  "without its " + ("output, which proposed tool calls" if prev.proposes else "output (not recorded)"))
        conv.runs.append(i)
        conv.evidence.append(ev)
        conv.tip = i
        conv_of[i] = conv_ids[0]
        register(i, conv_ids[0])
    return Stitched(convs, why_not)


def candidate(trace: str, chats: Sequence[Any], read: Callable[[Any], tuple[Any, Any, str, str]]) -> Candidate:
    """The candidate of a run whose spans are ``chats`` (model calls, in order), ``read`` giving a call's (input,
    output) messages."""
    first_in, _, _, _ = read(chats[0])
    last_in, last_out, _, _ = read(chats[-1])
    proposes = bool(last_out) and any(p.type == "tool_call" for m in last_out for p in m.parts)
    return Candidate(trace, normalise(first_in) if first_in is not None else None,
                     normalise(last_in) if last_in is not None else None,
                     normalise(last_out) if last_out is not None else None, proposes,
                     chats[0].start, chats[-1].start, chats[-1].end)


def entry_keys(c: Candidate) -> list[tuple[int, int]]:
    """The keys under which the conversation a candidate continues may be indexed (``(length, hash)`` of each prefix
    of its first request's input, longest first); none when that request carries no earlier round."""
    inp = c.first_input
    if inp is None or not _prior_rounds(inp):
        return []
    h = _chain(inp)
    return [(k, h[k]) for k in range(len(inp), 0, -1)]


def exit_keys(c: Candidate) -> list[tuple[int, int]]:
    """The keys a later request's prefix must have to continue this candidate (as :func:`stitch` registers them)."""
    out = []
    if c.last_input is None:
        return out
    if c.last_output:
        msgs = c.last_input + c.last_output
        out.append((len(msgs), _chain(msgs)[-1]))
    if c.last_output is None or c.proposes:
        out.append((len(c.last_input), _chain(c.last_input)[-1]))
    return out
