"""The pure decision core of loopspec: no I/O, no clock, no randomness.

Everything here takes plain values and returns plain values (or updates a :class:`RunState`
in place, deterministically). The reference engine drives these functions from a
``transitions`` machine built from ``spec/loop.toml``; the model checker, the fuzzer's judge and
the conformance oracle drive the same functions directly. CrossHair checks the contracts written
in the docstrings (``pre:`` / ``post:``) symbolically.

Names of guards, effects and invariants match the ids in ``loop.toml``; the engine refuses to
build when the two disagree (see :func:`check_against_spec`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "CODE_TABLE",
    "FAILURE_CATEGORIES",
    "GUARDS",
    "HINT_DEFAULTS",
    "INVARIANTS",
    "OVERLAP_POLICIES",
    "Answer",
    "Binding",
    "Execution",
    "Limits",
    "Outcome",
    "RunConfig",
    "RunState",
    "ToolDefinitionError",
    "ToolSchema",
    "arguments_valid",
    "canonical_json",
    "classify_binding",
    "decide",
    "in_flight",
    "overlaps",
    "parse_schema",
    "violated_invariants",
    "well_formed",
]

Json = Any

# --------------------------------------------------------------------------------------------
# Codes (validated against loop.toml by check_against_spec and a unit test)
# --------------------------------------------------------------------------------------------

#: code -> (kind, next_action, stop_reason, safe message)
CODE_TABLE: Final[Mapping[str, tuple[str, str, str, str]]] = {
    "REQUEST_LIMIT": ("limit", "STOP", "MAX_REQUESTS", "The run has reached its limit on tool requests."),
    "INVALID_CALL": ("violation", "FIX_INPUT", "INVALID_CALL", "The call is malformed: it needs a non-blank string id, a tool name and an arguments object."),
    "UNKNOWN_TOOL": ("violation", "FIX_INPUT", "UNKNOWN_TOOL", "No tool of that name is available."),
    "INVALID_ARGUMENT": ("violation", "FIX_INPUT", "INVALID_ARGUMENT", "The arguments do not match the tool's input schema."),
    "ID_CONFLICT": ("violation", "FIX_INPUT", "ID_CONFLICT", "This call id was already used for a different request; use a new id."),
    "NOT_FOUND_OR_NOT_ACCESSIBLE": ("failure", "STOP", "TERMINAL_ERROR", "The resource does not exist or is not accessible to the current identity."),
    "DEADLINE_EXCEEDED": ("limit", "STOP", "DEADLINE", "The run's deadline has passed."),
    "BUDGET_EXHAUSTED": ("limit", "STOP", "MAX_EXECUTIONS", "The run's execution budget is used up."),
    "TOOL_BUDGET_EXHAUSTED": ("limit", "STOP", "MAX_TOOL_EXECUTIONS", "This tool's execution budget is used up."),
    "DEPENDENCY_TEMPORARY": ("failure", "RETRY_WITH_BUDGET", "TERMINAL_ERROR", "A dependency is temporarily unavailable."),
    "INTERNAL_ERROR": ("failure", "STOP", "TERMINAL_ERROR", "The tool failed with an internal error."),
    # section 6 (R42): a write's unknown outcome; not a failure category
    "OUTCOME_UNKNOWN": ("unknown", "WAIT_FOR_RECONCILIATION", "UNRECONCILED", "The write was sent but its outcome is not known yet. It will be checked before it is sent again; do not repeat it under other arguments."),
}

FAILURE_CATEGORIES: Final = ("DEPENDENCY_TEMPORARY", "NOT_FOUND_OR_NOT_ACCESSIBLE", "INTERNAL_ERROR")
MODES: Final = ("abort", "continue")
LIMIT_POLICIES: Final = ("throw", "error-result")
#: Section 5: which calls may overlap (R30), and MCP's defaults for the tool hints it reads.
OVERLAP_POLICIES: Final = ("read-only", "idempotent", "all")
HINT_DEFAULTS: Final[Mapping[str, bool]] = {
    "readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True,
}

REJECT: Final = "reject"
REPLAY: Final = "replay"
EXECUTE: Final = "execute"

Binding_Class = Literal["fresh", "replay", "conflict", "unresolved"]


def code_kind(code: str) -> str:
    return CODE_TABLE[code][0]


# --------------------------------------------------------------------------------------------
# JSON values and canonical content
# --------------------------------------------------------------------------------------------

class _NotJson(Exception):
    pass


def _normalise(value: Json, depth: int = 0) -> Json:
    if depth > 64:
        raise _NotJson("too deep")
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotJson("non-finite number")
        if value.is_integer():
            return int(value)  # exact: an integral float has an exact integer value
        return value
    if isinstance(value, list | tuple):
        return [_normalise(v, depth + 1) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise _NotJson("non-string key")
            out[k] = _normalise(v, depth + 1)
        return out
    raise _NotJson(type(value).__name__)


def is_json(value: Json, depth: int = 0) -> bool:
    """Is ``value`` a JSON value (string keys, finite numbers, at most 64 levels deep)?"""
    if depth > 64:
        return False
    if value is None or isinstance(value, bool | str | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(is_json(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_json(v, depth + 1) for k, v in value.items())
    return False


def canonical_json(value: Json) -> str | None:
    """The canonical text of a JSON value, or ``None`` when ``value`` is not JSON.

    Object keys are sorted, integral numbers print as integers (``1.0`` -> ``1``), booleans stay
    booleans. Two call contents are equal exactly when their canonical texts are equal.
    (Checked by property tests: the C JSON encoder is out of CrossHair's symbolic reach.)
    """
    try:
        norm = _normalise(value)
    except _NotJson:
        return None
    return json.dumps(norm, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def content_key(name: str, arguments: Mapping[str, Json]) -> str:
    """The content of a well-formed call: tool name and canonical arguments, as one string."""
    canon = canonical_json(dict(arguments))
    assert canon is not None
    return name + "\x00" + canon


# --------------------------------------------------------------------------------------------
# The flat schema subset (R4)
# --------------------------------------------------------------------------------------------

SCHEMA_TYPES: Final = ("string", "integer", "boolean")


class ToolDefinitionError(ValueError):
    """A tool registered with an input schema outside loopspec's subset. Names tool and field."""

    def __init__(self, tool: str, fld: str, message: str) -> None:
        self.tool, self.field, self.message = tool, fld, message
        super().__init__(f"tool {tool!r}: inputSchema{fld}: {message}")


@dataclass(frozen=True, slots=True)
class ToolSchema:
    properties: tuple[tuple[str, str], ...] = ()
    required: frozenset[str] = frozenset()
    additional: bool = True

    def type_of(self, prop: str) -> str | None:
        for name, typ in self.properties:
            if name == prop:
                return typ
        return None

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {
            "type": "object",
            "properties": {n: {"type": t} for n, t in self.properties},
        }
        if self.required:
            out["required"] = sorted(self.required)
        if not self.additional:
            out["additionalProperties"] = False
        return out


def parse_schema(raw: Json, *, tool: str = "?") -> ToolSchema:
    """Parse an input schema in the flat subset of R4, or raise :class:`ToolDefinitionError`."""
    if raw is None:
        return ToolSchema()
    if not isinstance(raw, dict):
        raise ToolDefinitionError(tool, "", "must be a JSON object")
    allowed = {"type", "properties", "required", "additionalProperties", "$schema", "title", "description"}
    for key in raw:
        if key not in allowed:
            raise ToolDefinitionError(tool, f".{key}", "keyword outside loopspec's schema subset (R4)")
    if raw.get("type", "object") != "object":
        raise ToolDefinitionError(tool, ".type", "must be 'object'")
    props_raw = raw.get("properties", {})
    if not isinstance(props_raw, dict):
        raise ToolDefinitionError(tool, ".properties", "must be an object")
    props: list[tuple[str, str]] = []
    for name, sub in props_raw.items():
        if not isinstance(sub, dict) or set(sub) - {"type", "description", "title"}:
            raise ToolDefinitionError(tool, f".properties.{name}", "must be {'type': ...} (optionally with description)")
        typ = sub.get("type")
        if typ not in SCHEMA_TYPES:
            raise ToolDefinitionError(tool, f".properties.{name}.type", f"must be one of {', '.join(SCHEMA_TYPES)}")
        props.append((name, typ))
    req = raw.get("required", [])
    if not isinstance(req, list) or not all(isinstance(r, str) for r in req):
        raise ToolDefinitionError(tool, ".required", "must be a list of property names")
    names = {n for n, _ in props}
    for r in req:
        if r not in names:
            raise ToolDefinitionError(tool, ".required", f"{r!r} is not a declared property")
    add = raw.get("additionalProperties", True)
    if not isinstance(add, bool):
        raise ToolDefinitionError(tool, ".additionalProperties", "must be true or false")
    return ToolSchema(tuple(props), frozenset(req), add)


def _type_ok(typ: str, value: Json) -> bool:
    if typ == "string":
        return isinstance(value, str)
    if typ == "boolean":
        return isinstance(value, bool)
    if typ == "integer":
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return True
        return isinstance(value, float) and math.isfinite(value) and value.is_integer()
    return False


def arguments_valid(schema: ToolSchema, arguments: Mapping[str, Json]) -> bool:
    """Do ``arguments`` (already a JSON object) satisfy ``schema``? (R4)

    post: implies(__return__, all(r in arguments for r in schema.required))
    """
    for r in schema.required:
        if r not in arguments:
            return False
    for key, value in arguments.items():
        typ = schema.type_of(key)
        if typ is None:
            if not schema.additional:
                return False
        elif not _type_ok(typ, value):
            return False
    return True


#: Unicode White_Space (PropList.txt): an id made only of these is blank (R2).
WHITE_SPACE: Final = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def blank(text: str) -> bool:
    """Is ``text`` empty or made only of Unicode White_Space? (R2)

    post: __return__ == all(ch in WHITE_SPACE for ch in text)
    """
    return all(ch in WHITE_SPACE for ch in text)


def well_formed(call_id: object, name: object, arguments: object) -> bool:
    """R2: a non-blank string id, a string name, and arguments that are a JSON object.

    post: implies(__return__, isinstance(call_id, str) and not blank(call_id))
    post: implies(__return__, isinstance(name, str) and isinstance(arguments, dict))
    """
    if not isinstance(call_id, str) or blank(call_id):
        return False
    if not isinstance(name, str):
        return False
    if not isinstance(arguments, dict):
        return False
    return is_json(arguments)


def implies(a: bool, b: bool) -> bool:
    return (not a) or b


# --------------------------------------------------------------------------------------------
# Id binding and the per-call decision (R1, R5-R10)
# --------------------------------------------------------------------------------------------


def classify_binding(bound_key: str | None, has_success: bool, key: str) -> str:
    """How a request relates to its id's binding: fresh, replay, conflict or unresolved.

    post: (bound_key is None) == (__return__ == "fresh")
    post: implies(__return__ == "replay", bound_key == key and has_success)
    post: implies(__return__ == "conflict", bound_key is not None and bound_key != key)
    post: implies(__return__ == "unresolved", bound_key == key and not has_success)
    """
    if bound_key is None:
        return "fresh"
    if bound_key != key:
        return "conflict"
    return "replay" if has_success else "unresolved"


def decide(
    request_admitted: bool,
    well_formed: bool,
    allow_listed: bool,
    arguments_valid: bool,
    binding: str,
    authorized: bool,
    deadline_passed: bool,
    budget_left: bool,
    tool_budget_left: bool,
) -> tuple[str, str | None]:
    """The per-call check order of R1 as one function: ``(action, code)``.

    ``action`` is ``"reject"`` (with an error ``code``), ``"replay"`` or ``"execute"``. A test
    proves this function and the order of the ``check``/``start`` transitions of loop.toml agree
    on every combination of guard values.

    pre: binding in ("fresh", "replay", "conflict", "unresolved")
    post: (__return__[0] == "reject") == (__return__[1] is not None)
    post: implies(__return__[0] == "execute", request_admitted and well_formed and allow_listed and arguments_valid)
    post: implies(__return__[0] == "execute", binding in ("fresh", "unresolved") and authorized)
    post: implies(__return__[0] == "execute", budget_left and tool_budget_left and not deadline_passed)
    post: implies(__return__[0] == "replay", binding == "replay" and well_formed and allow_listed and arguments_valid)
    post: implies(binding == "conflict" and __return__[0] != "reject", False)
    """
    if not request_admitted:
        return REJECT, "REQUEST_LIMIT"
    if not well_formed:
        return REJECT, "INVALID_CALL"
    if not allow_listed:
        return REJECT, "UNKNOWN_TOOL"
    if not arguments_valid:
        return REJECT, "INVALID_ARGUMENT"
    if binding == "conflict":
        return REJECT, "ID_CONFLICT"
    if binding == "replay":
        return REPLAY, None
    if not authorized:
        return REJECT, "NOT_FOUND_OR_NOT_ACCESSIBLE"
    if deadline_passed:
        return REJECT, "DEADLINE_EXCEEDED"
    if not budget_left:
        return REJECT, "BUDGET_EXHAUSTED"
    if not tool_budget_left:
        return REJECT, "TOOL_BUDGET_EXHAUSTED"
    return EXECUTE, None


def overlaps(read_only: bool, idempotent: bool, destructive: bool, policy: str) -> bool:
    """R30: may a call to a tool with these MCP hints run alongside other calls under ``policy``?
    A call that may not is a barrier.

    pre: policy in ("read-only", "idempotent", "all")
    post: implies(policy == "all", __return__)
    post: implies(read_only, __return__)
    post: implies(policy == "read-only", __return__ == read_only)
    post: implies(__return__ and not read_only and policy != "all", idempotent and not destructive)
    """
    if policy == "all" or read_only:
        return True
    return policy == "idempotent" and idempotent and not destructive


def tool_overlaps(hints: Mapping[str, bool] | None, policy: str) -> bool:
    """:func:`overlaps` for a tool's hints as given (MCP's defaults where one is missing)."""
    h = {**HINT_DEFAULTS, **(hints or {})}
    return overlaps(bool(h["readOnlyHint"]), bool(h["idempotentHint"]), bool(h["destructiveHint"]), policy)


def escalates(kind: str, mode: str, on_limit: str) -> bool:
    """Does an answer of this code kind end the run? (R13, R14, R20)

    pre: kind in ("violation", "failure", "limit", "unknown")
    post: implies(kind == "limit", __return__ == (on_limit == "throw"))
    post: implies(kind != "limit", __return__ == (mode == "abort"))
    """
    if kind == "limit":
        return on_limit == "throw"
    return mode == "abort"


def within(count: int, limit: int | None) -> bool:
    """Is there room for one more under ``limit``? (``None`` = unlimited)

    pre: count >= 0
    post: __return__ == (limit is None or count < limit)
    """
    return limit is None or count < limit


# --------------------------------------------------------------------------------------------
# Configuration and run state
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Limits:
    """Run limits; ``None`` means unlimited (R19)."""

    max_rounds: int | None = None
    max_executions: int | None = None
    max_tool_executions: int | None = None
    max_requests: int | None = None
    max_retries: int = 0
    deadline: float | None = None  # seconds after the run's start, on the injected clock

    def __post_init__(self) -> None:
        for name in ("max_rounds", "max_executions", "max_tool_executions", "max_requests"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ValueError(f"limit {name} must be a non-negative integer or None, got {v!r}")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"limit max_retries must be a non-negative integer, got {self.max_retries!r}")
        if self.deadline is not None and not (isinstance(self.deadline, int | float) and self.deadline >= 0):
            raise ValueError(f"deadline must be a non-negative number of seconds or None, got {self.deadline!r}")


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Everything the core needs to know about a run, as plain values."""

    schemas: Mapping[str, ToolSchema]
    limits: Limits = Limits()
    mode: str = "abort"
    on_limit: str = "throw"
    principal: str = "anonymous"
    tool_limits: Mapping[str, int] = field(default_factory=dict)  # per-tool overrides
    run_id: str = "run"
    batch: bool = False  # a batch: exactly one proposal, then END_OF_BATCH
    #: Section 5: executions in flight at most (1 = the sequential machine, R29), and the registered
    #: tools whose calls may not overlap with others (barriers, R30).
    max_concurrency: int = 1
    barriers: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if isinstance(self.max_concurrency, bool) or not isinstance(self.max_concurrency, int) or self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be a positive integer, got {self.max_concurrency!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.on_limit not in LIMIT_POLICIES:
            raise ValueError(f"on_limit must be one of {LIMIT_POLICIES}, got {self.on_limit!r}")

    def tool_limit(self, name: str) -> int | None:
        return self.tool_limits.get(name, self.limits.max_tool_executions)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one execution produced: ``ok`` with an output, or a failure category."""

    ok: bool
    output: Json = None
    category: str | None = None
    #: section 6 (R45): False when a write's execution recorded no dispatch mark (answered from the operation
    #: ledger, nothing sent, or refused by the dispatch budget): the execution does not use the budgets up
    charged: bool = True

    @staticmethod
    def success(output: Json) -> Outcome:
        return Outcome(True, output, None)

    @staticmethod
    def failure(category: str) -> Outcome:
        if category not in FAILURE_CATEGORIES:
            category = "INTERNAL_ERROR"
        return Outcome(False, None, category)


@dataclass(slots=True)
class Binding:
    name: str
    key: str
    bound_at: int  # request index that bound the id
    success: tuple[Json] | None = None  # the stored successful output, boxed (None = none stored)
    success_at: int | None = None  # request index whose execution produced it


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer to one request (R11, R15)."""

    index: int
    round: int
    call_id: str | None
    status: str  # "ok" | "error"
    output: Json = None
    code: str | None = None
    replayed: bool = False
    executed: bool = False
    late: bool = False  # an error answered when the clock had reached the deadline (a fact, for INV-DECISION)

    def to_json(self, run_id: str = "run") -> dict[str, Json]:
        """The model-visible form. Error answers carry only spec-defined text (R15)."""
        if self.status == "ok":
            return {"id": self.call_id, "status": "ok", "output": self.output}
        assert self.code is not None
        _, next_action, _, message = CODE_TABLE[self.code]
        return {
            "id": self.call_id,
            "status": "error",
            "code": self.code,
            "message": message,
            "next_action": next_action,
            "request_id": f"{run_id}:{self.index}",
        }


@dataclass(frozen=True, slots=True)
class Request:
    """One call as it arrived, kept verbatim so invariants can recompute every check."""

    index: int
    round: int
    call_id: object
    name: object
    arguments: object
    authorized: bool | None = None  # the hook's decision, when it was asked


@dataclass(slots=True)
class Execution:
    request: int
    tool: str
    principal: str
    ordinal: int  # 1-based among the run's executions
    attempts: int = 1
    outcome: Outcome | None = None
    late: bool = False  # started when the clock had reached the deadline (INV-DEADLINE)
    late_retries: int = 0  # retries started when the clock had reached the deadline
    retry_skipped: bool = False  # its failure became final while a retry was still due (INV-RETRY-DUE)
    abandoned: bool = False  # still in flight when the run ended (R26, R35): its result is discarded
    landed_late: bool = False  # its result landed in the background after the deadline (INV-DEADLINE)


def answer_id(call_id: object) -> str | None:
    return call_id if isinstance(call_id, str) else None


@dataclass(slots=True)
class RunState:
    """The whole state of one run (or batch). Mutated only by the effect functions below."""

    config: RunConfig
    phase: str = "decided"
    now: float = 0.0  # injected clock, seconds since the run started
    bindings: dict[str, Binding] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    executions: list[Execution] = field(default_factory=list)
    per_tool: dict[str, int] = field(default_factory=dict)
    model_requests: int = 0
    replays: int = 0
    rejections: int = 0
    retries: int = 0
    round: int = 0
    response: tuple[Json, ...] | None = None  # the current response's calls
    final: str | None = None  # the model's final answer, once given
    #: section 6 (R46): the run's write keys still unknown after the end-of-run reconciliation, set by the
    #: engine when the final answer arrives (empty in a run without write tools)
    unreconciled: tuple[str, ...] = ()
    #: section 6 (R45): executions whose outcome says they recorded no dispatch mark (not charged), in all and
    #: per tool; the budgets count the executions started less these (0 in a run without write tools)
    uncharged: int = 0
    uncharged_per_tool: dict[str, int] = field(default_factory=dict)
    model_failed: bool = False
    input_exhausted: bool = False
    cursor: int = 0
    admitted_cursor: int = -1  # the cursor position whose call became the newest request
    outcome: Outcome | None = None  # the current execution's latest outcome
    status: str | None = None
    stop_reason: str | None = None
    aborted: tuple[int, str] | None = None
    terminations: int = 0
    final_at: int | None = None  # len(requests) when the final answer arrived
    discarded: int = 0  # late results recorded as discarded (R26)
    late_model_requests: int = 0  # model requests made when the clock had reached the deadline
    aborted_answer: Answer | None = None  # the escalating answer, kept for the invariants
    # -- section 5 (all at rest when max_concurrency is 1) ------------------------------------
    focus: int | None = None  # the request the per-request states are about when not the newest (a landed result)
    held: dict[int, Answer] = field(default_factory=dict)  # answers known but not committed yet (R32)
    arrival: tuple[int, Outcome] | None = None  # the result that arrived (request index, outcome): the environment's
    early_take_ups: int = 0  # requests taken up when the run had to wait (INV-TAKE-UP-ORDER)

    # -- derived -------------------------------------------------------------------------
    @property
    def executed(self) -> int:
        return len(self.executions)

    @property
    def current(self) -> Request:
        """The request the per-request states are about: the newest, or the one whose result landed."""
        return self.requests[-1] if self.focus is None else self.requests[self.focus]

    @property
    def terminal(self) -> bool:
        return self.status is not None

    @property
    def coverage(self) -> str:
        if self.status != "COMPLETED":
            return "PARTIAL"
        if any(a.code is not None and code_kind(a.code) == "limit" for a in self.answers):
            return "PARTIAL"
        return "COMPLETE"

    def binding_class(self) -> str:
        r = self.current
        assert isinstance(r.call_id, str) and isinstance(r.name, str) and isinstance(r.arguments, dict)
        b = self.bindings.get(r.call_id)
        key = content_key(r.name, r.arguments)
        return classify_binding(b.key if b else None, b is not None and b.success is not None, key)

    def last_answer_kind(self) -> str | None:
        if not self.answers or self.answers[-1].index != self.current.index:
            return None
        code = self.answers[-1].code
        return code_kind(code) if code else None


# --------------------------------------------------------------------------------------------
# Guards (named as in loop.toml). Each reads the state; none changes it.
# --------------------------------------------------------------------------------------------


def _deadline_passed(s: RunState) -> bool:
    d = s.config.limits.deadline
    return d is not None and s.now >= d


def _cursor_call(s: RunState) -> Json:
    assert s.response is not None
    return s.response[s.cursor]


def _well_formed(s: RunState) -> bool:
    r = s.current
    return well_formed(r.call_id, r.name, r.arguments)


def _allow_listed(s: RunState) -> bool:
    return s.current.name in s.config.schemas


def _arguments_valid(s: RunState) -> bool:
    r = s.current
    assert isinstance(r.name, str) and isinstance(r.arguments, dict)
    return arguments_valid(s.config.schemas[r.name], r.arguments)


def _tool_budget_left(s: RunState) -> bool:
    name = s.current.name
    assert isinstance(name, str)
    return within(s.per_tool.get(name, 0) - s.uncharged_per_tool.get(name, 0), s.config.tool_limit(name))


def charged(s: RunState) -> int:
    """The executions the budgets count (R9, R45): every execution started but those whose outcome says that
    a write recorded no dispatch mark."""
    return s.executed - s.uncharged


def _set_outcome(s: RunState, ex: Execution, outcome: Outcome | None) -> None:
    """Give ``ex`` its (latest) outcome, keeping the count of uncharged executions (R45) in step."""
    was = ex.outcome is not None and not ex.outcome.charged
    now = outcome is not None and not outcome.charged
    if was != now:
        d = 1 if now else -1
        s.uncharged += d
        s.uncharged_per_tool[ex.tool] = s.uncharged_per_tool.get(ex.tool, 0) + d
    ex.outcome = outcome


def _fx(s: RunState) -> Execution:
    """The execution of the request in focus (the newest execution in the sequential machine)."""
    if s.focus is None:
        return s.executions[-1]
    for e in reversed(s.executions):
        if e.request == s.focus:
            return e
    raise AssertionError(f"request {s.focus} in focus has no execution")


def in_flight(s: RunState) -> list[Execution]:
    """The executions started whose result has not landed and which were not abandoned (section 5)."""
    return [e for e in s.executions if e.outcome is None and not e.abandoned]


def _running(s: RunState) -> list[Execution]:
    """:func:`in_flight`; in the sequential machine only the newest execution can be running."""
    if s.config.max_concurrency > 1:
        return in_flight(s)
    if s.outcome is not None:  # the newest execution (if any) has its outcome
        return []
    last = s.executions[-1] if s.executions else None
    return [last] if last is not None and last.outcome is None and not last.abandoned else []


def _escalating(s: RunState, a: Answer) -> bool:
    return a.code is not None and escalates(code_kind(a.code), s.config.mode, s.config.on_limit)


def take_up_blocked(s: RunState) -> bool:
    """R30, R31, R33, R34: executions are in flight and the item at the cursor cannot be taken up now."""
    if s.config.max_concurrency <= 1:
        return False
    flying = in_flight(s)
    if not flying:
        return False
    resp = s.response
    if resp is None or s.cursor >= len(resp):
        return True  # the proposal is all taken up: wait for the rest
    if len(flying) >= s.config.max_concurrency:
        return True
    barriers = s.config.barriers
    if any(e.tool in barriers for e in flying):
        return True
    call = resp[s.cursor]
    if isinstance(call, dict):
        name, cid = call.get("name"), call.get("id")
        if isinstance(name, str) and name in barriers:
            return True
        if isinstance(cid, str) and any(s.requests[e.request].call_id == cid for e in flying):
            return True
    return any(_escalating(s, a) for a in s.held.values())


def _runs_on(s: RunState) -> bool:
    return s.config.max_concurrency > 1 and _fx(s).outcome is None


def _retry_allowed(s: RunState) -> bool:
    o = s.outcome
    ex = _fx(s)
    return (
        o is not None
        and not o.ok
        and o.category == "DEPENDENCY_TEMPORARY"
        and ex.attempts - 1 < s.config.limits.max_retries
        and not _deadline_passed(s)
    )


def _escalates(kind: str) -> Callable[[RunState], bool]:
    def guard(s: RunState) -> bool:
        return s.last_answer_kind() == kind and escalates(kind, s.config.mode, s.config.on_limit)

    guard.__name__ = f"escalates_{kind}"
    return guard


GUARDS: Final[Mapping[str, Callable[[RunState], bool]]] = {
    "deadline_passed": _deadline_passed,
    "rounds_left": lambda s: within(s.model_requests, s.config.limits.max_rounds),
    "input_exhausted": lambda s: s.input_exhausted,
    "model_error": lambda s: s.model_failed,
    "final_answer": lambda s: s.final is not None,
    "unreconciled_left": lambda s: s.final is not None and bool(s.unreconciled),
    "round_done": lambda s: s.response is not None and s.cursor >= len(s.response),
    # every request counts, replays and rejections included, so request i is admitted iff i < max
    "request_admitted": lambda s: within(s.current.index, s.config.limits.max_requests),
    "well_formed": _well_formed,
    "allow_listed": _allow_listed,
    "arguments_valid": _arguments_valid,
    "id_conflict": lambda s: s.binding_class() == "conflict",
    "id_replay": lambda s: s.binding_class() == "replay",
    "id_fresh": lambda s: s.binding_class() == "fresh",
    "id_unresolved": lambda s: s.binding_class() == "unresolved",
    "authorized": lambda s: s.current.authorized is not False,
    "budget_left": lambda s: within(charged(s), s.config.limits.max_executions),
    "tool_budget_left": _tool_budget_left,
    "result_arrived": lambda s: s.arrival is not None,
    "take_up_blocked": take_up_blocked,
    "runs_on": _runs_on,
    "outcome_ok": lambda s: s.outcome is not None and s.outcome.ok,
    "retry_allowed": _retry_allowed,
    "escalates_violation": _escalates("violation"),
    "escalates_failure": _escalates("failure"),
    "escalates_limit": _escalates("limit"),
    "escalates_unknown": _escalates("unknown"),  # section 6 (R42): OUTCOME_UNKNOWN in abort mode
}


# --------------------------------------------------------------------------------------------
# State updates (the I/O-free half of each effect)
# --------------------------------------------------------------------------------------------


def receive_response(s: RunState, response: Json) -> None:
    """Record the model's response: a list of calls, ``{"final": str}``, or anything else (an error)."""
    if _deadline_passed(s):
        s.late_model_requests += 1
    s.model_requests += 1
    s.round += 1
    s.cursor = 0
    s.admitted_cursor = -1
    s.response = None
    if isinstance(response, dict) and set(response) == {"final"} and isinstance(response["final"], str):
        s.final = response["final"]
        s.final_at = len(s.requests)
    elif isinstance(response, dict) and set(response) == {"calls"} and isinstance(response["calls"], list):
        s.response = tuple(response["calls"])
    elif isinstance(response, list | tuple):
        s.response = tuple(response)
    else:
        s.model_failed = True


def admit_cursor_call(s: RunState) -> Request:
    """Turn the call at the cursor into the next request (its index is its arrival order)."""
    if take_up_blocked(s):  # the spec's condition itself, not the guard table's entry (a variant may replace that)
        s.early_take_ups += 1
    call = _cursor_call(s)
    if isinstance(call, dict):
        req = Request(len(s.requests), s.round, call.get("id"), call.get("name"), call.get("arguments"))
    else:
        req = Request(len(s.requests), s.round, None, None, None)
    s.requests.append(req)
    return req


def set_authorization(s: RunState, allowed: bool) -> None:
    r = s.current
    s.requests[-1] = Request(r.index, r.round, r.call_id, r.name, r.arguments, allowed)


def _give(s: RunState, a: Answer) -> None:
    """Commit ``a`` when every earlier request's answer is committed, else hold it; then commit the
    held answers that follow, in request order, up to one that ends the run (R11, R32, R34)."""
    if s.config.max_concurrency > 1 and a.index != len(s.answers):
        s.held[a.index] = a
        return
    s.answers.append(a)
    if not s.held:
        return
    last = a
    while not _escalating(s, last) and len(s.answers) in s.held:
        last = s.held.pop(len(s.answers))
        s.answers.append(last)
    if last is not a and _escalating(s, last):
        s.focus = last.index  # the answer that ends the run is the one the advance group decides on


def answer_error(s: RunState, code: str) -> Answer:
    r = s.current
    a = Answer(r.index, r.round, answer_id(r.call_id), "error", code=code, late=_deadline_passed(s))
    _give(s, a)
    s.rejections += 1
    return a


def answer_replay(s: RunState) -> Answer:
    r = s.current
    assert isinstance(r.call_id, str)
    b = s.bindings[r.call_id]
    assert b.success is not None
    a = Answer(r.index, r.round, r.call_id, "ok", output=b.success[0], replayed=True)
    _give(s, a)
    s.replays += 1
    return a


def bind_id(s: RunState) -> None:
    r = s.current
    assert isinstance(r.call_id, str) and isinstance(r.name, str) and isinstance(r.arguments, dict)
    s.bindings[r.call_id] = Binding(r.name, content_key(r.name, r.arguments), r.index)


def begin_execution(s: RunState) -> Execution:
    r = s.current
    assert isinstance(r.name, str)
    ex = Execution(r.index, r.name, s.config.principal, len(s.executions) + 1, late=_deadline_passed(s))
    s.executions.append(ex)
    s.per_tool[r.name] = s.per_tool.get(r.name, 0) + 1
    s.outcome = None
    return ex


def begin_retry(s: RunState) -> None:
    ex = _fx(s)
    ex.attempts += 1
    _set_outcome(s, ex, None)  # the new attempt has no outcome yet (and is charged: reserved again, R45)
    if _deadline_passed(s):
        ex.late_retries += 1
    s.retries += 1
    s.outcome = None


def record_outcome(s: RunState, outcome: Outcome) -> None:
    s.outcome = outcome
    _set_outcome(s, _fx(s), outcome)


def land(s: RunState) -> None:
    """T33: the result that arrived lands — its request comes into focus, its outcome is recorded."""
    assert s.arrival is not None
    index, outcome = s.arrival
    s.arrival = None
    s.focus = index
    ex = _fx(s)
    assert ex.outcome is None and not ex.abandoned, "only an execution in flight lands"
    if _deadline_passed(s):
        ex.landed_late = True
    s.outcome = outcome
    _set_outcome(s, ex, outcome)


def run_on(s: RunState) -> None:
    """T31: the execution in focus stays in flight; move past the item when it was taken up at the
    cursor (a retry of a landed result moves nothing)."""
    if s.focus is None:
        s.cursor += 1
    s.focus = None


def store_success(s: RunState) -> Answer:
    r = s.current
    assert s.outcome is not None and s.outcome.ok and isinstance(r.call_id, str)
    b = s.bindings[r.call_id]
    b.success = (s.outcome.output,)
    b.success_at = r.index
    a = Answer(r.index, r.round, r.call_id, "ok", output=s.outcome.output, executed=True)
    _give(s, a)
    return a


def retry_due(s: RunState) -> bool:
    """R23 for the current execution: its latest attempt failed with DEPENDENCY_TEMPORARY, fewer
    than ``max_retries`` retries were made and the clock has not reached the deadline. The fact
    :func:`answer_failure` records; read here, not through the ``retry_allowed`` guard's table
    entry, so that a variant of the guard cannot hide what it skipped."""
    o = s.outcome
    return (
        o is not None
        and not o.ok
        and o.category == "DEPENDENCY_TEMPORARY"
        and bool(s.executions)
        and _fx(s).attempts - 1 < s.config.limits.max_retries
        and not _deadline_passed(s)
    )


def answer_failure(s: RunState) -> Answer:
    r = s.current
    assert s.outcome is not None and not s.outcome.ok and s.outcome.category is not None
    if retry_due(s):
        _fx(s).retry_skipped = True
    a = Answer(r.index, r.round, answer_id(r.call_id), "error", code=s.outcome.category, executed=True)
    _give(s, a)
    return a


def next_item(s: RunState) -> None:
    """Move past the item at the cursor; after a landed result (section 5) the cursor stays."""
    if s.focus is not None:
        s.focus = None
        return
    s.cursor += 1


def admit_pending(s: RunState) -> None:
    """When the run is about to check the item at the cursor and it is a call that has not become a
    request yet, make it the next request. Calls become requests only when they are taken up, so
    the calls of a response that is never processed (a cancelled run) are never counted (R26)."""
    if s.response is None or s.cursor >= len(s.response) or s.final is not None or s.model_failed:
        return
    if s.requests and s.requests[-1].round == s.round and s.admitted_cursor == s.cursor:
        return
    admit_cursor_call(s)
    s.admitted_cursor = s.cursor


def waits(s: RunState, guards: Mapping[str, Callable[[RunState], bool]] | None = None) -> bool:
    """Section 5, at ``proposed``: will the run land a result or wait (T29, T30) instead of taking
    up the item at the cursor? Then :func:`admit_pending` must not make it a request yet. The
    drivers ask with the guards they run the machine with (a checker's variant has its own)."""
    g = GUARDS if guards is None else guards
    return s.config.max_concurrency > 1 and (g["result_arrived"](s) or g["take_up_blocked"](s))


def end_round(s: RunState) -> None:
    s.response = None
    s.cursor = 0
    if s.config.batch:
        s.input_exhausted = True


def terminate(s: RunState, stop_reason: str, status: str, *, escalated: bool = False) -> None:
    """Enter a terminal state (absorbing, R21). An escalating answer becomes ``aborted`` (R13)."""
    s.terminations += 1
    if s.status is not None:
        return
    if escalated:
        last = s.answers.pop()
        assert last.code is not None
        s.aborted = (last.index, last.code)
        s.aborted_answer = last
    for e in _running(s):  # every execution still running is abandoned, not only the newest (R26, R35)
        e.abandoned = True
    s.status = status
    s.stop_reason = stop_reason


def escalation_stop_reason(s: RunState) -> str:
    code = s.answers[-1].code
    assert code is not None
    return CODE_TABLE[code][2]


# --------------------------------------------------------------------------------------------
# Invariants (ids as in loop.toml). Each recomputes what it checks from the raw requests and the
# configuration, independently of the decisions that produced the state.
# --------------------------------------------------------------------------------------------


def _passes_structure(cfg: RunConfig, r: Request) -> bool:
    return (
        well_formed(r.call_id, r.name, r.arguments)
        and isinstance(r.name, str)
        and r.name in cfg.schemas
        and isinstance(r.arguments, dict)
        and arguments_valid(cfg.schemas[r.name], r.arguments)
    )


#: The facts of the last list of requests seen (see :func:`_request_facts`): (requests, config, facts).
_FACTS: tuple[tuple[Request, ...], RunConfig | None, tuple[tuple[bool, bool, bool, str], ...]] = ((), None, ())


def _request_facts(s: RunState) -> tuple[tuple[bool, bool, bool, str], ...]:
    """Per request: (well-formed, allow-listed, schema-valid, content key — ``""`` unless valid).

    The invariants recompute these for every request of the history, several times per state;
    they are pure functions of a request and the configuration, and requests are immutable
    (a state and its copies share them), so the facts of the last requests seen are kept, and a
    state that extends them (its newest request is new) computes only what is new.
    """
    global _FACTS
    reqs = s.requests
    c_reqs, c_cfg, c_out = _FACTS
    n = 0
    if c_cfg is s.config:
        for a, b in zip(c_reqs, reqs, strict=False):
            if a is not b:
                break
            n += 1
    if n == len(reqs) == len(c_reqs):
        return c_out
    cfg = s.config
    out = list(c_out[:n])
    for r in reqs[n:]:
        wf = well_formed(r.call_id, r.name, r.arguments)
        listed = wf and isinstance(r.name, str) and r.name in cfg.schemas
        valid = listed and isinstance(r.arguments, dict) and arguments_valid(cfg.schemas[r.name], r.arguments)  # type: ignore[index]
        out.append((wf, listed, valid, content_key(r.name, r.arguments) if valid else ""))  # type: ignore[arg-type]
    result = tuple(out)
    _FACTS = (tuple(reqs), cfg, result)
    return result


def _binding_history(s: RunState) -> dict[int, tuple[str, str] | None]:
    """For each structurally valid request: (key bound for its id before it, its own key)."""
    bound: dict[str, str] = {}
    out: dict[int, tuple[str, str] | None] = {}
    limit = s.config.limits.max_requests
    facts = _request_facts(s)
    for r, (_, _, valid, key) in zip(s.requests, facts, strict=True):
        if not within(r.index, limit) or not valid:
            out[r.index] = None
            continue
        assert isinstance(r.call_id, str)
        prior = bound.get(r.call_id)
        out[r.index] = (prior if prior is not None else "", key)
        bound.setdefault(r.call_id, key)
    return out


def _answers_by_index(s: RunState) -> dict[int, Answer]:
    return {a.index: a for a in s.answers}


def _is_charged(e: Execution) -> bool:
    return e.outcome is None or e.outcome.charged


def inv_exec_budget(s: RunState) -> bool:
    n = charged(s)
    return within(n - 1, s.config.limits.max_executions) if n else True


def inv_tool_budget(s: RunState) -> bool:
    counts: dict[str, int] = {}
    free: dict[str, int] = {}
    for e in s.executions:
        counts[e.tool] = counts.get(e.tool, 0) + 1
        if not _is_charged(e):
            free[e.tool] = free.get(e.tool, 0) + 1
    return (counts == {k: v for k, v in s.per_tool.items() if v}
            and free == {k: v for k, v in s.uncharged_per_tool.items() if v} and sum(free.values()) == s.uncharged
            and all(within(n - free.get(t, 0) - 1, s.config.tool_limit(t)) for t, n in counts.items()
                    if n > free.get(t, 0)))


def inv_request_budget(s: RunState) -> bool:
    lim = s.config.limits
    if lim.max_rounds is not None and s.model_requests > lim.max_rounds:
        return False
    if lim.max_requests is None:
        return True
    over = {r.index for r in s.requests if r.index >= lim.max_requests}
    return not any(e.request in over for e in s.executions) and all(
        a.code == "REQUEST_LIMIT" for a in s.answers if a.index in over
    )


def inv_retry_budget(s: RunState) -> bool:
    return all(e.attempts - 1 <= s.config.limits.max_retries for e in s.executions) and s.retries == sum(
        e.attempts - 1 for e in s.executions
    )


def inv_one_answer_in_order(s: RunState) -> bool:
    if len(s.answers) > len(s.requests):
        return False
    for i, a in enumerate(s.answers):
        if a.index != i or a.call_id != answer_id(s.requests[i].call_id):
            return False
    if s.config.max_concurrency <= 1:
        # at most the request being processed (or the aborted one) lacks an answer
        return len(s.requests) - len(s.answers) <= 1
    if s.status is not None:
        return True  # what is not committed by the end is discarded (R34, R35)
    # section 5: a request lacks its committed answer only while it is being decided (the newest, or
    # the one whose result landed), while it is in flight, or while its answer waits behind one of
    # those; the first uncommitted answer never waits (answers are committed as soon as they can be),
    # except behind an answer that ends the run, in the step before it does (INV-ESCALATION)
    flying = {e.request for e in s.executions if e.outcome is None and not e.abandoned}
    deciding = {len(s.requests) - 1} | ({s.focus} if s.focus is not None else set())
    first = len(s.answers)
    if first in s.held and not (s.answers and _escalating(s, s.answers[-1])):
        return False
    return all(i in flying or i in deciding or i in s.held for i in range(first, len(s.requests)))


def inv_exec_accounting(s: RunState) -> bool:
    idx = [e.request for e in s.executions]
    if len(set(idx)) != len(idx) or idx != sorted(idx):
        return False
    if [e.ordinal for e in s.executions] != list(range(1, len(s.executions) + 1)):
        return False
    executed_answers = {a.index for a in s.answers if a.executed}
    return executed_answers <= set(idx) and all(a.index in executed_answers for a in s.answers if a.index in set(idx))


def inv_checked_before_exec(s: RunState) -> bool:
    hist = _binding_history(s)
    for e in s.executions:
        r = s.requests[e.request]
        h = hist.get(r.index)
        if h is None:
            return False
        prior, key = h
        if prior and prior != key:
            return False
        if r.authorized is False:
            return False
    return True


def inv_binding_stable(s: RunState) -> bool:
    hist = _binding_history(s)

    def expected(requests: list[Request]) -> dict[str, str]:
        out: dict[str, str] = {}
        for r in requests:
            h = hist[r.index]
            if h is not None:
                assert isinstance(r.call_id, str)
                out.setdefault(r.call_id, h[1])
        return out

    actual = {k: b.key for k, b in s.bindings.items()}
    if actual == expected(s.requests):
        return True
    # the newest request may still be between arrival and its id check
    last = s.requests[-1] if s.requests else None
    in_flight = last is not None and len(s.answers) == last.index and not any(
        e.request == last.index for e in s.executions
    )
    return in_flight and actual == expected(s.requests[:-1])


def inv_conflict_no_reuse(s: RunState) -> bool:
    hist = _binding_history(s)
    answers = _answers_by_index(s)
    executed = {e.request for e in s.executions}
    for i, h in hist.items():
        if h is not None and h[0] and h[0] != h[1]:
            if i in executed:
                return False
            a = answers.get(i)
            if a is not None and a.status == "ok":
                return False
    return True


def _first_success(s: RunState) -> dict[tuple[str, str], tuple[int, Json]]:
    """(id, key) -> (request index, output) of the first successful execution."""
    out: dict[tuple[str, str], tuple[int, Json]] = {}
    for e in s.executions:
        if e.outcome is not None and e.outcome.ok:
            r = s.requests[e.request]
            assert isinstance(r.call_id, str) and isinstance(r.name, str) and isinstance(r.arguments, dict)
            out.setdefault((r.call_id, content_key(r.name, r.arguments)), (e.request, e.outcome.output))
    return out


def inv_replay_no_exec(s: RunState) -> bool:
    hist = _binding_history(s)
    firsts = _first_success(s)
    answers = _answers_by_index(s)
    executed = {e.request for e in s.executions}
    for i, h in hist.items():
        if h is None or (h[0] and h[0] != h[1]):
            continue
        r = s.requests[i]
        assert isinstance(r.call_id, str)
        first = firsts.get((r.call_id, h[1]))
        if first is None or first[0] >= i:
            continue
        # an earlier success exists for this id and content: this request must replay it
        if i in executed:
            return False
        a = answers.get(i)
        if a is not None and a.code != "REQUEST_LIMIT" and (a.status != "ok" or a.output != first[1] or not a.replayed):
            return False
    return True


def inv_no_cached_failure(s: RunState) -> bool:
    firsts = _first_success(s)
    for a in s.answers:
        if not a.replayed:
            continue
        r = s.requests[a.index]
        if not (isinstance(r.call_id, str) and isinstance(r.name, str) and isinstance(r.arguments, dict)):
            return False
        first = firsts.get((r.call_id, content_key(r.name, r.arguments)))
        if first is None or first[0] >= a.index or first[1] != a.output or a.status != "ok":
            return False
    return True


def inv_abort_prefix(s: RunState) -> bool:
    if s.aborted is None:
        return True
    index, code = s.aborted
    # later requests exist only when they were taken up while the aborting one was still running
    # (section 5: taken up before the answer that ends the run was known, INV-TAKE-UP-ORDER)
    return (
        s.status is not None
        and index == len(s.answers)
        and (index == len(s.requests) - 1 or (s.config.max_concurrency > 1 and index < len(s.requests)))
        and escalates(code_kind(code), s.config.mode, s.config.on_limit)
    )


def inv_one_terminal(s: RunState) -> bool:
    return s.terminations <= 1 and (s.status is None) == (s.stop_reason is None)


def inv_partial_coverage(s: RunState) -> bool:
    if s.status is None:
        return True
    limited = any(a.code is not None and code_kind(a.code) == "limit" for a in s.answers) or (
        s.aborted is not None and code_kind(s.aborted[1]) == "limit"
    )
    complete = s.coverage == "COMPLETE"
    return complete == (s.status == "COMPLETED" and not limited)


def inv_safe_errors(s: RunState) -> bool:
    for a in s.answers:
        if a.status == "error":
            if a.code not in CODE_TABLE or a.output is not None:
                return False
            j = a.to_json(s.config.run_id)
            if set(j) != {"id", "status", "code", "message", "next_action", "request_id"}:
                return False
            if j["message"] != CODE_TABLE[a.code][3] or j["next_action"] != CODE_TABLE[a.code][1]:
                return False
        elif a.status != "ok" or a.code is not None:
            return False
    return True


def inv_decision(s: RunState) -> bool:
    """Recompute R1's decision for every decided request from the facts at its time."""
    cfg, lim = s.config, s.config.limits
    answers = _answers_by_index(s)
    if s.held:
        answers.update(s.held)  # section 5: decided at take-up or landing, not committed yet
    if s.aborted_answer is not None:
        answers[s.aborted_answer.index] = s.aborted_answer
    executions = {e.request: e for e in s.executions}
    bound: dict[str, str] = {}
    succeeded: set[tuple[str, str]] = set()
    started = 0
    started_per_tool: dict[str, int] = {}
    for r, (wf, listed, valid, key) in zip(s.requests, _request_facts(s), strict=True):
        a, ex = answers.get(r.index), executions.get(r.index)
        admitted = within(r.index, lim.max_requests)
        cid = r.call_id if isinstance(r.call_id, str) else ""
        binding = classify_binding(bound.get(cid), (cid, key) in succeeded, key) if valid else "fresh"
        if a is None and ex is None:  # still being decided
            if r.index != len(s.requests) - 1:
                return False
            continue
        late = ex.late if ex is not None else (a is not None and a.late)
        tool_left = valid and within(started_per_tool.get(r.name, 0), cfg.tool_limit(r.name))  # type: ignore[arg-type]
        action, code = decide(admitted, wf, listed, valid, binding, r.authorized is not False, late,
                              within(started, lim.max_executions), tool_left)
        if action == EXECUTE:
            if ex is None:
                return False
            if a is not None and ex.outcome is not None and (
                (a.status == "ok") != ex.outcome.ok or (a.status == "ok" and a.output != ex.outcome.output)
                or (a.status == "error" and a.code != ex.outcome.category)
            ):
                return False
        else:  # a replay or a refusal: answered, never executed
            as_decided = a is not None and ex is None and (
                (a.replayed and a.status == "ok") if action == REPLAY else (a.code == code and a.status == "error")
            )
            if not as_decided:
                return False
        if admitted and valid and binding != "conflict":
            bound.setdefault(cid, key)
        if ex is not None and _is_charged(ex):  # R45: a write that recorded no dispatch mark is not charged
            started += 1
            started_per_tool[ex.tool] = started_per_tool.get(ex.tool, 0) + 1
            if ex.outcome is not None and ex.outcome.ok:
                succeeded.add((cid, key))
    return True


def inv_escalation(s: RunState) -> bool:
    for a in s.answers:
        if a.code is None or not escalates(code_kind(a.code), s.config.mode, s.config.on_limit):
            continue
        # allowed only for the request being decided, before the run moves past it, or when a
        # cancellation won the race with the escalation right there (R21, R26: the abort then
        # changes nothing, so the answer stays). Section 5: the request in focus is the one whose
        # result landed, or whose held answer was committed last
        here = (a.index == s.focus) if s.focus is not None else (
            a.index == len(s.requests) - 1 and s.admitted_cursor == s.cursor)
        just_answered = (s.status is None or s.stop_reason == "CANCELLED") and a is s.answers[-1] and here
        if not just_answered:
            return False
    return True


def inv_deadline(s: RunState) -> bool:
    return s.late_model_requests == 0 and not any(e.late or e.late_retries or e.landed_late for e in s.executions)


def inv_retry_due(s: RunState) -> bool:
    return not any(e.retry_skipped for e in s.executions)


def inv_trusted_principal(s: RunState) -> bool:
    return all(e.principal == s.config.principal for e in s.executions)


def inv_no_call_after_final(s: RunState) -> bool:
    return s.final_at is None or len(s.requests) == s.final_at


def inv_concurrency_bound(s: RunState) -> bool:
    flying = [e for e in s.executions if e.outcome is None and not e.abandoned]
    if len(flying) <= 1:
        return True
    if len(flying) > s.config.max_concurrency or any(e.tool in s.config.barriers for e in flying):
        return False
    ids = [s.requests[e.request].call_id for e in flying]
    return len(ids) == len(set(ids))


def inv_take_up_order(s: RunState) -> bool:
    return s.early_take_ups == 0


def inv_abandon(s: RunState) -> bool:
    if s.status is None:
        # abandoning is for the end of the run: allowed early only in the step before an answer that
        # ends it does (the executions it would abandon then are all after the abort point, R34)
        ending = bool(s.answers) and _escalating(s, s.answers[-1])
        return ending or not any(e.abandoned for e in s.executions)
    return not any(e.outcome is None and not e.abandoned for e in s.executions)


INVARIANTS: Final[Mapping[str, Callable[[RunState], bool]]] = {
    "INV-EXEC-BUDGET": inv_exec_budget,
    "INV-TOOL-BUDGET": inv_tool_budget,
    "INV-REQUEST-BUDGET": inv_request_budget,
    "INV-RETRY-BUDGET": inv_retry_budget,
    "INV-ONE-ANSWER-IN-ORDER": inv_one_answer_in_order,
    "INV-EXEC-ACCOUNTING": inv_exec_accounting,
    "INV-CHECKED-BEFORE-EXEC": inv_checked_before_exec,
    "INV-BINDING-STABLE": inv_binding_stable,
    "INV-CONFLICT-NO-REUSE": inv_conflict_no_reuse,
    "INV-REPLAY-NO-EXEC": inv_replay_no_exec,
    "INV-NO-CACHED-FAILURE": inv_no_cached_failure,
    "INV-ABORT-PREFIX": inv_abort_prefix,
    "INV-ONE-TERMINAL": inv_one_terminal,
    "INV-PARTIAL-COVERAGE": inv_partial_coverage,
    "INV-SAFE-ERRORS": inv_safe_errors,
    "INV-TRUSTED-PRINCIPAL": inv_trusted_principal,
    "INV-DECISION": inv_decision,
    "INV-ESCALATION": inv_escalation,
    "INV-DEADLINE": inv_deadline,
    "INV-RETRY-DUE": inv_retry_due,
    "INV-NO-CALL-AFTER-FINAL": inv_no_call_after_final,
    "INV-CONCURRENCY-BOUND": inv_concurrency_bound,
    "INV-TAKE-UP-ORDER": inv_take_up_order,
    "INV-ABANDON": inv_abandon,
}


def violated_invariants(s: RunState) -> list[str]:
    """The ids of every invariant ``s`` breaks (empty when all hold)."""
    return [name for name, check in INVARIANTS.items() if not check(s)]


# --------------------------------------------------------------------------------------------
# Consistency with the spec data
# --------------------------------------------------------------------------------------------


def check_against_spec(spec: Any) -> list[str]:
    """Differences between this module and the loaded spec (empty when they agree)."""
    problems: list[str] = []
    spec_codes = {c.id: (c.kind, c.next_action, c.stop_reason, c.message) for c in spec.codes}
    if spec_codes != dict(CODE_TABLE):
        for cid in sorted(set(spec_codes) | set(CODE_TABLE)):
            if spec_codes.get(cid) != CODE_TABLE.get(cid):
                problems.append(f"code {cid}: spec says {spec_codes.get(cid)}, core says {CODE_TABLE.get(cid)}")
    guard_ids = {g.id for g in spec.guards}
    for g in sorted(guard_ids ^ set(GUARDS)):
        where = "spec" if g in guard_ids else "core"
        problems.append(f"guard {g}: declared only in the {where}")
    inv_ids = {i.id for i in spec.invariants}
    for i in sorted(inv_ids ^ set(INVARIANTS)):
        where = "spec" if i in inv_ids else "core"
        problems.append(f"invariant {i}: declared only in the {where}")
    conc = getattr(spec, "concurrency", None)
    if conc is not None:
        if tuple(conc.overlap) != OVERLAP_POLICIES:
            problems.append(f"overlap policies: spec says {list(conc.overlap)}, core says {list(OVERLAP_POLICIES)}")
        if dict(conc.hints) != dict(HINT_DEFAULTS):
            problems.append(f"hint defaults: spec says {dict(conc.hints)}, core says {dict(HINT_DEFAULTS)}")
    failure_codes = {c.id for c in spec.codes if c.kind == "failure"} - {"NOT_FOUND_OR_NOT_ACCESSIBLE"}
    if not failure_codes <= set(FAILURE_CATEGORIES):
        problems.append(f"failure categories differ: {sorted(failure_codes)} vs {FAILURE_CATEGORIES}")
    return problems



# --------------------------------------------------------------------------------------------
# The reference driver: the same run, sequenced by `decide` instead of a transitions machine.
# Pure as long as the callables given to it are. The engine and this driver are tested against
# each other (tests/test_differential.py); the checker, the fuzzer's judge and the oracle use it.
# --------------------------------------------------------------------------------------------


def gate(s: RunState, authorize: Callable[[RunState, Request], bool]) -> tuple[str, str | None, bool]:
    """Decide the current request with :func:`decide`: ``(action, code, binds)``.

    ``binds`` is true when the request passes checks 1-5 with a fresh id, so its id becomes bound
    whatever happens next (R5). ``authorize`` is asked only when the request gets that far.
    """
    r = s.current
    admitted = GUARDS["request_admitted"](s)
    wf = well_formed(r.call_id, r.name, r.arguments)
    listed = wf and isinstance(r.name, str) and r.name in s.config.schemas
    valid = listed and _arguments_valid(s)
    binding = s.binding_class() if valid else "fresh"
    passes_id_check = admitted and valid and binding in ("fresh", "unresolved")
    authorized = True
    if passes_id_check:
        authorized = bool(authorize(s, r))
        set_authorization(s, authorized)
    action, code = decide(
        admitted, wf, listed, valid, binding, authorized,
        _deadline_passed(s), GUARDS["budget_left"](s), valid and _tool_budget_left(s),
    )
    return action, code, passes_id_check and binding == "fresh"


def drive(
    s: RunState,
    model: Callable[[RunState], Json],
    outcome_for: Callable[[RunState, Execution], Outcome],
    *,
    authorize: Callable[[RunState, Request], bool] = lambda s, r: True,
    tick: Callable[[RunState], float] | None = None,
    on_step: Callable[[RunState, str], None] | None = None,
    arrive: Callable[[RunState, bool], int | None] | None = None,
) -> RunState:
    """Run ``s`` to its terminal state. ``model(s)`` gives the next response, ``outcome_for``
    the outcome of each attempt, ``tick(s)`` the clock reading before each step, ``on_step`` is
    told the phase after every step (for invariant checks).

    With ``max_concurrency`` > 1 (section 5) executions run in the background and ``arrive(s,
    must)`` is the environment choosing which one completes next: the request index whose result
    arrives, or ``None`` for none yet (only when ``must`` is false, before a take-up); its outcome
    is ``outcome_for`` at that moment. By default results arrive only when the run waits, lowest
    request first."""

    def step(label: str) -> None:
        if on_step is not None:
            on_step(s, label)

    def now() -> None:
        if tick is not None:
            s.now = tick(s)

    def finish(reason: str, escalated: bool = False) -> None:
        terminate(s, reason, _STATUS_OF[reason], escalated=escalated)
        step("terminal")

    while s.status is None:
        now()
        if _deadline_passed(s):
            finish("DEADLINE")
            break
        if not within(s.model_requests, s.config.limits.max_rounds):
            finish("MAX_ROUNDS")
            break
        if s.input_exhausted:
            finish("END_OF_BATCH")
            break
        receive_response(s, model(s))
        step("proposed")
        if s.model_failed:
            finish("MODEL_ERROR")
            break
        if s.final is not None:
            finish("FINAL_ANSWER")
            break
        assert s.response is not None
        if s.config.max_concurrency > 1:
            _drive_round_concurrently(s, outcome_for, authorize, arrive or _lowest_first, now, step, finish)
        while s.status is None and s.cursor < len(s.response):
            now()
            if _take_up(s, authorize):
                ex = begin_execution(s)
                step("executing")
                record_outcome(s, outcome_for(s, ex))
                now()
                while _retry_allowed(s):
                    begin_retry(s)
                    record_outcome(s, outcome_for(s, ex))
                    now()
                if s.outcome is not None and s.outcome.ok:
                    store_success(s)
                else:
                    answer_failure(s)
            step("returned")
            last = s.answers[-1].code
            if last is not None and escalates(code_kind(last), s.config.mode, s.config.on_limit):
                finish(CODE_TABLE[last][2], escalated=True)
                break
            next_item(s)
        if s.status is None:
            end_round(s)
            step("decided")
    return s


def _take_up(s: RunState, authorize: Callable[[RunState, Request], bool]) -> bool:
    """Take up the call at the cursor: admit it, gate it (binding its id when the gate says so) and answer a
    rejection or a replay at once. True when the call goes on to execute (the caller begins it)."""
    admit_pending(s)
    action, code, binds = gate(s, authorize)
    if binds:
        bind_id(s)
    if action == REJECT:
        assert code is not None
        answer_error(s, code)
        return False
    if action == REPLAY:
        answer_replay(s)
        return False
    return True


def _lowest_first(s: RunState, must: bool) -> int | None:
    return min(e.request for e in in_flight(s)) if must else None


def _drive_round_concurrently(
    s: RunState,
    outcome_for: Callable[[RunState, Execution], Outcome],
    authorize: Callable[[RunState, Request], bool],
    arrive: Callable[[RunState, bool], int | None],
    now: Callable[[], None],
    step: Callable[[str], None],
    finish: Callable[..., None],
) -> None:
    """One round of :func:`drive` with executions in the background: the transitions of section 5
    (T29–T33) in the machine's order, the core's effects, the environment's arrivals."""
    assert s.response is not None

    def arrival(pick: int) -> tuple[int, Outcome]:
        ex = next(e for e in s.executions if e.request == pick and e.outcome is None and not e.abandoned)
        return pick, outcome_for(s, ex)

    while s.status is None:
        now()
        flying = in_flight(s)
        if flying and s.arrival is None and not take_up_blocked(s):
            pick = arrive(s, False)  # has a result arrived before the take-up?
            if pick is not None:
                s.arrival = arrival(pick)
        if flying and (s.arrival is not None or take_up_blocked(s)):
            step("waiting")  # T29 / T30
            now()
            if _deadline_passed(s):
                finish("DEADLINE")  # T32: the run stops waiting
                return
            if s.arrival is None:
                pick = arrive(s, True)
                assert pick is not None, "the run waits: a result must arrive"
                s.arrival = arrival(pick)
            land(s)  # T33
            step("executing")
            now()
            if _retry_allowed(s):  # T22: the retry goes back in flight (T31)
                begin_retry(s)
                run_on(s)
                continue
            if s.outcome is not None and s.outcome.ok:
                store_success(s)  # T21
            else:
                answer_failure(s)  # T23
        else:
            if s.cursor >= len(s.response):
                return  # T07: nothing in flight, the proposal all taken up
            if _take_up(s, authorize):
                begin_execution(s)  # T20: checks and reservation in one step
                step("executing")
                run_on(s)  # T31
                continue
        step("returned")
        if any(GUARDS[g](s) for g in ("escalates_violation", "escalates_failure", "escalates_limit",
                                      "escalates_unknown")):
            finish(escalation_stop_reason(s), escalated=True)
            return
        next_item(s)


_STATUS_OF: Final[Mapping[str, str]] = {
    "FINAL_ANSWER": "COMPLETED", "END_OF_BATCH": "COMPLETED", "MAX_ROUNDS": "TRUNCATED",
    "MAX_EXECUTIONS": "TRUNCATED", "MAX_TOOL_EXECUTIONS": "TRUNCATED", "MAX_REQUESTS": "TRUNCATED",
    "DEADLINE": "TRUNCATED", "INVALID_CALL": "REJECTED", "UNKNOWN_TOOL": "REJECTED",
    "INVALID_ARGUMENT": "REJECTED", "ID_CONFLICT": "REJECTED", "TERMINAL_ERROR": "FAILED",
    "MODEL_ERROR": "FAILED", "CANCELLED": "CANCELLED", "UNRECONCILED": "TRUNCATED",
}
