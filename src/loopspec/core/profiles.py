"""Profiles: the reference behaviour under a framework's documented choices (SPEC.md section 4).

Pure. A :class:`Params` holds one value for every parameter of ``spec/loop.toml``'s ``[[parameter]]``
table (the strict default unless a profile chooses otherwise). Under the strict default the
reference is the core's own :func:`loopspec.core.rules.drive`, untouched; under any other choice it is
:func:`drive`, which sequences the same core effects (``decide``, ``answer_error``, ``bind_id``, …)
with the parameters applied at the points the spec names:

* :class:`Parser` — what the framework's message parser does to each proposal before anything is
  checked (``non_object_arguments = dropped``, ``duplicate_ids = collapse-identical``,
  ``id_binding = drop-repeats``, ``empty_proposal = final-answer``); the judge applies it to the
  trace's replies too, so request indices stay aligned;
* :func:`proposal_refusal` — the proposal-level checks (a refused proposal: nothing of it becomes a
  request), and ``rounds_exhausted`` (the framework's own final text at the last round);
* ``call_checks = upfront`` (a violation that ends the run does so before the proposal executes);
* the per-call checks (well-formedness, schema, binding, budget), escalation, and
  ``tool_execution = concurrent`` (a failure does not stop the proposal's other executions) and
  ``concurrent-keep-finished`` (as concurrent, and the answers finished before the failure are kept).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..spec.loader import Profile, Spec
from . import rules as core
from .rules import CODE_TABLE, Answer, Outcome, RunState, ToolSchema, canonical_json

__all__ = ["JUDGE_ONLY", "Params", "Parser", "arguments_valid", "drive", "params_for", "parse_replies",
           "proposal_refusal", "set_aside", "transform_proposal"]

Json = Any

#: Parameters that change what the judge accepts, never the reference run: ``batch_rejection`` (R47) lets a
#: rejection of the whole batch stand for the aborted outcome the reference computes.
JUDGE_ONLY = frozenset({"batch_rejection"})


@dataclass(frozen=True)
class Params:
    """One value per profile parameter, by parameter id."""

    values: Mapping[str, str]
    profile: str = "strict"
    texts: Mapping[str, str] = field(default_factory=dict)  # parameter -> the framework's fixed text

    def __getitem__(self, key: str) -> str:
        return self.values[key]

    def strict(self, spec: Spec) -> bool:
        return all(self.values[p.id] == p.default for p in spec.parameters)

    def reference_strict(self, spec: Spec) -> bool:
        """Is the reference run the strict one (every parameter but the judge-only ones at its default)?"""
        return all(self.values[p.id] == p.default for p in spec.parameters if p.id not in JUDGE_ONLY)

    def with_values(self, spec: Spec, **values: str) -> Params:
        """These parameters set (``batch_rejection="whole-batch"``), the others as they are; each value must be
        one of its parameter's."""
        for pid, v in values.items():
            if v not in spec.parameter(pid).values:
                raise ValueError(f"{pid}: {v!r} is not one of {', '.join(spec.parameter(pid).values)}")
        changed = ",".join(f"{k}={v}" for k, v in sorted(values.items()))
        return Params({**self.values, **values}, f"{self.profile}+{changed}", dict(self.texts))

    def differs(self, spec: Spec) -> list[str]:
        """The parameters set to something else than the strict default."""
        return [p.id for p in spec.parameters if self.values[p.id] != p.default]

    def only(self, spec: Spec, keep: Sequence[str]) -> Params:
        """These parameters as chosen, every other one at the strict default."""
        return Params({p.id: (self.values[p.id] if p.id in keep else p.default) for p in spec.parameters},
                      f"{self.profile}[{','.join(keep)}]", {k: v for k, v in self.texts.items() if k in keep})


def params_for(spec: Spec, profile: Profile | str | None) -> Params:
    if profile is None:
        profile = "strict"
    prof = spec.profile(profile) if isinstance(profile, str) else profile
    texts = {c.parameter: c.text for c in prof.choices if c.text is not None}
    return Params({p.id: prof.value(p.id, spec) for p in spec.parameters}, prof.id, texts)


