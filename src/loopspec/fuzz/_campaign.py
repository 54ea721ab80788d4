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
import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..protocol.rpc import ProtocolFailure
from ..spec.base import default_spec_path, spec_chosen
from ..spec.loader import using_spec
from ._adapter import CAMPAIGN_MARK, ImplFactory, Target, Watchdog, die_with_parent, end_marked, holds_answers
from ._coverage import Coverage, spec_transition_ids
from ._declared import Declaration, judging_profile
from ._generate import Ahead, Generator, Planned
from ._harness import failed_start_trace
from ._judging import Judging
from ._model import FINDING_SUFFIXES, CampaignResult, CaseError, Finding, Stats, as_finding, load_case
from ._outputs import CaseFiles, OutputError, corpus_files, coverage_doc, finding_summary
from ._reduce import Reducer
from ._run import HISTORY, Live, replay_case
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
    #: what the implementation declared: its tools and what it does not support (None: nothing)
    declared: Declaration | None = None
    #: stop at the first reduced case (-x, --exitfirst)
    exitfirst: bool = False
    #: causes already reported (by the corpus of cases in ``out``, replayed first): not reduced again
    known: frozenset[str] = frozenset()

    def to_json(self) -> dict[str, Json]:
        doc = {"mode": self.mode, "maxExamples": self.max_examples, "seed": self.seed,
               "stepsPerExample": self.steps, "maxCalls": self.max_calls, "isolation": self.isolation,
               "shrinkTime": self.shrink_seconds, "timeBudget": self.time_budget, "profile": self.profile or "strict",
               "spec": self.spec}
        if self.declared is not None:
            doc["declared"] = self.declared.to_json()
        return doc


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
        self.seen: set[str] = set(settings.known)  # causes met (each reduced once); the corpus's are known
        self.coverage = Coverage()
        self.stats = Stats()
        self.first_found: float | None = None
        self.first_reported: float | None = None  # when the first reduced case was kept (-x stops there)
        self.phase = "exploring"
        # the stages
        self.gen: Generator | WritesGenerator
        if settings.mode == "writes":
            self.gen = WritesGenerator(seed=settings.seed, steps=settings.steps, max_calls=settings.max_calls,
                                       declared=settings.declared)
        else:
            self.gen = Generator(settings.mode, seed=settings.seed, steps=settings.steps, max_calls=settings.max_calls,
                                 normalize=factory.step_normalizer(), concurrency=settings.concurrency,
                                 declared=settings.declared)
        profile = judging_profile(settings.profile, settings.declared)
        self.live = Live(factory, settings.mode, profile=profile)
        self.judging = Judging(profile, self.stats, self.coverage)
        self.reducer = Reducer(self.live, judge_fn=self.judging, mode=settings.mode,
                               shrink_seconds=settings.shrink_seconds, stats=self.stats, found=self.found,
                               keep_tools=settings.declared is not None and settings.declared.tools is not None)

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
                if why is not None and not (why == "shrink-time" and self.gen.opens(i)):  # (the opening ones run)
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
        if f.cause in self.seen:
            return
        self.seen.add(f.cause)
        if not self.s.confirm:
            self.keep(f)
            return
        t0 = time.perf_counter()
        self.phase = f"reducing {f.cause}"
        if self.on_progress is not None:
            self.on_progress(self, f"found {f.rule} {f.kind} ({f.calls} call(s) in {len(f.steps)} step(s)); reducing")
        try:
            f = self.reducer.reduce(f)
        finally:
            self.phase = "exploring"
            self.stats.reduce_seconds += time.perf_counter() - t0
        self.keep(f)

    def keep(self, f: Finding) -> None:
        keep, gone = fold(self.found, f)
        for c in gone:
            del self.found[c]
        self.stats.folded += len(gone) + (not keep)
        if not keep:
            return
        old = self.found.get(f.cause)
        if old is None or f.size < old.size:
            self.found[f.cause] = f
            if self.on_finding is not None:
                self.on_finding(f)
            if self.s.exitfirst and self.first_reported is None:
                self.first_reported = time.perf_counter()


