"""How fast ``loopspec check`` reads a ledger, next to the limit: merely parsing the same file.

Writes a synthetic ledger (real reference-engine runs, relabelled and interleaved: see
``loopspec.oracle.corpus``), then measures, best of ``--repeat`` rounds each:

* the **limit**: read every line and parse it with the fastest JSON parser loopspec ships (orjson
  when the ``fast`` extra is installed), doing nothing else;
* **check**: the whole oracle on the same file (every event replayed through the reference core);
* the same two with the standard library's ``json``, for comparison;
* a **skeleton**: the oracle's read loop (readline, parse, one dict lookup for the run) feeding
  each event to a per-run object that reads only ``seq``, ``type``, ``step``, ``via`` and ``t``
  and checks their order — no state machine, no guard, no field check. No checker that replays
  events in Python can be faster than this, so it bounds what a Python oracle can reach;
* with ``--stages``, where a check's time per event goes, by difference of passes: the raw parse, the
  loader's limits, the read loop (demultiplexing, records), the per-run setup, the per-event replay
  through the reference core; and what the ``--jobs`` scan costs per line another process owns;
* **check --jobs N** (N = ``--jobs``, default the number of CPUs): the same file split across N
  processes by run (``loopspec.oracle._split``: each process scans every line for its run id and
  checks only its own runs), timed from the first fork to the last merged record, beside the same
  single-core parse rate. Each round prints its own ratios (parse, single check and split check are
  measured one after the other in the round), so a noisy machine shows as spread between rounds.

* with ``--scaling 2,4,8``, the split for each of those process counts, in CPU time: the busiest process
  against a single-core parse of the same file (the processes share the machine's cores, so this is what
  that many free cores would show at worst).

Prints events per second and the ratios check / limit and check --jobs N / limit (wall clock), the same
ratios in CPU time (parse CPU against the check's, and against the busiest process of the split: what
the wall clock would show on free cores), and the machine's load average before and after (``os.getloadavg``: the machine is shared, and wall-clock rates fall with its load). With ``--memory`` it also prints the peak
RSS of ``loopspec check`` run as a child process (the kernel's figure, which counts the parser's C
allocations) and tracemalloc's peak for a check in process (Python's allocations only). No assertion: the numbers are for reading.

    python benchmarks/check_speed.py --events 300000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loopspec.judge.verdict import default_spec
from loopspec.oracle import _json
from loopspec.oracle._check import LedgerCheck
from loopspec.oracle.corpus import template_runs, write_corpus
from loopspec.support import safejson


def parse_only(path: Path) -> int:
    """Read and parse every line with the bare parser (orjson.loads, or the stdlib decoder), no limit checked."""
    return _parse_lines(path, _json.raw_parser())


def _parse_lines(path: Path, loads: Any) -> int:
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


_CPU: dict[str, float] = {}


def check_jobs(path: Path, jobs: int) -> tuple[int, int]:
    from loopspec.oracle._records import Summary
    from loopspec.oracle._split import check_split

    s = Summary()
    info: dict[str, Any] = {}
    t = time.process_time()
    runs = sum(1 for r in check_split(str(path), jobs, summary=s, info=info) if getattr(r, "verdict", "") == "conforms")
    assert "fallback" not in info, info  # a fallback to one process would not measure the split
    _CPU["parent"] = time.process_time() - t
    _CPU["workers"] = max(info["workerCpuSeconds"])
    _CPU["total"] = _CPU["parent"] + sum(info["workerCpuSeconds"])
    return s.events, runs


def check(path: Path) -> tuple[int, int]:
    spec = default_spec()
    with path.open("rb") as fh:
        ls = LedgerCheck(spec, str(path))
        runs = sum(1 for r in ls.run(fh) if getattr(r, "verdict", "") == "conforms")
    return ls.events, runs


class _Skeleton:
    """The least a per-event check can do: the sequence and step numbering of one run."""

    __slots__ = ("seq", "step", "via")

    def __init__(self) -> None:
        self.seq = 0
        self.step = 0
        self.via = ""

    def feed(self, ev: dict[str, object], line: int) -> None:
        seq = ev["seq"]
        if seq != self.seq + 1 or seq.__class__ is not int:
            raise ValueError(line)
        self.seq = seq
        if ev["type"].__class__ is not str:
            raise ValueError(line)
        step = ev.get("step")
        if step != self.step:
            if step.__class__ is not int or ev["t"].__class__ not in (int, float):
                raise ValueError(line)
            self.step = step
            self.via = ev.get("via")  # type: ignore[assignment]


def skeleton(path: Path) -> int:
    loads = safejson.fast_loader()  # the oracle's own parse, with the loader's limits
    runs: dict[object, _Skeleton] = {}
    n = 0
    with path.open("rb") as fh:
        readline = fh.readline
        while True:
            raw = readline(1 << 24)
            if not raw:
                break
            n += 1
            ev = loads(raw)
            run = ev.get("run")
            chk = runs.get(run)
            if chk is None:  # run_started: the run's first event
                runs[run] = _Skeleton()
                runs[run].seq = ev["seq"]
                continue
            chk.feed(ev, n)
    return n


def safe_parse_only(path: Path) -> int:
    """Read and parse every line with the oracle's own loader (its limits checked), nothing else."""
    return _parse_lines(path, safejson.fast_loader())


