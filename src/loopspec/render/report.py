"""A command's report as plain data, for the HTML page (:mod:`.html`) and the JUnit XML file (:mod:`.junit`).

``loopspec fuzz``, ``check`` and ``verify`` each turn what they found into one :class:`Report` (the command
line does it: the drivers never import each other, nor this module); the renderers only read it. Two views of
one result:

* :class:`Item` — a row of the report's table: a fuzz finding, a checked run, a model-checking counterexample,
  with its reduced case as step tables, its "Let … Then …" explanation, its path on the spec machine and the
  command that replays it;
* :class:`Case` — a JUnit test case: one per rule (fuzz, verify) or per run (check), passed, failed, in error
  or skipped, a failure carrying the explanation and the replay command.

A report can be large (a check of a million runs): :class:`Items` keeps every failing row up to a cap and the
conforming ones up to another, and counts the rest, so memory and the page stay bounded; the JUnit file is
streamed (:class:`.junit.JunitWriter`) and lists every case.

Pure data: nothing here reads a file or runs a program.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "MAX_FAILING_ITEMS",
    "MAX_PASSING_ITEMS",
    "Case",
    "CaseStatus",
    "Item",
    "Items",
    "PathTrace",
    "Report",
    "StepTable",
]

Json = Any

#: What a JUnit test case can be (the four outcomes CI systems show).
CaseStatus = Literal["passed", "failed", "error", "skipped"]

#: The rows a report lists (the rest are counted): failing rows, each with its details, and conforming ones.
MAX_FAILING_ITEMS: Final = 5_000
MAX_PASSING_ITEMS: Final = 20_000


@dataclass(frozen=True, slots=True)
class StepTable:
    """A table of the reduced case: one per step (a ``batch.run``, a model round, a counterexample's path).
    ``failing`` is the row where the implementation (or the run) left the spec, shown highlighted."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    failing: int | None = None

    def to_json(self) -> dict[str, Json]:
        return {"title": self.title, "columns": list(self.columns), "rows": [list(r) for r in self.rows],
                "failing": self.failing}


@dataclass(frozen=True, slots=True)
class PathTrace:
    """A walk on the loop machine (``spec/schema/transition-path.schema.json``): transition ids from
    ``start`` (the initial state when None), ``failed`` the 0-based position of the step that went wrong."""

    path: tuple[str, ...]
    failed: int | None = None
    start: str | None = None
    label: str = ""

    @classmethod
    def from_json(cls, doc: Mapping[str, Json] | None) -> PathTrace | None:
        """From a ``{"path": [...], "failed": n}`` document (a fuzz case's ``.path.json``, a check run's trace,
        a counterexample's trace); None when there is none or it is not one."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("path"), list):
            return None
        path = tuple(str(t) for t in doc["path"])
        failed = doc.get("failed")
        start = doc.get("start")
        return cls(path, failed if isinstance(failed, int) and not isinstance(failed, bool) else None,
                   start if isinstance(start, str) else None, str(doc.get("label") or ""))

    def to_json(self) -> dict[str, Json]:
        return {"path": list(self.path), "failed": self.failed, "start": self.start, "label": self.label}


#: What a row says: the run or finding broke the spec, conforms, or could not be judged.
Verdict = Literal["fails", "passes", "unreadable"]


@dataclass(frozen=True, slots=True)
class Item:
    """One row of the report: ``key`` names it (a rule for a finding, a run id for a checked run), ``rule`` is
    the rule it breaks (None when it conforms), ``title`` says what happened in a line."""

    key: str
    verdict: Verdict
    title: str
    rule: str | None = None
    where: str = ""
    explanation: str = ""
    tables: tuple[StepTable, ...] = ()
    path: PathTrace | None = None
    replay: str | None = None
    files: tuple[str, ...] = ()
    facts: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Json]:
        return {"key": self.key, "verdict": self.verdict, "title": self.title, "rule": self.rule,
                "where": self.where, "explanation": self.explanation, "tables": [t.to_json() for t in self.tables],
                "path": self.path.to_json() if self.path else None, "replay": self.replay, "files": list(self.files),
                "facts": [list(f) for f in self.facts]}


@dataclass(frozen=True, slots=True)
class Case:
    """A JUnit test case. ``message`` is the one line a CI system shows; ``text`` the body of a failure (the
    explanation, then the replay command) or the case's output when it passed."""

    name: str
    classname: str
    status: CaseStatus = "passed"
    message: str = ""
    text: str = ""
    kind: str = ""
    seconds: float | None = None


class Items:
    """The rows of a report, bounded: every failing row up to :data:`MAX_FAILING_ITEMS`, conforming rows up to
    :data:`MAX_PASSING_ITEMS`; the rest are counted by verdict (and failing ones by rule) in ``not_listed``."""

    def __init__(self, max_failing: int = MAX_FAILING_ITEMS, max_passing: int = MAX_PASSING_ITEMS) -> None:
        self.rows: list[Item] = []
        self.max_failing = max_failing
        self.max_passing = max_passing
        self.failing = 0
        self.passing = 0
        self.not_listed: Counter[str] = Counter()
        self.by_rule: Counter[str] = Counter()
        self.by_verdict: Counter[str] = Counter()
        self._at: dict[str, int] = {}

    def add(self, item: Item, *, replaces: bool = False) -> None:
        """Add a row; with ``replaces``, a row of the same key listed earlier (a run first seen conforming that
        a later event shows violating) is replaced instead."""
        if replaces and item.key in self._at:
            i = self._at[item.key]
            old = self.rows[i]
            self._uncount(old)
            self.rows[i] = item
            self._count(item)
            return
        self._count(item)
        listed = self.failing < self.max_failing if item.verdict != "passes" else self.passing < self.max_passing
        if not listed:
            self.not_listed[item.verdict] += 1
            return
        if item.verdict == "passes":
            self.passing += 1
        else:
            self.failing += 1
        self._at[item.key] = len(self.rows)
        self.rows.append(item)

    def _count(self, item: Item) -> None:
        self.by_verdict[item.verdict] += 1
        if item.rule:
            self.by_rule[item.rule] += 1

    def _uncount(self, item: Item) -> None:
        self.by_verdict[item.verdict] -= 1
        if item.rule:
            self.by_rule[item.rule] -= 1

    def __iter__(self) -> Iterator[Item]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


@dataclass
class Report:
    """What one command found, for people (:func:`.html.report_html`) and CI (:mod:`.junit`).

    ``outcome`` is the headline (``passed``, ``failed``, ``incomplete`` when input could not be read,
    ``interrupted``); ``summary`` the facts shown at the top, in order; ``coverage`` the spec transitions'
    hit counts (every transition id of the machine, 0 when not taken), with ``coverage_label`` saying whose;
    ``rules`` the spec's rule titles (for the filters and the JUnit names); ``next_step`` the one command to
    run next."""

    command: str
    title: str
    command_line: str
    outcome: Literal["passed", "failed", "incomplete", "interrupted"]
    exit_code: int
    summary: list[tuple[str, str]] = field(default_factory=list)
    items: Items = field(default_factory=Items)
    cases: list[Case] = field(default_factory=list)
    coverage: dict[str, int] | None = None
    coverage_label: str = ""
    rules: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    next_step: str = ""
    seconds: float | None = None
    timestamp: str = ""
    version: str = ""
    #: what the item column of the table is called ("finding", "run", "counterexample")
    item_noun: str = "finding"

    def add_items(self, items: Iterable[Item]) -> None:
        for it in items:
            self.items.add(it)

    def counts(self) -> dict[str, int]:
        """The JUnit totals: tests, failures, errors, skipped."""
        c = Counter(case.status for case in self.cases)
        return {"tests": len(self.cases), "failures": c["failed"], "errors": c["error"], "skipped": c["skipped"]}


def rule_sort_key(rule: str) -> tuple[int, int, str]:
    """R2 before R10, rules before protocol findings (P1…), anything else last."""
    head, digits = rule[:1], rule[1:]
    order = {"R": 0, "P": 1}.get(head, 2)
    return (order, int(digits) if digits.isdigit() else 10**6, rule)


def sorted_rules(rules: Sequence[str]) -> list[str]:
    return sorted(dict.fromkeys(rules), key=rule_sort_key)
