"""``loopspec spec``: validate a spec file and print its machine, rules and invariants."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .._core import check_against_spec
from .._spec import load_rules, load_spec
from .._text import table
from ._common import EXIT_FOUND, EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser("spec", help="validate the spec (or --file) and print its machine")
    p.add_argument("--file", help="a spec TOML file (default: the shipped spec/loop.toml)")
    p.add_argument("--rules", help="the SPEC.md to check rule citations against (default: next to the spec)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    spec = load_spec(args.file)
    problems = check_against_spec(spec)
    rules = load_rules(args.rules, spec) if (args.rules or args.file is None) else ()
    if args.format == "json":
        out = spec.as_dict()
        out["rules"] = [{"id": r.id, "strength": r.strength, "title": r.title, "invariants": list(r.invariants)} for r in rules]
        out["problems"] = problems
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(f"{spec.name} {spec.version}: {len(spec.states)} states, {len(spec.transitions)} transitions, "
              f"{len(spec.guards)} guards, {len(spec.codes)} codes, {len(spec.invariants)} invariants, {len(rules)} rules")
        rows = [[t.id, t.name, ",".join(t.sources), t.trigger, t.guard_label(), t.dest, t.code or t.stop_reason or (t.escalates and f"<{t.escalates}>") or ""]
                for t in spec.transitions]
        print(table(["id", "name", "source", "trigger", "guards", "dest", "code/stop"], rows))
        for p in problems:
            print(f"problem: {p}")
    return EXIT_FOUND if problems else EXIT_OK
