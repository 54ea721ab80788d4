"""Stage 2 of a campaign, running on the implementation: steps sent to a live implementation in order, each
recorded as a trace by the harness (:mod:`._harness` for ``batch.run`` and ``loop.run``,
:mod:`._writes_harness` for ``writes.run``).

:class:`Live` is the campaign's implementation process, reused across examples (every run starts fresh by
the protocol): it opens one when needed, replaces it after a protocol failure, keeps what it ran (a finding
may need that history to reproduce), notices a message sent after an answer (the finding of the step it
follows), and shortens the wait for an answer once a hang was seen. :func:`run_steps` runs a case — steps in
order, on the live process or a fresh one — and stops at the first divergence the verdict function it is
given reports; :func:`replay_case` does that for a saved case in a fresh process.

This stage imports no other stage of the campaign: the driver (:mod:`._campaign`) hands its results on.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.profiles import Params
from ..judge.trace import judge
from ..judge.verdict import Verdict
from ..protocol.rpc import ProtocolFailure
from ._adapter import Impl, ImplFactory
from ._declared import judging_profile
from ._harness import LATE_GRACE, amend_late, failed_start_trace, late_message, run_step, trace_failed
from ._model import ReplayResult
from ._steps import realized_schedule
from ._writes_harness import run_writes_step

__all__ = ["HISTORY", "Live", "replay_case", "run_steps"]

Json = Any

#: How many steps of a live process's history are kept to explain a finding that needs them.
HISTORY = 256


class Live:
    """The campaign's live implementation: one process (or in-process object) reused across examples, opened
    when needed and replaced after a protocol failure (or per example, by the driver, with
    ``isolation="example"``)."""

    def __init__(self, factory: ImplFactory, mode: str, *, profile: str | None = None) -> None:
        self.factory = factory
        self.mode = mode
        self.profile = profile
        self.impl: Impl | None = None
        #: the steps the live process ran, oldest first (a finding may need them to reproduce)
        self.history: collections.deque[dict[str, Json]] = collections.deque(maxlen=HISTORY)
        #: the steps and traces up to the last step answered on the live process (a late message is its finding)
        self.last: tuple[list[dict[str, Json]], list[dict[str, Json]]] | None = None
        self.slowest = 0.0
        self.hang_timeout: float | None = None

    # -- the process ------------------------------------------------------------------------------
    def open(self) -> Impl:
        """The live implementation, opened if there is none (ProtocolFailure when it cannot be)."""
        if self.impl is None:
            self.impl = self.factory.open(self.mode)
            self.history.clear()
            self.last = None
            ch = getattr(self.impl, "channel", None)
            if self.hang_timeout is not None and ch is not None:
                ch.timeout = self.hang_timeout
        return self.impl

    def drop(self, impl: Impl | None = None) -> None:
        """Done with ``impl`` (default: the live one): released, and forgotten if it was the live one."""
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

    # -- exploring ---------------------------------------------------------------------------------
    def step(self, step: dict[str, Json], steps: list[dict[str, Json]], traces: list[dict[str, Json]]) -> float:
        """Run ``step`` on the live implementation and append it (a PCT schedule replaced by the choices it
        made, PROTOCOL.md C4) and its trace to the example's ``steps`` and ``traces``; the seconds it took.
        Raises ProtocolFailure when no implementation can be opened."""
        impl: Impl | None = self.open()
        assert impl is not None
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
        steps.append(step)
        traces.append(trace)
        self.history.append(step)
        if trace_failed(trace):
            if trace["events"][-1].get("code") == "P2" and self.hang_timeout is None:
                # a hang: later runs need not wait as long to see it again (reduction stays fast)
                self.hang_timeout = max(0.5, min(self.factory.timeout or 10.0, 20 * self.slowest))
            if impl is not None:
                self.drop(impl)
        else:
            self.slowest = max(self.slowest, dt)
            self.last = (list(steps), list(traces))
        return dt

    def late(self) -> tuple[list[dict[str, Json]], list[dict[str, Json]]] | None:
        """Did the last step answered on the live process send something after its answer? Then its steps
        and traces, the last trace ending with that late message (P4 late-request), and the process is
        replaced; None when nothing came."""
        if self.impl is None or self.last is None:
            return None
        late = late_message(self.impl, f"{self.last[1][-1]['kind']}.run")
        if late is None:
            return None
        lsteps, ltraces = self.last
        amend_late(ltraces[-1], late)
        self.drop()
        return lsteps, ltraces

    # -- cases (what reduction runs) ---------------------------------------------------------------
    def live(self, steps: Sequence[Mapping[str, Json]]) -> ReplayResult:
        """``steps`` on the live process, which stays open after them (and keeps them in its history)."""
        rr = run_steps(steps, self.open, self.drop, profile=self.profile, keep=True, grace=0.0)
        if self.impl is not None and rr.traces:  # what ran on the live process stays in its record
            ran = [dict(x) for x in steps[:len(rr.traces)]]
            self.history.extend(ran)
            if rr.traces[-1]["events"][-1].get("type") == "response":
                self.last = (ran, list(rr.traces))
        return rr

    def fresh(self, steps: Sequence[Mapping[str, Json]]) -> ReplayResult:
        """``steps`` in a fresh process (a candidate: its result is replayed with the grace, :meth:`replay`)."""
        mode = steps[0].get("kind", "batch") if steps else self.mode
        return run_steps(steps, lambda: self.factory.open(mode), self.factory.release, profile=self.profile,
                         grace=0.0)

    def replay(self, steps: Sequence[Mapping[str, Json]]) -> ReplayResult:
        """``steps`` in a fresh process, as ``loopspec replay`` runs a case."""
        return replay_case({"steps": steps}, self.factory, profile=self.profile)


def run_steps(steps: Sequence[Mapping[str, Json]], impl_for: Callable[[], Impl], release: Callable[[Impl], None],
              *, profile: str | None = None, judge_fn: Callable[..., Verdict] = judge,
              grace: float = LATE_GRACE, keep: bool = False, between: float = 0.002) -> ReplayResult:
    """Run ``steps`` in order on the implementation ``impl_for()`` gives (again after a protocol
    failure, after ``release`` of the broken one), stop at the first divergence. A message the
    implementation sends after an answer is that step's finding (waiting ``grace`` seconds after
    the last step's answer, ``between`` seconds before each next step: a message sent right after
    an answer can take that long to arrive). ``keep``: a live implementation stays open at the end."""
    verdicts: list[Verdict] = []
    traces: list[dict[str, Json]] = []
    impl: Impl | None = None
    try:
        for n, step in enumerate(steps):
            if impl is None:
                try:
                    impl = impl_for()
                except Exception as exc:
                    f = exc if isinstance(exc, ProtocolFailure) else ProtocolFailure("P1", "exited", str(exc))
                    trace = failed_start_trace(step, f)
                    traces.append(trace)
                    verdicts.append(judge_fn(trace, profile=profile))
                    break
            elif traces and traces[-1]["events"][-1].get("type") == "response":
                late = late_message(impl, f"{traces[-1]['kind']}.run", wait=between)
                if late is not None:  # the step before answered, then sent more: that step's finding
                    amend_late(traces[-1], late)
                    verdicts[-1] = judge_fn(traces[-1], profile=profile)
                    break
            if step.get("kind") == "writes":  # may restart the implementation (PROTOCOL.md W2)
                trace, after = run_writes_step(impl, step, impl_for, release)
                if after is None:
                    traces.append(trace)
                    verdicts.append(judge_fn(trace, profile=profile))
                    break
                impl = after
            else:
                trace = run_step(impl, step)
            if n == len(steps) - 1 and grace and trace["events"][-1].get("type") == "response":
                late = late_message(impl, f"{trace['kind']}.run", wait=grace)
                if late is not None:
                    amend_late(trace, late)
            traces.append(trace)
            failed = trace_failed(trace)
            v = judge_fn(trace, profile=profile)
            verdicts.append(v)
            if failed:
                release(impl)
                impl = None
            if not v.ok:
                break
    finally:
        if impl is not None and (not keep or not getattr(impl, "healthy", True)):
            release(impl)
    return ReplayResult(verdicts, traces)


def replay_case(case: Mapping[str, Json], factory: ImplFactory, *, profile: str | None = None) -> ReplayResult:
    """Run the steps of ``case`` in order against a fresh implementation; stop at the first divergence
    (judged under ``profile``, default: the case's own, else the strict spec)."""
    if profile is None and isinstance(case.get("profile"), str) and case["profile"] != "strict":
        profile = case["profile"]
    if isinstance(case.get("declared"), dict) and not isinstance(profile, Params):  # as the campaign judged it
        profile = judging_profile(profile, case["declared"])
    steps: Sequence[Mapping[str, Json]] = case["steps"]
    mode = steps[0].get("kind", "batch") if steps else "batch"
    return run_steps(steps, lambda: factory.open(mode), factory.release, profile=profile)

