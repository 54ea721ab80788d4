#!/usr/bin/env python3
"""For any seed: how often each TypeScript framework's default loop campaign finds each deviation issue 29 lists
for its default loop, over many seeds.

For every framework (the AI SDK, OpenAI Agents JS, LangGraph JS in its default createReactAgent v1, Mastra) and
every deviation of :data:`EXPECTED`, a loop campaign of ``--examples`` examples (20) and ``--shrink-time`` 10 s
(exploring stops that long after the first divergence, as ``loopspec fuzz --shrink-time`` says, but for the
focused examples that open the campaign, which always run; the test tests/test_frameworks_typescript.py runs the
same campaigns) is judged under the framework's profile with the parameters that
would explain the deviation put back to the strict default (every other choice kept, so nothing else hides it),
as the tests do; one campaign per framework and profile variant serves every deviation it looks for. A deviation
is found by a seed when the campaign reports a finding :func:`matches` it: its rule and kind, and what the
shrunk case shows (the last round of a run the step limit ended, a call id repeated in a later response, ...).

    python3 benchmarks/ts_seeds.py [--seeds 0-19] [--examples 20] [--shrink-time 10] [--frameworks ai-sdk,mastra] [--anchor] [--json]

Prints, per deviation, the seeds that found it out of those run, the misses, and the seconds per campaign.
``--anchor`` also runs every campaign with the generator's focused examples off (``focus_of`` answering None:
swarm examples only, the generator before them) and prints its found-rate beside ours: the anchor measured in the
same run. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

Json = Any


def _calls(step: Mapping[str, Json]) -> list[list[Json]]:
    """The calls of each response of a loop step's scripted model."""
    return [m["calls"] for m in step.get("model", []) if isinstance(m, dict) and isinstance(m.get("calls"), list)]


def _repeated_id(finding: Any) -> bool:
    """Does the shrunk case's last step repeat a call id in a later response than the one that bound it?"""
    seen: dict[str, int] = {}
    for r, calls in enumerate(_calls(finding.steps[-1])):
        for c in calls:
            cid = c.get("id") if isinstance(c, dict) else None
            if isinstance(cid, str) and seen.get(cid, r) < r:
                return True
            if isinstance(cid, str):
                seen.setdefault(cid, r)
    return False


def _repeated_in_a_response(finding: Any) -> bool:
    """Does one response of the shrunk case's last step hold two calls under one id?"""
    for calls in _calls(finding.steps[-1]):
        ids = [c.get("id") for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]
        if len(ids) != len(set(ids)):
            return True
    return False


def _stopped_by_rounds(finding: Any) -> bool:
    return finding.traces[-1]["events"][-1]["result"]["stopReason"] == "MAX_ROUNDS"


def _malformed_call(finding: Any) -> bool:
    """Does the shrunk case hold a malformed call (not an object, or no string id, name or object arguments)?"""
    return any(not (isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("name"), str)
                    and isinstance(c.get("arguments"), dict))
               for calls in _calls(finding.steps[-1]) for c in calls)


@dataclass(frozen=True)
class Deviation:
    """One deviation issue 29 lists for a framework's default loop, and how a campaign's finding shows it."""

    label: str
    #: the profile parameters its campaign changes (the rest of the profile kept): each put back to the strict
    #: default, or to the value given as "parameter=value"
    strict: tuple[str, ...]
    #: (rule, kind)s, one of which a finding must have
    kinds: frozenset[tuple[str, str]]
    #: what the finding's shrunk case must show as well (None: nothing more)
    shows: Callable[[Any], bool] | None = None

    def matches(self, finding: Any) -> bool:
        return (finding.rule, finding.kind) in self.kinds and (self.shows is None or self.shows(finding))


REPLAY = frozenset({("R6", "replay-reexecuted")})
CONFLICT = frozenset({("R7", "executed-despite-id-conflict")})
EXCEPTION_TEXT = frozenset({("R15", "exception-text-shown")})

