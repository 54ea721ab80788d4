"""What a check reports: one record per run (data first), plus input errors and the summary; and
:class:`Judged`, the verdict the judge stage hands to the record stage.

A violating run's record carries the judge's :class:`~loopspec.judge.verdict.Violation` (rule, kind,
invariant, the invariants the observed behaviour breaks, the rules' "Checked by" invariants, the
request index, the spec transition, expected vs observed, the "Let … Then …" explanation), where it
happened (event index within the run, seq, file line), the longest conforming prefix, and the path
on the spec machine with the failed step (``spec/schema/transition-path.schema.json``).

Shared data, below the stages: it imports nothing of the oracle.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..judge.verdict import Verdict, Violation

Json = Any

#: Why a rule is taken as reported, for ledgers (key: rule id).
LEDGER_ASSUMPTIONS: Final[Mapping[str, str]] = {
    "R4": "arguments recorded only as digests: whether they satisfy the tool's input schema (and whether they "
          "were a JSON object, R2) is taken from the ledger: INVALID_ARGUMENT where it says so, valid elsewhere; "
          "the place of that check in R1's order is verified",
    "R16": "the ledger does not record the principal each execution received (execution_started.principal)",
    "R24": "the authorization hook's answers are not recorded: a denial (T16) is taken as the hook's answer; that "
           "it is asked after the id checks and before any budget is charged is verified",
    "R35": "an abandoned execution's cancellation signal and deadline are not recorded: that each was told is taken "
           "as given; that every execution in flight at the end is abandoned, counted as started, and its late "
           "result only recorded as discarded is verified",
}

#: Section 6's rules a run ledger with write events lets the oracle verify (R36–R38, the tools' declarations and
#: the keys' derivation, and R41, what the external system answered, are not in the ledger).
WRITE_RULES_VERIFIED: Final = ("R39", "R40", "R42", "R43", "R44", "R45", "R46")

#: Rules a ledger cannot witness at all.
LEDGER_NOT_WITNESSED: Final[Mapping[str, str]] = {
    "R15": "error answers are recorded by code only: their message, next_action and request_id are not in the "
           "ledger (the code is checked)",
    "R25": "outputs are recorded as digests of the projected value: whether undeclared fields were projected away "
           "cannot be seen",
    "R47": "the ledger has no event for a batch rejected as a whole (protocol 1.3): every run it records ends "
           "with run_terminal after its requests' own answers, which R11 and R13 judge; whether the implementation "
           "would answer a batch by one rejection is not in it",
}


@dataclass(slots=True)
class Judged:
    """A run's verdict as the judge stage gives it: everything its record says but the file it is in."""

    run: str
    input: str
    verdict: str  # "conforms" | "violates" | "unreadable"
    events: int
    lines: tuple[int, int]
    summary: Mapping[str, Json] = field(default_factory=dict)
    checks: Mapping[str, Any] = field(default_factory=dict)  # verified, assumed, notWitnessed; why (rule -> reason)
    violation: Violation | None = None
    at: Mapping[str, Json] | None = None
    prefix: Mapping[str, Json] | None = None
    error: str | None = None
    error_line: int | None = None
    trace: Mapping[str, Json] | None = None  # the path on the spec machine (the record adds its source)
    amends: bool = False


@dataclass
class RunRecord:
    file: str
    run: str
    input: str
    verdict: str  # "conforms" | "violates" | "unreadable"
    events: int
    lines: tuple[int, int]
    summary: Mapping[str, Json] = field(default_factory=dict)
    checks: Mapping[str, Any] = field(default_factory=dict)  # verified, assumed, notWitnessed; why (rule -> reason)
    violation: Violation | None = None
    at: Mapping[str, Json] | None = None
    prefix: Mapping[str, Json] | None = None
    error: str | None = None
    error_line: int | None = None
    trace: Mapping[str, Json] | None = None
    amends: bool = False  # a later event changed the verdict of a run already reported as conforming

    @property
    def verdict_obj(self) -> Verdict:
        return Verdict(self.violation, dict(self.summary), {"events": self.events})

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {"file": self.file, "run": self.run, "input": self.input, "verdict": self.verdict,
                                "events": self.events, "lines": list(self.lines)}
        if self.amends:
            out["amends"] = True
        if self.summary:
            out["summary"] = dict(self.summary)
        if self.checks:
            out["checks"] = {k: dict(v) if isinstance(v, dict) else list(v) for k, v in self.checks.items()}
        if self.violation is not None:
            v = self.violation.to_json()
            if self.at is not None:
                v["at"] = dict(self.at)
            out["violation"] = v
            out["prefix"] = None if self.prefix is None else dict(self.prefix)
            if self.trace is not None:
                out["trace"] = dict(self.trace)
        if self.error is not None:
            out["error"] = {"line": self.error_line, "message": self.error}
        return out