# --------------------------------------------------------------------------------------------
# The message parser and the proposal-level checks
# --------------------------------------------------------------------------------------------


def _content(call: Mapping[str, Json], p: Params) -> str | None:
    """A call's content as the framework's parser compares it (``content_equality``)."""
    if p["content_equality"] == "as-written":
        try:
            return json.dumps([call.get("name"), call.get("arguments")], sort_keys=True, ensure_ascii=False)
        except (TypeError, ValueError):
            return None
    return canonical_json([call.get("name"), call.get("arguments")])


def _binds(call: Json, tools: Collection[str]) -> bool:
    """Does this call of an accepted proposal bind its id under ``id_binding = drop-repeats``?"""
    return (isinstance(call, dict) and isinstance(call.get("id"), str) and call["id"] != ""
            and call.get("name") in tools)


@dataclass
class Parser:
    """The framework's message parser over one run: what becomes of each proposal before any check.

    ``bound`` holds the ids bound by earlier proposals (``id_binding = drop-repeats``): id -> content."""

    p: Params
    tools: Collection[str]
    finals: bool = True  # turn an empty proposal into the final answer (empty_proposal, loops only)
    bound: dict[str, str | None] = field(default_factory=dict)

    kept: list[int] = field(default_factory=list)  # positions of the calls the last reply handed on

    def _objects(self, pairs: list[tuple[int, Json]]) -> list[tuple[int, Json]]:
        """Stage 1, the message parser proper: calls whose arguments are not an object may be set aside
        (``dropped``), or missing arguments read as {} (``validated``)."""
        if self.p["non_object_arguments"] == "validated":
            return [(k, {**c, "arguments": {}} if isinstance(c, dict) and "arguments" not in c else c)
                    for k, c in pairs]
        if self.p["non_object_arguments"] != "dropped":
            return pairs
        return [(k, c) for k, c in pairs if not (isinstance(c, dict) and not isinstance(c.get("arguments"), dict))]

    def _repeats(self, pairs: list[tuple[int, Json]]) -> list[tuple[int, Json]]:
        """Stage 2, before any check: repeated invocations may be coalesced (duplicate_ids, id_binding)."""
        out: list[tuple[int, Json]] = []
        for k, c in pairs:
            cid = c.get("id") if isinstance(c, dict) else None
            if isinstance(c, dict) and isinstance(cid, str):
                if self.p["duplicate_ids"] == "collapse-identical" and any(
                        isinstance(d, dict) and d.get("id") == cid and _content(d, self.p) == _content(c, self.p)
                        for _, d in out):
                    continue
                if (self.p["id_binding"] == "drop-repeats" and cid in self.bound
                        and self.bound[cid] == _content(c, self.p)):
                    continue
            out.append((k, c))
        return out

    def calls(self, calls: Sequence[Json]) -> list[Json]:
        pairs = self._repeats(self._objects(list(enumerate(calls))))
        self.kept = [k for k, _ in pairs]
        return [c for _, c in pairs]

    def reply(self, reply: Json) -> Json:
        """One model reply as the framework hands it on; the ids of its calls are then bound. A reply
        with no calls after stage 1 is the final answer under ``empty_proposal = final-answer``; one that
        stage 2 empties is a round without requests."""
        self.kept = []
        if not (isinstance(reply, dict) and set(reply) == {"calls"} and isinstance(reply["calls"], list)):
            return reply
        objects = self._objects(list(enumerate(reply["calls"])))
        if not objects and self.finals and self.p["empty_proposal"] == "final-answer":
            return {"final": ""}
        pairs = self._repeats(objects)
        self.kept = [k for k, _ in pairs]
        calls = [c for _, c in pairs]
        if self.p["id_binding"] == "drop-repeats":
            for c in calls:
                if _binds(c, self.tools) and c["id"] not in self.bound:
                    self.bound[c["id"]] = _content(c, self.p)
        return {"calls": calls}