@contextlib.contextmanager
def _without(replay: bool, setup: bool) -> Iterator[None]:
    """The check with its per-event replay (``RunChecker.feed``) and/or its per-run setup
    (``RunChecker.__init__``: configuration, core state, compiled groups) replaced by the least that keeps
    the read loop going (seq, event count, the terminal event ends the run): what remains is what those
    stages do not cost. For measuring only."""
    from loopspec.core.rules import RunState
    from loopspec.oracle._judge.ledger import Checks, RunChecker, cached_run_config

    feed, init = RunChecker.feed, RunChecker.__init__
    states: dict[int, RunState] = {}

    def bare_feed(self: Any, ev: dict[str, Any], line: int) -> None:
        self.seq = ev["seq"]
        self.events += 1
        self.last_line = line
        if ev["type"] == "run_terminal":
            self.terminal = True
            self.terminal_line = line

    def bare_init(self: Any, tables: Any, run_id: str, started: Any, line: int, config_key: Any = None) -> None:
        self.t, self.run_id, self.first_line, self.last_line = tables, run_id, line, line
        self.seq = self.events = 1
        self.step = 0
        self.terminal, self.inflight, self.terminal_line, self.concurrent = False, None, 0, False
        self.checks = Checks()
        self.writes = None
        if not states:
            states[0] = RunState(cached_run_config(started["config"], run_id)[0])
        self.s = states[0]

    try:
        if not replay:
            RunChecker.feed = bare_feed  # type: ignore[method-assign]
        if not setup:
            RunChecker.__init__ = bare_init  # type: ignore[method-assign]
        yield
    finally:
        RunChecker.feed, RunChecker.__init__ = feed, init  # type: ignore[method-assign]


def stages(path: Path, repeat: int) -> dict[str, float]:
    """CPU seconds per event of each stage of a check (CPU time: the machine is shared), by difference of
    passes over the same file (best of ``repeat`` each): the raw parse, the loader's limits, the read loop
    (demultiplexing, records), the per-run setup, the per-event replay; and the ``--jobs`` scan of a line
    another process owns."""
    from loopspec.oracle._split import owned_lines

    def scan() -> int:
        with path.open("rb") as fh:
            return sum(1 for _ in owned_lines(fh, 0, 1 << 30, (1 << 24) + 1))  # owns (almost) nothing

    cpu = time.process_time
    t_raw, n = best(lambda: parse_only(path), repeat, cpu)
    t_safe, _ = best(lambda: safe_parse_only(path), repeat, cpu)
    with _without(replay=False, setup=False):
        t_loop, _ = best(lambda: check(path), repeat, cpu)
    with _without(replay=False, setup=True):
        t_setup, _ = best(lambda: check(path), repeat, cpu)
    t_full, _ = best(lambda: check(path), repeat, cpu)
    t_scan, _ = best(scan, repeat, cpu)
    return {"parse": t_raw / n, "limits": (t_safe - t_raw) / n, "loop": (t_loop - t_safe) / n,
            "setup": (t_setup - t_loop) / n, "replay": (t_full - t_setup) / n, "total": t_full / n,
            "scan": t_scan / n}


