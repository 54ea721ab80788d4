"""The stateful fuzzer: Hypothesis drives an implementation over the adapter protocol.

A :class:`~hypothesis.stateful.RuleBasedStateMachine` generates steps (a configuration, a batch
of calls and a script for the tools), sends each to a fresh implementation process per example,
records the exchange as a trace and judges it with :mod:`loopspec._judge` — the same judge the
conformance oracle uses. A divergence raises an exception whose type names the rule, so
Hypothesis shrinks every distinct rule violation on its own and reports each one. Every finding
is written to the output directory as soon as it is seen (atomically), and replaced by smaller
versions while shrinking runs, so an interrupted campaign still leaves its evidence on disk.

Files per finding (``<rule>`` is the rule id, e.g. ``R6``):

* ``<rule>.json`` — the case (``loopspec-fuzz-case/1``): the steps to replay, the traces, the
  verdict; ``loopspec replay <rule>.json --impl CMD`` reruns it exactly;
* ``<rule>.txt`` — the readable explanation;
* ``<rule>.path.json`` — ``{"path": [...], "failed": n}``: the spec transitions of the expected
  behaviour and the one the implementation did not follow (``loopspec diagram --trace``).

and ``campaign.json`` for the whole campaign.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import Flaky
from hypothesis.reporting import with_reporter
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from .._judge import TRACE_FORMAT, Verdict, decision_position, judge
from .._spec import load_rules, load_spec
from .._text import compact, write_atomic
from ._adapter import Impl, ImplFactory
from ._generate import batch_steps
from ._harness import LATE_GRACE, amend_late, late_message, run_batch_step, trace_failed
from ._rpc import ProtocolFailure

__all__ = [
    "CASE_FORMAT",
    "Campaign",
    "CampaignResult",
    "Divergence",
    "Finding",
    "diagram_trace",
    "load_case",
    "replay_case",
]

Json = Any

CASE_FORMAT: Final = "loopspec-fuzz-case/1"
#: The files a campaign writes per finding (``<rule><suffix>``).
FINDING_SUFFIXES: Final = (".json", ".txt", ".path.json")
_RULE_FILE = re.compile(r"^([PR][0-9]{1,3})(\.json|\.txt|\.path\.json)$")


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
CAMPAIGN_FORMAT: Final = "loopspec-fuzz-campaign/1"


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

    @property
    def rule(self) -> str:
        assert self.verdict.violation is not None
        return self.verdict.violation.rule

    @property
    def kind(self) -> str:
        assert self.verdict.violation is not None
        return self.verdict.violation.kind

    @property
    def calls(self) -> int:
        return sum(step_calls(s) for s in self.steps)

    @property
    def size(self) -> tuple[int, int, int, int]:
        """What minimization reduces: calls, then steps, then the numbers (budgets, limits, script
        length), then the text."""
        return (self.calls, len(self.steps), sum(step_magnitude(s) for s in self.steps), len(json.dumps(self.steps)))

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
    return sum(n for n in numbers if isinstance(n, int) and not isinstance(n, bool)) + len(step.get("script", []))


class _StopCampaign(BaseException):
    """Ends the Hypothesis run early (the shrink time budget is spent). Not an Exception, so
    Hypothesis lets it through instead of treating it as one more failure."""


class Divergence(AssertionError):
    """Raised inside the state machine when the judge finds a divergence (one subclass per rule)."""

    finding: Finding

    def __init__(self, finding: Finding) -> None:
        self.finding = finding
        v = finding.verdict.violation
        assert v is not None
        super().__init__(f"{v.rule} {v.kind} at request {v.index}: {v.explanation.splitlines()[-1]}")


_DIVERGENCE_TYPES: dict[str, type[Divergence]] = {}


def divergence_type(rule_id: str) -> type[Divergence]:
    """A distinct exception type per rule, so Hypothesis shrinks and reports each rule apart."""
    if rule_id not in _DIVERGENCE_TYPES:
        _DIVERGENCE_TYPES[rule_id] = type(f"Divergence{rule_id}", (Divergence,), {})
    return _DIVERGENCE_TYPES[rule_id]


# --------------------------------------------------------------------------------------------
# Running steps
# --------------------------------------------------------------------------------------------


def run_step(impl: Impl, step: Mapping[str, Json]) -> dict[str, Json]:
    kind = step.get("kind", "batch")
    if kind == "batch":
        return run_batch_step(impl, step)
    if kind == "loop":
        from ._loop import run_loop_step

        return run_loop_step(impl, step)
    raise ValueError(f"unknown step kind {kind!r}")


def failed_start_trace(step: Mapping[str, Json], failure: ProtocolFailure) -> dict[str, Json]:
    """The trace of a step whose implementation could not even be started/initialized."""
    kind = step.get("kind", "batch")
    trace: dict[str, Json] = {"format": TRACE_FORMAT, "kind": kind, "config": step["config"],
                              "events": [failure.to_event()]}
    if kind == "batch":
        trace["calls"] = step["calls"]
    return trace


@dataclass
class _Example:
    impl: Impl | None = None
    steps: list[dict[str, Json]] = field(default_factory=list)
    traces: list[dict[str, Json]] = field(default_factory=list)


@dataclass
class CampaignResult:
    findings: list[Finding]
    seed: int
    stats: dict[str, Json]
    files: list[str]
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.findings


class Campaign:
    """One fuzz campaign against one implementation."""

    def __init__(
        self,
        factory: ImplFactory,
        *,
        mode: str = "batch",
        max_examples: int = 100,
        seed: int | None = None,
        out: str | Path | None = None,
        steps: int = 6,
        max_calls: int = 6,
        confirm: bool = True,
        progress: Callable[[str], None] | None = None,
        isolation: str = "campaign",
        shrink_seconds: float = 120.0,
        profile: str | None = None,
    ) -> None:
        self.profile = profile
        if mode not in ("batch", "loop"):
            raise ValueError(f"mode must be batch or loop, got {mode!r}")
        if isolation not in ("example", "campaign"):
            raise ValueError(f"isolation must be example or campaign, got {isolation!r}")
        self.isolation = isolation
        self.shared: Impl | None = None
        self.shared_history: list[dict[str, Json]] = []  # every step the shared process has run
        #: the steps and traces of the previous example on the shared process (a late message after
        #: its last answer is that example's finding)
        self.shared_last: tuple[list[dict[str, Json]], list[dict[str, Json]]] | None = None
        self.shrink_seconds = shrink_seconds
        self.first_found: float | None = None
        self.finish_deadline: float | None = None
        self.stopped_early = False
        self.factory = factory
        self.mode = mode
        self.max_examples = max_examples
        self.seed = seed if seed is not None else random.randrange(2**32)
        self.out = Path(out) if out is not None else None
        self.steps = steps
        self.max_calls = max_calls
        self.confirm = confirm
        self.progress = progress
        self.best: dict[str, Finding] = {}
        self.examples = 0
        self.step_count = 0
        self.executions = 0
        self.step_seconds = 0.0
        self.started = 0.0
        self.hang_timeout: float | None = None
        self.slowest = 0.0
        self.normalize = factory.step_normalizer()

    # -- the state machine ----------------------------------------------------------------
    def machine_class(self) -> type[RuleBasedStateMachine]:
        campaign = self
        if self.mode == "loop":
            from ._loop import loop_steps

            step_strategy = loop_steps(self.max_calls)
        else:
            step_strategy = batch_steps(self.max_calls)
        if self.normalize is not None:  # an in-process framework adapter: only what it can express
            step_strategy = step_strategy.map(self.normalize)

        class AdapterFuzz(RuleBasedStateMachine):
            """Fresh implementation per example; every step is judged as it happens."""

            def __init__(self) -> None:
                super().__init__()
                self.example = _Example()
                campaign.examples += 1

            @rule(step=step_strategy)
            def run(self, step: dict[str, Json]) -> None:
                campaign.run_step(self.example, step)

            @rule(step=step_strategy)
            def run_twice(self, step: dict[str, Json]) -> None:
                """The same step twice in one process: each run starts fresh, so both must match the spec
                (an implementation that keeps bindings or results across runs diverges the second time)."""
                campaign.run_step(self.example, step)
                campaign.run_step(self.example, step)

            def teardown(self) -> None:
                campaign.end_example(self.example)

        return AdapterFuzz

    def end_example(self, ex: _Example) -> None:
        if ex.impl is not None and ex.traces and ex.traces[-1]["events"][-1].get("type") == "response":
            late = late_message(ex.impl, f"{ex.traces[-1]['kind']}.run")
            if late is not None:  # recorded as that step's finding; the process is not reused
                amend_late(ex.traces[-1], late)
                verdict = judge(ex.traces[-1], profile=self.profile)
                if not verdict.ok:
                    self._record(Finding(verdict, list(ex.steps), list(ex.traces)))
        if ex.impl is not None:
            if self.isolation == "campaign" and not self.best and ex.impl is self.shared:
                self.shared_last = (list(ex.steps), list(ex.traces))  # keep the process for the next example
            else:
                self.factory.release(ex.impl)
                if ex.impl is self.shared:
                    self.shared = None
            ex.impl = None

    def _open(self) -> Impl:
        if self.isolation == "campaign" and not self.best:
            # one process for the whole campaign, until the first divergence: from then on every
            # example gets a fresh process again, so that shrinking is reproducible
            if self.shared is None:
                self.shared = self.factory.open(self.mode)
                self.shared_history = []
            return self.shared
        return self.factory.open(self.mode)

    def run_step(self, ex: _Example, step: dict[str, Json]) -> None:
        if self._time_left() <= 0:
            self.stopped_early = True
            raise _StopCampaign
        if ex.impl is None:
            try:
                ex.impl = self._open()
                self._apply_hang_timeout(ex.impl)
            except ProtocolFailure as f:
                trace = failed_start_trace(step, f)
                self._judge_and_raise(ex, step, trace)
                return
        if not ex.traces and ex.impl is self.shared and self.shared_last is not None:
            steps, traces = self.shared_last
            self.shared_last = None
            if traces and traces[-1]["events"][-1].get("type") == "response":
                late = late_message(ex.impl, f"{traces[-1]['kind']}.run")
                if late is not None:  # the previous example's last step sent more after its answer
                    amend_late(traces[-1], late)
                    verdict = judge(traces[-1], profile=self.profile)
                    if not verdict.ok:
                        self._record(Finding(verdict, steps, traces))
                    self._drop(ex)
                    ex.impl = self._open()
        if ex.traces and ex.traces[-1]["events"][-1].get("type") == "response":
            late = late_message(ex.impl, f"{ex.traces[-1]['kind']}.run")
            if late is not None:  # it belongs to the step before: that step is the finding
                amend_late(ex.traces[-1], late)
                self._drop(ex)
                prev_step, prev_trace = ex.steps.pop(), ex.traces.pop()
                if self.shared_history:
                    self.shared_history.pop()
                self._judge_and_raise(ex, prev_step, prev_trace)
        t0 = time.perf_counter()
        trace = run_step(ex.impl, step)
        dt = time.perf_counter() - t0
        self.step_seconds += dt
        self.step_count += 1
        self.executions += sum(1 for e in trace["events"] if e.get("type") == "execute")
        failed = trace_failed(trace)
        if failed:
            if trace["events"][-1].get("code") == "P2" and self.hang_timeout is None:
                # a hang: later examples need not wait as long to see it again (shrinking stays fast)
                self.hang_timeout = max(0.5, min(self.factory.timeout or 10.0, 20 * self.slowest))
            self._drop(ex)
        else:
            self.slowest = max(self.slowest, dt)
        self._judge_and_raise(ex, step, trace)

    def _drop(self, ex: _Example) -> None:
        """Release (kill) the example's process after a protocol failure."""
        if ex.impl is not None:
            self.factory.release(ex.impl)
            if ex.impl is self.shared:
                self.shared = None
            ex.impl = None

    def _apply_hang_timeout(self, impl: Impl) -> None:
        channel = getattr(impl, "channel", None)
        if self.hang_timeout is not None and channel is not None:
            channel.timeout = self.hang_timeout

    def _judge_and_raise(self, ex: _Example, step: dict[str, Json], trace: dict[str, Json]) -> None:
        ex.steps.append(step)
        ex.traces.append(trace)
        shared = ex.impl is not None and ex.impl is self.shared
        if shared:
            self.shared_history.append(step)
        verdict = judge(trace, profile=self.profile)
        if verdict.ok:
            return
        prefix = self.shared_history[: len(self.shared_history) - len(ex.steps)] if shared else []
        finding = Finding(verdict, list(ex.steps), list(ex.traces), prefix=prefix)
        self._record(finding)
        raise divergence_type(finding.rule)(finding)

    def _record(self, finding: Finding) -> None:
        best = self.best.get(finding.rule)
        if self.first_found is None:
            self.first_found = time.perf_counter()
        if best is None or finding.size < best.size:
            self.best[finding.rule] = finding
            if best is None and self.progress is not None:
                self.progress(f"found {finding.rule} {finding.kind} ({finding.calls} call(s)); shrinking…")
            if self.out is not None:
                self.written.update(Path(x).name for x in self.write_finding(finding, provisional=True))

    # -- running ----------------------------------------------------------------------------
    def settings(self) -> settings:
        return settings(
            max_examples=self.max_examples,
            stateful_step_count=self.steps,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            verbosity=Verbosity.quiet,
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
            report_multiple_bugs=True,
            print_blob=False,
        )

    def clear_previous(self) -> None:
        """Remove the finding files of an earlier campaign in ``out`` — those its ``campaign.json``
        listed and provisional ones it never listed (interrupted) — so that the directory never mixes
        two campaigns' findings. Only files that are ours: named after a rule, and a case file's
        JSON says it is a fuzz case."""
        if self.out is None or not self.out.is_dir():
            return
        rules: set[str] = set()
        try:
            doc = json.loads((self.out / "campaign.json").read_text(encoding="utf-8"))
            rules = {f["rule"] for f in doc.get("findings", []) if isinstance(f.get("rule"), str)}
        except (OSError, ValueError, AttributeError, TypeError, RecursionError):
            pass
        doomed = []
        for entry in self.out.iterdir():
            m = _RULE_FILE.match(entry.name)
            if m is None or entry.is_symlink() or not entry.is_file():
                continue
            rule = m.group(1)
            if rule in rules or _is_case_file(self.out / f"{rule}.json"):
                doomed.append(entry)
        for entry in doomed:
            entry.unlink(missing_ok=True)

    def _time_left(self) -> float:
        """Seconds left of --shrink-time: of exploring after the first divergence (inf before one was
        found), then of the final minimization (at most as long again)."""
        if self.finish_deadline is not None:
            return self.finish_deadline - time.perf_counter()
        if self.first_found is None:
            return math.inf
        return self.shrink_seconds - (time.perf_counter() - self.first_found)

    def run(self) -> CampaignResult:
        """Run the campaign. Ctrl-C at any point ends it with what was found so far on disk
        (``interrupted`` in the result and in ``campaign.json``)."""
        self.clear_previous()
        self.written: set[str] = set()
        self.started = time.perf_counter()
        finals: list[Finding] = []
        flaky = False
        interrupted = False
        try:
            finals, flaky = self._explore()
        except KeyboardInterrupt:
            interrupted = True
        if self.shared is not None:
            with contextlib.suppress(Exception):
                self.factory.release(self.shared)
            self.shared = None
        elapsed = time.perf_counter() - self.started
        if not (flaky or interrupted or self.stopped_early):
            for f in finals:
                f.shrunk = True
        # one finding per rule: the smallest; rules seen but not raised through Hypothesis (Hypothesis
        # could not confirm, we stopped, or a late message after an example) with the best seen
        by_rule: dict[str, Finding] = {}
        for f in finals:
            if f.rule not in by_rule or f.size < by_rule[f.rule].size:
                by_rule[f.rule] = f
        finals = list(by_rule.values()) + [f for r, f in self.best.items() if r not in by_rule]
        if self.confirm and not interrupted:
            self.finish_deadline = time.perf_counter() + self.shrink_seconds
            try:
                finals = self._finish(finals)
            except KeyboardInterrupt:
                interrupted = True
        finals.sort(key=lambda f: f.rule)
        files: list[str] = []
        if self.out is not None:
            for f in finals:
                files += self.write_finding(f, provisional=interrupted and not f.shrunk)
            keep = {Path(x).name for x in files}
            for name in self.written - keep:  # provisional cases of rules not reported in the end
                (self.out / name).unlink(missing_ok=True)
        stats = self.stats(elapsed, flaky, interrupted)
        result = CampaignResult(finals, self.seed, stats, files, interrupted)
        if self.out is not None:
            files.append(self.write_summary(result))
        return result

    def _explore(self) -> tuple[list[Finding], bool]:
        machine = self.machine_class()

        def factory() -> RuleBasedStateMachine:
            return machine()

        seeded = hypothesis_seed(self.seed)(factory)
        try:
            with with_reporter(lambda s: None):
                run_state_machine_as_test(seeded, settings=self.settings())
        except Divergence as d:
            return [d.finding], False
        except _StopCampaign:
            return [], False
        except BaseExceptionGroup as group:
            divs, others = _split_group(group)
            if others and not divs:
                if any(isinstance(e, KeyboardInterrupt) for e in others):
                    raise KeyboardInterrupt from None
                raise
            return [d.finding for d in divs], isinstance(group, Flaky)
        except Flaky:
            return [], True
        return [], False

    def _finish(self, finals: list[Finding]) -> list[Finding]:
        """Minimize, re-check in a fresh process and merge carried state, within --shrink-time."""
        out: dict[str, Finding] = {}
        for f in finals:
            if self._time_left() > 0:
                f = self.minimize(self.with_history(f), max_seconds=max(0.0, min(60.0, self._time_left())))
            if self._time_left() > 0:
                f = self.late_attribution(f)
                f.reproduced = self.reconfirm(f)
            if f.rule not in out or f.size < out[f.rule].size:
                out[f.rule] = f
        return self.merge_carried_state(list(out.values())) if self._time_left() > 0 else list(out.values())

    def late_attribution(self, f: Finding) -> Finding:
        """A divergence that needs the step before it may be that step's late message (sent after
        its answer, read during the next step): run the step before alone, waiting a moment after
        its answer; a late message there is the finding, of the step it belongs to."""
        if len(f.steps) < 2 or f.rule.startswith("P"):
            return f
        try:
            rr = replay_case({"steps": [f.steps[-2]]}, self.factory, profile=self.profile)
        except Exception:
            return f
        v = rr.verdict
        if v is not None and v.violation is not None and v.violation.kind == "late-request":
            return Finding(v, [f.steps[-2]], rr.traces, shrunk=f.shrunk)
        return f

    def reconfirm(self, finding: Finding) -> bool:
        try:
            rr = replay_case({"steps": finding.steps}, self.factory, profile=self.profile)
        except Exception:
            return False
        return rr.verdict is not None and not rr.verdict.ok and rr.verdict.violation is not None and (
            rr.verdict.violation.rule == finding.rule
        )

    def with_history(self, f: Finding) -> Finding:
        """A finding from the shared process that a fresh process does not reproduce on its own may
        depend on the steps that process ran before: replay them too, and keep them if that reproduces."""
        if not f.prefix or f.rule.startswith("P") or self.reconfirm(f):
            return f
        whole = Finding(f.verdict, f.prefix + f.steps, f.traces, shrunk=f.shrunk)
        rr = replay_case({"steps": whole.steps}, self.factory, profile=self.profile)
        v = rr.verdict
        if v is None or v.ok or v.violation is None or v.violation.rule != f.rule:
            return f
        n = len(rr.verdicts)
        return Finding(v, whole.steps[:n], rr.traces[:n], shrunk=f.shrunk)

    def minimize(self, finding: Finding, max_runs: int | None = None, max_seconds: float = 60.0) -> Finding:
        """Delta-debug a case after Hypothesis: drop steps, calls, script entries and unused tools one
        at a time, keeping each removal after which a fresh process still diverges with the same rule.
        Hypothesis shrinks well but stops after a fixed number of shrinks; this makes every reported
        case minimal with respect to removing any single part."""
        if finding.rule in ("P2",):  # every run of a hang costs the timeout: not worth it
            return finding
        rule_id = finding.rule
        best = finding
        runs = 0
        if max_runs is None:
            max_runs = min(600, 150 + 4 * len(finding.steps))
        deadline = time.monotonic() + max_seconds

        def attempt(steps: list[dict[str, Json]]) -> Finding | None:
            nonlocal runs
            runs += 1
            if self.normalize is not None:
                steps = [self.normalize(s) for s in steps]
            try:
                rr = replay_case({"steps": steps}, self.factory, profile=self.profile)
            except Exception:
                return None
            v = rr.verdict
            if v is None or v.ok or v.violation is None or v.violation.rule != rule_id:
                return None
            n = len(rr.verdicts)
            return Finding(v, [dict(s) for s in steps[:n]], rr.traces[:n], shrunk=finding.shrunk)

        improved = True
        while improved and runs < max_runs and time.monotonic() < deadline:
            improved = False
            for candidate in _reductions(best.steps):
                if runs >= max_runs or time.monotonic() >= deadline:
                    break
                found = attempt(candidate)
                if found is not None and found.size < best.size:
                    best = found
                    improved = True
                    break
        return best

    def merge_carried_state(self, finals: list[Finding]) -> list[Finding]:
        """Findings whose failing step alone, in a fresh process, matches the spec come from state
        kept across runs in one process: one root cause, reported once as R5 (a binding lasts for its
        batch or run; each batch.run / loop.run starts fresh), with the symptoms listed."""
        carried: list[Finding] = []
        for f in finals:
            if len(f.steps) < 2 or f.rule.startswith("P"):
                continue
            try:
                alone = replay_case({"steps": [f.steps[-1]]}, self.factory, profile=self.profile)
            except Exception:
                continue
            if alone.ok:
                carried.append(f)
        if not carried:
            return finals
        best = min(carried, key=lambda f: f.size)
        v = best.verdict.violation
        assert v is not None
        symptoms = ", ".join(sorted({f"{f.rule} {f.kind}" for f in carried}))
        note = (f"\nThe failing step alone, in a fresh process, matches the spec: the divergence comes from state "
                f"the implementation kept from the earlier step(s) in the same process. Each "
                f"{'batch.run' if best.steps[-1].get('kind', 'batch') == 'batch' else 'loop.run'} starts fresh: "
                f"id bindings and stored results last for their batch or run (R5), budgets and counts too "
                f"(R9, R12). Symptoms seen: {symptoms}.")
        merged_v = dataclasses.replace(
            v, rule="R5", kind="state-carried-over", explanation=v.explanation + note,
            invariant="INV-BINDING-STABLE", checked_by=_checked_by("R5"),
        )
        merged = Finding(dataclasses.replace(best.verdict, violation=merged_v), best.steps, best.traces,
                         best.reproduced, best.shrunk)
        return [f for f in finals if f not in carried and f.rule != "R5"] + [merged]

    def stats(self, elapsed: float, flaky: bool, interrupted: bool) -> dict[str, Json]:
        return {
            "examples": self.examples,
            "steps": self.step_count,
            "executionsObserved": self.executions,
            "processesStarted": self.factory.started,
            "seconds": round(elapsed, 3),
            "stepsPerSecond": round(self.step_count / elapsed, 1) if elapsed > 0 else None,
            "secondsInSteps": round(self.step_seconds, 3),
            "flaky": flaky,
            "interrupted": interrupted,
            "shrinkTimeSpent": self.stopped_early,
        }

    # -- files ------------------------------------------------------------------------------
    def meta(self) -> dict[str, Json]:
        return {"impl": self.factory.describe(), "seed": self.seed, "implInfo": self.factory.info,
                "profile": self.profile or "strict"}

    def write_finding(self, f: Finding, *, provisional: bool) -> list[str]:
        assert self.out is not None
        base = self.out / f.rule
        case = f.case_json(self.meta())
        case["provisional"] = provisional
        write_atomic(base.with_suffix(".json"), json_text(case))
        write_atomic(base.with_suffix(".txt"), render_finding(f, self.factory.describe(), f"{base}.json", provisional))
        paths = [str(base.with_suffix(".json")), str(base.with_suffix(".txt"))]
        dt = diagram_trace(f)
        if dt is not None:
            write_atomic(f"{base}.path.json", json_text(dt, indent=None))
            paths.append(f"{base}.path.json")
        return paths

    def write_summary(self, result: CampaignResult) -> str:
        assert self.out is not None
        doc = {
            "format": CAMPAIGN_FORMAT,
            **self.meta(),
            "mode": self.mode,
            "maxExamples": self.max_examples,
            "stepsPerExample": self.steps,
            "isolation": self.isolation,
            "ok": result.ok,
            "interrupted": result.interrupted,
            "stats": result.stats,
            "findings": [
                {
                    "rule": f.rule, "kind": f.kind,
                    "invariant": f.verdict.violation.invariant if f.verdict.violation else None,
                    "index": f.verdict.violation.index if f.verdict.violation else None,
                    "calls": f.calls, "steps": len(f.steps), "shrunk": f.shrunk, "reproduced": f.reproduced,
                    "case": str(self.out / f"{f.rule}.json"),
                }
                for f in result.findings
            ],
        }
        path = self.out / "campaign.json"
        write_atomic(path, json_text(doc))
        return str(path)