def set_aside(raw: Sequence[Json], kept: Sequence[int]) -> list[bool]:
    """For each call of a proposal: did the framework's parser set it aside (not a request)?"""
    keep = set(kept)
    return [k not in keep for k in range(len(raw))]


def transform_proposal(calls: Sequence[Json], p: Params) -> list[Json]:
    """One proposal as the framework's message parser hands it on, with no earlier proposal (a batch)."""
    return Parser(p, ()).calls(calls)


def parse_replies(replies: Sequence[Json], p: Params, tools: Collection[str]) -> list[tuple[Json, list[int]]]:
    """The calls of every reply of a run as the framework's parser hands them on (earlier proposals bind
    ids), for aligning request indices, each with the positions it kept; an empty proposal stays one
    (the driver decides what it means)."""
    parser = Parser(p, tools, finals=False)
    out = []
    for r in replies:
        parsed = parser.reply(r)
        out.append((parsed, list(parser.kept)))
    return out


def proposal_refusal(s: RunState, calls: Sequence[Json], p: Params,
                     bound: Mapping[str, str | None] | None = None) -> str | None:
    """The code of the proposal-level check that refuses ``calls`` (None when none does): the budget
    first (measured: pydantic-ai checks tool_calls_limit before the uniqueness of ids), then the ids one
    call at a time in proposal order (as the Agents SDK's single pass does), then an unknown tool.
    ``bound``: the ids bound by earlier proposals (``id_binding = drop-repeats``), id -> content."""
    if p["budget"] == "per-proposal" and calls:
        limit = s.config.limits.max_executions
        if limit is not None and _budget_used(s, p) + len(calls) > limit:
            return "BUDGET_EXHAUSTED"
    seen: set[str] = set()
    for c in calls:
        cid = c.get("id") if isinstance(c, dict) else None
        if not isinstance(cid, str):
            continue
        if p["blank_ids"] == "refuse-proposal-if-empty" and cid == "":
            return "INVALID_CALL"
        if p["duplicate_ids"] in ("refuse-proposal", "collapse-identical") and cid in seen:
            return "ID_CONFLICT"  # collapse-identical: the parser already dropped the identical repeats
        if (p["id_binding"] == "drop-repeats" and bound is not None and cid in bound
                and bound[cid] != _content(c, p)):
            return "ID_CONFLICT"
        seen.add(cid)
    if p["unknown_tool"] == "refuse-proposal" and any(
            isinstance(c, dict) and isinstance(c.get("name"), str) and c["name"] not in s.config.schemas for c in calls):
        return "UNKNOWN_TOOL"
    return None


def _budget_used(s: RunState, p: Params) -> int:
    if p["budget_counts"] == "successes":
        return sum(1 for e in s.executions if e.outcome is not None and e.outcome.ok)
    return s.executed


# --------------------------------------------------------------------------------------------
# Per-call checks
# --------------------------------------------------------------------------------------------

_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def _lax_type_ok(typ: str, value: Json) -> bool:
    if core._type_ok(typ, value):
        return True
    if typ == "integer":
        if isinstance(value, bool):
            return True
        if isinstance(value, str):
            try:
                int(value.strip())
            except ValueError:
                return False
            return True
        return False
    if typ == "boolean":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value in (0, 1)
        return isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE
    return False


def arguments_valid(schema: ToolSchema, arguments: Mapping[str, Json], p: Params) -> bool:
    """R4 under the profile's ``argument_types`` and ``additional_properties``."""
    for r in schema.required:
        if r not in arguments:
            return False
    lax = p["argument_types"] == "lax"
    for key, value in arguments.items():
        typ = schema.type_of(key)
        if typ is None:
            if not schema.additional and p["additional_properties"] == "enforced":
                return False
        elif not (_lax_type_ok(typ, value) if lax else core._type_ok(typ, value)):
            return False
    return True


def _id_ok(call_id: object, p: Params) -> bool:
    if p["blank_ids"] == "invalid-call":
        return isinstance(call_id, str) and not core.blank(call_id)
    if p["blank_ids"] == "accepted":
        return call_id is None or isinstance(call_id, str)
    return isinstance(call_id, str)


