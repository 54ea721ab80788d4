"""``loopspec replay``: rerun a saved fuzz case against an implementation, exactly; or every case in a
directory (a campaign's ``--out``: its corpus).

Exit 0 when every step now matches the spec, 1 when a divergence shows up (explained), 2 on a
usage error, an unreadable case or an implementation that cannot start.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from shlex import quote
from typing import Any

from ..support.text import paint, use_color
from ._common import (
    EXIT_FOUND,
    EXIT_OK,
    NextStep,
    UsageError,
    add_format_option,
    add_progress_option,
    add_quiet_option,
    add_spec_option,
    default_out,
    next_json,
    progress_line,
)
from .fuzz import add_impl_options, open_factory


def register(sub: Any) -> None:
    p = sub.add_parser("replay", help="rerun a saved fuzz case (CASE.json) against an implementation",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("case", metavar="CASE.json|DIR", help="a case written by loopspec fuzz, or a directory: every case "
                   "in it (a campaign's --out)")
    add_impl_options(p)
    add_spec_option(p)
    add_format_option(p, what="the replay's result",
                      meanings={"json": "one JSON document on stdout: ok, the failing step, every step's verdict "
                                        "and trace"})
    add_quiet_option(p, "the verdict (a directory: the cases that still diverge and the count)")
    add_progress_option(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from ..fuzz._model import CaseError, load_case
    from ..fuzz._run import replay_case

    if Path(args.case).is_dir():
        return replay_dir(args, Path(args.case))
    try:
        case = load_case(args.case)
    except CaseError as exc:
        raise UsageError(str(exc)) from None
    mode = case["steps"][0].get("kind", "batch")
    factory = open_factory(args, mode)
    try:
        rr = replay_case(case, factory)
    finally:
        factory.close()
    failing = next((i for i, v in enumerate(rr.verdicts) if not v.ok), None)
    step = case_suggestion(args, rr)
    if args.format == "json":
        print(json.dumps({"ok": rr.ok, "failingStep": failing, "verdicts": [v.to_json() for v in rr.verdicts],
                          "traces": rr.traces, "next": next_json(step)}, indent=2, ensure_ascii=False))
        return EXIT_OK if rr.ok else EXIT_FOUND
    color = use_color(sys.stdout)
    for i, v in enumerate(rr.verdicts):
        if args.quiet:
            break
        mark = paint("ok", "32", color) if v.ok else paint(f"DIVERGES: {v.violation.rule}", "31;1", color)  # type: ignore[union-attr]
        print(f"step {i + 1}/{len(case['steps'])}: {mark}")
    if rr.ok:
        print(f"{paint('no divergence', '32', color)}: the case now matches the spec ({len(rr.verdicts)} step(s))")
        return EXIT_OK
    v = rr.verdict.violation  # type: ignore[union-attr]
    assert v is not None
    print(f"\n{v.rule} {v.kind}" + (f", invariant {v.invariant}" if v.invariant else ""))
    print(v.explanation)
    if step is not None:
        step.print()
    return EXIT_FOUND


def case_suggestion(args: argparse.Namespace, rr: Any) -> NextStep | None:
    """What to run after a case that still diverges (the text's last lines, the JSON's ``"next"``): the same
    replay, after a fix. None when it passes."""
    v = rr.verdict.violation if not rr.ok and rr.verdict is not None else None
    if v is None:
        return None
    path = Path(args.case).with_suffix(".path.json")
    also = ((f"loopspec diagram --trace {quote(str(path))} --out {default_out('diagram')}",
             "the failing step's path drawn on the spec machine"),) if path.is_file() else ()
    return NextStep(f"loopspec replay {quote(args.case)} --impl {quote(args.impl)}",
                    "run it again after a fix: it exits 0 once the implementation matches the spec",
                    also, f"spec/SPEC.md, rule {v.rule}; docs/cli.md#what-to-run-next")


def dir_suggestion(args: argparse.Namespace, failing: list[Any]) -> NextStep | None:
    """What to run after replaying a directory in which a case still diverges: that case alone, explained."""
    if not failing:
        return None
    return NextStep(f"loopspec replay {quote(str(failing[0][0]))} --impl {quote(args.impl)}",
                    "the first case that still diverges, step by step with its explanation",
                    doc="docs/cli.md#what-to-run-next")


def replay_dir(args: argparse.Namespace, where: Any) -> int:
    """Every case in ``where`` (named after a cause or a rule), each in a fresh process: one line each."""
    from ..fuzz._model import CaseError, load_case
    from ..fuzz._outputs import corpus_files
    from ..fuzz._run import replay_case

    paths = corpus_files(where)
    if not paths:
        raise UsageError(f"{where}: no fuzz case in it (loopspec-fuzz-case/1 files named like R7-conflict-reused.json)")
    cases = []
    for p in paths:
        try:
            cases.append((p, load_case(p)))
        except CaseError as exc:
            raise UsageError(str(exc)) from None
    factories: dict[str, Any] = {}
    rows = []
    line = progress_line(args)
    try:
        for p, case in cases:
            from ..support.progress import Status

            line.update(Status("loopspec replay", line.elapsed(), len(rows), len(cases), "cases",
                               findings=sum(1 for r in rows if not r[1].ok), finding="diverging case"))
            mode = case["steps"][0].get("kind", "batch")
            if mode not in factories:
                factories[mode] = open_factory(args, mode)
            rr = replay_case(case, factories[mode])
            v = rr.verdict.violation if rr.verdict is not None else None
            rows.append((p, rr, v))
    finally:
        line.clear()
        for f in factories.values():
            f.close()
    failing = [r for r in rows if not r[1].ok]
    step = dir_suggestion(args, failing)
    if args.format == "json":
        print(json.dumps({"ok": not failing, "cases": [
            {"case": str(p), "ok": rr.ok, "rule": v.rule if v else None, "kind": v.kind if v else None,
             "failingStep": next((i for i, x in enumerate(rr.verdicts) if not x.ok), None)} for p, rr, v in rows],
            "next": next_json(step)}, indent=2, ensure_ascii=False))
        return EXIT_FOUND if failing else EXIT_OK
    color = use_color(sys.stdout)
    for p, rr, v in rows:
        if args.quiet and rr.ok:
            continue
        mark = paint("passes", "32", color) if rr.ok else paint(f"DIVERGES: {v.rule}-{v.kind}", "31;1", color)  # type: ignore[union-attr]
        print(f"{p.name}: {mark}")
    print(f"{len(rows)} case(s): {len(rows) - len(failing)} pass, {len(failing)} still diverge")
    if step is not None:
        step.print()
    return EXIT_FOUND if failing else EXIT_OK
