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
from .._items import TranscriptError

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
    """Where a conversation may be continued: its last call's input (and output, ``extends``). Its messages are not
    kept (they are read again from the call's span to confirm a hash hit): memory holds a few numbers per trace."""

    conv: int
    run: int  # index of the run (in the candidates) whose last call this is
    kind: str  # extends | resends
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


Loaded = tuple[tuple[NMsg, ...] | None, tuple[NMsg, ...] | None, tuple[NMsg, ...] | None, bool]


@dataclass
class Candidate:
    """A run that may be stitched: its trace, when its calls ran, and ``load`` giving its first request's input and
    its last call's input and output (normalised; None when not recorded) and whether that output proposed tool
    calls — read from the spans each time it is needed, never held."""

    trace: str
    load: Callable[[], Loaded]
    first_start: int
    last_start: int
    last_end: int


#: how many conversations ending alike a request's history is compared with before it is left unstitched
CROWD = 16


#: an exit's key: how it may be continued (``extends`` | ``resends``), the prefix's length and its chain hash
Key = tuple[str, int, int]


def _exits(i: int, c: Candidate, conv: int, got: Loaded) -> list[tuple[Key, Exit]]:
    _, last_in, last_out, proposes = got
    out: list[tuple[Key, Exit]] = []
    if last_in is None:
        return out
    if last_out:
        msgs = last_in + last_out
        out.append((("extends", len(msgs), _chain(msgs)[-1]), Exit(conv, i, "extends", c.last_start, c.last_end)))
    if last_out is None or proposes:
        out.append((("resends", len(last_in), _chain(last_in)[-1]), Exit(conv, i, "resends", c.last_start,
                                                                          c.last_end)))
    return out


def _exit_msgs(e: Exit, got: Loaded) -> tuple[NMsg, ...] | None:
    _, last_in, last_out, _ = got
    if last_in is None:
        return None
    return last_in + (last_out or ()) if e.kind == "extends" else last_in


