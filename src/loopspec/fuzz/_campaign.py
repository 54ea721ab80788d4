"""A fuzz campaign, the driver: the five stages composed in order, as a straight pipeline.

    generate (._generate, ._writes_gen)  →  run on the implementation (._run: ._harness, ._writes_harness)
      →  judge (._judging)  →  reduce (._reduce)  →  report (._outputs: ._report, ._paths)

No stage imports another (the ``fuzz-pipeline`` contract of pyproject.toml says so); each takes plain data —
steps and their predictions, traces, verdicts, findings — and this module hands what one stage returns to
the next. Reduction reruns candidates: it is handed the campaign's live implementation (stage 2) as its
way to run them, and the judge's verdict function (stage 3), never their modules.

The campaign draws examples from the seeded generator, runs their steps on **one implementation
process reused across examples** (every ``batch.run`` / ``loop.run`` starts fresh by the protocol; a fresh
process is started only after a protocol failure, or per example with ``isolation="example"``), and judges
each trace — by the prediction's fast path when the trace is exactly what the spec predicts, by the judge
otherwise. The first finding of each rule is reduced at once (on the live process, then re-checked in a
fresh one), its case written, and the campaign goes on at full speed to the end of its examples. A finding
that only a process's earlier runs explain is **state leaking between runs**: reported as R5
``state-carried-over``. The files it writes in ``out`` are described in :mod:`._outputs`.

With ``jobs`` > 1 the examples are sharded over that many worker processes, each with its own
implementation process; with ``dask`` (a scheduler address) over a Dask cluster's workers. Results
are merged: one finding per rule, the smallest.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..protocol.rpc import ProtocolFailure
from ..spec.base import default_spec_path, spec_chosen
from ..spec.loader import load_spec, using_spec
from ._adapter import ImplFactory, Target, holds_answers
from ._coverage import Coverage
from ._generate import Ahead, Generator, Planned
from ._harness import failed_start_trace
from ._judging import Judging
from ._model import CampaignResult, Finding, Stats
from ._outputs import CaseFiles, coverage_doc, finding_summary
from ._reduce import Reducer
from ._run import HISTORY, Live
from ._steps import announces_concurrency
from ._writes_gen import WritesGenerator

__all__ = ["HISTORY", "Campaign", "CampaignResult", "Finding", "Settings", "announces_concurrency",
           "finding_summary", "run_shard"]

Json = Any


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


# --------------------------------------------------------------------------------------------
# Exploring (one process at a time)
# --------------------------------------------------------------------------------------------


class Explorer:
    """Runs examples on a live implementation, judges them, reduces each new rule's first finding: the
    stages of one campaign (or shard), composed."""

    def __init__(self, factory: ImplFactory, settings: Settings, *,
                 on_finding: Callable[[Finding], None] | None = None,
                 on_progress: Callable[[Explorer, str], None] | None = None) -> None:
        self.factory = factory
        self.s = settings
        self.on_finding = on_finding
        self.on_progress = on_progress
        self.found: dict[str, Finding] = {}
        self.seen: set[str] = set()  # rules met during exploration (each reduced once)
        self.coverage = Coverage()
        self.stats = Stats()
        self.first_found: float | None = None
        self.phase = "exploring"
        # the stages
        self.gen: Generator | WritesGenerator
        if settings.mode == "writes":
            self.gen = WritesGenerator(seed=settings.seed, steps=settings.steps, max_calls=settings.max_calls)
        else:
            self.gen = Generator(settings.mode, seed=settings.seed, steps=settings.steps, max_calls=settings.max_calls,
                                 normalize=factory.step_normalizer(), concurrency=settings.concurrency)
        self.live = Live(factory, settings.mode, profile=settings.profile)
        self.judging = Judging(settings.profile, self.stats, self.coverage)
        self.reducer = Reducer(self.live, judge_fn=self.judging, mode=settings.mode,
                               shrink_seconds=settings.shrink_seconds, stats=self.stats, found=self.found)

    def close(self) -> None:
        self.live.close()

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

    def example(self, i: int, generated: tuple[list[Planned], set[str]] | None = None) -> None:
        planned, features = generated if generated is not None else self.gen.example(i)
        self.stats.examples += 1
        if self.s.mode == "loop":
            self.coverage.add_example(features)
        self.check_late()
        if self.s.isolation == "example" and self.live.impl is not None:
            self.live.drop()
        steps: list[dict[str, Json]] = []
        traces: list[dict[str, Json]] = []
        prefix = list(self.live.history)
        for pl in planned:
            if steps and self.check_late():
                return  # the step before (this example's) answered and then sent more: the example ends there
            try:
                dt = self.live.step(pl.step, steps, traces)
            except ProtocolFailure as f:
                trace = failed_start_trace(pl.step, f)
                self.divergence(Finding(self.judging(trace), [*steps, pl.step], [*traces, trace]))
                return
            self.stats.step_seconds += dt
            self.stats.steps += 1
            verdict = self.judging.step(traces[-1], pl.prediction)
            if verdict is not None:
                self.divergence(Finding(verdict, steps, traces, prefix=prefix))
                return

    def check_late(self) -> bool:
        """Did the last step answered on the live process send something after its answer? Then
        that is its finding (P4 late-request) and the process is replaced. True when one was found."""
        got = self.live.late()
        if got is None:
            return False
        lsteps, ltraces = got
        self.divergence(Finding(self.judging(ltraces[-1]), lsteps, ltraces))
        return True

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
            f = self.reducer.reduce(f)
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
        self.files = CaseFiles(self.out, impl=factory.describe(), replay_impl=factory.describe(),
                               meta=self.meta) if self.out is not None else None
        self.progress = progress
        self.status = status
        self.jobs = max(1, jobs)
        self.dask = dask
        self.findings: dict[str, Finding] = {}
        self.started = 0.0
        self.explorer: Explorer | None = None
        self.coverage = Coverage()
        self.stats = Stats()

    def meta(self) -> dict[str, Json]:
        return {"impl": self.factory.describe(), "seed": self.seed, "implInfo": self.factory.info,
                "profile": self.profile or "strict", "concurrency": self.settings.concurrency}

    # -- running ----------------------------------------------------------------------------------
    def _found(self, f: Finding) -> None:
        old = self.findings.get(f.rule)
        if old is not None and old.size <= f.size:
            return
        self.findings[f.rule] = f
        if self.files is not None:
            self.files.write(f)
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
        if self.files is not None:
            self.files.clear_previous()
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
        if self.files is not None:
            result.files = self.files.finish(findings)
            result.files += self.files.write_summary(
                result, {"mode": self.mode, "maxExamples": self.max_examples, "stepsPerExample": self.settings.steps,
                         "isolation": self.settings.isolation},
                coverage_doc(self.coverage, mode=self.mode, seed=self.seed, impl=self.factory.describe(),
                             steps=self.stats.steps))
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
