"""The risk view of a framework report: the strict spec's divergences ranked by their consequence for a
user (docs/frameworks.md opens with it; the profile's conformance follows as the second view).

Pure: it reads the per-rule entries of conformance reports (``loopspec fuzz --report``'s JSON) and the
settings matrix, and ranks. A divergence's consequence is decided by the judge's finding kind (what the
implementation did), then by its rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Json = Any

__all__ = ["CONSEQUENCES", "Risk", "consequence", "rank_risks"]

#: (id, what it means for a user), most severe first
CONSEQUENCES: tuple[tuple[str, str], ...] = (
    ("executed-twice", "a call executed twice (a replay, an id conflict or a repeated id): a duplicate side effect"),
    ("past-budget", "an execution past a budget or limit"),
    ("not-allowed", "a call executed that is not allow-listed, malformed, invalid or under the wrong identity"),
    ("result-lost", "a lost or mis-paired result: the model is shown something else than each call's answer"),
    ("exception-shown", "the tool's exception text (a secret) shown to the model"),
    ("final-replaced", "a final answer replaced or lost, or a run ended with the wrong status"),
    ("other", "other divergences from the strict spec (what is checked, refused or shown, and when)"),
)

_RANK = {cid: n for n, (cid, _) in enumerate(CONSEQUENCES)}


def consequence(rule: str, kind: str) -> str:
    """The consequence id of a finding (rule, kind) of the judge."""
    if kind in ("replay-reexecuted", "executed-twice", "executed-despite-id-conflict", "conflict-reused"):
        return "executed-twice"
    if kind.startswith("executed-despite-") and any(w in kind for w in ("budget", "limit", "deadline")):
        return "past-budget"
    if kind in ("retried-beyond-budget",):
        return "past-budget"
    if kind.startswith("executed-despite-") or kind in ("untrusted-principal", "unexpected-execution"):
        return "not-allowed"
    if kind in ("answer-missing", "last-round-unanswered", "rejection-unanswered", "answers-out-of-order",
                "wrong-answer-id", "wrong-output", "extra-answer", "answers-lost-on-abort", "model-shown-wrong-results",
                "malformed-answer", "replay-wrong-output", "deduplicated-by-content", "failure-cached"):
        return "result-lost"
    if kind == "exception-text-shown":
        return "exception-shown"
    if rule in ("R19", "R21", "R22", "R28") or kind in ("wrong-final", "wrong-terminal-state"):
        return "final-replaced"
    return "other"


@dataclass
class Risk:
    framework: str
    mode: str
    rule: str
    kind: str
    status: str  # design-choice (a documented or source choice explains it) or deviates
    explanation: str
    case: str | None
    parameters: list[str] = field(default_factory=list)  # the choices that explain it (design choice)
    observed_only: list[str] | None = None  # explained only by observed choices
    avoided_by: list[str] = field(default_factory=list)  # settings under which the strict campaign did not find it

    @property
    def consequence(self) -> str:
        return consequence(self.rule, self.kind)

    @property
    def rank(self) -> int:
        return _RANK[self.consequence]


def rank_risks(reports: Iterable[tuple[str, str, Mapping[str, Json]]],
               matrix: Mapping[tuple[str, str], Sequence[tuple[str, set[str]]]] | None = None,
               baselines: Mapping[tuple[str, str], set[str]] | None = None) -> list[Risk]:
    """Every strict divergence of the reports ``(framework, mode, report JSON)``, most severe first.

    ``matrix[(framework, mode)]`` lists ``(settings, rules found)`` for each setting combination the
    campaign varied, ``baselines[(framework, mode)]`` the rules a campaign of the same size found at the
    adapter's defaults: a risk whose rule the baseline found and a combination did not names that
    combination as the setting that avoids it (as far as campaigns of that size can tell)."""
    out = []
    for fw, mode, data in reports:
        for r in data["rules"]:
            if r["status"] not in ("design-choice", "deviates"):  # conforms, or not exercised: no divergence
                continue
            risk = Risk(fw, mode, r["rule"], r["kind"], r["status"], r["explanation"], r.get("case"),
                        list(r.get("parameters", [])), r.get("observedOnly"))
            base = (baselines or {}).get((fw, mode))
            for settings, rules in (matrix or {}).get((fw, mode), ()):
                if r["rule"] not in rules and (base is None or r["rule"] in base):
                    risk.avoided_by.append(settings)
            out.append(risk)
    out.sort(key=lambda k: (k.rank, k.framework, k.mode, int(k.rule[1:]) if k.rule[1:].isdigit() else 99))
    return out