def _arguments(call: Json, p: Params) -> object:
    """The call's arguments as the framework validates them: under ``non_object_arguments = validated``
    missing arguments count as {} (a present ``null`` does not)."""
    if not isinstance(call, dict):
        return None
    if p["non_object_arguments"] == "validated" and "arguments" not in call:
        return {}
    return call.get("arguments")


def _gate(s: RunState, p: Params) -> tuple[str, str | None, bool]:
    r = s.current
    admitted = core.within(r.index, s.config.limits.max_requests)
    assert s.response is not None
    args = _arguments(s.response[s.cursor], p)
    validated = p["non_object_arguments"] == "validated"
    wf = _id_ok(r.call_id, p) and isinstance(r.name, str) and (isinstance(args, dict) or validated)
    listed = wf and r.name in s.config.schemas
    valid = listed and isinstance(args, dict) and arguments_valid(s.config.schemas[r.name], args, p)  # type: ignore[index]
    binding = "fresh"
    if valid and isinstance(r.call_id, str) and p["id_binding"] == "run":
        binding = s.binding_class()
    budget_left = True
    if p["budget"] == "per-call":
        budget_left = core.within(_budget_used(s, p), s.config.limits.max_executions)
    tool_left = valid and core._tool_budget_left(s)
    action, code = core.decide(admitted, wf, listed, valid, binding, True, core._deadline_passed(s), budget_left,
                               tool_left)
    return action, code, admitted and valid and binding == "fresh"


def _escalates(code: str, s: RunState, p: Params) -> bool:
    if code == "UNKNOWN_TOOL" and p["unknown_tool"] == "error-result":
        return False
    if code == "INVALID_ARGUMENT" and p["invalid_arguments"] == "error-result":
        return False
    return core.escalates(core.code_kind(code), s.config.mode, s.config.on_limit)


def _bind(s: RunState, p: Params) -> None:
    r = s.current
    if not isinstance(r.call_id, str):
        return
    if p["id_binding"] == "none":
        s.bindings.pop(r.call_id, None)
    if r.call_id not in s.bindings:
        assert s.response is not None
        args = _arguments(s.response[s.cursor], p)  # missing arguments count as {} (validated)
        assert isinstance(r.name, str) and isinstance(args, dict)
        s.bindings[r.call_id] = core.Binding(r.name, core.content_key(r.name, args), r.index)


def _store_success(s: RunState) -> None:
    r = s.current
    if isinstance(r.call_id, str):
        core.store_success(s)
        return
    assert s.outcome is not None
    s.answers.append(Answer(r.index, r.round, None, "ok", output=s.outcome.output, executed=True))


# --------------------------------------------------------------------------------------------
# The profiled reference driver
# --------------------------------------------------------------------------------------------


def drive(s: RunState, model: Callable[[RunState], Json], outcome_for: Callable[[RunState, core.Execution], Outcome],
          p: Params, spec: Spec) -> RunState:
    """Run ``s`` to its terminal state under ``p`` (the strict default: exactly :func:`loopspec.core.rules.drive`)."""
    if p.reference_strict(spec):
        return core.drive(s, model, outcome_for)

    def finish(reason: str, escalated: bool = False) -> None:
        core.terminate(s, reason, core._STATUS_OF[reason], escalated=escalated)

    parser = Parser(p, tuple(s.config.schemas), finals=not s.config.batch)
    while s.status is None:
        if core._deadline_passed(s):
            finish("DEADLINE")
            break
        if not core.within(s.model_requests, s.config.limits.max_rounds):
            finish("MAX_ROUNDS")
            break
        if s.input_exhausted:
            finish("END_OF_BATCH")
            break
        bound = dict(parser.bound)  # the ids earlier proposals bound (drop-repeats)
        reply = parser.reply(model(s))
        last_round = s.config.limits.max_rounds is not None and s.model_requests + 1 >= s.config.limits.max_rounds
        if (last_round and not s.config.batch and p["rounds_exhausted"] == "final-text" and isinstance(reply, dict)
                and set(reply) == {"calls"} and isinstance(reply["calls"], list) and reply["calls"]):
            reply = {"final": p.texts["rounds_exhausted"]}  # the framework's own answer replaces the calls
        core.receive_response(s, reply)
        if s.model_failed:
            finish("MODEL_ERROR")
            break
        if s.final is not None:
            finish("FINAL_ANSWER")
            break
        assert s.response is not None
        refused = proposal_refusal(s, s.response, p, bound)
        if refused is not None:
            if refused == "BUDGET_EXHAUSTED" or s.config.batch:
                s.aborted = (len(s.requests), refused)
                finish(CODE_TABLE[refused][2])
            else:
                finish("MODEL_ERROR")
            break
        early = _upfront_violation(s, s.response, p) if p["call_checks"] == "upfront" else None
        if early is not None:  # the proposal never starts: aborted at its first violating request
            s.aborted = (len(s.requests) + early[0], early[1])
            finish(CODE_TABLE[early[1]][2])
            break
        _run_proposal(s, outcome_for, p, finish)
        if s.status is None:
            core.end_round(s)
    return s