def stitch(cands: Sequence[Candidate]) -> Stitched:
    """Join candidates (in the order given: by their first call's start) into conversations.

    A request is stitched to a conversation when that conversation's last call (its tip) is the only tip, of every
    conversation so far, that the request continues — extends it, or re-sends it — at any prefix length; when the
    tips of two conversations qualify it is ambiguous, and when only calls that were already continued qualify it
    is a fork: either way it starts a run of its own, which says why. Only tips are indexed (a call that has been
    continued moves to ``stale``, kept to name a fork), and the search stops at the second conversation found, so
    a crowd of identical conversations costs no more than distinct ones."""
    index: dict[Key, list[Exit]] = {}  # the tips' exits
    stale: dict[Key, Exit] = {}  # the first exit under each key of a call already continued
    tip_keys: dict[int, list[Key]] = {}  # conversation -> its tip's keys
    convs: list[Conversation] = []
    why_not: dict[int, str] = {}

    def register(i: int, conv: int, got: Loaded) -> None:
        for key in tip_keys.pop(conv, []):
            lst = index.get(key, [])
            for e in [e for e in lst if e.conv == conv]:
                lst.remove(e)
                stale.setdefault(key, e)
            if not lst:
                index.pop(key, None)
        keys = []
        for key, e in _exits(i, cands[i], conv, got):
            index.setdefault(key, []).append(e)
            keys.append(key)
        tip_keys[conv] = keys

    def new(i: int, got: Loaded) -> None:
        convs.append(Conversation([i], [], i))
        register(i, len(convs) - 1, got)

    loaded: dict[int, Loaded] = {}  # the exits read again while one request is matched

    def fits(e: Exit, k: int, c: Candidate, inp: tuple[NMsg, ...]) -> bool:
        """Does the request ``c`` (input ``inp``) continue exit ``e`` at prefix length ``k``: after it (an answer is
        carried only once given; a re-sent request comes after the call ended), with exactly its messages?"""
        timely = ((e.kind == "extends" and e.start <= c.first_start)
                  or (e.kind == "resends" and k == len(inp) and e.end <= c.first_start))
        if not timely:
            return False
        if e.run not in loaded:
            loaded[e.run] = cands[e.run].load()
        return _exit_msgs(e, loaded[e.run]) == inp[:k]

    for i, c in enumerate(cands):
        try:
            got = c.load()
        except TranscriptError:  # its messages cannot be read: its run says so, unstitched
            got = (None, None, None, False)
        inp = got[0]
        loaded.clear()
        if inp is None or not _prior_rounds(inp):
            new(i, got)
            continue
        h = _chain(inp)
        found: dict[int, Exit] = {}  # conversation -> its tip's exit this request continues
        forked: Exit | None = None
        crowd = False
        keys = [("resends", len(inp), h[-1])] + [("extends", k, h[k]) for k in range(len(inp), 0, -1)]
        for key in keys:  # a re-sent request is its whole input; an extended one any prefix of it
            k = key[1]
            hits = index.get(key, ())
            for n_seen, e in enumerate(hits):
                if n_seen >= CROWD:
                    crowd = True
                    break
                if e.conv not in found and fits(e, k, c, inp):
                    found[e.conv] = e
                    if len(found) > 1:
                        break
            if len(found) > 1 or crowd:
                break
            if forked is None and not found:
                st = stale.get(key)
                if st is not None and fits(st, k, c, inp):
                    forked = st
        if len(found) != 1 or crowd:
            if crowd:
                why_not[i] = (f"more than {CROWD} conversations end with the history it carries: it is not stitched "
                              "to any")
            elif len(found) > 1:
                traces = ", ".join(sorted(cands[e.run].trace for e in found.values()))
                why_not[i] = (f"its history continues the last model call of more than one conversation alike "
                              f"(traces {traces}): it is not stitched to any")
            elif forked is not None:
                why_not[i] = (f"its history continues the model call of trace {cands[forked.run].trace}, which a later "
                              f"request (trace {cands[convs[forked.conv].tip].trace}) already continued: a fork, not "
                              "stitched")
            new(i, got)
            continue
        ((conv_id, e),) = found.items()
        conv = convs[conv_id]
        prev = cands[e.run]
        _, p_in, p_out, p_proposes = loaded[e.run]
        n_in = len(p_in or ())
        if e.kind == "extends":
            n_msgs = n_in + len(p_out or ())
            rest = inp[n_msgs:]
            ids = [p[1] for _, parts in (p_out or ()) for p in parts if p[0] == "tool_call"]
            answered = sum(1 for _, parts in rest for p in parts if p[0] == "tool_call_response")
            ev = (f"trace {c.trace}'s first request carries trace {prev.trace}'s last request ({n_in} message(s)) and "
                  f"its output ({n_msgs - n_in} message(s)"
                  + (f", tool call id(s) {', '.join(str(x) for x in ids)}" if ids else "")
                  + f"), then {len(rest)} more message(s)"
                  + (f" ({answered} tool result(s))" if answered else ""))
        else:
            ev = (f"trace {c.trace}'s first request re-sends trace {prev.trace}'s last request ({n_in} message(s)) "
                  "without its " + ("output, which proposed tool calls" if p_proposes else "output (not recorded)"))
        conv.runs.append(i)
        conv.evidence.append(ev)
        conv.tip = i
        register(i, conv_id, got)
    return Stitched(convs, why_not)


def candidate(trace: str, chats: Sequence[Any], read: Callable[[Any], tuple[Any, Any, str, str]]) -> Candidate:
    """The candidate of a run whose spans are ``chats`` (model calls, in order), ``read`` giving a call's (input,
    output) messages (a ``TranscriptError`` it raises leaves the run unstitched: its run reports it)."""
    first, last = chats[0], chats[-1]

    def load() -> Loaded:
        first_in, _, _, _ = read(first)
        last_in, last_out, _, _ = read(last) if last is not first else read(first)
        proposes = bool(last_out) and any(p.type == "tool_call" for m in last_out for p in m.parts)
        f = normalise(first_in) if first_in is not None else None
        li = f if last is first else normalise(last_in) if last_in is not None else None
        return f, li, normalise(last_out) if last_out is not None else None, proposes

    return Candidate(trace, load, first.start, last.start, last.end)


def keys(c: Candidate) -> tuple[list[Key], list[Key]]:
    """The keys of a candidate, read once: under which the conversation it continues may be indexed (its whole first
    request re-sent, then each prefix of it extended, longest first; none when that request carries no earlier
    round), and those a later request's prefix must have to continue it (as :func:`stitch` indexes them). Raises
    ``TranscriptError`` when its messages cannot be read."""
    got = c.load()
    inp = got[0]
    entry: list[Key] = []
    if inp is not None and _prior_rounds(inp):
        h = _chain(inp)
        entry = [("resends", len(inp), h[-1])] + [("extends", k, h[k]) for k in range(len(inp), 0, -1)]
    return entry, [key for key, _ in _exits(0, c, 0, got)]