#: --impl name -> the deviations of issue 29 its default loop has (docs/frameworks.md, the TypeScript note)
EXPECTED: dict[str, tuple[Deviation, ...]] = {
    "ai-sdk": (
        Deviation("a replayed call id executed again", ("id_binding", "error_text=framework-text"), REPLAY),
        Deviation("a conflicting id executed", ("id_binding", "error_text=framework-text"), CONFLICT),
        Deviation("the tool's exception text passed to the model", ("id_binding", "error_text=framework-text"), EXCEPTION_TEXT),
    ),
    "openai-agents-js": (
        # id_binding = drop-repeats (source) explains it under the profile; strict, the request is unanswered
        # (left out of the results: missing at the end of them, or the next answer in its place)
        Deviation("a replay silently left out of the history", ("id_binding",),
                  frozenset({("R11", "answer-missing"), ("R11", "answers-out-of-order")}), _repeated_id),
    ),
    "langgraph-js": (
        Deviation("a replayed or conflicting call left without an answer", (),
                  frozenset({("R11", "answer-missing"), ("R11", "rejection-unanswered")}), _repeated_id),
        Deviation("a call executed in the last allowed step and never answered", (),
                  frozenset({("R11", "last-round-unanswered")}), _stopped_by_rounds),
        Deviation("the tool's exception text passed to the model", ("error_text=framework-text",), EXCEPTION_TEXT),
        Deviation("a run that ends silently with an empty answer on malformed arguments",
                  ("non_object_arguments", "empty_proposal"),
                  # set aside without an answer, or the run ended on it without asking the model again
                  frozenset({("R2", "missed-invalid-call"), ("R11", "rejection-unanswered"),
                             ("R22", "model-not-asked")}), _malformed_call),
    ),
    "mastra": (
        Deviation("a replayed call id executed again", ("id_binding", "error_text=framework-text"), REPLAY),
        Deviation("a conflicting id executed", ("id_binding", "error_text=framework-text"), CONFLICT),
        # (the history keeps one result per id: the model sees the other call's result, or none, for one of them).
        # Under the whole profile: with id_binding strict the second execution under the id diverges first (R6/R7)
        Deviation("results paired with the wrong call in the history", (),
                  frozenset({("R11", "wrong-output"), ("R11", "answers-out-of-order"), ("R11", "answer-missing"),
                             ("R11", "rejection-unanswered")}), _repeated_in_a_response),
        Deviation("the tool's exception text passed to the model", ("id_binding", "error_text=framework-text"), EXCEPTION_TEXT),
    ),
}


def profile_for(name: str, strict: Sequence[str]) -> Any:
    """The framework's profile with these parameters back at the strict default."""
    from loopspec.core.profiles import params_for
    from loopspec.spec.loader import load_spec

    spec = load_spec()
    params = params_for(spec, name.partition("[")[0])
    names = [p.partition("=")[0] for p in strict]
    out = params.only(spec, [p for p in params.differs(spec) if p not in names])
    values = dict(p.split("=", 1) for p in strict if "=" in p)
    return out.with_values(spec, **values) if values else out


def campaigns(name: str, seed: int, examples: int = 20, out: str | None = None, *, shrink: float = 10.0,
              focused: bool = True) -> dict[tuple[str, ...], Json]:
    """Run the framework's campaigns for one seed: variant (the parameters it changes) -> (findings, seconds).
    ``focused`` False: without the generator's focused examples (the anchor)."""
    import contextlib
    from unittest import mock

    from loopspec.frameworks import resolve
    from loopspec.fuzz import _generate, fuzz

    got: dict[tuple[str, ...], Json] = {}
    for strict in dict.fromkeys(d.strict for d in EXPECTED[name]):
        t0 = time.perf_counter()
        off = mock.patch.object(_generate, "focus_of", lambda i: None) if not focused else contextlib.nullcontext()
        with off:
            res = fuzz(resolve(name), mode="loop", max_examples=examples, seed=seed, out=out or tempfile.mkdtemp(),
                       shrink_seconds=shrink, profile=profile_for(name, strict))
        got[strict] = (res.findings, time.perf_counter() - t0)
    return got


def found(name: str, got: Mapping[tuple[str, ...], Json]) -> dict[str, bool]:
    return {d.label: any(d.matches(f) for f in got[d.strict][0]) for d in EXPECTED[name]}


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--examples", type=int, default=20)
    ap.add_argument("--shrink-time", type=float, default=10.0)
    ap.add_argument("--frameworks", default=",".join(EXPECTED))
    ap.add_argument("--anchor", action="store_true", help="also run without the focused examples")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from loopspec.frameworks import installed

    seeds = _seeds(args.seeds)
    table: dict[str, Json] = {}
    for name in args.frameworks.split(","):
        if not installed(name):
            print(f"{name}: Node.js >= 20 is not on PATH; skipped", file=sys.stderr)
            continue
        table[name] = {}
        for focused in (True, False) if args.anchor else (True,):
            rows: dict[str, list[int]] = {d.label: [] for d in EXPECTED[name]}
            seconds: list[float] = []
            for seed in seeds:
                got = campaigns(name, seed, args.examples, shrink=args.shrink_time, focused=focused)
                seconds += [s for _, s in got.values()]
                for label, ok in found(name, got).items():
                    if not ok:
                        rows[label].append(seed)
                        kinds = sorted({(f.rule, f.kind) for fs, _ in got.values() for f in fs})
                        print(f"  {name} seed {seed}{'' if focused else ' (anchor)'}: not found: {label}; found "
                              f"{kinds}", file=sys.stderr)
            which = "ours" if focused else "anchor"
            table[name][which] = {"seeds": len(seeds), "misses": rows,
                                  "secondsPerCampaign": sum(seconds) / len(seconds)}
            for label, misses in rows.items():
                print(f"{name:18} {which:6} {len(seeds) - len(misses):3}/{len(seeds)}  {label}"
                      + (f"  (missed: seeds {', '.join(map(str, misses))})" if misses else ""))
            print(f"{name:18} {which:6} {sum(seconds) / len(seconds):.1f} s a campaign, {len(seconds)} campaigns")
            sys.stdout.flush()
    if args.json:
        print(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
