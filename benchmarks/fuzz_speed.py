#!/usr/bin/env python3
"""How fast does loopspec fuzz explore, against the I/O limit of the same implementation process?

Prints, for the standalone Python example executor (examples/python/executor.py), all measured in
this one run:

1. the raw JSON-RPC ping-pong rate to one process (round trips per second): the limit;
2. the campaign's exploration (seeded generator, one process reused, fast-path judging) against the
   correct executor: steps/s and round trips/s (a round trip: batch.run / loop.run, each
   tool.execute, each model.next), and their share of the limit — the target is >= 50%;
3. the floor for the campaign's own steps: the same steps replayed on one process without
   generating or judging anything;
4. whether a clean campaign ends when its work is done: its wall time against examples x steps /
   throughput.

    python3 benchmarks/fuzz_speed.py [--examples N] [--mode batch|loop] [--json]

No assertion: this prints numbers, the report interprets them.
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

from loopspec.fuzz._adapter import ImplFactory  # noqa: E402
from loopspec.fuzz._campaign import Campaign  # noqa: E402
from loopspec.fuzz._generate import Generator  # noqa: E402
from loopspec.fuzz._harness import run_step, trace_failed  # noqa: E402

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


def trips_of(trace: dict[str, Any]) -> int:
    return 1 + sum(1 for e in trace["events"] if e.get("type") in ("execute", "model"))


def campaign(mode: str, examples: int) -> dict[str, Any]:
    factory = ImplFactory(CMD, timeout=10.0)
    try:
        c = Campaign(factory, mode=mode, max_examples=examples, seed=1234)
        t0 = time.perf_counter()
        r = c.run()
        wall = time.perf_counter() - t0
    finally:
        factory.close()
    assert r.ok, "the correct example diverged?"
    st = r.stats
    return {"stats": st, "wall": wall, "trips": st["steps"] + st["executionsObserved"] + st.get("modelRequests", 0)}


def replay_raw(mode: str, examples: int) -> tuple[float, float, int]:
    """Steps/s and round trips/s of the campaign's steps sent to one process, nothing else done."""
    gen = Generator(mode, seed=1234)
    steps = [pl.step for i in range(examples) for pl in gen.example(i)[0]]
    factory = ImplFactory(CMD, timeout=10.0, warm=False)
    impl = factory.open(mode)
    trips = 0
    try:
        t0 = time.perf_counter()
        for st in steps:
            trace = run_step(impl, st)
            trips += trips_of(trace)
            if trace_failed(trace):
                raise RuntimeError("the correct example failed a step")
        dt = time.perf_counter() - t0
    finally:
        factory.release(impl)
        factory.close()
    return len(steps) / dt, trips / dt, len(steps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=500)
    ap.add_argument("--mode", choices=("batch", "loop"), default="batch")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON too")
    args = ap.parse_args()

    pp = ping_pong(5000)
    fz = campaign(args.mode, args.examples)
    floor_sps, floor_tps, n = replay_raw(args.mode, args.examples)
    pp2 = ping_pong(5000)  # again: the machine's load may have changed meanwhile
    limit = max(pp, pp2)
    st = fz["stats"]
    explore_s = st["secondsInSteps"] + st.get("secondsGenerating", 0.0)
    fuzz_tps = fz["trips"] / st["seconds"]
    fuzz_sps = st["steps"] / st["seconds"]
    rows = [
        ("raw ping-pong (the limit)", f"{limit:,.0f} round trips/s", "", "100%"),
        ("same steps replayed raw", f"{floor_sps:,.0f} steps/s", f"{floor_tps:,.0f} round trips/s",
         f"{floor_tps / limit:.0%}"),
        ("fuzz campaign, one process", f"{fuzz_sps:,.0f} steps/s", f"{fuzz_tps:,.0f} round trips/s",
         f"{fuzz_tps / limit:.0%}"),
    ]
    print(f"loopspec fuzz speed, {args.mode} mode, {args.examples} examples x 8 steps, Python example executor")
    w = max(len(r[0]) for r in rows)
    for name, a, b, c in rows:
        print(f"  {name:<{w}}  {a:>22}  {b:<24}  {c:>5} of the limit")
    print(f"  fuzz / replay floor: {fuzz_tps / floor_tps:.0%}; the judge ran on {st['judged']} of {st['steps']} "
          f"steps (the rest matched the prediction exactly); ping-pong before/after: {pp:,.0f} / {pp2:,.0f}")
    expected = st["steps"] / floor_sps
    print(f"  a clean campaign ends when its work is done: {args.examples} examples x 8 steps took {fz['wall']:.2f} s "
          f"wall ({st['seconds']} s in the campaign, {explore_s:.2f} s in steps); at the replay floor they take "
          f"{expected:.2f} s")
    if args.json:
        print(json.dumps({"pingPongPerSecond": limit, "pingPongBeforeAfter": [pp, pp2],
                          "replayStepsPerSecond": floor_sps, "replayTripsPerSecond": floor_tps,
                          "fuzzStepsPerSecond": fuzz_sps, "fuzzTripsPerSecond": fuzz_tps,
                          "fuzzShareOfLimit": fuzz_tps / limit, "campaignWallSeconds": fz["wall"],
                          "stats": st}, indent=2))
    del n
    return 0


if __name__ == "__main__":
    sys.exit(main())