#: Causes reported as another that explains them: a P7 that the state leak an R5 shows explains; a blind
#: re-send after a restart (R39) that a re-send without lookup (R43) explains (PROTOCOL.md W4).
_FOLDED_INTO: Final = {"P7-not-reproduced": "R5-", "R39-resent-after-restart": "R43-blind-redispatch"}


def fold(found: Mapping[str, Finding], f: Finding) -> tuple[bool, list[str]]:
    """Whether ``f`` is reported beside ``found`` (False: a cause found explains it), and the causes found
    that ``f`` explains (to be dropped)."""
    into = _FOLDED_INTO.get(f.cause)
    if into is not None and any(c.startswith(into) for c in found):
        return False, []
    gone = [c for c, by in _FOLDED_INTO.items() if c in found and f.cause.startswith(by)]
    return True, gone


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
              cwd: str | None = None, deadline: float | None = None, stop_event: str | None = None) -> ShardResult:
    """Examples ``shard``, ``shard + shards``, … of a campaign, on this machine's own implementation
    process (what each --jobs worker and each Dask task runs). ``deadline``: wall-clock seconds
    (time.time()) after which no new example starts. ``stop_event``: the name of a Dask ``Event`` the
    campaign sets when it is interrupted: the shard then ends its implementations (and what they started) at
    once and returns what it had found until then."""
    if isinstance(target, str):
        from ..frameworks import resolve

        with contextlib.suppress(Exception):
            resolved = resolve(target)
            if resolved is not None:
                target = resolved
    with using_spec(settings.spec):
        return _run_shard(target, settings, shard, shards, timeout=timeout, cwd=cwd, deadline=deadline,
                          stop_event=stop_event)


#: In a --jobs worker: where it sends what it finds as it finds it (set by :func:`_worker_start`)
_SINK: Any = None


def _worker_start(sink: Any) -> None:
    """A --jobs worker's first act: die with the campaign (even a SIGKILLed one), leave Ctrl-C to the campaign
    (which ends the workers itself), and send its findings and statistics to ``sink`` as they come."""
    import signal

    global _SINK
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _SINK = sink


def _send(msg: tuple[Any, ...]) -> None:
    """One message to the campaign, pickled now (the queue would pickle it later, in another thread, while the
    explorer goes on changing it)."""
    import pickle

    if _SINK is not None:
        with contextlib.suppress(Exception):
            _SINK.put(pickle.dumps(msg))


def _run_shard(target: Target, settings: Settings, shard: int, shards: int, *, timeout: float | None,
               cwd: str | None, deadline: float | None, stop_event: str | None = None) -> ShardResult:
    mark = os.urandom(8).hex()  # this shard's processes, to end them all when the campaign says stop
    factory = ImplFactory(target, timeout=timeout, cwd=cwd,
                          env={**os.environ, CAMPAIGN_MARK: mark} if stop_event is not None else None)
    streaming = _SINK is not None
    ex = Explorer(factory, settings, on_finding=(lambda f: _send(("finding", shard, f))) if streaming else None)
    sent = [0.0]
    halted: list[dict[str, Finding]] = []  # what was found when the campaign said stop

    def halt() -> None:
        halted.append(dict(ex.found))
        factory.halted = True
        end_marked(CAMPAIGN_MARK, mark)

    watcher = _StopWatcher(stop_event, halt) if stop_event is not None else None

    def stop() -> str | None:
        if halted:
            return "interrupted"
        if streaming and time.monotonic() - sent[0] > 0.25:  # the campaign's view of this shard, if it ends now
            sent[0] = time.monotonic()
            _send(("stats", shard, ex.stats, ex.coverage, factory.started))
        if deadline is not None and time.time() >= deadline:
            return "time-budget"
        if ex.first_reported is not None:
            return "exitfirst"
        if ex.first_found is not None and time.perf_counter() - ex.first_found > settings.shrink_seconds:
            return "shrink-time"
        return None

    try:
        ex.explore(range(shard, settings.max_examples, shards), stop)
    except Exception:
        if not halted:  # a failure of its own; one caused by the implementations ended under it is not
            raise
    finally:
        if watcher is not None:
            watcher.close()
        ex.close()
        factory.close()
        if halted:
            end_marked(CAMPAIGN_MARK, mark)
    found = halted[0] if halted else ex.found  # nothing found after the stop: the stop caused it
    if halted:
        ex.stats.stopped = "interrupted"
    return ShardResult(list(found.values()), ex.coverage, ex.stats, factory.started, factory.info)


