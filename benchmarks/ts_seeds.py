#!/usr/bin/env python3
"""For any seed: how often each TypeScript framework's default loop campaign finds each deviation issue 29 lists
for its default loop, over many seeds.

For every framework (the AI SDK, OpenAI Agents JS, LangGraph JS in its default createReactAgent v1, Mastra) and
every deviation of :data:`EXPECTED`, a loop campaign of ``--examples`` examples (60, as
tests/test_frameworks_typescript.py runs them) is judged under the framework's profile with the parameters that
would explain the deviation put back to the strict default (every other choice kept, so nothing else hides it),
as the tests do; one campaign per framework and profile variant serves every deviation it looks for. A deviation
is found by a seed when the campaign reports a finding :func:`matches` it: its rule and kind, and what the
shrunk case shows (the last round of a run the step limit ended, a call id repeated in a later response, ...).

    python3 benchmarks/ts_seeds.py [--seeds 0-19] [--examples 60] [--frameworks ai-sdk,mastra] [--json]

Prints, per deviation, the seeds that found it out of those run, the misses, and the seconds per campaign (the
anchor measured in the same run: the same campaign's time to its first finding). Nothing is asserted.
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


def _stopped_by_rounds(finding: Any) -> bool:
    return finding.traces[-1]["events"][-1]["result"]["stopReason"] == "MAX_ROUNDS"


def _non_object_arguments(finding: Any) -> bool:
    return any(isinstance(c, dict) and not isinstance(c.get("arguments"), dict)
               for calls in _calls(finding.steps[-1]) for c in calls)


@dataclass(frozen=True)
class Deviation:
    """One deviation issue 29 lists for a framework's default loop, and how a campaign's finding shows it."""

    label: str
    #: the profile parameters put back to the strict default for its campaign (the rest of the profile kept)
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
        Deviation("a replayed call id executed again", ("id_binding", "error_text"), REPLAY),
        Deviation("a conflicting id executed", ("id_binding", "error_text"), CONFLICT),
        Deviation("the tool's exception text passed to the model", ("id_binding", "error_text"), EXCEPTION_TEXT),
    ),
    "openai-agents-js": (
        # id_binding = drop-repeats (source) explains it under the profile; strict, the request is unanswered
        Deviation("a replay silently left out of the history", ("id_binding",),
                  frozenset({("R11", "answer-missing")}), _repeated_id),
    ),
    "langgraph-js": (
        Deviation("a replayed or conflicting call left without an answer", (),
                  frozenset({("R11", "answer-missing")}), _repeated_id),
        Deviation("a call executed in the last allowed step and never answered", (),
                  frozenset({("R11", "last-round-unanswered"), ("R11", "answer-missing")}), _stopped_by_rounds),
        Deviation("the tool's exception text passed to the model", ("error_text",), EXCEPTION_TEXT),
        Deviation("a run that ends silently with an empty answer on malformed arguments",
                  ("non_object_arguments", "empty_proposal"),
                  frozenset({("R2", "missed-invalid-call"), ("R11", "answer-missing"), ("R22", "model-not-asked"),
                             ("R18", "model-not-asked")}), _non_object_arguments),
    ),
    "mastra": (
        Deviation("a replayed call id executed again", ("id_binding", "error_text"), REPLAY),
        Deviation("a conflicting id executed", ("id_binding", "error_text"), CONFLICT),
        Deviation("results paired with the wrong call in the history", ("id_binding", "error_text"),
                  frozenset({("R11", "wrong-output"), ("R11", "answers-out-of-order")})),
        Deviation("the tool's exception text passed to the model", ("id_binding", "error_text"), EXCEPTION_TEXT),
    ),
}


def profile_for(name: str, strict: Sequence[str]) -> Any:
    """The framework's profile with these parameters back at the strict default."""
    from loopspec.core.profiles import params_for
    from loopspec.spec.loader import load_spec

    spec = load_spec()
    params = params_for(spec, name.partition("[")[0])
    return params.only(spec, [p for p in params.differs(spec) if p not in strict])


def campaigns(name: str, seed: int, examples: int, out: str | None = None) -> dict[tuple[str, ...], Json]:
    """Run the framework's campaigns for one seed: variant (the parameters put back) -> (findings, seconds,
    seconds to the first finding)."""
    from loopspec.frameworks import resolve
    from loopspec.fuzz import fuzz

    got: dict[tuple[str, ...], Json] = {}
    for strict in dict.fromkeys(d.strict for d in EXPECTED[name]):
        t0 = time.perf_counter()
        res = fuzz(resolve(name), mode="loop", max_examples=examples, seed=seed, out=out or tempfile.mkdtemp(),
                   shrink_seconds=3.0, profile=profile_for(name, strict))
        first = res.stats.get("firstFindingSeconds")
        got[strict] = (res.findings, time.perf_counter() - t0, first)
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
    ap.add_argument("--examples", type=int, default=60)
    ap.add_argument("--frameworks", default=",".join(EXPECTED))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from loopspec.frameworks import installed

    seeds = _seeds(args.seeds)
    table: dict[str, Json] = {}
    for name in args.frameworks.split(","):
        if not installed(name):
            print(f"{name}: Node.js >= 20 is not on PATH; skipped", file=sys.stderr)
            continue
        rows = {d.label: [] for d in EXPECTED[name]}
        seconds: list[float] = []
        for seed in seeds:
            got = campaigns(name, seed, args.examples)
            seconds += [s for _, s, _ in got.values()]
            for label, ok in found(name, got).items():
                if not ok:
                    rows[label].append(seed)
                    kinds = sorted({(f.rule, f.kind) for fs, _, _ in got.values() for f in fs})
                    print(f"  {name} seed {seed}: not found: {label}; found {kinds}", file=sys.stderr)
        table[name] = {"seeds": len(seeds), "misses": rows, "secondsPerCampaign": sum(seconds) / len(seconds)}
        for label, misses in rows.items():
            print(f"{name:18} {len(seeds) - len(misses):3}/{len(seeds)}  {label}"
                  + (f"  (missed: seeds {', '.join(map(str, misses))})" if misses else ""))
        print(f"{name:18} {sum(seconds) / len(seconds):.1f} s a campaign, {len(seconds)} campaigns")
        sys.stdout.flush()
    if args.json:
        print(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