def scaling(path: Path, counts: list[int], parser: str) -> list[tuple[int, float, float]]:
    """For each N in ``counts``: the file checked by N processes (``check --jobs N``), in CPU time — the
    busiest process's against a single-core parse of the same file, measured just before it. On N free cores
    the busiest process bounds the wall time, so this is the ratio they would show; the processes run by
    turns when N exceeds the CPUs, so the wall clock is not used. Returns (N, busiest CPU s, ratio)."""
    print(f"--jobs N on one file, in CPU time (anchor: a single-core {parser} parse of the same file, measured "
          "just before each split):")
    out = []
    for jobs in counts:
        c0 = time.process_time()
        n = parse_only(path)
        parse_cpu = time.process_time() - c0
        events, _ = check_jobs(path, jobs)
        assert events == n, (events, n)
        busiest = max(_CPU["workers"], _CPU["parent"])
        out.append((jobs, busiest, parse_cpu / busiest))
        print(f"  --jobs {jobs}: busiest process {busiest:.2f} s CPU against {parse_cpu:.2f} s to parse = "
              f"{parse_cpu / busiest:.0%} of the parse rate (all processes together {_CPU['total']:.2f} s)")
    return out


def best(fn, repeat: int, clock=time.perf_counter) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, out = [], None
    for _ in range(repeat):
        t = clock()
        out = fn()
        times.append(clock() - t)
    return min(times), out


# Forks the command from a small process: a child forked from this (large) one would start with its
# resident size as the high-water mark the kernel reports (kept across exec).
_LAUNCH = """
import json, os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
print(json.dumps({"maxrss_kb": ru.ru_maxrss, "status": status}))
"""