def _reductions(steps: list[dict[str, Json]]) -> list[list[dict[str, Json]]]:
    """Every case obtained by removing one part of ``steps`` (largest parts first)."""
    out: list[list[dict[str, Json]]] = []
    size = len(steps) // 2
    while size >= 2:  # large chunks first (ddmin): a long history shrinks in logarithmic time
        out += [steps[:i] + steps[i + size:] for i in range(0, len(steps), size)]
        size //= 2
    if len(steps) > 1:
        out += [steps[:i] + steps[i + 1:] for i in range(len(steps))]
    for i, step in enumerate(steps):
        def with_step(new: dict[str, Json], i: int = i) -> list[dict[str, Json]]:
            return [*steps[:i], new, *steps[i + 1:]]

        if step.get("kind", "batch") == "loop":
            from ._loop import loop_step_reductions

            out += [with_step(s) for s in loop_step_reductions(step)]
            continue
        calls = step.get("calls", [])
        out += [with_step({**step, "calls": calls[:j] + calls[j + 1:]}) for j in range(len(calls))]
        script = step.get("script", [])
        out += [with_step({**step, "script": script[:j] + script[j + 1:]}) for j in range(len(script))]
        budget = step["config"].get("budget")
        if isinstance(budget, int) and budget > 0:
            out.append(with_step({**step, "config": {**step["config"], "budget": budget - 1}}))
        used = {c.get("name") for c in calls if isinstance(c, dict)}
        tools = step["config"]["tools"]
        out += [with_step({**step, "config": {**step["config"], "tools": tools[:j] + tools[j + 1:]}})
                for j in range(len(tools)) if tools[j]["name"] not in used and len(tools) > 1]
    return out


