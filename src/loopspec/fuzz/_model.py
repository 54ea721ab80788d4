"""The fuzzer's data: findings, cases and campaign results, and the strict JSON they are written as.

A **case** (``loopspec-fuzz-case/1``, JSON Schema in spec/schema/fuzz-case.schema.json) is a finding
on disk: the steps to replay, the traces, the verdict. ``loopspec replay CASE --impl CMD`` reruns it.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..judge.verdict import Verdict
from ..support.safejson import JsonInputError, load_json

__all__ = [
    "CAMPAIGN_FORMAT",
    "CASE_FORMAT",
    "CampaignResult",
    "CaseError",
    "Finding",
    "ReplayResult",
    "Stats",
    "as_finding",
    "cause_name",
    "json_text",
    "load_case",
    "step_calls",
    "step_magnitude",
]

Json = Any

CASE_FORMAT: Final = "loopspec-fuzz-case/1"
CAMPAIGN_FORMAT: Final = "loopspec-fuzz-campaign/1"
#: The files a campaign writes per finding (``<cause><suffix>``; ``<rule><suffix>`` before causes were named).
FINDING_SUFFIXES: Final = (".json", ".txt", ".path.json")
RULE_FILE: Final = re.compile(r"^([PR][0-9]{1,3}(?:-[a-z0-9][a-z0-9-]*)?)(\.json|\.txt|\.path\.json)$")


def json_text(doc: Json, *, indent: int | None = 2) -> str:
    """``doc`` as strict JSON text (RFC 8259: no NaN or Infinity), whatever it holds: a value that
    cannot be written as such (non-finite, nested too deep) is replaced by a string saying so."""
    try:
        return json.dumps(doc, indent=indent, ensure_ascii=False, allow_nan=False) + "\n"
    except (ValueError, TypeError, RecursionError):
        return json.dumps(_writable(doc, 0), indent=indent, ensure_ascii=False, allow_nan=False) + "\n"


def _writable(v: Json, depth: int) -> Json:
    if depth > 200:
        return "<nested too deep to write>"
    if isinstance(v, float) and not math.isfinite(v):
        return f"<non-finite number {v}>"
    if isinstance(v, dict):
        return {str(k): _writable(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_writable(x, depth + 1) for x in v]
    if v is None or isinstance(v, str | int | float | bool):
        return v
    return repr(v)


# --------------------------------------------------------------------------------------------
# Findings
# --------------------------------------------------------------------------------------------


@dataclass
class Finding:
    """A divergence with the whole example that produced it (earlier steps passed)."""

    verdict: Verdict
    steps: list[dict[str, Json]]
    traces: list[dict[str, Json]]
    reproduced: bool | None = None  # set after a replay in a fresh process
    shrunk: bool = False
    #: steps the same (shared) process ran before this example: the case may depend on them
    prefix: list[dict[str, Json]] = field(default_factory=list)
    #: the case file of an earlier campaign this finding was replayed from (the corpus in ``--out``)
    origin: str | None = None

    @property
    def rule(self) -> str:
        assert self.verdict.violation is not None
        return self.verdict.violation.rule

    @property
    def kind(self) -> str:
        assert self.verdict.violation is not None
        return self.verdict.violation.kind

    @property
    def cause(self) -> str:
        """The cause, named beside the rule (``R11-answer-lost-after-rejection``, ``R2-valid-id-rejected``): two
        findings are one cause when they fail the same check in the same way. Its case files are named by it."""
        return cause_name(self.rule, self.kind)

    @property
    def calls(self) -> int:
        return sum(step_calls(s) for s in self.steps)

    @property
    def size(self) -> tuple[int, int, int, int, int]:
        """What minimization reduces: calls, then steps, then the numbers (budgets, limits, script
        length), then the characters a reader cannot read at a glance (a case prefers ``c1`` to ``\x1c``), then
        the text."""
        return (self.calls, len(self.steps), sum(step_magnitude(s) for s in self.steps), unreadable(self.steps),
                len(json.dumps(self.steps)))

    def case_json(self, meta: Mapping[str, Json]) -> dict[str, Json]:
        return {
            "format": CASE_FORMAT,
            "mode": self.steps[-1].get("kind", "batch") if self.steps else "batch",
            **meta,
            "shrunk": self.shrunk,
            "reproduced": self.reproduced,
            "steps": self.steps,
            "failingStep": len(self.steps) - 1,
            "verdict": self.verdict.to_json(),
            "traces": self.traces,
        }


_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


def unreadable(v: Json) -> int:
    """How many characters of the strings in ``v`` (keys too) are not plain ASCII letters, digits or ``_-.``."""
    if isinstance(v, str):
        return sum(1 for ch in v if ch not in _PLAIN)
    if isinstance(v, dict):
        return sum(unreadable(k) + unreadable(x) for k, x in v.items())
    if isinstance(v, list):
        return sum(unreadable(x) for x in v)
    return 0


def step_calls(step: Mapping[str, Json]) -> int:
    """The number of calls a step proposes (a batch's calls, or every round's calls in a loop)."""
    if step.get("kind", "batch") == "loop":
        return sum(len(r["calls"]) for r in step.get("model", [])
                   if isinstance(r, dict) and isinstance(r.get("calls"), list))
    return len(step.get("calls", []))


def step_magnitude(step: Mapping[str, Json]) -> int:
    cfg = step.get("config", {})
    numbers = [cfg.get("budget"), *(cfg.get("limits") or {}).values()]
    numbers += [t.get("maxExecutions") for t in cfg.get("tools", []) if isinstance(t, dict)]
    crashes = step.get("crashes")
    return (sum(n for n in numbers if isinstance(n, int) and not isinstance(n, bool)) + len(step.get("script", []))
            + (len(crashes) if isinstance(crashes, list) else 0))


@dataclass
class CampaignResult:
    findings: list[Finding]
    seed: int
    stats: dict[str, Json]
    files: list[str]
    interrupted: bool = False
    coverage: dict[str, Json] = field(default_factory=dict)
    params: dict[str, Json] = field(default_factory=dict)
    #: the signal that interrupted the campaign: 2 (SIGINT, Ctrl-C), 15 (SIGTERM) or 1 (SIGHUP); None if it was not
    signum: int | None = None
    #: what became of the cases an earlier campaign left in ``out`` (the corpus, replayed first): one entry per
    #: case, ``{"case", "status": still-failing|fixed|renamed|not-replayed|unreadable, ...}``
    corpus: list[dict[str, Json]] = field(default_factory=list)
    #: what ``loopspec replay --impl`` needs to rerun a case against this implementation
    impl: str | None = None
    #: a file in ``out`` that could not be written, and why (the campaign stopped there; see OutputError)
    out_error: str | None = None

    @property
    def ok(self) -> bool:
        return not self.findings


def is_case_file(path: Path) -> bool:
    """Is ``path`` a fuzz case (ours to replace)? Reads at most its first kilobytes."""
    try:
        if path.is_symlink() or not path.is_file():
            return False
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return f'"format": "{CASE_FORMAT}"'.encode() in head


class CaseError(ValueError):
    """A case file that cannot be replayed (names the field)."""


def load_case(path: str | Path) -> dict[str, Json]:
    p = Path(path)
    try:  # the hardened loader: size, UTF-8, depth, integer digits, finite numbers; file:line: reason
        doc = load_json(p, what="case file")
    except JsonInputError as exc:
        raise CaseError(str(exc) if exc.file else f"{p}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != CASE_FORMAT:
        raise CaseError(f"{p}: format: must be {CASE_FORMAT!r}")
    steps = doc.get("steps")
    if not isinstance(steps, list) or not steps:
        raise CaseError(f"{p}: steps: must be a non-empty list")
    for i, s in enumerate(steps):
        if not isinstance(s, dict) or s.get("kind", "batch") not in ("batch", "loop", "writes") \
                or not isinstance(s.get("config"), dict):
            raise CaseError(f"{p}: steps[{i}]: must be an object with kind batch|loop|writes and a config")
        if s.get("kind", "batch") in ("batch", "writes") and not isinstance(s.get("calls"), list):
            raise CaseError(f"{p}: steps[{i}].calls: must be a list")
        if not isinstance(s.get("script", []), list):
            raise CaseError(f"{p}: steps[{i}].script: must be a list")
        problem = _step_problem(s)
        if problem is not None:
            raise CaseError(f"{p}: steps[{i}].{problem}")
    return doc


def _step_problem(step: Mapping[str, Json]) -> str | None:
    """What makes a case step impossible to replay (the configuration the judge reads, the tool
    script, the model's replies), named by field; None when it can be replayed."""
    from ..core import rules as core
    from ..judge.batch import parse_batch_config
    from ..judge.loop import parse_loop_config
    from ..judge.verdict import TraceError

    kind = step.get("kind", "batch")
    if kind == "writes":
        return _writes_step_problem(step)
    try:
        if kind == "batch":
            cfg = step["config"]
            parse_batch_config(cfg)
            for k in ("budget", "mode", "principal"):
                if k not in cfg:
                    return f"config.{k}: missing"
        else:
            parse_loop_config(step["config"])
    except TraceError as exc:
        return f"{exc.where}: {exc.message}"
    for k, entry in enumerate(step.get("script", [])):
        if not isinstance(entry, dict) or not (("value" in entry) ^ ("fail" in entry)):
            return f"script[{k}]: must be {{\"value\": V}} or {{\"fail\": CATEGORY}}"
        if "fail" in entry and entry["fail"] not in core.FAILURE_CATEGORIES:
            return f"script[{k}].fail: one of {', '.join(core.FAILURE_CATEGORIES)}"
    model = step.get("model", [])
    if kind == "loop" and (not isinstance(model, list) or not all(isinstance(r, dict) for r in model)):
        return "model: must be a list of replies (objects)"
    return None


def _writes_step_problem(step: Mapping[str, Json]) -> str | None:
    """What makes a writes step (PROTOCOL.md section 8) impossible to replay, named by field."""
    from ..judge.verdict import TraceError
    from ..judge.writes import parse_writes_config

    try:
        parse_writes_config(step["config"], step["calls"])
    except TraceError as exc:
        return f"{exc.where.removeprefix('trace.')}: {exc.message}"
    for k, entry in enumerate(step.get("script", [])):
        ok = isinstance(entry, dict) and len(entry) == 1 and (
            "value" in entry or (entry.get("fail") in ("DEPENDENCY_TEMPORARY", "NOT_FOUND_OR_NOT_ACCESSIBLE",
                                                       "INTERNAL_ERROR"))
            or entry.get("lose") in ("applied", "not-applied") or entry.get("restart") in ("applied", "not-applied"))
        if not ok:
            return (f"script[{k}]: must be {{\"value\": V}}, {{\"fail\": CATEGORY}}, {{\"lose\": applied|not-applied}} "
                    "or {\"restart\": applied|not-applied}")
    outages = step.get("outages", [])
    if not isinstance(outages, list) or not all(isinstance(n, int) and not isinstance(n, bool) and 0 < n < 10**6
                                                for n in outages):
        return "outages: must be a list of positive integers"
    crashes = step.get("crashes", [])
    if not isinstance(crashes, list) or not all(isinstance(n, int) and not isinstance(n, bool) and 0 < n < 10**6
                                                for n in crashes):
        return "crashes: must be a list of positive integers (the lookups at which the process is killed)"
    return None


@dataclass
class ReplayResult:
    verdicts: list[Verdict]
    traces: list[dict[str, Json]]

    @property
    def verdict(self) -> Verdict | None:
        return self.verdicts[-1] if self.verdicts else None

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts)


