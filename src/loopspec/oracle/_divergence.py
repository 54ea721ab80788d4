"""What the ledger checker, its explanations and the grouping of runs share: the exceptions that end a run's
check, what is kept of a finished run, and the view of a :class:`~loopspec.oracle._judge.ledger.RunChecker`
the explanations read.

Shared data, below the stages: ``_judge.ledger`` (the checker) imports the explanations (``_judge.classify``,
``_judge.writes``), and they import only this module, never the checker; the group stage keeps the notes
of finished runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from ..core.rules import RunConfig, RunState
    from ..spec.loader import Transition
    from ._tables import Tables

Json = Any


class RunInputError(Exception):
    """The run's events cannot be read as a ledger (bad shape, missing events, wrong order)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(message)


@dataclass
class Divergence(Exception):
    """The first point where the ledger and the spec part ways (raised, then turned into a report)."""

    rule: str
    kind: str
    then: str  # "Then … but …" sentence
    expected: Json
    observed: Json
    index: int | None = None  # request index, when the divergence belongs to one request
    expected_tid: str | None = None  # the transition the spec takes here (drawn as the failed step)
    observed_tid: str | None = None
    invariant_hint: str | None = None
    at_step: bool = True  # the divergence is a transition (vs. a detail of an agreed transition)
    event: Mapping[str, Json] | None = None
    line: int | None = None
    invariants: tuple[str, ...] = ()

    def __str__(self) -> str:  # pragma: no cover - debugging aid
        return f"{self.rule} {self.kind}: {self.then}"


@dataclass(slots=True)
class Finished:
    """What is remembered of a run after its terminal event: enough to judge a late result (a run
    whose verdict was a violation or unreadable shares :data:`GAVE_UP`: its later events change
    nothing, so nothing more is kept)."""

    conformed: bool
    inflight: tuple[int, int] | None
    line: int
    late_seen: bool = False
    seq: int = 0
    #: section 5: the executions abandoned by the end whose late result has not been recorded yet
    abandoned: set[tuple[int, int]] | None = None

    def late_expected(self, ev: Mapping[str, Json]) -> bool:
        """Is ``ev`` the late result of an execution cut off by the end, not recorded yet? (then it is noted)"""
        if "step" in ev:
            return False
        got = (ev.get("index"), ev.get("ordinal"))
        if self.abandoned is not None:
            if got in self.abandoned and not _has_bool(got):
                self.abandoned.discard(got)  # type: ignore[arg-type]
                return True
            return False
        if self.inflight is not None and not self.late_seen and got == self.inflight:
            self.late_seen = True
            return True
        return False


#: The note of every run that did not conform (shared: later events of such a run are ignored).
GAVE_UP: Final = Finished(False, None, 0)


@dataclass
class Checks:
    """Which rules a run's verdict rests on: recomputed from recorded inputs, or taken as reported."""

    args_assumed: bool = False  # some arguments were recorded only as digests (R4, R2's object test)
    args_verified: bool = False  # some arguments were recorded and checked
    auth_assumed: bool = False  # an authorization decision was needed (R24)
    principal_recorded: bool = False
    principal_missing: bool = False
    signal_assumed: bool = False  # executions were abandoned: whether each was told is not recorded (R35)
    unreconciled_assumed: bool = False  # a final answer with writes: whether one is still unknown (R46)

    def assumed(self) -> list[str]:
        out = []
        if self.args_assumed:
            out.append("R4")
        if self.principal_missing:
            out.append("R16")
        if self.auth_assumed:
            out.append("R24")
        if self.signal_assumed:
            out.append("R35")
        if self.unreconciled_assumed:
            out.append("R46")
        return out


def _has_bool(values: tuple[Any, ...]) -> bool:
    """JSON true/false where a count or index belongs (Python's True == 1 must not pass for it)."""
    for v in values:  # noqa: SIM110 - a loop, not any(genexpr): this runs for most events
        if v.__class__ is bool:
            return True
    return False


class CheckerView(Protocol):
    """The state of a run's check that an explanation reads (a :class:`~loopspec.oracle._judge.ledger.RunChecker`
    is one). Explanations never change it, except :class:`~loopspec.oracle._judge.writes.WriteTracker`, which
    keeps its own state."""

    t: Tables
    s: RunState
    config: RunConfig
    run_id: str
    state: str
    step: int
    cur: Transition | None
    last_line: int
    events: int
    concurrent: bool
    checks: Checks
    req_key: str
    auth_input: bool
    args_assumed: bool
    inflight: tuple[int, int] | None
    abandoned: set[tuple[int, int]]

    def expected_or_none(self) -> Transition | None: ...

    def current_index(self) -> int | None: ...