def _split_group(group: BaseExceptionGroup[Any]) -> tuple[list[Divergence], list[BaseException]]:
    divs: list[Divergence] = []
    others: list[BaseException] = []
    for e in group.exceptions:
        if isinstance(e, Divergence):
            divs.append(e)
        elif isinstance(e, BaseExceptionGroup):
            d, o = _split_group(e)
            divs += d
            others += o
        else:
            others.append(e)
    return divs, others


# --------------------------------------------------------------------------------------------
# Cases: loading and replaying
# --------------------------------------------------------------------------------------------


def _is_case_file(path: Path) -> bool:
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
    from .. import _safejson

    p = Path(path)
    try:  # the hardened loader: size, UTF-8, depth, integer digits, finite numbers; file:line: reason
        doc = _safejson.load_json(p, what="case file")
    except _safejson.JsonInputError as exc:
        raise CaseError(str(exc)) from None
    if not isinstance(doc, dict) or doc.get("format") != CASE_FORMAT:
        raise CaseError(f"{p}: format: must be {CASE_FORMAT!r}")
    steps = doc.get("steps")
    if not isinstance(steps, list) or not steps:
        raise CaseError(f"{p}: steps: must be a non-empty list")
    for i, s in enumerate(steps):
        if not isinstance(s, dict) or s.get("kind", "batch") not in ("batch", "loop") or not isinstance(s.get("config"), dict):
            raise CaseError(f"{p}: steps[{i}]: must be an object with kind batch|loop and a config")
        if s.get("kind", "batch") == "batch" and not isinstance(s.get("calls"), list):
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
    from .. import _core as core
    from .._judge import TraceError, parse_batch_config
    from .._judge_loop import parse_loop_config

    kind = step.get("kind", "batch")
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


