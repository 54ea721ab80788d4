"""The exceptions and markers a tool body, the engine and the writes loop share: :class:`EngineError` (the
engine cannot be built or driven), :class:`ToolFailure` (a tool fails with a category, R17),
:class:`WriteAnswer` and :class:`Uncharged` (a write's answer from the operation ledger, section 6).
Both ``reference`` and ``writeloop`` import it; it imports only the core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core import rules as core

Json = Any

if TYPE_CHECKING:
    pass

__all__ = ["EngineError", "ToolFailure", "Uncharged", "WriteAnswer"]

class EngineError(RuntimeError):
    """The engine cannot be built or driven from this spec (a definition error, not a run outcome)."""


class ToolFailure(Exception):
    """Raised by a tool to fail with a category (R17). ``detail`` is for your logs only: it never
    reaches an answer, the ledger or the outcome."""

    def __init__(self, category: str, detail: str = "") -> None:
        if category not in core.FAILURE_CATEGORIES:
            raise ValueError(f"unknown failure category {category!r}; use one of {core.FAILURE_CATEGORIES}")
        self.category = category
        self.detail = detail
        super().__init__(category)


class WriteAnswer(Exception):
    """A write's error answer from the operation ledger (section 6): its code as is — ``OUTCOME_UNKNOWN``
    (R42) or the budget's — not mapped to a failure category; ``charged`` False when the write recorded no
    dispatch mark (R45)."""

    def __init__(self, code: str, charged: bool = True) -> None:
        super().__init__(code)
        self.code = code
        self.charged = charged


@dataclass(frozen=True, slots=True)
class Uncharged:
    """A write's successful answer for which no dispatch mark was recorded (a replay from the operation
    ledger, a recorded answer after a restart): its execution is not charged (R45)."""

    output: Json