def _upfront_violation(s: RunState, calls: Sequence[Json], p: Params) -> tuple[int, str] | None:
    """``call_checks = upfront``: the position and code of the first call of the proposal whose
    structural checks (R2-R4) fail with a violation that ends the run, or None."""
    for j, c in enumerate(calls):
        if not isinstance(c, dict):
            code: str | None = "INVALID_CALL"
        else:
            args = _arguments(c, p)
            validated = p["non_object_arguments"] == "validated"
            code = None
            if not (_id_ok(c.get("id"), p) and isinstance(c.get("name"), str) and (isinstance(args, dict) or validated)):
                code = "INVALID_CALL"
            elif c["name"] not in s.config.schemas:
                code = "UNKNOWN_TOOL"
            elif not (isinstance(args, dict) and arguments_valid(s.config.schemas[c["name"]], args, p)):
                code = "INVALID_ARGUMENT"
        if code is not None and _escalates(code, s, p):
            return j, code
    return None


def _run_proposal(s: RunState, outcome_for: Callable[[RunState, core.Execution], Outcome], p: Params,
                  finish: Callable[..., None]) -> None:
    """The requests of the current proposal, in order (R1 per request). Under ``tool_execution =
    concurrent`` a failure that ends the run does not stop the proposal's other executions, and the
    proposal's answers are lost with the run; under ``concurrent-keep-finished`` the answers of the
    requests before the failing one (finished before it) are kept."""
    assert s.response is not None
    first_answer = len(s.answers)
    stopped: tuple[int, str] | None = None
    while s.cursor < len(s.response):
        core.admit_pending(s)
        action, code, binds = _gate(s, p)
        if stopped is not None and action != core.EXECUTE:
            core.next_item(s)  # a concurrent sibling that does not execute: its answer is lost anyway
            continue
        if binds:
            _bind(s, p)  # R5: a fresh id that passed checks 1-5 is bound, whatever happens next
        if action == core.REJECT:
            assert code is not None
            core.answer_error(s, code)
        elif action == core.REPLAY:
            core.answer_replay(s)
        else:
            ex = core.begin_execution(s)
            core.record_outcome(s, outcome_for(s, ex))
            while core._retry_allowed(s):
                core.begin_retry(s)
                core.record_outcome(s, outcome_for(s, ex))
            if s.outcome is not None and s.outcome.ok:
                _store_success(s)
            else:
                core.answer_failure(s)
        last = s.answers[-1].code
        if stopped is None and last is not None and _escalates(last, s, p):
            if p["tool_execution"] != "sequential" and core.code_kind(last) == "failure":
                stopped = (s.answers[-1].index, last)
            else:
                finish(CODE_TABLE[last][2], escalated=True)
                return
        core.next_item(s)
    if stopped is not None:
        if p["tool_execution"] == "concurrent-keep-finished":
            first_answer = next(k for k, a in enumerate(s.answers) if a.index == stopped[0])
        del s.answers[first_answer:]
        s.aborted = stopped
        finish(CODE_TABLE[stopped[1]][2])
