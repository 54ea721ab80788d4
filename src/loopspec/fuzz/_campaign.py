"""A fuzz campaign: explore at full speed, reduce each distinct finding, write the cases.

The campaign draws examples from the seeded generator (:mod:`._generate`), runs their steps on
**one implementation process reused across examples** (every ``batch.run`` / ``loop.run`` starts
fresh by the protocol; a fresh process is started only after a protocol failure, or per example
with ``isolation="example"``), and judges each trace — by the prediction's fast path when the trace
is exactly what the spec predicts, by the judge otherwise. The first finding of each rule is reduced
at once (:mod:`._reduce`: on the live process, then re-checked in a fresh one), its case written,
and the campaign goes on at full speed to the end of its examples. A finding that only a process's
earlier runs explain is **state leaking between runs**: reported as R5 ``state-carried-over``.

Files in ``out`` per finding (``<rule>`` is the rule id, e.g. ``R6``):

* ``<rule>.json`` — the case (``loopspec-fuzz-case/1``): the steps to replay, the traces, the
  verdict; ``loopspec replay <rule>.json --impl CMD`` reruns it exactly;
* ``<rule>.txt`` — the readable explanation;
* ``<rule>.path.json`` — the expected path with the failed transition (``loopspec diagram --trace``);

and for the campaign ``campaign.json`` (parameters, findings, statistics, coverage) and
``coverage.json`` (the spec transitions the campaign's runs took: ``loopspec diagram --coverage``).

With ``jobs`` > 1 the examples are sharded over that many worker processes, each with its own
implementation process; with ``dask`` (a scheduler address) over a Dask cluster's workers. Results
are merged: one finding per rule, the smallest.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..judge.trace import judge
from ..protocol.rpc import ProtocolFailure
from ..spec.base import default_spec_path, spec_chosen
from ..spec.loader import load_rules, load_spec, using_spec
from ..support.text import printable_lines, write_atomic
from ._adapter import Impl, ImplFactory, Target, holds_answers
from ._coverage import Coverage
from ._exercised import exercised
from ._generate import Ahead, Generator, matches
from ._harness import amend_late, failed_start_trace, late_message, realized_schedule, run_step, trace_failed
from ._model import (
    CAMPAIGN_FORMAT,
    RULE_FILE,
    CampaignResult,
    Finding,
    is_case_file,
    json_text,
)
from ._reduce import as_finding, minimize, replay_case, run_steps
from ._writes_gen import WritesGenerator
from ._writes_harness import run_writes_step

__all__ = ["Campaign", "CampaignResult", "Finding", "Settings", "run_shard"]

Json = Any

#: How many steps of a live process's history are kept to explain a finding that needs them.
HISTORY = 256


@dataclass(frozen=True)
class Settings:
    """What a campaign (or one shard of it) does; plain data, so it can travel to a worker."""

    mode: str = "batch"
    max_examples: int = 200
    seed: int = 0
    steps: int = 8
    max_calls: int = 6
    isolation: str = "campaign"
    shrink_seconds: float = 120.0
    time_budget: float | None = None
    profile: str | None = None
    confirm: bool = True
    #: the spec the campaign judges by (a loop.toml path; None = the shipped spec). It travels with the
    #: settings so that --jobs and --dask workers judge by the same spec as the campaign.
    spec: str | None = None
    #: batch steps run concurrently too (protocol v1.1): the implementation announced ``concurrency``
    concurrency: bool = False

    def to_json(self) -> dict[str, Json]:
        return {"mode": self.mode, "maxExamples": self.max_examples, "seed": self.seed,
                "stepsPerExample": self.steps, "maxCalls": self.max_calls, "isolation": self.isolation,
                "shrinkTime": self.shrink_seconds, "timeBudget": self.time_budget, "profile": self.profile or "strict",
                "spec": self.spec}


@dataclass
class Stats:
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


# --------------------------------------------------------------------------------------------
# Exploring (one process at a time)
# --------------------------------------------------------------------------------------------


class Explorer:
    """Runs examples on a live implementation, judges them, reduces each new rule's first finding."""

    def __init__(self, factory: ImplFactory, settings: Settings, *,
                 on_finding: Callable[[Finding], None] | None = None,
                 on_progress: Callable[[Explorer, str], None] | None = None) -> None:
        self.factory = factory
        self.s = settings
        self.gen: Generator | WritesGenerator
        if settings.mode == "writes":
            self.gen = WritesGenerator(seed=settings.seed, steps=settings.steps, max_calls=settings.max_calls)
        else:
            self.gen = Generator(settings.mode, seed=settings.seed, steps=settings.steps, max_calls=settings.max_calls,
                                 normalize=factory.step_normalizer(), concurrency=settings.concurrency)
        self.on_finding = on_finding
        self.on_progress = on_progress
        self.impl: Impl | None = None
        self.history: collections.deque[dict[str, Json]] = collections.deque(maxlen=HISTORY)
        #: the steps and traces up to the last step answered on the live process (a late message is its finding)
        self.last: tuple[list[dict[str, Json]], list[dict[str, Json]]] | None = None
        self.found: dict[str, Finding] = {}
        self.seen: set[str] = set()  # rules met during exploration (each reduced once)
        self.coverage = Coverage()
        self.stats = Stats()
        self.first_found: float | None = None
        self.slowest = 0.0
        self.hang_timeout: float | None = None
        self.phase = "exploring"

    # -- the live process ---------------------------------------------------------------------
    def live(self) -> Impl:
        if self.impl is None:
            self.impl = self.factory.open(self.s.mode)
            self.history.clear()
            self.last = None
            ch = getattr(self.impl, "channel", None)
            if self.hang_timeout is not None and ch is not None:
                ch.timeout = self.hang_timeout
        return self.impl

    def drop(self, impl: Impl | None = None) -> None:
        impl = impl if impl is not None else self.impl
        if impl is not None:
            self.factory.release(impl)
        if impl is self.impl:
            self.impl = None
            self.history.clear()
            self.last = None

    def close(self) -> None:
        if self.impl is not None:
            with contextlib.suppress(Exception):
                self.factory.release(self.impl)
            self.impl = None

    # -- judging --------------------------------------------------------------------------------
    def judge(self, trace: dict[str, Json]) -> Any:
        self.stats.judged += 1
        return judge(trace, profile=self.s.profile)

    # -- exploring ------------------------------------------------------------------------------
    def explore(self, examples: Iterable[int], stop: Callable[[], str | None]) -> None:
        indices = list(examples)
        ahead = None
        if self.factory.argv is not None and self.s.profile is None and len(indices) > 4 and hasattr(os, "fork"):
            ahead = Ahead(self.gen, indices)  # a process implementation: generate in a helper meanwhile
        try:
            for i in indices:
                why = stop()
                if why is not None:
                    self.stats.stopped = why
                    return
                got = ahead.get(i) if ahead is not None else None
                self.example(i, got if got is not None else self.gen.example(i))
        finally:
            if ahead is not None:
                ahead.close()

    def example(self, i: int, generated: tuple[list[Any], set[str]] | None = None) -> None:
        planned, features = generated if generated is not None else self.gen.example(i)
        self.stats.examples += 1
        if self.s.mode == "loop":
            self.coverage.add_example(features)
        self.check_late()
        if self.s.isolation == "example" and self.impl is not None:
            self.drop()
        steps: list[dict[str, Json]] = []
        traces: list[dict[str, Json]] = []
        prefix = list(self.history)
        for pl in planned:
            step = pl.step
            if steps and self.check_late():
                return  # the step before (this example's) answered and then sent more: the example ends there
            try:
                impl = self.live()
            except ProtocolFailure as f:
                trace = failed_start_trace(step, f)
                self.divergence(Finding(self.judge(trace), [*steps, step], [*traces, trace]))
                return
            t0 = time.perf_counter()
            if step.get("kind") == "writes":  # may restart the implementation (PROTOCOL.md W2)
                trace, after = run_writes_step(impl, step, lambda: self.factory.open("writes"), self.factory.release)
                if after is not impl:
                    self.impl, impl = after, after
                    self.history.clear()
                    self.last = None
            else:
                trace = run_step(impl, step)
            dt = time.perf_counter() - t0
            if isinstance(step.get("schedule"), dict):  # a PCT policy: keep the choices it made (PROTOCOL.md C4)
                step = {**step, "schedule": realized_schedule(trace)}
            self.stats.step_seconds += dt
            self.stats.steps += 1
            for e in trace["events"]:
                t = e.get("type")
                if t == "execute":
                    self.stats.executions += 1
                elif t == "model":
                    self.stats.models += 1
            steps.append(step)
            traces.append(trace)
            self.history.append(step)
            self.stats.exercised.update(exercised(trace))
            p = pl.prediction
            if p is not None:
                self.coverage.add_run(p.transitions, p.codes, p.stop)
            ok = self.s.profile is None and p is not None and matches(trace, p)
            verdict = None
            if not ok:
                verdict = self.judge(trace)
                ok = verdict.ok
            if trace_failed(trace):
                if trace["events"][-1].get("code") == "P2" and self.hang_timeout is None:
                    # a hang: later runs need not wait as long to see it again (reduction stays fast)
                    self.hang_timeout = max(0.5, min(self.factory.timeout or 10.0, 20 * self.slowest))
                if impl is not None:
                    self.drop(impl)
            else:
                self.slowest = max(self.slowest, dt)
                self.last = (list(steps), list(traces))
            if not ok:
                assert verdict is not None
                self.divergence(Finding(verdict, steps, traces, prefix=prefix))
                return

    def check_late(self) -> bool:
        """Did the last step answered on the live process send something after its answer? Then
        that is its finding (P4 late-request) and the process is replaced. True when one was found."""
        found = False
        while self.impl is not None and self.last is not None:
            late = late_message(self.impl, f"{self.last[1][-1]['kind']}.run")
            if late is None:
                break
            lsteps, ltraces = self.last
            amend_late(ltraces[-1], late)
            self.drop()
            self.divergence(Finding(self.judge(ltraces[-1]), lsteps, ltraces))
            found = True
        return found

    # -- findings -------------------------------------------------------------------------------
    def divergence(self, f: Finding) -> None:
        if self.first_found is None:
            self.first_found = time.perf_counter()
        if f.rule in self.seen:
            return
        self.seen.add(f.rule)
        if not self.s.confirm:
            self.keep(f)
            return
        t0 = time.perf_counter()
        self.phase = f"reducing {f.rule}"
        if self.on_progress is not None:
            self.on_progress(self, f"found {f.rule} {f.kind} ({f.calls} call(s) in {len(f.steps)} step(s)); reducing")
        try:
            f = self.reduce(f)
        finally:
            self.phase = "exploring"
            self.stats.reduce_seconds += time.perf_counter() - t0
        self.keep(f)

    def keep(self, f: Finding) -> None:
        if f.rule == "P7" and "R5" in self.found:
            self.stats.folded += 1  # most likely the state leak R5 already shows: not reported twice
            return
        if f.rule == "R5" and "P7" in self.found:
            del self.found["P7"]
            self.stats.folded += 1
        # a blind re-send after a restart (R39) is what a re-send without lookup (R43) does too: one root
        # cause, reported as R43 (PROTOCOL.md W4)
        if f.rule == "R39" and f.kind == "resent-after-restart" and "R43" in self.found \
                and self.found["R43"].kind == "blind-redispatch":
            self.stats.folded += 1
            return
        if f.rule == "R43" and f.kind == "blind-redispatch" and self.found.get("R39") is not None \
                and self.found["R39"].kind == "resent-after-restart":
            del self.found["R39"]
            self.stats.folded += 1
        old = self.found.get(f.rule)
        if old is None or f.size < old.size:
            self.found[f.rule] = f
            if self.on_finding is not None:
                self.on_finding(f)

    def _live_check(self, rule: str) -> Callable[[list[dict[str, Json]]], Finding | None]:
        def check(steps: list[dict[str, Json]]) -> Finding | None:
            self.stats.reduce_runs += 1
            rr = run_steps(steps, self.live, self.drop, profile=self.s.profile, keep=True, grace=0.0)
            if self.impl is not None and rr.traces:  # what ran on the live process stays in its record
                ran = [dict(x) for x in steps[:len(rr.traces)]]
                self.history.extend(ran)
                if rr.traces[-1]["events"][-1].get("type") == "response":
                    self.last = (ran, list(rr.traces))
            return as_finding(rr, steps, rule)

        return check

    def _fresh_check(self, rule: str) -> Callable[[list[dict[str, Json]]], Finding | None]:
        def check(steps: list[dict[str, Json]]) -> Finding | None:
            self.stats.reduce_runs += 1
            mode = steps[0].get("kind", "batch") if steps else self.s.mode
            rr = run_steps(steps, lambda: self.factory.open(mode), self.factory.release, profile=self.s.profile,
                           grace=0.0)  # a candidate; the result is re-checked with the grace (replay_case)
            return as_finding(rr, steps, rule)

        return check

    def reduce(self, f: Finding) -> Finding:
        """Minimize on the live process, re-check in a fresh one (with the history that explains it
        when it needs one), then name what the reduced case shows: a late message of the step before,
        or state carried over between runs (R5). A writes finding is minimized first and re-checked
        after (:meth:`_live_first`), the usual way only when the reduced case does not reproduce."""
        deadline = time.monotonic() + self.s.shrink_seconds
        rule = f.rule
        hang = rule == "P2"
        runs = 12 if hang else 600
        fresh = self._fresh_check(rule)
        def explained(rr: Any, steps: list[dict[str, Json]]) -> Finding | None:
            """A fresh run that fails differently because a step before answered, then sent more:
            that is the finding (P4 late-request, of the step it belongs to)."""
            other = as_finding(rr, steps)
            if other is not None and other.kind == "late-request":
                return dataclasses.replace(other, steps=other.steps[-1:], traces=other.traces[-1:], reproduced=True,
                                           shrunk=True)
            return None

        quick = self._live_first(f, deadline, runs) if self.s.mode == "writes" and not hang else None
        if quick is not None:
            return self._named(quick)
        self.stats.reduce_runs += 1
        rr_alone = replay_case({"steps": f.steps}, self.factory, profile=self.s.profile)
        alone = as_finding(rr_alone, f.steps, rule)  # the example's own steps, in a fresh process
        if alone is None and (late := explained(rr_alone, f.steps)) is not None:
            return late
        if alone is None and "R5" in self.found:  # another symptom of the state leak already reported
            return not_reproduced(f)
        if alone is None:  # it needs what the live process ran before it (state kept across runs)
            steps = [*f.prefix, *f.steps]
            rr = replay_case({"steps": steps}, self.factory, profile=self.s.profile) if f.prefix else None
            whole = as_finding(rr, steps, rule) if rr is not None else None
            if whole is None and rr is not None and (late := explained(rr, steps)) is not None:
                return late
            if whole is None:  # not even with its history: reported as it was seen (P7)
                return not_reproduced(f)
            small, _ = minimize(whole, fresh, deadline=deadline, max_runs=runs // 2)
            best = dataclasses.replace(small, reproduced=True)
        else:
            small, _ = minimize(alone, self._live_check(rule), deadline=deadline, max_runs=runs,
                                judge_fn=lambda t: judge(t, profile=self.s.profile))  # re-checked fresh below
            again = fresh(small.steps) if small is not alone else alone
            if again is None:  # the live process's state helped: reduce in fresh processes instead
                again, _ = minimize(alone, fresh, deadline=deadline, max_runs=runs // 2)
            best = dataclasses.replace(again, reproduced=True)
        return self._named(best)

    def _live_first(self, f: Finding, deadline: float, runs: int) -> Finding | None:
        """A writes finding (each run of it restarts processes, the costly part) minimized on the live process
        straight away, and the reduced case replayed in a fresh process as :func:`replay_case` replays a case
        (with the grace for a late message): the replay of the whole example in a fresh process that
        :meth:`reduce` starts with is left out when the reduced case reproduces. None when it does not: then
        :meth:`reduce` takes its usual way (the example alone, its history, fresh processes)."""
        small, _ = minimize(f, self._live_check(f.rule), deadline=deadline, max_runs=runs,
                            judge_fn=lambda t: judge(t, profile=self.s.profile))
        self.stats.reduce_runs += 1
        rr = replay_case({"steps": small.steps}, self.factory, profile=self.s.profile)
        again = as_finding(rr, small.steps, f.rule)
        return dataclasses.replace(again, reproduced=True) if again is not None else None

    def _named(self, best: Finding) -> Finding:
        """A reduced, reproduced finding, named by what it shows: a re-send without lookup (R43) rather than a
        mark not durable (R39), a late message of the step before, or state carried over between runs (R5)."""
        rule = best.rule
        best.shrunk = True
        if rule == "R39" and best.kind == "resent-after-restart":
            blind = self._without_restart(best)
            if blind is not None:
                return blind
        if len(best.steps) >= 2 and not rule.startswith("P"):
            late = as_finding(replay_case({"steps": [best.steps[-2]]}, self.factory, profile=self.s.profile),
                              [best.steps[-2]])
            if late is not None and late.kind == "late-request":
                return dataclasses.replace(late, reproduced=True, shrunk=True)
            alone = replay_case({"steps": [best.steps[-1]]}, self.factory, profile=self.s.profile)
            if alone.ok:
                return carried_over(best)
        return best

    def _without_restart(self, f: Finding) -> Finding | None:
        """A blind re-send after a restart (R39) has two possible causes: the dispatch mark was not durable
        before the send, or the implementation re-sends without a lookup whatever happened (R43). Tell them
        apart: the same step with each restart turned into a lost answer in the same process, and the cut
        call proposed once more at the end. If that re-sends blind too, the finding is R43 (PROTOCOL.md W4)."""
        step = f.steps[-1]
        cut = next((e.get("callId") for e in f.traces[-1].get("events", [])
                    if e.get("type") == "execute" and (e.get("outcome") or {}).get("status") == "restart"), None)
        again = next((c for c in step.get("calls", []) if c.get("id") == cut), None)
        if again is None:
            return None
        ids = {c.get("id") for c in step["calls"]}
        new_id = next(f"r{n}" for n in range(1, len(ids) + 2) if f"r{n}" not in ids)
        probe = {**step, "calls": [*step["calls"], {**again, "id": new_id}],
                 "script": [{"lose": e["restart"]} if isinstance(e, dict) and "restart" in e else e
                            for e in step.get("script", [])]}
        found = self._fresh_check("R43")([*f.steps[:-1], probe])
        if found is None or found.kind != "blind-redispatch":
            return None
        return dataclasses.replace(found, reproduced=True, shrunk=True)


def announces_concurrency(info: Json) -> bool:
    """Did the implementation announce protocol v1.1's ``concurrency`` capability (PROTOCOL.md C1)?"""
    caps = info.get("capabilities") if isinstance(info, dict) else None
    return isinstance(caps, dict) and caps.get("concurrency") is True


def not_reproduced(f: Finding) -> Finding:
    """A divergence seen on the live process that a fresh process does not reproduce, even after the
    earlier runs kept as its history: P7 (state carried across runs from further back, or
    nondeterminism), with what was seen."""
    v = f.verdict.violation
    assert v is not None
    note = (f"\nReplayed in a fresh process, even after the earlier runs the campaign kept ({len(f.prefix)} "
            f"step(s)), this case does not diverge (P7): the implementation keeps state across runs from "
            f"further back, or is nondeterministic. Seen: {v.rule} {v.kind}.")
    p7 = dataclasses.replace(v, rule="P7", kind="not-reproduced", explanation=v.explanation + note, invariant=None,
                             checked_by=())
    return Finding(dataclasses.replace(f.verdict, violation=p7), f.steps, f.traces, False, False)


def carried_over(f: Finding) -> Finding:
    """A finding whose failing step alone, in a fresh process, matches the spec: state kept from the
    earlier steps in the same process. One root cause, reported as R5 (each run starts fresh)."""
    v = f.verdict.violation
    assert v is not None
    note = (f"\nThe failing step alone, in a fresh process, matches the spec: the divergence comes from state "
            f"the implementation kept from the earlier step(s) in the same process. Each "
            f"{'batch.run' if f.steps[-1].get('kind', 'batch') == 'batch' else 'loop.run'} starts fresh: "
            f"id bindings and stored results last for their batch or run (R5), budgets and counts too "
            f"(R9, R12). Symptom: {v.rule} {v.kind}.")
    merged = dataclasses.replace(v, rule="R5", kind="state-carried-over", explanation=v.explanation + note,
                                 invariant="INV-BINDING-STABLE", checked_by=_checked_by("R5"))
    return Finding(dataclasses.replace(f.verdict, violation=merged), f.steps, f.traces, f.reproduced, f.shrunk)


def _checked_by(rule_id: str) -> tuple[str, ...]:
    try:
        return next((r.invariants for r in load_rules() if r.id == rule_id), ())
    except Exception:
        return ()


# --------------------------------------------------------------------------------------------
# Shards (--jobs, --dask)
# --------------------------------------------------------------------------------------------


@dataclass
class ShardResult:
    findings: list[Finding]
    coverage: Coverage
    stats: Stats
    processes: int
    info: dict[str, Json] | None
    first_found: float | None = None


def run_shard(target: Target, settings: Settings, shard: int, shards: int, *, timeout: float | None = 10.0,
              cwd: str | None = None, deadline: float | None = None) -> ShardResult:
    """Examples ``shard``, ``shard + shards``, … of a campaign, on this machine's own implementation
    process (what each --jobs worker and each Dask task runs). ``deadline``: wall-clock seconds
    (time.time()) after which no new example starts."""
    if isinstance(target, str):
        from ..frameworks import resolve

        with contextlib.suppress(Exception):
            resolved = resolve(target)
            if resolved is not None:
                target = resolved
    with using_spec(settings.spec):
        return _run_shard(target, settings, shard, shards, timeout=timeout, cwd=cwd, deadline=deadline)


def _run_shard(target: Target, settings: Settings, shard: int, shards: int, *, timeout: float | None,
               cwd: str | None, deadline: float | None) -> ShardResult:
    factory = ImplFactory(target, timeout=timeout, cwd=cwd)
    ex = Explorer(factory, settings)
    started = time.perf_counter()

    def stop() -> str | None:
        if deadline is not None and time.time() >= deadline:
            return "time-budget"
        if ex.first_found is not None and time.perf_counter() - ex.first_found > settings.shrink_seconds:
            return "shrink-time"
        return None

    try:
        ex.explore(range(shard, settings.max_examples, shards), stop)
    finally:
        ex.close()
        factory.close()
    del started
    return ShardResult(list(ex.found.values()), ex.coverage, ex.stats, factory.started, factory.info)


# --------------------------------------------------------------------------------------------
# The campaign
# --------------------------------------------------------------------------------------------


class Campaign:
    """One fuzz campaign against one implementation (see the module docstring)."""

    def __init__(
        self,
        factory: ImplFactory,
        *,
        mode: str = "batch",
        max_examples: int = 200,
        seed: int | None = None,
        out: str | Path | None = None,
        steps: int = 8,
        max_calls: int = 6,
        confirm: bool = True,
        progress: Callable[[str], None] | None = None,
        isolation: str = "campaign",
        shrink_seconds: float = 120.0,
        profile: str | None = None,
        time_budget: float | None = None,
        jobs: int = 1,
        dask: str | None = None,
        status: Callable[[Campaign], None] | None = None,
    ) -> None:
        if mode not in ("batch", "loop", "writes"):
            raise ValueError(f"mode must be batch, loop or writes, got {mode!r}")
        if isolation not in ("example", "campaign"):
            raise ValueError(f"isolation must be example or campaign, got {isolation!r}")
        import random

        self.factory = factory
        self.settings = Settings(mode=mode, max_examples=max_examples,
                                 seed=seed if seed is not None else random.randrange(2**32), steps=steps,
                                 max_calls=max_calls, isolation=isolation, shrink_seconds=shrink_seconds,
                                 time_budget=time_budget, profile=profile, confirm=confirm,
                                 spec=str(default_spec_path()) if spec_chosen() else None,
                                 concurrency=mode == "batch" and profile is None
                                 and (factory.argv is not None or holds_answers(factory.target))
                                 and announces_concurrency(factory.info))
        self.seed = self.settings.seed
        self.mode = mode
        #: the transitions the campaign can reach (a concurrent batch campaign's include section 5's)
        self.coverage_mode = "batch-concurrent" if self.settings.concurrency else mode
        self.max_examples = max_examples
        self.profile = profile
        self.out = Path(out) if out is not None else None
        self.progress = progress
        self.status = status
        self.jobs = max(1, jobs)
        self.dask = dask
        self.findings: dict[str, Finding] = {}
        self.written: set[str] = set()
        self.started = 0.0
        self.explorer: Explorer | None = None
        self.coverage = Coverage()
        self.stats = Stats()

    # -- files ----------------------------------------------------------------------------------
    def clear_previous(self) -> None:
        """Remove the finding files of an earlier campaign in ``out`` — those its ``campaign.json``
        listed and provisional ones it never listed (interrupted) — so that the directory never mixes
        two campaigns' findings. Only files that are ours: named after a rule, and a case file's
        JSON says it is a fuzz case."""
        if self.out is None or not self.out.is_dir():
            return
        rules: set[str] = set()
        with contextlib.suppress(Exception):
            from ..support.safejson import load_json

            doc = load_json(self.out / "campaign.json")
            rules = {f["rule"] for f in doc.get("findings", []) if isinstance(f, dict) and isinstance(f.get("rule"), str)}
        doomed = []
        for entry in self.out.iterdir():
            m = RULE_FILE.match(entry.name)
            if m is None or entry.is_symlink() or not entry.is_file():
                continue
            rule = m.group(1)
            if rule in rules or is_case_file(self.out / f"{rule}.json"):
                doomed.append(entry)
        for entry in doomed:
            entry.unlink(missing_ok=True)

    def meta(self) -> dict[str, Json]:
        return {"impl": self.factory.describe(), "seed": self.seed, "implInfo": self.factory.info,
                "profile": self.profile or "strict", "concurrency": self.settings.concurrency}

    def write_finding(self, f: Finding) -> list[str]:
        from ._paths import diagram_trace
        from ._report import render_finding

        assert self.out is not None
        base = self.out / f.rule
        case = f.case_json(self.meta())
        case["provisional"] = not f.shrunk
        write_atomic(base.with_suffix(".json"), json_text(case))
        # the explanation quotes what the implementation sent: no control character reaches a reader's
        # terminal through `cat R7.txt` either
        write_atomic(base.with_suffix(".txt"), printable_lines(render_finding(
            f, self.factory.describe(), f"{base}.json", not f.shrunk, replay_impl=self.replay_impl())))
        paths = [str(base.with_suffix(".json")), str(base.with_suffix(".txt"))]
        dt = diagram_trace(f)
        if dt is not None:
            write_atomic(f"{base}.path.json", json_text(dt, indent=None))
            paths.append(f"{base}.path.json")
        self.written.update(Path(p).name for p in paths)
        return paths

    def replay_impl(self) -> str:
        """What to pass to ``loopspec replay --impl`` to rerun a case against this implementation."""
        return self.factory.describe()

    def coverage_doc(self) -> dict[str, Json]:
        spec_ids = [t.id for t in load_spec().transitions]
        return {"transitions": {t: self.coverage.transitions.get(t, 0) for t in spec_ids},
                "runs": self.coverage.runs,
                "label": f"loopspec fuzz, {self.mode} mode, seed {self.seed}",
                "source": f"loopspec fuzz --impl {self.factory.describe()} --mode {self.mode} --seed {self.seed}: "
                          f"the spec transitions of the expected runs of {self.stats.steps} steps"}

    def write_summary(self, result: CampaignResult) -> list[str]:
        assert self.out is not None
        doc = {
            "format": CAMPAIGN_FORMAT,
            **self.meta(),
            "mode": self.mode,
            "maxExamples": self.max_examples,
            "stepsPerExample": self.settings.steps,
            "isolation": self.settings.isolation,
            "parameters": result.params,
            "ok": result.ok,
            "interrupted": result.interrupted,
            "stats": result.stats,
            "coverage": result.coverage,
            "findings": [finding_summary(f, self.out) for f in result.findings],
        }
        cov = self.out / "coverage.json"
        write_atomic(cov, json_text(self.coverage_doc()))
        path = self.out / "campaign.json"
        write_atomic(path, json_text(doc))
        return [str(cov), str(path)]

    # -- running ----------------------------------------------------------------------------------
    def _found(self, f: Finding) -> None:
        old = self.findings.get(f.rule)
        if old is not None and old.size <= f.size:
            return
        self.findings[f.rule] = f
        if self.out is not None:
            self.write_finding(f)
        if self.progress is not None:
            rep = "" if f.reproduced is not False else " (did not reproduce in a fresh process)"
            self.progress(f"{f.rule} {f.kind}: {f.calls} call(s) in {len(f.steps)} step(s){rep}"
                          + (f" → {self.out / (f.rule + '.json')}" if self.out is not None else ""))

    def _stop(self) -> str | None:
        now = time.perf_counter()
        if self.settings.time_budget is not None and now - self.started >= self.settings.time_budget:
            return "time-budget"
        ex = self.explorer
        if ex is not None and ex.first_found is not None and now - ex.first_found > self.settings.shrink_seconds:
            return "shrink-time"
        if self.status is not None:
            self.status(self)
        return None

    def run(self) -> CampaignResult:
        """Run the campaign. Ctrl-C at any point ends it with what was found so far on disk
        (``interrupted`` in the result and in ``campaign.json``)."""
        self.clear_previous()
        self.started = time.perf_counter()
        interrupted = False
        signum: int | None = None
        try:
            if self.jobs > 1 or self.dask is not None:
                self._run_sharded()
            else:
                self._run_here()
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP raised as its subclass by the command line
            interrupted = True
            signum = getattr(exc, "signum", 2)
            self.stats.stopped = "interrupted"
        finally:
            if self.explorer is not None:
                self.explorer.close()
        elapsed = time.perf_counter() - self.started
        if "R5" in self.findings and "P7" in self.findings:  # the state leak R5 shows explains the P7
            del self.findings["P7"]
            self.stats.folded += 1
        r39 = self.findings.get("R39")
        if "R43" in self.findings and self.findings["R43"].kind == "blind-redispatch" and r39 is not None \
                and r39.kind == "resent-after-restart":
            del self.findings["R39"]  # the re-send without lookup R43 shows explains it (PROTOCOL.md W4)
        findings = sorted(self.findings.values(), key=lambda f: f.rule)
        stats = self.stats_json(elapsed, interrupted)
        result = CampaignResult(findings, self.seed, stats, [], interrupted,
                                coverage=self.coverage.to_json(self.coverage_mode,
                                                               [t.id for t in load_spec().transitions]),
                                params=self.settings.to_json() | {"jobs": self.jobs, "dask": self.dask},
                                signum=signum)
        if self.out is not None:
            keep = set()
            for f in findings:
                if f.rule + ".json" not in self.written:  # found but not yet written (interrupted, shards)
                    self.write_finding(f)
                keep |= {f"{f.rule}.json", f"{f.rule}.txt", f"{f.rule}.path.json"}
            for name in self.written - keep:
                (self.out / name).unlink(missing_ok=True)
            result.files = sorted(str(self.out / n) for n in self.written & keep)
            result.files += self.write_summary(result)
        return result

    def _run_here(self) -> None:
        ex = Explorer(self.factory, self.settings, on_finding=self._found,
                      on_progress=lambda e, m: self.progress(m) if self.progress is not None else None)
        self.explorer = ex
        self.coverage = ex.coverage
        self.stats = ex.stats
        ex.explore(range(self.settings.max_examples), self._stop)

    def _run_sharded(self) -> None:
        n = self.jobs
        deadline = time.time() + self.settings.time_budget if self.settings.time_budget is not None else None
        target = self.factory.label if self.factory.label is not None else self.factory.target
        args = [(target, self.settings, k, n) for k in range(n)]
        kw = {"timeout": self.factory.timeout, "cwd": self.factory.cwd, "deadline": deadline}
        if self.dask is not None:
            from distributed import Client

            with Client(self.dask) as client:
                futures = [client.submit(run_shard, *a, pure=False, **kw) for a in args]
                results = client.gather(futures)
        else:
            import concurrent.futures
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
                futures = [pool.submit(run_shard, *a, **kw) for a in args]
                results = [fu.result() for fu in futures]
        processes = 0
        for r in results:
            self.coverage.merge(r.coverage)
            self.stats.merge(r.stats)
            processes += r.processes
            if r.info is not None:
                self.factory.info = r.info
            for f in r.findings:
                self._found(f)
        self.shard_processes = processes

    def stats_json(self, elapsed: float, interrupted: bool) -> dict[str, Json]:
        st = self.stats
        processes = getattr(self, "shard_processes", None)
        return {
            "examples": st.examples,
            "steps": st.steps,
            "executionsObserved": st.executions,
            "modelRequests": st.models,
            "processesStarted": processes if processes is not None else self.factory.started,
            "seconds": round(elapsed, 3),
            "stepsPerSecond": round(st.steps / elapsed, 1) if elapsed > 0 else None,
            "secondsInSteps": round(st.step_seconds, 3),
            "judged": st.judged,
            "reduceSeconds": round(st.reduce_seconds, 3),
            "reduceRuns": st.reduce_runs,
            "foldedIntoR5": st.folded,
            "jobs": self.jobs,
            "interrupted": interrupted,
            "stoppedBy": st.stopped,
            "shrinkTimeSpent": st.stopped == "shrink-time",
            "exercised": dict(sorted(st.exercised.items())),
        }


def finding_summary(f: Finding, out: Path | None) -> dict[str, Json]:
    v = f.verdict.violation
    return {
        "rule": f.rule, "kind": f.kind,
        "invariant": v.invariant if v else None,
        "index": v.index if v else None,
        "calls": f.calls, "steps": len(f.steps), "shrunk": f.shrunk, "reproduced": f.reproduced,
        "explanation": v.explanation if v else None,
        "case": str(out / f"{f.rule}.json") if out is not None else None,
    }
