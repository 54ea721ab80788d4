#!/usr/bin/env python3
"""How fast does loopspec fuzz, against the I/O limit of the same implementation process?

Prints, for the standalone Python example executor (examples/python/executor.py):

1. the raw JSON-RPC ping-pong rate to one process (round trips per second): the limit;
2. the floor for the fuzzer's own steps: the same recorded steps (batch.run with its tool.execute
   callbacks) replayed without generating or judging anything (steps/s and round trips/s);
3. the fuzzer's rate (Hypothesis generation + harness + judge), with one process for the whole
   campaign and with a fresh process per example (the default), as steps/s and round trips/s;
4. two lower bounds on the cost of a step that involve no I/O at all: Hypothesis' stateful engine
   running the fuzzer's own rules with the step *drawn but not run*, and the same engine with a
   rule that draws one small integer and does nothing (the engine's own floor, whatever the step
   strategy);

and the ratios fuzz / limit, plus the time a step may take at the target and what 4. leaves of it. Target (issue 6): fuzzing at >= 50% of the limit. No assertion:
this prints numbers, the report interprets them.

    python3 benchmarks/fuzz_speed.py [--examples N] [--mode batch|loop] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test  # noqa: E402

from loopspec.fuzz._adapter import ImplFactory  # noqa: E402
from loopspec.fuzz._campaign import Campaign, run_step  # noqa: E402
from loopspec.fuzz._harness import trace_failed  # noqa: E402

CMD = [sys.executable, str(ROOT / "examples" / "python" / "executor.py")]


def ping_pong(n: int) -> float:
    """Round trips per second of the smallest request (an unknown method, answered by an error)."""
    factory = ImplFactory(CMD, warm=False)
    impl = factory.open()
    try:
        for _ in range(200):
            impl.ping_pong()
        t0 = time.perf_counter()
        for _ in range(n):
            impl.ping_pong()
        return n / (time.perf_counter() - t0)
    finally:
        factory.release(impl)
        factory.close()


class Recorder(Campaign):
    """A campaign that keeps every step it ran, so the same steps can be replayed raw."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.recorded: list[dict[str, Any]] = []

    def run_step(self, ex: Any, step: dict[str, Any]) -> None:
        self.recorded.append(step)
        super().run_step(ex, step)


def fuzz(mode: str, examples: int, isolation: str, record: bool = False) -> tuple[dict[str, Any], list[Any], int]:
    factory = ImplFactory(CMD, timeout=10.0)
    cls = Recorder if record else Campaign
    c = cls(factory, mode=mode, max_examples=examples, seed=1234, isolation=isolation, confirm=False)
    trips = [0]
    orig_open = factory.open

    def counting_open(m: str = "batch") -> Any:
        impl = orig_open(m)
        ch = getattr(impl, "channel", None)
        if ch is not None:
            ch.tap = _count(trips)
        return impl

    factory.open = counting_open  # type: ignore[method-assign]
    try:
        r = c.run()
    finally:
        factory.close()
    assert r.ok, "the correct example diverged?"
    return r.stats, getattr(c, "recorded", []), trips[0]


def _count(trips: list[int]) -> Any:
    def tap(direction: str, msg: dict[str, Any]) -> None:
        # one round trip per request, whoever sends it (batch.run / loop.run, tool.execute, model.next)
        if "method" in msg and msg["method"] not in ("initialize", "shutdown"):
            trips[0] += 1
    return tap


def replay_raw(steps: list[dict[str, Any]]) -> tuple[float, int]:
    """Steps per second for the recorded steps, sent to one process, without generation or judging."""
    factory = ImplFactory(CMD, timeout=10.0, warm=False)
    impl = factory.open(steps[0].get("kind", "batch") if steps else "batch")
    trips = [0]
    impl.channel.tap = _count(trips)  # type: ignore[attr-defined]
    try:
        t0 = time.perf_counter()
        for st in steps:
            trace = run_step(impl, st)
            if trace_failed(trace):
                raise RuntimeError("the correct example failed a step")
        dt = time.perf_counter() - t0
    finally:
        factory.release(impl)
        factory.close()
    return len(steps) / dt, trips[0]


class _Drawn(Campaign):
    """The fuzzer's own state machine and settings, with every drawn step dropped: generation only."""

    def run_step(self, ex: Any, step: dict[str, Any]) -> None:
        self.drawn += 1

    def end_example(self, ex: Any) -> None:
        pass


