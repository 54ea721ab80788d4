"""Overlays drawn on the loop machine: a run's path (trace) and how often each part was hit (coverage).

Inputs are text (the command line reads the files); everything here is pure. Three input forms:

* a **trace** (``spec/schema/transition-path.schema.json``)::

      {"path": ["T04", "T14", "T20", "T21", "T27"], "failed": 3}

  ``path`` is a walk on the machine from ``start`` (default: the initial state); ``failed`` is the
  0-based index of the step that went wrong, or ``null``;
* a **coverage** file (``spec/schema/transition-coverage.schema.json``)::

      {"transitions": {"T04": 12, "T14": 9}, "runs": 3}

  counts per transition id; an id that is absent counts 0;
* a **run ledger** (NDJSON, ``loopspec.Ledger``): every event names its run (``run``) and, when a
  transition produced it, the transition (``via``). The path of a run is rebuilt from its events:
  consecutive events with the same ``via`` belong to one step (a new step starts when an event
  type repeats), and a transition that emits no event (``next_item``) is filled in when it is the
  only transition joining two recorded steps. A trace from a ledger marks as failed the step that
  ended the run in a terminal state other than COMPLETED.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..support import safejson
from .model import Machine

__all__ = [
    "Coverage",
    "Overlay",
    "OverlayError",
    "Step",
    "Trace",
    "ledger_runs",
    "make_overlay",
    "read_coverage",
    "read_trace",
]


class OverlayError(ValueError):
    """Bad overlay input: ``path:line: message`` (line 0 when no line applies)."""

    def __init__(self, path: str, line: int, message: str) -> None:
        self.path = path
        self.line = line
        self.message = message
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")


@dataclass(frozen=True, slots=True)
class Trace:
    path: tuple[str, ...]
    failed: int | None = None
    start: str | None = None
    label: str = ""


@dataclass(frozen=True, slots=True)
class Coverage:
    transitions: tuple[tuple[str, int], ...]
    runs: int | None = None
    label: str = ""

    def count(self, tid: str) -> int:
        return dict(self.transitions).get(tid, 0)


@dataclass(frozen=True, slots=True)
class Step:
    number: int
    transition: str
    source: str
    dest: str
    failed: bool


@dataclass(frozen=True, slots=True)
class Overlay:
    """What the renderers draw on top of the machine. Empty fields mean "no such overlay"."""

    steps: tuple[Step, ...] = ()
    trace_label: str = ""
    has_trace: bool = False
    #: Every transition id of the machine with its count (0 when not hit), when coverage is given.
    counts: tuple[tuple[str, int], ...] = ()
    state_counts: tuple[tuple[str, int], ...] = ()
    coverage_label: str = ""
    has_coverage: bool = False

    def steps_of(self, tid: str) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.transition == tid)

    @property
    def failed_step(self) -> Step | None:
        return next((s for s in self.steps if s.failed), None)

    @property
    def visited(self) -> frozenset[str]:
        return frozenset({s.source for s in self.steps} | {s.dest for s in self.steps})

    @property
    def top(self) -> int:
        return max([c for _, c in self.counts] + [c for _, c in self.state_counts] + [0])

    def count(self, tid: str) -> int:
        return dict(self.counts).get(tid, 0)

    def state_count(self, sid: str) -> int:
        return dict(self.state_counts).get(sid, 0)


# --------------------------------------------------------------------------------------------
# Building the overlay (from validated inputs)
# --------------------------------------------------------------------------------------------


def walk(machine: Machine, path: Sequence[str], start: str | None = None) -> list[tuple[str, str]]:
    """The (source, dest) of each step of ``path``; ValueError naming the first bad step."""
    edges = {e.id: e for e in machine.edges}
    cur = start or machine.initial
    out: list[tuple[str, str]] = []
    for i, tid in enumerate(path):
        e = edges.get(tid)
        if e is None:
            raise ValueError(f"path[{i}]: unknown transition {tid!r}")
        if cur not in e.sources:
            raise ValueError(
                f"path[{i}]: {tid} cannot fire in state {cur!r} (it leaves {', '.join(e.sources)})"
            )
        out.append((cur, e.dest))
        cur = e.dest
    return out


def make_overlay(machine: Machine, trace: Trace | None = None, coverage: Coverage | None = None) -> Overlay:
    steps: tuple[Step, ...] = ()
    if trace is not None:
        pairs = walk(machine, trace.path, trace.start)
        steps = tuple(
            Step(i + 1, tid, src, dst, trace.failed == i)
            for i, (tid, (src, dst)) in enumerate(zip(trace.path, pairs, strict=True))
        )
    counts: tuple[tuple[str, int], ...] = ()
    state_counts: tuple[tuple[str, int], ...] = ()
    if coverage is not None:
        given = dict(coverage.transitions)
        counts = tuple((e.id, given.get(e.id, 0)) for e in machine.edges)
        into = {s.id: 0 for s in machine.states}
        out_of = {s.id: 0 for s in machine.states}
        for e in machine.edges:
            n = given.get(e.id, 0)
            into[e.dest] += n
            if len(e.sources) == 1:
                out_of[e.sources[0]] += n
        state_counts = tuple((s.id, max(into[s.id], out_of[s.id])) for s in machine.states)
    return Overlay(
        steps=steps,
        trace_label=trace.label if trace else "",
        has_trace=trace is not None,
        counts=counts,
        state_counts=state_counts,
        coverage_label=coverage.label if coverage else "",
        has_coverage=coverage is not None,
    )


# --------------------------------------------------------------------------------------------
# Reading the inputs
# --------------------------------------------------------------------------------------------


def _line_of(text: str, needle: str, nth: int = 0) -> int:
    pos = -1
    for _ in range(nth + 1):
        pos = text.find(needle, pos + 1)
        if pos < 0:
            return 0
    return text.count("\n", 0, pos) + 1


def _classify(text: str, path: str) -> tuple[Literal["simple", "ledger"], Any]:
    if not text.strip():
        raise OverlayError(path, 0, "the file is empty")
    try:
        doc = safejson.loads(text)
    except safejson.JsonInputError as exc:
        if exc.reason == "not JSON: Extra data":
            return "ledger", None
        raise OverlayError(path, exc.line or 0, exc.message()) from None
    if isinstance(doc, dict) and ("path" in doc or "transitions" in doc):
        return "simple", doc
    if isinstance(doc, dict):
        return "ledger", None
    raise OverlayError(path, 1, "expected a JSON object or NDJSON ledger events")


def _check_keys(doc: Mapping[str, Any], allowed: set[str], text: str, path: str) -> None:
    for k in doc:
        if k not in allowed:
            raise OverlayError(path, _line_of(text, json.dumps(k)),
                               f"unknown field {k!r} (allowed: {', '.join(sorted(allowed))})")


def _opt_str(doc: Mapping[str, Any], key: str, text: str, path: str) -> str:
    v = doc.get(key, "")
    if not isinstance(v, str):
        raise OverlayError(path, _line_of(text, json.dumps(key)), f"{key}: expected a string")
    return v


def ledger_runs(text: str, path: str) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    """Group NDJSON ledger events by run, in the order runs first appear: run -> [(line, event)]."""
    runs: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            ev = safejson.parse_line(line)
        except safejson.JsonInputError as exc:
            raise OverlayError(path, n, exc.message()) from None
        if not isinstance(ev, dict):
            raise OverlayError(path, n, "a ledger event must be a JSON object")
        run = ev.get("run")
        if not isinstance(run, str) or not run:
            raise OverlayError(path, n, 'a ledger event needs a "run" (a non-empty string)')
        via = ev.get("via")
        if via is not None and not isinstance(via, str):
            raise OverlayError(path, n, '"via" must be a transition id (a string)')
        runs.setdefault(run, []).append((n, ev))
    if not runs:
        raise OverlayError(path, 0, "no runs in this ledger (no event has a \"run\")")
    return runs


def _ledger_path(machine: Machine, events: Sequence[tuple[int, dict[str, Any]]], path: str) -> list[str]:
    edges = {e.id: e for e in machine.edges}
    steps: list[tuple[str, set[str], int]] = []
    for n, ev in events:
        via = ev.get("via")
        if via is None:
            continue
        if via not in edges:
            raise OverlayError(path, n, f"via: unknown transition {via!r}")
        typ = str(ev.get("type", ""))
        if steps and steps[-1][0] == via and typ not in steps[-1][1]:
            steps[-1][1].add(typ)
            continue
        steps.append((via, {typ}, n))
    out: list[str] = []
    cur = machine.initial
    for via, _, n in steps:
        e = edges[via]
        if cur not in e.sources:
            joins = [j for j in machine.edges if cur in j.sources and j.dest in e.sources]
            if len(joins) != 1:
                raise OverlayError(path, n, f"{via} cannot follow state {cur!r} (it leaves {', '.join(e.sources)})")
            out.append(joins[0].id)
        out.append(via)
        cur = e.dest
    return out


def _pick_run(runs: Mapping[str, Any], run: str | None, path: str) -> str:
    if run is None:
        return next(iter(runs))
    if run not in runs:
        names = list(runs)
        more = f", … ({len(names)} runs)" if len(names) > 5 else ""
        raise OverlayError(path, 0, f"no run {run!r} in this ledger (runs: {', '.join(names[:5])}{more})")
    return run


def read_trace(text: str, path: str, machine: Machine, run: str | None = None) -> Trace:
    """A trace from a trace file or a ledger (``run``: which run; default the first)."""
    form, doc = _classify(text, path)
    if form == "simple":
        if run is not None:
            raise OverlayError(path, 0, "--run applies to ledger files only")
        if "path" not in doc:
            raise OverlayError(path, 1, 'this is a coverage file ("transitions"); a trace has a "path"')
        _check_keys(doc, {"path", "failed", "start", "label", "source"}, text, path)
        p = doc["path"]
        if not isinstance(p, list) or not all(isinstance(x, str) for x in p):
            raise OverlayError(path, _line_of(text, '"path"'), "path: expected a list of transition ids")
        start = doc.get("start")
        if start is not None and (not isinstance(start, str) or start not in {s.id for s in machine.states}):
            raise OverlayError(path, _line_of(text, '"start"'), f"start: unknown state {start!r}")
        failed = doc.get("failed")
        if failed is not None and (isinstance(failed, bool) or not isinstance(failed, int)
                                   or not 0 <= failed < len(p)):
            raise OverlayError(path, _line_of(text, '"failed"'),
                               f"failed: expected null or a step index 0..{len(p) - 1}, got {failed!r}")
        try:
            walk(machine, p, start)
        except ValueError as exc:
            i = int(str(exc).split("]", 1)[0].removeprefix("path["))
            nth = p[:i].count(p[i])
            raise OverlayError(path, _line_of(text, json.dumps(p[i]), nth) or _line_of(text, '"path"'), str(exc)) from None
        label = _opt_str(doc, "label", text, path) or _opt_str(doc, "source", text, path)
        return Trace(tuple(p), failed, start, label)
    runs = ledger_runs(text, path)
    rid = _pick_run(runs, run, path)
    p = _ledger_path(machine, runs[rid], path)
    if not p:
        raise OverlayError(path, runs[rid][0][0], f"run {rid!r} took no transition")
    last = machine.edge(p[-1])
    dest = machine.state(last.dest)
    failed = len(p) - 1 if dest.terminal and dest.status != "COMPLETED" else None
    return Trace(tuple(p), failed, None, f"run {rid}")


def read_coverage(text: str, path: str, machine: Machine, run: str | None = None) -> Coverage:
    """Coverage from a coverage file or a ledger (all runs, or only ``run``)."""
    form, doc = _classify(text, path)
    ids = {e.id for e in machine.edges}
    if form == "simple":
        if run is not None:
            raise OverlayError(path, 0, "--run applies to ledger files only")
        if "transitions" not in doc:
            raise OverlayError(path, 1, 'this is a trace file ("path"); a coverage file has "transitions"')
        _check_keys(doc, {"transitions", "runs", "label", "source"}, text, path)
        tr = doc["transitions"]
        if not isinstance(tr, dict):
            raise OverlayError(path, _line_of(text, '"transitions"'), "transitions: expected an object {id: count}")
        counts: dict[str, int] = {}
        for k, v in tr.items():
            line = _line_of(text, json.dumps(k))
            if k not in ids:
                raise OverlayError(path, line, f"transitions: unknown transition {k!r}")
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise OverlayError(path, line, f"transitions.{k}: expected a count (an integer >= 0), got {v!r}")
            counts[k] = v
        runs_n = doc.get("runs")
        if runs_n is not None and (isinstance(runs_n, bool) or not isinstance(runs_n, int) or runs_n < 0):
            raise OverlayError(path, _line_of(text, '"runs"'), "runs: expected an integer >= 0")
        label = _opt_str(doc, "label", text, path) or _opt_str(doc, "source", text, path)
        ordered = tuple((e.id, counts[e.id]) for e in machine.edges if e.id in counts)
        return Coverage(ordered, runs_n, label)
    runs = ledger_runs(text, path)
    chosen = [_pick_run(runs, run, path)] if run is not None else list(runs)
    totals: dict[str, int] = {}
    for rid in chosen:
        for tid in _ledger_path(machine, runs[rid], path):
            totals[tid] = totals.get(tid, 0) + 1
    label = f"run {chosen[0]}" if run is not None else f"{len(chosen)} run{'s' if len(chosen) != 1 else ''}"
    return Coverage(tuple((e.id, totals[e.id]) for e in machine.edges if e.id in totals), len(chosen), label)
