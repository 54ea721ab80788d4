"""``loopspec spec``: validate a spec file and print its machine, rules and invariants."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..support.text import table
from ._common import (
    EXIT_FOUND,
    EXIT_OK,
    add_format_option,
    add_progress_option,
    add_quiet_option,
    add_spec_option,
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "spec", help="validate the spec (or --spec FILE) and print its machine",
        description="Validate a spec (loop.toml): its machine, and that its rules text (SPEC.md) cites only "
                    "invariants it defines; print the transitions.",
        epilog="Exit codes: 0 valid; 1 the reference engine disagrees with it (problems listed); 2 unreadable "
               "or malformed (the line and field are named).")
    add_spec_option(p, "--file")
    p.add_argument("--rules", metavar="FILE",
                   help="the rules text (SPEC.md) to check rule citations against (default: SPEC.md next to the spec)")
    add_format_option(p, meanings={"json": "the machine, its rules and problems as one JSON document on stdout"})
    add_quiet_option(p, "the summary line and the problems, not the transitions")
    add_progress_option(p)  # accepted for one vocabulary; validating a spec takes well under a second
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from ..core.rules import check_against_spec
    from ..spec.base import default_spec_path
    from ..spec.loader import load_rules, load_spec

    spec = load_spec(args.spec)
    problems = check_against_spec(spec)
    rules_file = Path(args.rules) if args.rules else default_spec_path().with_name("SPEC.md")
    found = args.rules is not None or rules_file.is_file()
    rules = load_rules(rules_file, spec) if found else ()
    missing = None if found else f"no rules text: {rules_file} does not exist (give --rules FILE)"
    if missing:
        print(f"loopspec spec: warning: {missing}", file=sys.stderr)
    if args.format == "json":
        out = spec.as_dict()
        out["rules"] = [{"id": r.id, "strength": r.strength, "title": r.title, "invariants": list(r.invariants)}
                        for r in rules] if found else None
        out["rulesFile"] = str(rules_file) if found else None
        out["problems"] = problems
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(f"{spec.name} {spec.version}: {len(spec.states)} states, {len(spec.transitions)} transitions, "
              f"{len(spec.guards)} guards, {len(spec.codes)} codes, {len(spec.invariants)} invariants, "
              + (f"{len(rules)} rules" if found else "rules not checked (no SPEC.md next to the spec)"))
        if args.quiet:
            for p in problems:
                print(f"problem: {p}")
            return EXIT_FOUND if problems else EXIT_OK
        rows = [[t.id, t.name, ",".join(t.sources), t.trigger, t.guard_label(), t.dest, t.code or t.stop_reason or (t.escalates and f"<{t.escalates}>") or ""]
                for t in spec.transitions]
        print(table(["id", "name", "source", "trigger", "guards", "dest", "code/stop"], rows))
        for p in problems:
            print(f"problem: {p}")
    return EXIT_FOUND if problems else EXIT_OK