def generation_only(mode: str, examples: int) -> float:
    """Steps per second of Hypothesis drawing the fuzzer's steps through its rules, nothing else."""
    c = _Drawn(ImplFactory(CMD), mode=mode, max_examples=examples, seed=1234, confirm=False)
    c.drawn = 0  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    run_state_machine_as_test(c.machine_class(), settings=c.settings())
    return c.drawn / (time.perf_counter() - t0)  # type: ignore[attr-defined,no-any-return]


def engine_floor(examples: int) -> float:
    """Steps per second of Hypothesis' stateful engine with one rule that draws an integer and
    returns: what any RuleBasedStateMachine pays per step before it does anything."""
    count = [0]

    class Noop(RuleBasedStateMachine):
        @rule(x=st.integers(0, 255))
        def step(self, x: int) -> None:
            count[0] += 1

    cfg = Campaign(ImplFactory(CMD), max_examples=examples, seed=1234, confirm=False).settings()  # same settings
    t0 = time.perf_counter()
    run_state_machine_as_test(Noop, settings=cfg)
    return count[0] / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument("--mode", choices=("batch", "loop"), default="batch")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON too")
    args = ap.parse_args()

    pp = ping_pong(5000)
    shared, steps, _ = fuzz(args.mode, args.examples, "campaign", record=True)
    per_example, _, _ = fuzz(args.mode, args.examples, "example")
    floor_sps, floor_trips = replay_raw(steps)
    gen_sps = generation_only(args.mode, args.examples)
    engine_sps = engine_floor(args.examples)

    rt_per_step = floor_trips / len(steps) if steps else 0.0
    fuzz_sps = shared["stepsPerSecond"]
    fresh_sps = per_example["stepsPerSecond"]
    rows = [
        ("raw ping-pong (the limit)", f"{pp:,.0f} round trips/s", f"= {pp / rt_per_step:,.0f} steps/s at "
                                                                  f"{rt_per_step:.2f} round trips/step", "100%"),
        ("same steps replayed raw", f"{floor_sps:,.0f} steps/s", f"{floor_sps * rt_per_step:,.0f} round trips/s",
         f"{floor_sps * rt_per_step / pp:.0%}"),
        ("fuzz, one process", f"{fuzz_sps:,.0f} steps/s", f"{fuzz_sps * rt_per_step:,.0f} round trips/s",
         f"{fuzz_sps * rt_per_step / pp:.1%}"),
        ("fuzz, process per example", f"{fresh_sps:,.0f} steps/s", f"{fresh_sps * rt_per_step:,.0f} round trips/s",
         f"{fresh_sps * rt_per_step / pp:.1%}"),
    ]
    print(f"loopspec fuzz speed, {args.mode} mode, {args.examples} examples, Python example executor")
    w = max(len(r[0]) for r in rows)
    for name, a, b, c in rows:
        print(f"  {name:<{w}}  {a:>22}  {b:<44}  {c:>6} of the limit")
    budget_us = 1e6 / (0.5 * pp / rt_per_step) if rt_per_step else 0.0
    floor_us, gen_us, engine_us = 1e6 / floor_sps, 1e6 / gen_sps, 1e6 / engine_sps
    print(f"  lower bounds without I/O: the fuzzer's rules drawing steps only {gen_sps:,.0f} steps/s "
          f"({gen_us:,.0f} us/step); Hypothesis' stateful engine with a no-op rule {engine_sps:,.0f} steps/s "
          f"({engine_us:,.0f} us/step)")
    print(f"  at the target (50% of the limit) a step may take {budget_us:,.0f} us; the I/O alone (replay) takes "
          f"{floor_us:,.0f} us, leaving {budget_us - floor_us:,.0f} us for generation and judging, "
          f"{'less' if budget_us - floor_us < engine_us else 'more'} than the engine floor ({engine_us:,.0f} us)")
    print(f"  fuzz / replay floor: one process {fuzz_sps / floor_sps:.1%}, process per example "
          f"{fresh_sps / floor_sps:.1%}; steps {shared['steps']} / {per_example['steps']}, "
          f"{shared['seconds']} s / {per_example['seconds']} s")
    if args.json:
        print(json.dumps({"pingPongPerSecond": pp, "roundTripsPerStep": rt_per_step, "replayStepsPerSecond": floor_sps,
                          "fuzzStepsPerSecondOneProcess": fuzz_sps, "fuzzStepsPerSecondPerExample": fresh_sps,
                          "generationOnlyStepsPerSecond": gen_sps, "engineFloorStepsPerSecond": engine_sps,
                          "stepBudgetMicrosecondsAtTarget": budget_us,
                          "stats": {"campaign": shared, "example": per_example}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
