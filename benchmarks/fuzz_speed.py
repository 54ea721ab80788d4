#!/usr/bin/env python3
"""How fast does loopspec fuzz, against the I/O limit of the same implementation process?

Prints, for the standalone Python example executor (examples/python/executor.py):

1. the raw JSON-RPC ping-pong rate to one process (round trips per second): the limit;
2. the floor for the fuzzer's own steps: the same recorded steps (batch.run with its tool.execute
   callbacks) replayed without generating or judging anything (steps/s and round trips/s);
3. the fuzzer's rate (Hypothesis generation + harness + judge), with one process for the whole
   campaign and with a fresh process per example (the default), as steps/s and round trips/s;

and the ratios fuzz / limit. Target (issue 6): fuzzing at >= 50% of the limit. No assertion:
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

from loopspec._adapter import ImplFactory  # noqa: E402
from loopspec._fuzz import Campaign, run_step  # noqa: E402
from loopspec._harness import trace_failed  # noqa: E402

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
    print(f"  fuzz / replay floor: one process {fuzz_sps / floor_sps:.1%}, process per example "
          f"{fresh_sps / floor_sps:.1%}; steps {shared['steps']} / {per_example['steps']}, "
          f"{shared['seconds']} s / {per_example['seconds']} s")
    if args.json:
        print(json.dumps({"pingPongPerSecond": pp, "roundTripsPerStep": rt_per_step, "replayStepsPerSecond": floor_sps,
                          "fuzzStepsPerSecondOneProcess": fuzz_sps, "fuzzStepsPerSecondPerExample": fresh_sps,
                          "stats": {"campaign": shared, "example": per_example}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