def child_peak_rss(path: Path) -> tuple[float, int]:
    """The peak RSS (MB) and exit code of ``loopspec check --quiet path`` in a child process."""
    out = subprocess.run([sys.executable, "-S", "-c", _LAUNCH, sys.executable, "-m", "loopspec", "check", "--quiet",
                          str(path)], capture_output=True, text=True, check=False)
    rep = json.loads(out.stdout.strip().splitlines()[-1])
    return rep["maxrss_kb"] / 1024, os.waitstatus_to_exitcode(rep["status"])


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - not on this platform
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--memory", action="store_true",
                    help="also measure the peak memory of a check: a child's peak RSS, and tracemalloc's peak")
    ap.add_argument("--record-arguments", action="store_true", help="ledgers with raw arguments (R4 recomputed)")
    ap.add_argument("--parsers", default="orjson,json", help="the parsers to measure single-process (default: both)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="processes for the split check (default: the number of CPUs)")
    ap.add_argument("--scaling", default="",
                    help="also split the file across each of these numbers of processes (comma-separated, e.g. 2,4,8) "
                         "and print, in CPU time, the busiest process against the single-core parse: what that many "
                         "free cores would show (more processes than CPUs run by turns, so no wall clock)")
    ap.add_argument("--stages", action="store_true",
                    help="also split the check's time per event into its stages (parse, limits, read loop, run "
                         "setup, replay; the --jobs scan), by difference of passes")
    args = ap.parse_args()
    print(f"load average before: {_load()} ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "ledger.ndjson"
        with path.open("w") as fh:
            info = write_corpus(fh, args.events, templates=template_runs(200, record_arguments=args.record_arguments))
        size = path.stat().st_size
        print(f"ledger: {info['events']} events, {info['runs']} runs, {size / 1e6:.1f} MB "
              f"({size / info['events']:.0f} bytes/event)")
        parsers = [p for p in args.parsers.split(",") if p == "json" or _json._fast is not None] or ["json"]
        for parser in parsers:
            _json.use_parser(parser)
            t_parse, n = best(lambda: parse_only(path), args.repeat)
            t_check, (events, runs) = best(lambda: check(path), args.repeat)  # type: ignore[misc]
            assert events == n and runs == info["runs"], (events, n, runs)
            t_skel, _ = best(lambda: skeleton(path), args.repeat)
            limit, rate, skel = n / t_parse, n / t_check, n / t_skel
            print(f"{parser:>6}: parse only {limit:>10,.0f} events/s (the limit) | check {rate:>10,.0f} events/s "
                  f"| check/limit = {rate / limit:.0%} | skeleton {skel:>10,.0f} events/s = {skel / limit:.0%}")
            budget = 1e6 / (0.5 * limit) - 1e6 / skel
            print(f"{'':>6}  at 50% of the limit an event may take {1e6 / (0.5 * limit):.2f} us; the skeleton "
                  f"takes {1e6 / skel:.2f} us, leaving {budget:.2f} us for the check itself (it takes "
                  f"{1e6 / rate - 1e6 / skel:.2f} us)")
        _json.use_parser(parsers[0])
        if args.stages:
            st = stages(path, args.repeat)
            print(f"stages of the check ({parsers[0]}), CPU us/event, by difference of passes (best of {args.repeat}): "
                  f"parse {st['parse'] * 1e6:.2f} + the loader's limits {st['limits'] * 1e6:.2f} + read loop and "
                  f"records {st['loop'] * 1e6:.2f} + run setup {st['setup'] * 1e6:.2f} + replay "
                  f"{st['replay'] * 1e6:.2f} = {st['total'] * 1e6:.2f}; the --jobs scan of a line another "
                  f"process owns: {st['scan'] * 1e6:.2f}")
        print(f"--jobs {args.jobs} on one file ({os.cpu_count()} CPUs; anchor: single-core {parsers[0]} parse rate, "
              "measured in the same round):")
        ratios = []
        cpu_ratios = []
        for k in range(args.repeat):
            c0 = time.process_time()
            t_parse, n = best(lambda: parse_only(path), 1)
            parse_cpu = time.process_time() - c0
            c0 = time.process_time()
            t_one, _ = best(lambda: check(path), 1)
            t_one_cpu = [time.process_time() - c0]
            t_jobs, (events, runs) = best(lambda: check_jobs(path, args.jobs), 1)  # type: ignore[misc]
            assert events == n and runs == info["runs"], (events, n, runs)
            limit = n / t_parse
            ratios.append((n / t_one / limit, n / t_jobs / limit))
            print(f"  round {k + 1}: parse only {limit:>10,.0f} events/s | check {n / t_one:>10,.0f} events/s = "
                  f"{n / t_one / limit:.0%} | check --jobs {args.jobs} {n / t_jobs:>10,.0f} events/s = "
                  f"{n / t_jobs / limit:.0%} of the limit")
            print(f"           CPU seconds: parse only {parse_cpu:.2f}; one process {t_one_cpu[0]:.2f}; split: busiest "
                  f"process {_CPU['workers']:.2f}, parent {_CPU['parent']:.2f}, all {_CPU['total']:.2f} (on {args.jobs} "
                  f"free cores the busiest process bounds the wall time; the machine's load shows as wall > CPU)")
            busiest = max(_CPU["workers"], _CPU["parent"])
            cpu_ratios.append((parse_cpu / t_one_cpu[0], parse_cpu / busiest))
            print(f"           in CPU time (what free cores would show): check/limit = {cpu_ratios[-1][0]:.0%}, "
                  f"check --jobs {args.jobs}/limit = {cpu_ratios[-1][1]:.0%} (the busiest process against the parse)")
        best_one, best_jobs = max(r[0] for r in ratios), max(r[1] for r in ratios)
        print(f"  best: check/limit = {best_one:.0%}, check --jobs {args.jobs}/limit = {best_jobs:.0%} "
              f"(target 50%); in CPU time {max(r[0] for r in cpu_ratios):.0%} and "
              f"{max(r[1] for r in cpu_ratios):.0%}")
        if args.scaling:
            scaling(path, [int(x) for x in args.scaling.split(",") if x.strip()], parsers[0])
        print(f"load average after: {_load()}")
        if args.memory:
            rss, code = child_peak_rss(path)
            print(f"peak RSS of loopspec check (a child process, the kernel's figure): {rss:.1f} MB while checking "
                  f"{info['events']} events, exit {code} (the file is {size / 1e6:.1f} MB)")
            tracemalloc.start()
            check(path)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            print(f"peak traced memory (tracemalloc: Python's allocations only) while checking {info['events']} "
                  f"events in this process: {peak / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
