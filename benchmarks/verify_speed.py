#!/usr/bin/env python3
"""How fast `loopspec verify` exhausts the default bound (spec/bounds.toml), on one core.

Prints, per scope and in total: distinct states (canonical, after symmetry reduction), the states
they stand for before symmetry reduction, transitions, depth, seconds, and the rates; then the
ratios against the targets of issue 4 (exhaust the default bound in under 30 s; at least 200k
distinct states per second counted before reduction). Also times the reference model (whole
RunStates, no window, no memo) on a small bound for comparison, unless --quick.

    python benchmarks/verify_speed.py [--repeat N] [--quick] [--scope NAME ...]

The default bound is what `loopspec verify` explores without --scope: every scope not marked slow.

This is a measurement, not a test: it never fails on timing.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

from loopspec.checker.bounds import apply_overrides, load_bounds
from loopspec.checker.explore import explore

TARGET_SECONDS = 30.0
TARGET_RATE = 200_000  # distinct states per second, counted before symmetry reduction


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=1, help="runs per scope; the best is reported")
    ap.add_argument("--quick", action="store_true", help="skip the reference-model comparison")
    ap.add_argument("--scope", action="append", default=[],
                    help="measure only this scope (repeatable; a scope marked slow only when named, as in verify)")
    args = ap.parse_args()
    b = load_bounds()
    chosen = [b.scope(n) for n in args.scope] if args.scope else [s for s in b.scopes.values() if not s.slow]
    print(f"python {platform.python_version()} on {platform.machine()}, one core; bounds: {b.path}")
    total_s = total_t = total_orbit = 0
    total_time = 0.0
    rows = []
    for scope in chosen:
        name = scope.name
        best = None
        for _ in range(max(1, args.repeat)):
            ex = explore(b, scope)
            if best is None or ex.seconds < best.seconds:
                best = ex
        assert best is not None
        t0 = time.perf_counter()
        orbit = explore(b, scope, count_orbits=True).orbit_states
        _ = time.perf_counter() - t0
        total_s += best.states
        total_t += best.transitions
        total_orbit += orbit
        total_time += best.seconds
        rows.append((name, best.states, orbit, best.transitions, best.depth, best.seconds,
                     best.memo_misses, best.memo_hits))
    print(f"{'scope':6} {'states':>9} {'before sym.':>12} {'transitions':>12} {'depth':>5} {'seconds':>8} "
          f"{'states/s':>9} {'before-sym/s':>13} {'memo miss/hit':>15}")
    for name, s, o, t, d, sec, miss, hit in rows:
        print(f"{name:6} {s:9,} {o:12,} {t:12,} {d:5} {sec:8.2f} {s / sec:9,.0f} {o / sec:13,.0f} {miss:7,}/{hit:,}")
    print(f"{'total':6} {total_s:9,} {total_orbit:12,} {total_t:12,} {'':5} {total_time:8.2f} "
          f"{total_s / total_time:9,.0f} {total_orbit / total_time:13,.0f}")
    what = "the default bound" if not args.scope else "the scopes measured"
    print(f"\ntime to exhaust {what}: {total_time:.1f} s  (target {TARGET_SECONDS:.0f} s: "
          f"ratio {total_time / TARGET_SECONDS:.2f})")
    rate = total_orbit / total_time
    print(f"distinct states per second before symmetry reduction: {rate:,.0f}  (target {TARGET_RATE:,}: "
          f"ratio {rate / TARGET_RATE:.2f})")
    print(f"canonical (reduced) states per second: {total_s / total_time:,.0f}; transitions per second: "
          f"{total_t / total_time:,.0f}")
    if not args.quick:
        small = apply_overrides(b, ["batch.calls=3", "batch.ids=3"])
        fast = explore(small, small.scope("batch"))
        ref = explore(small, small.scope("batch"), model="reference")
        print(f"\nbatch at calls=3 ids=3: fast model {fast.seconds:.2f} s, reference model (whole RunStates) "
              f"{ref.seconds:.2f} s: {ref.seconds / fast.seconds:.1f}x; same states: {fast.states == ref.states}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