def replay_case(case: Mapping[str, Json], factory: ImplFactory, *, profile: str | None = None) -> ReplayResult:
    """Run the steps of ``case`` in order against a fresh implementation; stop at the first divergence
    (judged under ``profile``, default: the case's own, else the strict spec)."""
    if profile is None and isinstance(case.get("profile"), str) and case["profile"] != "strict":
        profile = case["profile"]
    steps: Sequence[Mapping[str, Json]] = case["steps"]
    mode = steps[0].get("kind", "batch") if steps else "batch"
    verdicts: list[Verdict] = []
    traces: list[dict[str, Json]] = []
    impl: Impl | None = None
    try:
        for n, step in enumerate(steps):
            if impl is None:
                try:
                    impl = factory.open(mode)
                except ProtocolFailure as f:
                    trace = failed_start_trace(step, f)
                    traces.append(trace)
                    verdicts.append(judge(trace, profile=profile))
                    break
            elif traces and traces[-1]["events"][-1].get("type") == "response":
                late = late_message(impl, f"{traces[-1]['kind']}.run")
                if late is not None:  # the step before, answered, then sent more: that step's finding
                    amend_late(traces[-1], late)
                    verdicts[-1] = judge(traces[-1], profile=profile)
                    break
            trace = run_step(impl, step)
            if n == len(steps) - 1 and trace["events"][-1].get("type") == "response":
                late = late_message(impl, f"{trace['kind']}.run", wait=LATE_GRACE)
                if late is not None:
                    amend_late(trace, late)
            traces.append(trace)
            if trace_failed(trace):
                factory.release(impl)
                impl = None
            v = judge(trace, profile=profile)
            verdicts.append(v)
            if not v.ok:
                break
    finally:
        if impl is not None:
            factory.release(impl)
    return ReplayResult(verdicts, traces)


