"""Profiles: the reference behaviour under a framework's documented choices (SPEC.md section 4).

Pure. A :class:`Params` holds one value for every parameter of ``spec/loop.toml``'s ``[[parameter]]``
table (the strict default unless a profile chooses otherwise). Under the strict default the
reference is the core's own :func:`loopspec._core.drive`, untouched; under any other choice it is
:func:`drive`, which sequences the same core effects (``decide``, ``answer_error``, ``bind_id``, …)
with the parameters applied at the points the spec names:

* :func:`transform_proposal` — what the framework's message parser does to a proposal before
  anything is checked (``non_object_arguments = dropped``, ``duplicate_ids = collapse-identical``);
  the judge applies it to the trace's calls too, so indices stay aligned;
* :func:`proposal_refusal` — the proposal-level checks (a refused proposal: nothing of it becomes a
  request);
* the per-call checks (well-formedness, schema, binding, budget) and escalation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import _core as core
from ._core import CODE_TABLE, Answer, Outcome, RunState, ToolSchema, canonical_json
from ._spec import Profile, Spec

__all__ = ["Params", "arguments_valid", "drive", "params_for", "proposal_refusal", "transform_proposal"]

Json = Any


@dataclass(frozen=True)
class Params:
    """One value per profile parameter, by parameter id."""

    values: Mapping[str, str]
    profile: str = "strict"

    def __getitem__(self, key: str) -> str:
        return self.values[key]

    def strict(self, spec: Spec) -> bool:
        return all(self.values[p.id] == p.default for p in spec.parameters)

    def differs(self, spec: Spec) -> list[str]:
        """The parameters set to something else than the strict default."""
        return [p.id for p in spec.parameters if self.values[p.id] != p.default]

    def only(self, spec: Spec, keep: Sequence[str]) -> Params:
        """These parameters as chosen, every other one at the strict default."""
        return Params({p.id: (self.values[p.id] if p.id in keep else p.default) for p in spec.parameters},
                      f"{self.profile}[{','.join(keep)}]")


def params_for(spec: Spec, profile: Profile | str | None) -> Params:
    if profile is None:
        profile = "strict"
    prof = spec.profile(profile) if isinstance(profile, str) else profile
    return Params({p.id: prof.value(p.id, spec) for p in spec.parameters}, prof.id)


# --------------------------------------------------------------------------------------------
# The message parser and the proposal-level checks
# --------------------------------------------------------------------------------------------


def _content(call: Mapping[str, Json]) -> str | None:
    return canonical_json([call.get("name"), call.get("arguments")])


def transform_proposal(calls: Sequence[Json], p: Params) -> list[Json]:
    """The proposal as the framework's message parser hands it on: calls set aside are not requests."""
    out: list[Json] = []
    for c in calls:
        if p["non_object_arguments"] == "dropped" and isinstance(c, dict) and not isinstance(c.get("arguments"), dict):
            continue
        if p["duplicate_ids"] == "collapse-identical" and isinstance(c, dict) and isinstance(c.get("id"), str) and any(
                isinstance(d, dict) and d.get("id") == c["id"] and _content(d) == _content(c) for d in out):
            continue
        out.append(c)
    return out


def proposal_refusal(s: RunState, calls: Sequence[Json], p: Params) -> str | None:
    """The code of the proposal-level check that refuses ``calls`` (None when none does). The budget is
    checked first (measured: pydantic-ai checks tool_calls_limit before the uniqueness of ids)."""
    if p["budget"] == "per-proposal" and calls:
        limit = s.config.limits.max_executions
        if limit is not None and _budget_used(s, p) + len(calls) > limit:
            return "BUDGET_EXHAUSTED"
    if p["blank_ids"] == "refuse-proposal-if-empty" and any(isinstance(c, dict) and c.get("id") == "" for c in calls):
        return "INVALID_CALL"
    if p["duplicate_ids"] in ("refuse-proposal", "collapse-identical"):
        ids = [c.get("id") for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]
        if len(ids) != len(set(ids)):
            return "ID_CONFLICT"
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


def _arguments(args: object, p: Params) -> object:
    if p["non_object_arguments"] == "validated" and args is None:
        return {}
    return args


def _gate(s: RunState, p: Params) -> tuple[str, str | None, bool]:
    r = s.current
    admitted = core.within(r.index, s.config.limits.max_requests)
    args = _arguments(r.arguments, p)
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
        core.bind_id(s)


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
    """Run ``s`` to its terminal state under ``p`` (the strict default: exactly :func:`loopspec._core.drive`)."""
    if p.strict(spec):
        return core.drive(s, model, outcome_for)

    def finish(reason: str, escalated: bool = False) -> None:
        core.terminate(s, reason, core._STATUS_OF[reason], escalated=escalated)

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
        reply = model(s)
        if isinstance(reply, dict) and set(reply) == {"calls"} and isinstance(reply["calls"], list):
            reply = {"calls": transform_proposal(reply["calls"], p)}
        core.receive_response(s, reply)
        if s.model_failed:
            finish("MODEL_ERROR")
            break
        if s.final is not None:
            finish("FINAL_ANSWER")
            break
        assert s.response is not None
        refused = proposal_refusal(s, s.response, p)
        if refused is not None:
            if refused == "BUDGET_EXHAUSTED" or s.config.batch:
                s.aborted = (len(s.requests), refused)
                finish(CODE_TABLE[refused][2])
            else:
                finish("MODEL_ERROR")
            break
        while s.cursor < len(s.response):
            core.admit_pending(s)
            action, code, binds = _gate(s, p)
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
            if last is not None and _escalates(last, s, p):
                finish(CODE_TABLE[last][2], escalated=True)
                break
            core.next_item(s)
        if s.status is None:
            core.end_round(s)
    return s
