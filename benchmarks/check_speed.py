"""How fast ``loopspec check`` reads a ledger, next to the limit: merely parsing the same file.

Writes a synthetic ledger (real reference-engine runs, relabelled and interleaved: see
``loopspec.oracle.corpus``), then measures, best of ``--repeat`` rounds each:

* the **limit**: read every line and parse it with the fastest JSON parser loopspec ships (orjson
  when the ``fast`` extra is installed), doing nothing else;
* **check**: the whole oracle on the same file (every event replayed through the reference core);
* the same two with the standard library's ``json``, for comparison.

Prints events per second and the ratio check / limit. With ``--memory`` it also checks the file
under tracemalloc and prints the peak. No assertion: the numbers are for reading.

    python benchmarks/check_speed.py --events 300000
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

from loopspec._judge import default_spec
from loopspec.oracle import _json
from loopspec.oracle._stream import LedgerStream
from loopspec.oracle.corpus import template_runs, write_corpus


def parse_only(path: Path, parser: str) -> int:
    loads = __import__("orjson").loads if parser == "orjson" else json.loads
    n = 0
    with path.open("rb") as fh:
        readline = fh.readline
        while True:
            line = readline(1 << 24)
            if not line:
                break
            loads(line)
            n += 1
    return n


def check(path: Path) -> tuple[int, int]:
    spec = default_spec()
    with path.open("rb") as fh:
        ls = LedgerStream(spec, str(path))
        runs = sum(1 for r in ls.run(fh) if getattr(r, "verdict", "") == "conforms")
    return ls.events, runs


def best(fn, repeat: int) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--memory", action="store_true", help="also measure the peak memory of a check (tracemalloc)")
    ap.add_argument("--record-arguments", action="store_true", help="ledgers with raw arguments (R4 recomputed)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "ledger.ndjson"
        with path.open("w") as fh:
            info = write_corpus(fh, args.events, templates=template_runs(200, record_arguments=args.record_arguments))
        size = path.stat().st_size
        print(f"ledger: {info['events']} events, {info['runs']} runs, {size / 1e6:.1f} MB "
              f"({size / info['events']:.0f} bytes/event)")
        parsers = ["orjson", "json"] if _json._fast is not None else ["json"]
        for parser in parsers:
            _json.use_parser(parser)
            t_parse, n = best(lambda parser=parser: parse_only(path, parser), args.repeat)
            t_check, (events, runs) = best(lambda: check(path), args.repeat)  # type: ignore[misc]
            assert events == n and runs == info["runs"], (events, n, runs)
            limit, rate = n / t_parse, n / t_check
            print(f"{parser:>6}: parse only {limit:>10,.0f} events/s (the limit) | check {rate:>10,.0f} events/s "
                  f"| check/limit = {rate / limit:.0%}")
        _json.use_parser(parsers[0])
        if args.memory:
            tracemalloc.start()
            check(path)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            print(f"peak traced memory while checking {info['events']} events: {peak / 1e6:.1f} MB "
                  f"(the file is {size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