# --------------------------------------------------------------------------------------------
# The expected path on the spec machine, for diagrams
# --------------------------------------------------------------------------------------------


def diagram_trace(finding: Finding) -> dict[str, Json] | None:
    """``{"path": [transition ids of the expected run], "failed": position}`` for the failing step."""
    if not finding.traces:
        return None
    trace = finding.traces[-1]
    v = finding.verdict.violation
    if trace.get("kind") == "loop":
        from ._loop import loop_reference_path

        steps = loop_reference_path(trace)
    else:
        steps = batch_reference_path(trace)
    if steps is None:
        return None
    index = v.index if v is not None else None
    out: dict[str, Json] = {"path": [t for t, _ in steps], "failed": decision_position(steps, index)}
    if v is not None:
        out["label"] = f"counterexample: {v.rule} {v.kind}" + (f" ({v.invariant})" if v.invariant else "")
    out["source"] = "loopspec fuzz: the expected run of the failing step (reference engine, same tool outcomes)"
    return out


def outcome_tools(tools: Sequence[Mapping[str, Json]], outcomes: Sequence[Mapping[str, Json]]) -> list[Any]:
    """Engine tools that give the recorded outcomes in execution order (whatever tool runs)."""
    from .._engine import Tool, ToolFailure

    feed = iter(outcomes)

    def fn(args: dict[str, Json], ctx: Any) -> Json:
        o = next(feed, None)
        if o is None:
            return None
        if o.get("status") == "error":
            raise ToolFailure(o.get("category", "INTERNAL_ERROR"))
        return o.get("output")

    return [Tool.define(t["name"], fn, t.get("inputSchema"), max_executions=t.get("maxExecutions")) for t in tools]


