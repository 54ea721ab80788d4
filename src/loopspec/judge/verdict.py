"""What every judge shares and every driver reads: the trace format's name, the :class:`Verdict` and its
:class:`Violation`, :class:`TraceError` for a malformed trace (naming the field), the protocol's error codes,
and the canary that shows a tool exception's text reaching an answer (R15).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..spec.loader import Spec
from ..spec.loader import default_spec as _default_spec

__all__ = ["CANARY_PREFIX", "ERROR_FIELDS", "PROTOCOL_CODES", "TRACE_FORMAT", "TraceError", "Verdict", "Violation", "default_spec", "shows_canary"]

Json = Any


TRACE_FORMAT: Final = "loopspec-trace/1"


#: Tool exceptions raised by loopspec's harnesses carry this marker in their message (R15): text that shows it
#: is the exception's text, which only a profile with error_text = exception-text may show the model.
CANARY_PREFIX: Final = "loopspec-canary-"


def shows_canary(value: Json) -> bool:
    """Does any string in ``value`` (any JSON value, nested) carry a tool exception's canary?"""
    if isinstance(value, str):
        return CANARY_PREFIX in value
    if isinstance(value, dict):
        return any(shows_canary(k) or shows_canary(v) for k, v in value.items())
    if isinstance(value, list):
        return any(shows_canary(v) for v in value)
    return False


#: Protocol findings: the implementation broke the adapter protocol (spec/PROTOCOL.md) rather than
#: a rule of SPEC.md, so no answer could be compared.
PROTOCOL_CODES: Final[Mapping[str, str]] = {
    "P1": "the implementation process could not start, exited or closed its output",
    "P2": "no message from the implementation within the per-request timeout",
    "P3": "a line on the implementation's stdout that is not a JSON-RPC 2.0 message",
    "P4": "a JSON-RPC envelope error: a response with the wrong id, an error response, an unknown method",
    "P5": "a message whose params or result do not have the shape the protocol defines",
    "P6": "the initialize handshake failed or the implementation lacks the capability for this mode",
    "P7": "a divergence that a fresh process does not reproduce (state carried across runs, or nondeterminism)",
}


#: Fields an error answer may carry on the wire (R15: the structure, nothing else).
ERROR_FIELDS: Final = frozenset({"id", "status", "code", "message", "next_action", "request_id"})


class TraceError(ValueError):
    """The trace itself is malformed (not a divergence of the implementation). Names the field."""

    def __init__(self, where: str, message: str) -> None:
        self.where, self.message = where, message
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Violation:
    """One divergence between the spec and the implementation."""

    rule: str  # SPEC.md rule id (R6, ...) or a protocol code (P1..P7)
    kind: str  # short machine-readable name, e.g. "replay-reexecuted"
    index: int | None  # request index, when the divergence belongs to one request
    expected: Json
    observed: Json
    explanation: str
    invariant: str | None = None
    invariants: tuple[str, ...] = ()  # every invariant the observed behaviour violates
    transition: str | None = None  # the spec transition the expected behaviour takes at `index`
    checked_by: tuple[str, ...] = ()  # the invariants SPEC.md cites for the rule ("Checked by:")

    def to_json(self) -> dict[str, Json]:
        return {
            "rule": self.rule,
            "kind": self.kind,
            "invariant": self.invariant,
            "invariants": list(self.invariants),
            "checkedBy": list(self.checked_by),
            "index": self.index,
            "transition": self.transition,
            "expected": self.expected,
            "observed": self.observed,
            "explanation": self.explanation,
        }


@dataclass(frozen=True)
class Verdict:
    """The judge's answer for one trace: ``ok``, or the first violation; plus both behaviours."""

    violation: Violation | None
    expected: Mapping[str, Json] = field(default_factory=dict)
    observed: Mapping[str, Json] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.violation is None

    def to_json(self) -> dict[str, Json]:
        return {
            "ok": self.ok,
            "violation": None if self.violation is None else self.violation.to_json(),
            "expected": dict(self.expected),
            "observed": dict(self.observed),
        }


def default_spec() -> Spec:
    """The default spec (the shipped one, or the one chosen with ``--spec``), loaded once per choice."""
    return _default_spec()


def _need(cond: bool, where: str, message: str) -> None:
    if not cond:
        raise TraceError(where, message)
