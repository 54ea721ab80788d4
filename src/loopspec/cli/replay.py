"""``loopspec replay``: rerun a saved fuzz case against an implementation, exactly.

Exit 0 when every step now matches the spec, 1 when a divergence shows up (explained), 2 on a
usage error, an unreadable case or an implementation that cannot start.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..support.text import paint, use_color
from ._common import EXIT_FOUND, EXIT_OK, UsageError, add_format_option, add_spec_option
from .fuzz import add_impl_options, open_factory


def register(sub: Any) -> None:
    p = sub.add_parser("replay", help="rerun a saved fuzz case (CASE.json) against an implementation",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("case", metavar="CASE.json", help="a case written by loopspec fuzz")
    add_impl_options(p)
    add_spec_option(p)
    add_format_option(p, what="the replay's result",
                      meanings={"json": "one JSON document on stdout: ok, the failing step, every step's verdict "
                                        "and trace"})
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from ..fuzz._model import CaseError, load_case
    from ..fuzz._run import replay_case

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
    if args.format == "json":
        print(json.dumps({"ok": rr.ok, "failingStep": failing, "verdicts": [v.to_json() for v in rr.verdicts],
                          "traces": rr.traces}, indent=2, ensure_ascii=False))
        return EXIT_OK if rr.ok else EXIT_FOUND
    color = use_color(sys.stdout)
    for i, v in enumerate(rr.verdicts):
        mark = paint("ok", "32", color) if v.ok else paint(f"DIVERGES: {v.violation.rule}", "31;1", color)  # type: ignore[union-attr]
        print(f"step {i + 1}/{len(case['steps'])}: {mark}")
    if rr.ok:
        print(f"{paint('no divergence', '32', color)}: the case now matches the spec ({len(rr.verdicts)} step(s))")
        return EXIT_OK
    v = rr.verdict.violation  # type: ignore[union-attr]
    assert v is not None
    print(f"\n{v.rule} {v.kind}" + (f", invariant {v.invariant}" if v.invariant else ""))
    print(v.explanation)
    return EXIT_FOUND