def batch_reference_path(trace: Mapping[str, Json]) -> list[tuple[str, int | None]] | None:
    from .._engine import run_batch

    try:
        cfg = trace["config"]
        outcomes = [e["outcome"] for e in trace["events"] if e.get("type") == "execute"]
        tools = outcome_tools(cfg["tools"], outcomes)
        steps: list[tuple[str, int | None]] = []
        run_batch(trace["calls"], tools=tools, budget=cfg["budget"], mode=cfg["mode"], principal=cfg["principal"],
                  observer=lambda s, t: steps.append((t.id, s.requests[-1].index if s.requests else None)))
    except Exception:
        return None
    return steps


# --------------------------------------------------------------------------------------------
# The readable report
# --------------------------------------------------------------------------------------------


def _checked_by(rule_id: str) -> tuple[str, ...]:
    try:
        return next((r.invariants for r in load_rules() if r.id == rule_id), ())
    except Exception:
        return ()


def _rule_title(rule_id: str) -> str:
    if rule_id.startswith("P"):
        from .._judge import PROTOCOL_CODES

        return f"adapter protocol: {PROTOCOL_CODES.get(rule_id, '')}"
    try:
        for r in load_rules():
            if r.id == rule_id:
                return f"{r.strength} {r.title}"
    except Exception:
        pass
    return ""


