"""Judging a conversation: the items of a transcript, a framework history or a telemetry run, walked in order.

A conversation shows what the model proposed and what the application sent back (and, from telemetry,
what ran), but not the limits or the tools' schemas unless they were recorded. So only the rules it can
*witness* are checked (:data:`WITNESSED` for transcripts and histories; :mod:`._judge.telemetry` for a
telemetry run); the verdict lists the others as not witnessed. :func:`check_items` walks the items:

* every call gets exactly one result, and no result comes without its call (R11);
* results come in the order of the calls (request order), whatever order the executions completed
  in (R11, R32); with executions recorded (telemetry), two of one call id never overlap (R33);
* a call without a valid id (not a non-blank string) is refused, never answered as a success (R2);
* a call id reused for *different* content is refused, never answered as a success (R7, R5);
* a call id reused for the *same* content is a replay: it gets exactly the stored result (R6);
* after the final answer, no tool call until the user speaks again (R28).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ...core import rules as core
from ...judge.verdict import Violation
from ...support.text import compact
from .. import _json
from .._items import Call, Conversation, Execution, Item, Result
from .._records import Judged

Json = Any

#: Rules each transcript format can witness, and how firmly: "verified" from the transcript, "assumed" when
#: the verdict rests on telling an error result from a success, which only Anthropic records
#: (``is_error``); elsewhere a result is a success unless its content is a loopspec error object. The
#: framework histories (pydantic-ai, LangChain) record whether a result is an error (pydantic-ai
#: ``outcome`` / ``retry-prompt``, LangChain ``status``), so R2, R6 and R7 are verified, not assumed.
WITNESSED: Final[Mapping[str, Mapping[str, str]]] = {
    "openai-chat": {"R11": "verified", "R28": "verified", "R7": "assumed", "R6": "assumed",
                    "R2": "assumed"},
    "openai-responses": {"R11": "verified", "R28": "verified", "R7": "assumed", "R6": "assumed",
                         "R2": "assumed"},
    "anthropic": {"R11": "verified", "R28": "verified", "R7": "verified", "R6": "verified",
                  "R2": "verified"},
    "pydantic-ai": {"R2": "verified", "R6": "verified", "R7": "verified", "R11": "verified", "R28": "verified"},
    "langchain": {"R2": "verified", "R6": "verified", "R7": "verified", "R11": "verified", "R28": "verified"},
}

ASSUMPTION: Final = ("a result counts as a success unless it is marked as an error (Anthropic is_error) or its "
                     "content is a loopspec error object {\"status\": \"error\", \"code\": …}")


@dataclass
class _Binding:
    key: str
    index: int
    success: Json = None
    has_success: bool = False
    executed_ok: bool = False  # an execution of the bound request succeeded (telemetry)


@dataclass
class TranscriptVerdict:
    violation: Violation | None
    item_pos: int | None  # event index (position in the conversation)
    path: str | None
    line: int | None
    events: int
    calls: int
    results: int
    steps: int
    executions: int = 0


def _content_key(c: Call) -> str:
    if c.args_ok:
        return core.content_key(c.name if isinstance(c.name, str) else compact(c.name), c.args)
    return f"{c.name!r}\x00<not an object>\x00{c.args!r}"


def _is_error(r: Result) -> bool:
    if r.is_error is True:
        return True
    c = r.content
    if isinstance(c, str):
        try:
            c = _json.loads(c)
        except _json.JsonError:
            return False
    return isinstance(c, dict) and c.get("status") == "error" and isinstance(c.get("code"), str)


def _error_code(r: Result) -> str | None:
    c = r.content
    if isinstance(c, str):
        try:
            c = _json.loads(c)
        except _json.JsonError:
            return None
    return c.get("code") if isinstance(c, dict) and c.get("status") == "error" else None


def _same(a: Json, b: Json) -> bool:
    ca = core.canonical_json(a)
    return ca is not None and ca == core.canonical_json(b)


def _call_desc(c: Call) -> str:
    cid = repr(c.id) if isinstance(c.id, str) else f"<id {compact(c.id, 12)}>"
    name = c.name if isinstance(c.name, str) else "<no name>"
    args = compact(c.args, 40) if c.args_ok else f"<arguments not an object: {compact(c.args, 30)}>"
    return f"#{c.index} {cid} {name}({args})"


class _Broken(Exception):
    def __init__(self, rule: str, kind: str, item: Item, index: int | None, expected: Json, observed: Json,
                 then: str) -> None:
        self.rule, self.kind, self.item, self.index = rule, kind, item, index
        self.expected, self.observed, self.then = expected, observed, then


def _key(v: Json) -> str | None:
    """What two ids (or arguments) are compared by: their canonical JSON (None: not JSON, equal to nothing)."""
    return core.canonical_json(v)


class _Round:
    """The calls of the current proposal, indexed so that each result and each execution finds its call in
    constant time (amortized): one model response may propose thousands of calls, and matching each result
    or execution by scanning the proposal made a round quadratic in its size."""

    def __init__(self, calls: list[Call]) -> None:
        n = len(calls)
        self.calls = calls
        self.answered = [False] * n
        self.executed: list[Any] = [False] * n
        self.outcome: list[bool | None] = [None] * n  # how each call's recorded execution ended (telemetry)
        self._first = 0  # every call before it is answered
        self.ids = [_key(c.id) for c in calls]
        self._args = [_key(c.args) if c.args_ok else None for c in calls]
        self._unanswered: dict[str | None, deque[int]] = {}  # id key -> calls not answered yet, in order
        self._by_id: dict[str | None, list[int]] = {}  # id key -> calls, in order
        self._by_name: dict[str, deque[int]] = {}  # tool -> calls not executed yet, in order
        self._by_args: dict[tuple[str, str], deque[int]] = {}  # (tool, arguments) -> calls not executed yet
        self._by_name_bad: dict[str, deque[int]] = {}  # tool -> calls whose arguments are not an object
        for k, c in enumerate(calls):
            idk = self.ids[k]
            if idk is not None:
                self._unanswered.setdefault(idk, deque()).append(k)
                self._by_id.setdefault(idk, []).append(k)
            name = _key(c.name)
            if name is None:
                continue
            self._by_name.setdefault(name, deque()).append(k)
            ak = self._args[k]
            if ak is None:
                self._by_name_bad.setdefault(name, deque()).append(k)
            else:
                self._by_args.setdefault((name, ak), deque()).append(k)

    def first_unanswered(self) -> int | None:
        answered = self.answered
        while self._first < len(answered) and answered[self._first]:
            self._first += 1
        return self._first if self._first < len(answered) else None

    def unanswered_with_id(self, rid: Json) -> int | None:
        """The first call not answered yet whose id is ``rid``."""
        q = self._unanswered.get(_key(rid))
        while q and self.answered[q[0]]:
            q.popleft()
        return q[0] if q else None

    def with_id(self, rid: Json) -> list[int]:
        return self._by_id.get(_key(rid), [])

    def _front(self, q: deque[int] | None) -> int | None:
        while q and self.executed[q[0]]:
            q.popleft()
        return q[0] if q else None

    def executable(self, x: Execution) -> int | None:
        """The first call not executed yet that ``x`` can be the execution of: the same tool, the same
        arguments (unless either side's are not a recorded object) and, when the span records one, the
        same id."""
        name = _key(x.name)
        if name is None:
            return None
        if x.id is not None:
            want = self._args_key(x)
            for k in self.with_id(x.id):
                c = self.calls[k]
                if not self.executed[k] and _key(c.name) == name and (
                        want is None or self._args[k] is None or self._args[k] == want):
                    return k
            return None
        want = self._args_key(x)
        if want is None:
            return self._front(self._by_name.get(name))
        got = [k for k in (self._front(self._by_args.get((name, want))), self._front(self._by_name_bad.get(name)))
               if k is not None]
        return min(got) if got else None

    @staticmethod
    def _args_key(x: Execution) -> str | None:
        return _key(x.args) if x.args_known else None


def check_items(fmt: str, conv_id: str, items: Sequence[Item], events: int, rules: Mapping[str, tuple[str, ...]], *,
                allow_incomplete: bool = False, step_window: int = 48,
                tools: Mapping[str, core.ToolSchema | None] | None = None, allow_list: bool = True
                ) -> TranscriptVerdict:
    """Walk a conversation's items. ``execution`` items (telemetry) are matched to the current
    proposal's calls; ``tools`` (the recorded tool definitions: name -> schema, None when the schema is
    outside R4's subset) lets an execution of an unknown tool (R3) or with invalid arguments (R4) be
    seen; with ``allow_list`` False the mapping holds only some tools' schemas (R4 only)."""
    bindings: dict[str, _Binding] = {}
    rnd = _Round([])
    pending, answered, outcome = rnd.calls, rnd.answered, rnd.outcome
    executions_seen = 0
    running: dict[str, Execution] = {}  # call id -> its latest execution (R33)
    ran: dict[int, Execution] = {}  # position in the proposal -> its execution (completion order, R32)
    final_at: Item | None = None
    calls_seen = 0
    results_seen = 0
    all_calls: list[Call] = []
    steps: list[str] = []
    n_steps = 0

    def step(text: str) -> None:
        nonlocal n_steps
        n_steps += 1
        steps.append(f"  {n_steps}. {text}")
        if len(steps) > step_window:
            del steps[0]

    def first_unanswered() -> int | None:
        return rnd.first_unanswered()

    def missing(item: Item, why: str) -> None:
        j = first_unanswered()
        if j is None:
            return
        c = pending[j]
        raise _Broken("R11", "result-missing", item, c.index, {"result": {"callId": c.id}}, {"next": item.path},
                      f"Then call {_call_desc(c)} ({c.path}, line {c.line}) gets exactly one result before "
                      f"{why} (R11); but {item.path} (line {item.line}) comes first and it never got one.")

    try:
        for item in items:
            if item.kind == "user":
                missing(item, "the user speaks again")
                rnd = _Round([])
                pending, answered, outcome, final_at = rnd.calls, rnd.answered, rnd.outcome, None
                ran.clear()
                step(f"{item.path} (line {item.line}): the user speaks — a new turn")
            elif item.kind == "final":
                missing(item, "the model answers")
                rnd = _Round([])
                pending, answered, outcome = rnd.calls, rnd.answered, rnd.outcome
                ran.clear()
                final_at = item
                step(f"{item.path} (line {item.line}): the model gives its final answer — every call is answered")
            elif item.kind == "unrecorded":
                # a model call whose input is not recorded: what was sent back for the calls before it is unknown,
                # so they count as answered and nothing is claimed about their results (R11 is not witnessed)
                for j in range(len(pending)):
                    answered[j] = True
                step(f"{item.path} (line {item.line}): not recorded — what was sent back for the calls before this "
                     "model call is unknown")
            elif item.kind == "proposal":
                for c in item.calls:
                    c.index = calls_seen
                    calls_seen += 1
                    all_calls.append(c)
                if final_at is not None:
                    c = item.calls[0]
                    raise _Broken("R28", "call-after-final", item, c.index, {"calls": 0},
                                  {"calls": [x.id for x in item.calls]},
                                  f"Then, once the model has given its final answer ({final_at.path}, line "
                                  f"{final_at.line}), no further call is admitted until the user speaks (R28); but "
                                  f"{item.path} (line {item.line}) proposes {_call_desc(c)}.")
                missing(item, "the model is asked again")
                notes = []
                for c in item.calls:
                    if not isinstance(c.id, str) or core.blank(c.id):
                        c.cls = "malformed"
                        notes.append(f"#{c.index} has no valid id")
                        continue
                    key = _content_key(c)
                    b = bindings.get(c.id)
                    if b is None:
                        bindings[c.id] = _Binding(key, c.index)
                        c.cls = "fresh"
                    elif b.key != key:
                        c.cls = "conflict"
                        notes.append(f"#{c.index} reuses id {c.id!r} of #{b.index} for other content")
                    else:
                        c.cls = "replay"
                        notes.append(f"#{c.index} repeats #{b.index} (same id, same content)")
                rnd = _Round(list(item.calls))
                pending, answered, outcome = rnd.calls, rnd.answered, rnd.outcome
                ran.clear()
                step(f"{item.path} (line {item.line}): the model proposes "
                     + ", ".join(_call_desc(c) for c in item.calls) + (f" [{'; '.join(notes)}]" if notes else ""))
            elif item.kind == "execution":
                x = item.execution
                assert x is not None
                executions_seen += 1
                prev = running.get(x.id) if isinstance(x.id, str) else None
                if prev is not None and prev.end is not None and x.start is not None and x.start + _clock_step(prev, x) < prev.end:
                    c = next((pending[k] for k in rnd.with_id(x.id)), None)
                    raise _Broken("R33", "in-flight-id-executed-twice", item, c.index if c is not None else None,
                                  {"executions in flight": 1}, {"execution": x.path},
                                  f"Then a call whose id {x.id!r} has an execution in flight ({prev.path}, line "
                                  f"{prev.line}) waits for its result, then is a replay, a retry or a conflict: two "
                                  f"executions of one call id never overlap (R33); but {x.path} (line {x.line}) "
                                  "starts another before the first has ended.")
                if isinstance(x.id, str):
                    running[x.id] = x
                j = _check_execution(x, item, rnd, bindings, final_at, tools, allow_list)
                rnd.executed[j] = True
                outcome[j] = x.ok
                ran[j] = x
                c = pending[j]
                how = "succeeded" if x.ok else ("failed" if x.ok is False else "ended")
                step(f"{x.path} (line {x.line}): {_call_desc(c)} executes and {how}")
            else:
                r = item.result
                assert r is not None
                results_seen += 1
                j = rnd.unanswered_with_id(r.id)
                if j is None:
                    twice = next((pending[k] for k in rnd.with_id(r.id) if answered[k]), None)
                    earlier = next((c for c in reversed(all_calls) if _same(c.id, r.id)), None)
                    if twice is not None:
                        raise _Broken("R11", "answered-twice", item, twice.index, {"results": 1},
                                      {"result": r.path},
                                      f"Then call {_call_desc(twice)} gets exactly one result (R11); but "
                                      f"{r.path} (line {r.line}) is a second result for id {r.id!r}.")
                    if earlier is not None:
                        raise _Broken("R11", "result-out-of-turn", item, earlier.index, {"result": None},
                                      {"result": r.path},
                                      f"Then the results of a proposal come before the model is asked again (R11); "
                                      f"but {r.path} (line {r.line}) answers {_call_desc(earlier)} "
                                      f"({earlier.path}, line {earlier.line}) after that.")
                    raise _Broken("R11", "result-without-call", item, None, {"result": None},
                                  {"result": r.path, "callId": r.id},
                                  f"Then every result answers a call (R11); but {r.path} (line {r.line}) answers id "
                                  f"{compact(r.id, 30)}, which no call proposed.")
                first = first_unanswered()
                assert first is not None
                c = pending[j]
                if j != first:
                    f = pending[first]
                    xc, xf = ran.get(j), ran.get(first)
                    in_time = xc is not None and xc.end is not None and (xf is None or xf.end is None or xc.end < xf.end)
                    rule, kind = ("R32", "answers-in-completion-order") if in_time else ("R11", "results-out-of-order")
                    when = (f": {_call_desc(c)}'s execution ({xc.path}, line {xc.line}) completed first, but answers "
                            "are committed in request order whatever the completion order" if in_time and xc else "")
                    raise _Broken(rule, kind, item, f.index,
                                  {"next": {"callId": f.id, "index": f.index}}, {"result": {"callId": r.id,
                                                                                            "index": c.index}},
                                  f"Then results come in the order of the calls, so {_call_desc(f)} is answered next "
                                  f"({rule}{when}); but {r.path} (line {r.line}) answers {_call_desc(c)} first.")
                answered[j] = True
                err = _is_error(r) if r.is_error is not None or outcome[j] is None else not outcome[j]
                b = bindings.get(c.id) if c.cls != "malformed" else None
                how = "an error" + (f" {_error_code(r)}" if _error_code(r) else "") if err else "a success"
                if c.cls == "malformed" and not err:
                    raise _Broken("R2", "invalid-call-answered-success", item, c.index, {"result": "an error "
                                                                                         "(INVALID_CALL)"},
                                  {"result": r.content},
                                  f"Then call {_call_desc(c)} has no valid id (a non-blank string), so it is answered "
                                  f"INVALID_CALL and never executes (R2); but {r.path} (line {r.line}) answers it as a "
                                  f"success ({compact(r.content, 40)}).")
                if c.cls == "conflict" and not err:
                    assert b is not None
                    reuse = b.has_success and _same(b.success, r.content)
                    raise _Broken("R7", "conflict-reused" if reuse else "conflict-answered", item, c.index,
                                  {"result": "an error (ID_CONFLICT)"}, {"result": r.content},
                                  f"Then call {_call_desc(c)} is refused with ID_CONFLICT: its id is bound to other "
                                  f"content by #{b.index}, and it never gets a result of its own or the stored one "
                                  f"(R7); but {r.path} (line {r.line}) answers it "
                                  + ("with the stored result of #" + str(b.index) if reuse else "as a success")
                                  + f" ({compact(r.content, 40)}).")
                if c.cls == "replay" and b is not None and b.has_success and not err and not _same(b.success,
                                                                                                  r.content):
                    raise _Broken("R6", "replay-changed-result", item, c.index, {"result": b.success},
                                  {"result": r.content},
                                  f"Then call {_call_desc(c)} repeats #{b.index} (same id, same content) and is "
                                  f"answered with exactly its stored result {compact(b.success, 40)} (R6); but "
                                  f"{r.path} (line {r.line}) answers {compact(r.content, 40)}.")
                if b is not None and not err and not b.has_success and c.cls != "conflict":
                    b.success, b.has_success = r.content, True
                step(f"{r.path} (line {r.line}): result for {_call_desc(c)}, {how} — the next call in order")
        if not allow_incomplete and pending and first_unanswered() is not None:
            last = items[-1]
            j = first_unanswered()
            assert j is not None
            c = pending[j]
            raise _Broken("R11", "result-missing", last, c.index, {"result": {"callId": c.id}}, {"result": None},
                          f"Then call {_call_desc(c)} ({c.path}, line {c.line}) gets exactly one result (R11); but the "
                          "conversation ends without it.")
    except _Broken as b:
        expl = [f"Let a conversation {conv_id!r} ({fmt}, {events} entries)"
                + (" in which the model proposes:" if all_calls else ".")]
        for c in all_calls[:16]:
            expl.append(f"  {_call_desc(c)} ({c.path}, line {c.line})")
        if len(all_calls) > 16:
            expl.append(f"  … ({len(all_calls) - 16} more calls)")
        if steps:
            expl.append("Each step of the conversation, and why the spec allowed it:")
            if n_steps > len(steps):
                expl.append(f"  … {n_steps - len(steps)} earlier step(s) conformed")
            expl += steps
        expl.append(b.then)
        cited = rules.get(b.rule, ())
        inv = {"R11": "INV-ONE-ANSWER-IN-ORDER", "R7": "INV-CONFLICT-NO-REUSE", "R6": "INV-REPLAY-NO-EXEC",
               "R28": "INV-NO-CALL-AFTER-FINAL", "R2": "INV-CHECKED-BEFORE-EXEC", "R3": "INV-CHECKED-BEFORE-EXEC",
               "R4": "INV-CHECKED-BEFORE-EXEC", "R12": "INV-EXEC-ACCOUNTING"}.get(b.rule)
        v = Violation(rule=b.rule, kind=b.kind, index=b.index, expected=b.expected, observed=b.observed,
                      explanation="\n".join(expl), invariant=inv if inv in cited else (cited[0] if cited else None),
                      invariants=(), transition=None, checked_by=cited)
        return TranscriptVerdict(v, b.item.pos, b.item.path, b.item.line, events, calls_seen, results_seen, n_steps,
                                 executions_seen)
    return TranscriptVerdict(None, None, None, None, events, calls_seen, results_seen, n_steps, executions_seen)


def _check_execution(x: Execution, item: Item, rnd: _Round, bindings: dict[str, _Binding], final_at: Item | None,
                     tools: Mapping[str, core.ToolSchema | None] | None, allow_list: bool) -> int:
    """Match an execution to the proposal's first call it can belong to (by id when the span records
    one, else by name and arguments) and check that the spec lets that call execute; returns the call's
    position in the proposal."""
    where = f"{x.path} (line {x.line})"
    what = f"{x.name if isinstance(x.name, str) else '<no name>'}" + (
        f"({compact(x.args, 40)})" if x.args_known else "")
    if final_at is not None:
        raise _Broken("R28", "executed-after-final", item, None, {"executions": 0}, {"execution": x.path},
                      f"Then, once the model has given its final answer ({final_at.path}, line {final_at.line}), no "
                      f"tool executes (R28); but {where} executes {what}.")
    pending, executed = rnd.calls, rnd.executed
    k = rnd.executable(x)
    if k is None:
        done = [k for k, c in enumerate(pending) if executed[k] and c.name == x.name
                and (x.id is None or _same(c.id, x.id))]
        if done:
            c = pending[done[-1]]
            raise _Broken("R12", "executed-twice", item, c.index, {"executions": 1}, {"execution": x.path},
                          f"Then call {_call_desc(c)} executes at most once (R12: each request is one execution); "
                          f"but {where} executes it again.")
        ids = f" with id {x.id!r}" if x.id is not None else ""
        raise _Broken("R12", "execution-without-request", item, None, {"execution": None}, {"execution": x.path},
                      f"Then a tool executes only for a request of the current proposal (R12); but {where} executes "
                      f"{what}{ids}, which no call of the proposal asks for.")
    c = pending[k]
    if c.cls == "malformed":
        raise _Broken("R2", "executed-despite-invalid-call", item, c.index, {"answer": "INVALID_CALL"},
                      {"execution": x.path},
                      f"Then call {_call_desc(c)} is answered INVALID_CALL and never executes: its id is not a "
                      f"non-blank string (R2); but {where} executes it.")
    if tools is not None and isinstance(c.name, str):
        if c.name not in tools and allow_list:
            raise _Broken("R3", "executed-despite-unknown-tool", item, c.index, {"answer": "UNKNOWN_TOOL"},
                          {"execution": x.path},
                          f"Then call {_call_desc(c)} is answered UNKNOWN_TOOL and never executes: the tools recorded "
                          f"for the run are {', '.join(sorted(tools)) or 'none'} (R3); but {where} executes it.")
        schema = tools.get(c.name)
        if schema is not None and (not c.args_ok or not core.arguments_valid(schema, c.args)):
            raise _Broken("R4", "executed-despite-invalid-argument", item, c.index, {"answer": "INVALID_ARGUMENT"},
                          {"execution": x.path},
                          f"Then call {_call_desc(c)} is answered INVALID_ARGUMENT and never executes: its arguments "
                          f"do not satisfy the recorded input schema of {c.name!r} {compact(schema.to_json(), 80)} "
                          f"(R4); but {where} executes it.")
    b = bindings.get(c.id) if isinstance(c.id, str) else None
    if c.cls == "conflict" and b is not None:
        raise _Broken("R7", "executed-despite-id-conflict", item, c.index, {"answer": "ID_CONFLICT"},
                      {"execution": x.path},
                      f"Then call {_call_desc(c)} is answered ID_CONFLICT and never executes: id {c.id!r} is bound to "
                      f"other content by #{b.index} (R7); but {where} executes it.")
    if c.cls == "replay" and b is not None and b.executed_ok:
        raise _Broken("R6", "replay-reexecuted", item, c.index, {"answer": "the stored result of #" + str(b.index)},
                      {"execution": x.path},
                      f"Then call {_call_desc(c)} repeats #{b.index} (same id, same content), whose execution "
                      f"succeeded: it is answered with the stored result and nothing executes (R6); but {where} "
                      "executes it again.")
    if b is not None and x.ok and c.cls in ("fresh", "replay"):
        b.executed_ok = True
    return k


def judge_conversation(c: Conversation, rules: Mapping[str, tuple[str, ...]], all_rules: Sequence[str], *,
                       allow_incomplete: bool = False) -> Judged:
    """The verdict on a transcript's or a history's conversation (read: ``c.items`` is not None)."""
    items = c.items
    assert items is not None
    last = max([c.line] + [it.line for it in items])
    tv = check_items(c.format, c.id, items, c.entries, rules, allow_incomplete=allow_incomplete)
    w = WITNESSED[c.format]
    checks = {"verified": [r for r, how in w.items() if how == "verified"],
              "assumed": [r for r, how in w.items() if how == "assumed"],
              "notWitnessed": [r for r in all_rules if r not in w and r != "R0"]}
    if checks["assumed"]:
        checks["why"] = {r: ASSUMPTION for r in checks["assumed"]}
    summ = {"calls": tv.calls, "results": tv.results}
    if tv.violation is None:
        return Judged(c.id, c.format, "conforms", tv.events, (c.line, last), summ, checks)
    return Judged(c.id, c.format, "violates", tv.events, (c.line, last), summ, checks, tv.violation,
                  {"event": tv.item_pos, "path": tv.path, "line": tv.line}, {"events": tv.item_pos, "steps": tv.steps})


_MS = 1_000_000


def _clock_step(a: Execution, b: Execution) -> int:
    """How coarse the two executions' start times are (ns): 1 ms when both are whole milliseconds (some
    instrumentations take a span's start from ``Date.now()`` and its end from a finer clock), else 0. A start read
    that way may be up to 1 ms early, so an overlap smaller than that is no evidence of two executions in flight
    (R33): the AI SDK's spans of one id in two rounds, the second started within the first's millisecond, would
    otherwise read as overlapping."""
    if a.start is not None and b.start is not None and a.start % _MS == 0 and b.start % _MS == 0:
        return _MS
    return 0