def cause_name(rule: str, kind: str) -> str:
    """A cause's name: the rule, then the kind of divergence (``R7-conflict-reused``)."""
    return f"{rule}-{kind}"


def as_finding(rr: ReplayResult, steps: Sequence[Mapping[str, Json]], cause: str | None = None) -> Finding | None:
    """The divergence of a run (with the steps up to it), if it is of ``cause`` (any when None)."""
    v = rr.verdict
    if v is None or v.violation is None or (cause is not None and cause_name(v.violation.rule, v.violation.kind) != cause):
        return None
    n = len(rr.verdicts)
    return Finding(v, [dict(s) for s in steps[:n]], rr.traces[:n])


@dataclass
class Stats:
    """What a campaign (or one shard of it) did, counted by the stages as they go."""

    examples: int = 0
    steps: int = 0
    executions: int = 0
    models: int = 0
    judged: int = 0  # traces the fast path could not settle (the judge ran)
    step_seconds: float = 0.0
    reduce_seconds: float = 0.0
    reduce_runs: int = 0
    folded: int = 0  # findings not reported apart: P7 symptoms of a state leak reported as R5
    stopped: str | None = None  # why exploration ended early: time-budget, shrink-time, interrupted
    #: rule preconditions the explored traces met (loopspec.fuzz._exercised: replays, conflicts, failures, ...)
    exercised: Counter[str] = field(default_factory=Counter)

    def merge(self, o: Stats) -> None:
        self.examples += o.examples
        self.steps += o.steps
        self.executions += o.executions
        self.models += o.models
        self.judged += o.judged
        self.step_seconds += o.step_seconds
        self.reduce_seconds += o.reduce_seconds
        self.reduce_runs += o.reduce_runs
        self.folded += o.folded
        self.exercised.update(o.exercised)
        self.stopped = self.stopped or o.stopped
