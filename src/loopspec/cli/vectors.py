"""``loopspec vectors``: run the conformance vectors through the reference engine."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from ..support import safejson
from ..support.text import compact, paint, printable, table, use_color
from ._common import (
    EXIT_FOUND,
    EXIT_OK,
    NextStep,
    UsageError,
    add_format_option,
    add_progress_option,
    add_quiet_option,
    add_spec_option,
    next_json,
    progress_line,
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "vectors", help="run the spec's conformance vectors through the reference engine",
        description="Run the language-neutral conformance vectors through the reference engine and compare "
                    "every answer with the expectation written in the vector file: the batch vectors, or with --loop "
                    "the loop vectors (whole runs, section 6's write tools included).",
        epilog="Exit codes: 0 every vector passes; 1 a vector differs (its fields are listed); 2 unreadable vectors.")
    add_spec_option(p)
    p.add_argument("--file", metavar="FILE",
                   help="a batch or loop vector file, told by its format (default: conformance/batch.json next to the "
                        "spec, or conformance/loop.json with --loop)")
    p.add_argument("--loop", action="store_true",
                   help="run the loop vectors (conformance/loop.json next to the spec) instead of the batch vectors")
    p.add_argument("--case", action="append", default=[], metavar="ID", help="run only this case id (repeatable)")
    add_format_option(p, meanings={"json": "the count, the failing case ids and their differences, on stdout"})
    add_quiet_option(p, "the failing vectors and the count of those that pass")
    add_progress_option(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from ..engine.vectors import load_batch_vectors, load_loop_vectors, run_batch_vector, run_loop_vector

    loop = args.loop
    try:
        if args.file is not None and not loop:  # a loop vector file is told by its format
            head = safejson.load_json(args.file, what="vector file")
            loop = isinstance(head, dict) and head.get("format") == "loopspec-loop-vectors/1"
        doc = load_loop_vectors(args.file) if loop else load_batch_vectors(args.file)
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"cannot read vectors: {exc}") from None
    run_vector = run_loop_vector if loop else run_batch_vector
    cases = [c for c in doc["cases"] if not args.case or c["id"] in args.case]
    if args.case and len(cases) != len(set(args.case)):
        raise UsageError(f"unknown case id among {args.case}")
    from ..support.progress import Status

    line = progress_line(args)
    results = []
    for c in cases:
        line.update(Status("loopspec vectors", line.elapsed(), len(results), len(cases), "vectors"))
        try:
            results.append(run_vector(c, doc.get("toolsets", {})))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:  # a case the engine refuses
            where = args.file or "the shipped vectors"
            raise UsageError(f"{where}: case {c['id']!r} cannot be run: {type(exc).__name__}: {exc}") from None
    line.clear()
    failed = [r for r in results if not r.passed]
    same = "".join(f" {flag} {shlex.quote(v)}" for flag, v in (("--spec", args.spec), ("--file", args.file)) if v)
    step = NextStep("loopspec vectors" + same + "".join(f" --case {shlex.quote(r.case_id)}" for r in failed[:3])
                    + (" --loop" if args.loop else "") + " --format json",
                    "each failing vector's expected and observed fields", doc="spec/conformance/README.md") \
        if failed else None
    if args.format == "json":
        print(safejson.dumps({
            "cases": len(results), "failed": [r.case_id for r in failed],
            "diffs": {r.case_id: r.diff() for r in failed}, "next": next_json(step),
        }, indent=2))
    else:
        color = use_color()
        rows = [
            [printable(r.case_id), paint("pass", "32", color) if r.passed else paint("FAIL", "31;1", color),
             str(r.observed["executed"]), printable(compact(r.observed["aborted"], 40))]
            for r in results if not (args.quiet and r.passed)
        ]
        if rows:
            print(table(["case", "verdict", "executed", "aborted"], rows))
        for r in failed:
            print(f"\n{printable(r.case_id)}:")
            for d in r.diff():
                print(f"  {printable(d)}")
        print(("\n" if rows else "") + f"{len(results) - len(failed)}/{len(results)} vectors pass")
        if step is not None:
            step.print()
    return EXIT_FOUND if failed else EXIT_OK