def render_finding(f: Finding, impl: str, case_path: str, provisional: bool = False) -> str:
    v = f.verdict.violation
    assert v is not None
    spec = load_spec()
    lines = [
        f"loopspec fuzz: divergence {v.rule} ({v.kind})" + (f", invariant {v.invariant}" if v.invariant else ""),
        f"rule:           {v.rule} {_rule_title(v.rule)}",
    ]
    if v.transition:
        t = spec.transition(v.transition)
        lines.append(f"transition:     {t.id} {t.name} ({', '.join(t.sources)} → {t.dest})")
    lines += [
        f"implementation: {impl}",
        f"case:           {f.calls} call(s) in {len(f.steps)} step(s)"
        + (" (shrunk)" if f.shrunk else " (provisional: shrinking was still running)" if provisional else ""),
        f"replay:         loopspec replay {case_path} --impl {json.dumps(impl)}",
    ]
    if f.reproduced is False:
        lines.append("note:           this divergence did NOT reproduce when the case was replayed in a fresh "
                     "process (P7): the implementation is nondeterministic or keeps state between runs")
    lines.append("")
    if len(f.steps) > 1:
        lines.append(f"Before the failing step, the same process answered {len(f.steps) - 1} step(s) correctly:")
        for i, s in enumerate(f.steps[:-1]):
            lines.append(f"  step {i + 1}: {_step_summary(s)}")
        lines.append("")
    lines.append(v.explanation)
    lines.append("")
    exp = f.verdict.expected
    if exp:
        lines.append("What the spec requires (reference run, fed the same tool outcomes):")
        for k in ("results", "executed", "aborted", "status", "stopReason"):
            if k in exp:
                lines.append(f"  {k}: {compact(exp[k], 200)}")
    lines.append("The divergence:")
    lines.append(f"  the spec:           {compact(v.expected, 200)}")
    lines.append(f"  the implementation: {compact(v.observed, 200)}")
    lines.append("What the implementation did:")
    obs = f.verdict.observed
    if obs.get("executions") is not None:
        lines.append(f"  executions seen by the harness: {len(obs['executions'])}")
        for k, e in enumerate(obs["executions"], start=1):
            lines.append(f"    {k}. request #{e.get('request')}: {compact(e.get('callId'), 14)} {e.get('name')}"
                         f"({compact(e.get('arguments'), 40)}) principal={compact(e.get('principal'), 16)} → "
                         f"{compact(e.get('outcome'), 50)}")
    if obs.get("response") is not None:
        lines.append(f"  response: {compact(obs['response'], 300)}")
    if obs.get("protocolError") is not None:
        pe = obs["protocolError"]
        lines.append(f"  protocol error: {pe.get('code')} {pe.get('kind')}: {pe.get('detail')}")
    if v.invariants:
        lines.append(f"  invariants violated by the observed behaviour: {', '.join(v.invariants)}")
    return "\n".join(lines) + "\n"


def _step_summary(step: Mapping[str, Json]) -> str:
    cfg = step.get("config", {})
    if step.get("kind", "batch") == "batch":
        calls = step.get("calls", [])
        return (f"batch.run budget={cfg.get('budget')} mode={cfg.get('mode')} with {len(calls)} call(s): "
                + "; ".join(compact(c, 50) for c in calls[:6]))
    lim = {k: v for k, v in cfg.get("limits", {}).items() if v is not None}
    return (f"loop.run {compact(lim, 80)} mode={cfg.get('mode')} onLimit={cfg.get('onLimit')} with a "
            f"{len(step.get('model', []))}-round model script ({step_calls(step)} call(s))")