class _StopWatcher:
    """A thread of a Dask task that waits for the campaign's stop event (a ``distributed.Event``) and calls
    ``halt`` when it is set; ended by :meth:`close` when the shard is over."""

    def __init__(self, name: str, halt: Callable[[], None]) -> None:
        import threading

        self.done = threading.Event()
        self.halt = halt
        self.event: Any = None
        with contextlib.suppress(Exception):  # in the task's own thread: its worker's client
            from distributed import Event
            from distributed.worker import get_client

            self.event = Event(name, client=get_client())
        self.thread = threading.Thread(target=self._watch, daemon=True, name="loopspec-shard-stop")
        self.thread.start()

    def _watch(self) -> None:
        if self.event is None:  # not in a Dask task: nothing to watch
            return
        while not self.done.is_set():
            try:
                if self.event.wait(timeout=0.5):
                    self.halt()
                    return
            except Exception:  # the scheduler is gone
                return

    def close(self) -> None:
        self.done.set()
        self.thread.join(timeout=2.0)


# --------------------------------------------------------------------------------------------
# The campaign
# --------------------------------------------------------------------------------------------


def _rule_number(rule: str) -> tuple[str, int]:
    return rule[:1], int(rule[1:]) if rule[1:].isdigit() else 0


def _declaration(given: Declaration | None, factory: ImplFactory) -> Declaration | None:
    """The campaign's declaration: the one given (``--tools``), completed by the implementation's own
    (its ``initialize`` result, read by :meth:`ImplFactory.open`); None when neither declares anything."""
    own = factory.declared
    if given is None:
        return own
    return given.merged(own)


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
        declared: Declaration | None = None,
        exitfirst: bool = False,
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
                                 and announces_concurrency(factory.info),
                                 declared=_declaration(declared, factory), exitfirst=exitfirst)
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
        self.corpus: list[dict[str, Json]] = []
        self.started = 0.0
        self.explorer: Explorer | None = None
        self.coverage = Coverage()
        self.stats = Stats()
        self.out_error: str | None = None  # a file in out that could not be written (OutputError)

    def meta(self) -> dict[str, Json]:
        meta = {"impl": self.factory.describe(), "seed": self.seed, "implInfo": self.factory.info,
                "profile": self.profile or "strict", "concurrency": self.settings.concurrency}
        if self.settings.declared is not None:  # a replay judges the case as the campaign did
            meta["declared"] = self.settings.declared.to_json()
        return meta

    # -- running ----------------------------------------------------------------------------------
    def _found(self, f: Finding) -> None:
        old = self.findings.get(f.cause)
        if old is not None and old.size <= f.size:
            return
        keep, gone = fold(self.findings, f)  # (shards: the same folding as each explorer's)
        for c in gone:
            del self.findings[c]
        if not keep:
            return
        self.findings[f.cause] = f
        if self.files is not None:
            self.files.write(f)
        if self.progress is not None:
            rep = "" if f.reproduced is not False else " (did not reproduce in a fresh process)"
            self.progress(f"{f.cause}: {f.calls} call(s) in {len(f.steps)} step(s){rep}"
                          + (f" → {self.out / (f.cause + '.json')}" if self.out is not None else ""))

    def _stop(self) -> str | None:
        now = time.perf_counter()
        if self.settings.time_budget is not None and now - self.started >= self.settings.time_budget:
            return "time-budget"
        ex = self.explorer
        if ex is not None and ex.first_reported is not None:
            return "exitfirst"
        if ex is not None and ex.first_found is not None and now - ex.first_found > self.settings.shrink_seconds:
            return "shrink-time"
        if self.status is not None:
            self.status(self)
        return None

    def replay_corpus(self) -> None:
        """The cases an earlier campaign left in ``out``, replayed first (stage 2 and 3 on saved steps): a case
        that still fails is kept as a finding (its cause is not reduced again), one that passes is moved into
        ``fixed/``; none is deleted. A case of another mode, or one that cannot be read, is left as it is."""
        if self.out is None or self.files is None:
            return
        for path in corpus_files(self.out):
            entry: dict[str, Json] = {"case": str(path)}
            self.corpus.append(entry)
            try:
                case = load_case(path)
            except CaseError as exc:
                entry.update(status="unreadable", why=str(exc))
                continue
            mode = case["steps"][0].get("kind", "batch")
            if mode != self.mode:
                entry.update(status="not-replayed", why=f"a {mode} case; this campaign is in {self.mode} mode")
                continue
            self.stats.reduce_runs += 1
            rr = replay_case(case, self.factory)
            f = as_finding(rr, case["steps"])
            if f is None:
                entry.update(status="fixed", now=self.files.retire(path))
                if self.progress is not None:
                    self.progress(f"fixed: {path.name} passes now → {entry['now']}")
                continue
            f = dataclasses.replace(f, reproduced=True, shrunk=bool(case.get("shrunk", True)), origin=str(path))
            entry.update(status="still-failing", cause=f.cause)
            self._found(f)
            if path.name != f.cause + ".json":  # an older name (the rule alone), or the cause it fails with changed
                entry.update(status="renamed", now=str(self.out / (f.cause + ".json")))
                for suffix in FINDING_SUFFIXES:
                    old = path.with_name(path.name.removesuffix(".json") + suffix)
                    if old.is_file() and not old.is_symlink() and old.name not in self.files.written:
                        old.unlink()
        known = frozenset(c for c, f in self.findings.items() if f.shrunk)  # a provisional one is reduced again
        if known:
            self.settings = dataclasses.replace(self.settings, known=known)

    def run(self) -> CampaignResult:
        """Run the campaign. Ctrl-C at any point ends it with what was found so far on disk
        (``interrupted`` in the result and in ``campaign.json``)."""
        self.started = time.perf_counter()
        interrupted = False
        signum: int | None = None
        try:
            self.replay_corpus()
            if self.jobs > 1 or self.dask is not None:
                self._run_sharded()
            else:
                self._run_here()
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP raised as its subclass by the command line
            interrupted = True
            signum = getattr(exc, "signum", 2)
            self.stats.stopped = "interrupted"
        except OutputError as exc:  # a case could not be written (a full disk): stop, keep what is written
            self.out_error = str(exc)
            self.stats.stopped = "out-unwritable"
        finally:
            if self.explorer is not None:
                self.explorer.close()
        elapsed = time.perf_counter() - self.started
        for f in list(self.findings.values()):  # what another cause found explains (P7 by R5, R39 by R43)
            if f.cause in self.findings and not fold({c: g for c, g in self.findings.items() if c != f.cause}, f)[0]:
                del self.findings[f.cause]
                self.stats.folded += 1
        findings = sorted(self.findings.values(), key=lambda f: (_rule_number(f.rule), f.cause))
        stats = self.stats_json(elapsed, interrupted)
        result = CampaignResult(findings, self.seed, stats, [], interrupted,
                                coverage=self.coverage.to_json(self.coverage_mode, spec_transition_ids(self.mode)),
                                params=self.settings.to_json() | {"jobs": self.jobs, "dask": self.dask},
                                signum=signum, corpus=self.corpus, impl=self.factory.describe())
        result.out_error = self.out_error
        if self.files is not None:
            try:
                result.files = self.files.finish(findings)
            except OutputError as exc:
                result.out_error = self.out_error = self.out_error or str(exc)
                result.stats["stoppedBy"] = self.stats.stopped = self.stats.stopped or "out-unwritable"
                result.files = sorted(str(self.out / n) for n in self.files.written)
            if result.out_error is not None:
                result.stats["outError"] = result.out_error
            try:  # campaign.json, if there is room for it still (it says which file could not be written)
                result.files += self.files.write_summary(
                    result, {"mode": self.mode, "maxExamples": self.max_examples,
                             "stepsPerExample": self.settings.steps, "isolation": self.settings.isolation},
                    coverage_doc(self.coverage, mode=self.mode, seed=self.seed, impl=self.factory.describe(),
                                 steps=self.stats.steps))
            except OutputError as exc:
                result.out_error = self.out_error or str(exc)
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
            from distributed import Client, Event, wait

            stop_event = f"loopspec-stop-{os.urandom(8).hex()}"
            with Client(self.dask) as client:
                futures = [client.submit(run_shard, *a, pure=False, stop_event=stop_event, **kw) for a in args]
                try:
                    results = client.gather(futures)
                except KeyboardInterrupt:  # every task ends its implementations and returns what it found
                    with contextlib.suppress(Exception):
                        Event(stop_event, client=client).set()
                        wait(futures, timeout=15.0)
                    for fu in futures:
                        if fu.status == "finished":
                            r = fu.result()
                            self.coverage.merge(r.coverage)
                            self.stats.merge(r.stats)
                            for f in r.findings:
                                self._found(f)
                    client.cancel(futures)
                    raise
        else:
            results = self._run_jobs(args, kw)
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

    def _run_jobs(self, args: list[tuple[Any, ...]], kw: dict[str, Any]) -> list[ShardResult]:
        """The shards on ``--jobs`` local worker processes. Each worker sends its findings as it finds them
        (their cases are written at once) and its statistics every quarter second; when the campaign is
        interrupted (Ctrl-C, SIGTERM) it stops waiting at once, ends the workers and everything they started,
        and keeps what they sent. Every process of the campaign carries its mark (:data:`CAMPAIGN_MARK`), and a
        watchdog ends whatever still carries it when the campaign is over, or killed."""
        import concurrent.futures
        import multiprocessing
        import pickle
        import queue

        ctx = multiprocessing.get_context("spawn")
        sink = ctx.Queue()
        mark = os.urandom(8).hex()
        before = os.environ.get(CAMPAIGN_MARK)
        os.environ[CAMPAIGN_MARK] = mark  # inherited by the workers, their implementations and their helpers
        watchdog = Watchdog(CAMPAIGN_MARK, mark)
        latest: dict[int, tuple[Stats, Coverage, int]] = {}

        def drain() -> None:
            while True:
                try:
                    msg = pickle.loads(sink.get_nowait())
                except (queue.Empty, OSError, EOFError, ValueError, pickle.UnpicklingError):
                    return
                if msg[0] == "finding":
                    self._found(msg[2])
                elif msg[0] == "stats":
                    latest[msg[1]] = (msg[2], msg[3], msg[4])

        pool = concurrent.futures.ProcessPoolExecutor(max_workers=len(args), mp_context=ctx,
                                                      initializer=_worker_start, initargs=(sink,))
        finished = False
        try:
            futures = [pool.submit(run_shard, *a, **kw) for a in args]
            pending = set(futures)
            while pending:
                _, pending = concurrent.futures.wait(pending, timeout=0.2)
                drain()
            results = [fu.result() for fu in futures]
            drain()
            finished = True
            return results
        finally:
            if not finished:  # interrupted (or a worker failed): what the workers sent is what was found
                with contextlib.suppress(OutputError):
                    drain()
                workers = list(getattr(pool, "_processes", {}).values())
                for w in workers:
                    with contextlib.suppress(Exception):
                        w.kill()
                end_marked(CAMPAIGN_MARK, mark)
                pool.shutdown(wait=False, cancel_futures=True)
                for w in workers:
                    with contextlib.suppress(Exception):
                        w.join(timeout=2.0)
                for st, cov, started in latest.values():
                    self.stats.merge(st)
                    self.coverage.merge(cov)
                    self.shard_processes = getattr(self, "shard_processes", 0) + started
            else:
                pool.shutdown(wait=True)
            watchdog.close()
            sink.close()
            sink.cancel_join_thread()
            if before is None:
                os.environ.pop(CAMPAIGN_MARK, None)
            else:
                os.environ[CAMPAIGN_MARK] = before

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