#: Input errors reported with their exact location, per file; the rest are counted (memory stays
#: bounded however many lines are bad).
MAX_ERRORS_SHOWN: Final = 100


@dataclass(frozen=True)
class InputError:
    """A line or a file that could not be read, not attributable to one run."""

    file: str
    line: int | None
    message: str

    def text(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"

    def to_json(self) -> dict[str, Json]:
        return {"file": self.file, "line": self.line, "message": self.message}


@dataclass
class Summary:
    files: int = 0
    runs: int = 0
    events: int = 0
    conform: int = 0
    violate: int = 0
    unreadable: int = 0
    input_errors: int = 0
    by_rule: Counter[str] = field(default_factory=Counter)
    by_input: Counter[str] = field(default_factory=Counter)
    assumed: Counter[str] = field(default_factory=Counter)
    why: dict[str, str] = field(default_factory=dict)  # assumed rule -> why, from the first run that gave one

    def add(self, rec: RunRecord) -> None:
        if rec.amends:  # the run was counted as conforming; it now violates
            self.conform -= 1
            self.violate += 1
            assert rec.violation is not None
            self.by_rule[rec.violation.rule] += 1
            return
        self.runs += 1
        self.by_input[rec.input] += 1
        if rec.verdict == "conforms":
            self.conform += 1
        elif rec.verdict == "violates":
            self.violate += 1
            assert rec.violation is not None
            self.by_rule[rec.violation.rule] += 1
        else:
            self.unreadable += 1
        reasons = rec.checks.get("why") or {}
        for r in rec.checks.get("assumed", ()):
            self.assumed[r] += 1
            if r not in self.why and reasons.get(r):
                self.why[r] = reasons[r]

    def merge(self, other: Summary) -> None:
        for k in ("files", "runs", "events", "conform", "violate", "unreadable", "input_errors"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.by_rule.update(other.by_rule)
        self.by_input.update(other.by_input)
        self.assumed.update(other.assumed)
        for r, w in other.why.items():
            self.why.setdefault(r, w)

    @property
    def exit_code(self) -> int:
        if self.unreadable or self.input_errors:
            return 2
        return 1 if self.violate else 0

    def to_json(self) -> dict[str, Json]:
        return {
            "files": self.files, "runs": self.runs, "events": self.events, "conform": self.conform,
            "violate": self.violate, "unreadable": self.unreadable, "inputErrors": self.input_errors,
            "violationsByRule": dict(sorted(self.by_rule.items(), key=_rule_key)),
            "inputs": dict(sorted(self.by_input.items())),
            "assumed": {r: {"runs": n, "why": self.why.get(r) or LEDGER_ASSUMPTIONS.get(r, "")}
                        for r, n in sorted(self.assumed.items(), key=_rule_key)},
            "exitCode": self.exit_code,
        }

    def line(self) -> str:
        rules = ", ".join(f"{r} ×{n}" for r, n in sorted(self.by_rule.items(), key=_rule_key))
        files = f"{self.files} file{'s' if self.files != 1 else ''}"
        text = (f"checked {self.runs} run{'s' if self.runs != 1 else ''}, {self.events} event"
                f"{'s' if self.events != 1 else ''} in {files}: {self.conform} conform, {self.violate} violate"
                + (f" ({rules})" if rules else "") + f", {self.unreadable} unreadable")
        if self.input_errors:
            text += f"; {self.input_errors} input error{'s' if self.input_errors != 1 else ''}"
        return text


def _rule_key(item: tuple[str, int]) -> tuple[int, str]:
    r = item[0]
    return (int(r[1:]) if r[1:].isdigit() else 999, r)
