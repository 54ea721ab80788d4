"""``loopspec verify``: exhaustive bounded model checking of the spec (see loopspec.checker).

Explores every behaviour of the decision core within the bounds of ``spec/bounds.toml`` (or
``--bounds``), checks every invariant of loop.toml in every state, and reports the shortest
counterexample when one breaks (exit 1). Transition coverage is judged against what the chosen
scopes reach at the committed bounds (``reached`` in each scope's expected table): a transition
only another scope can reach is not missing, and a shortfall within smaller bounds is reported as
such — never as a violation (exit 0). ``--mutants`` runs the must-fail corpus instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ..support.progress import Status
from ..support.text import paint, table, use_color, write_atomic
from ._common import (
    EXIT_FOUND,
    EXIT_OK,
    NextStep,
    UsageError,
    add_format_option,
    add_out_option,
    add_progress_option,
    add_quiet_option,
    add_spec_option,
    default_out,
    next_json,
    progress_line,
)
from ._reports import add_report_options, check_report_paths, verify_report, write_reports

Json = Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "verify",
        help="exhaustively model-check the spec's invariants within bounds (shortest counterexample on failure)",
        description="Explore every behaviour of the decision core within the bounds and check every invariant "
                    "of loop.toml in every state reached (breadth-first, deduplicated up to symmetry).",
        epilog="Exit codes: 0 every invariant holds (a transition coverage shortfall is reported, not failed); "
               "1 a counterexample (or, with --mutants/--crosscheck, an unexpected result); 2 usage error or "
               "unreadable input.",
    )
    add_spec_option(p)
    p.add_argument("--bounds", metavar="FILE", help="a bounds file (default: bounds.toml next to the spec)")
    p.add_argument("--bound", metavar="SCOPE.FIELD=VALUE", action="append", default=[],
                   help="override one bound, e.g. batch.calls=4 or loop.budgets=[1] (repeatable)")
    p.add_argument("--scope", action="append", default=[],
                   help="explore only this scope (repeatable); scopes marked slow are explored only when named")
    add_format_option(p, meanings={"json": "the loopspec-verify/1 report on stdout, for programs"})
    add_report_options(p)
    add_out_option(p, "verify", "verify.json, coverage.json and, on a violation, counterexample.json, "
                   "counterexample.txt and trace.json", default=False)
    add_progress_option(p)
    add_quiet_option(p, "the verdict line and the counterexample, not the table of scopes")
    p.add_argument("--model", choices=("fast", "reference"), default="fast",
                   help="fast (default): compact states stepped by the core on a window; reference: whole "
                        "RunStates (slow; for cross-checking)")
    p.add_argument("--mutants", action="store_true",
                   help="run the must-fail corpus: every broken variant must yield a short counterexample")
    p.add_argument("--variant", metavar="NAME",
                   help="explore a broken variant of the must-fail corpus instead of the core (see --mutants)")
    p.add_argument("--update-expected", action="store_true",
                   help="write the figures found as the expected ones into the bounds file (refused for the bounds "
                        "file of an installed loopspec: copy the spec directory and give --spec or --bounds)")
    p.add_argument("--crosscheck", action="store_true",
                   help="check the checker at these bounds (use small ones): the fast model against whole "
                        "RunStates, and deduplicated exploration against every history separately")
    p.add_argument("--count-orbits", action="store_true",
                   help="also count the states before symmetry reduction")
    p.add_argument("--writes", action="store_true",
                   help="check SPEC.md section 6 instead (writes, crashes and restarts; bounds in writes-bounds.toml "
                        "next to the spec); with --variant NAME or --mutants, its broken variants")
    p.set_defaults(handler=handle)


def _load(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    from ..checker.bounds import BoundsError, apply_overrides, load_bounds

    try:
        bounds = apply_overrides(load_bounds(args.bounds), args.bound)
        # a scope marked slow (a larger bound) is explored only when named
        scopes = [bounds.scope(n) for n in args.scope] if args.scope else [s for s in bounds.scopes.values() if not s.slow]
    except BoundsError as exc:
        raise UsageError(str(exc)) from None
    return bounds, scopes


class _Progress:
    """The explorer's progress callback, shown with the shared progress line (one per scope)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.line = progress_line(args)

    def __call__(self, p: Any) -> None:
        if p.seconds < 2.0 and p.frontier:
            return
        status = Status(f"verify [{p.scope}]", p.seconds, p.states, None, "states",
                        phase=f"{p.transitions:,} transitions, depth {p.depth}")
        if p.frontier:
            self.line.update(status)
        else:
            self.line.finish(status)


def handle(args: argparse.Namespace) -> int:
    check_report_paths(args)
    if args.writes:
        return _writes(args)
    if args.mutants:
        return _mutants(args)
    if args.crosscheck:
        return _crosscheck(args)
    from ..checker.counterexample import counterexample_json, lift
    from ..checker.explain import explain
    from ..checker.explore import explore
    from ..checker.semantics import CORE

    bounds, scopes = _load(args)
    sem = CORE
    if args.variant:
        from ..checker.mutants import UnknownVariant, by_name

        try:
            sem = by_name(args.variant).semantics
        except UnknownVariant as exc:
            raise UsageError(str(exc)) from None
        if not sem.local and args.model == "fast":
            args.model = "reference"  # the variant reaches outside the fast model's window
    if args.update_expected and (args.bound or args.model != "fast" or args.variant):
        raise UsageError("--update-expected records the committed bounds with the core and the fast model: "
                         "drop --bound/--model/--variant")
    if args.update_expected:
        _check_writable_bounds(args)
    prog = _Progress(args)
    started = time.perf_counter()
    results = []
    for scope in scopes:
        results.append(explore(bounds, scope, sem, model=args.model, progress=prog, count_orbits=args.count_orbits))
    from ..spec.loader import load_spec

    spec = load_spec()
    spec_ids = [t.id for t in spec.transitions]
    coverage: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    stops: Counter[str] = Counter()
    for ex in results:
        coverage.update(ex.coverage)
        codes.update(ex.codes)
        stops.update(ex.stop_reasons)
    # section 6's transitions (T34 abort_on_unknown, T35 final_answer_unreconciled) are reached by the scopes with
    # a write tool (bounds.toml [scope.writes]); a choice of scopes without one does not reach them
    unreached = [t for t in spec_ids if not coverage.get(t)]
    reachable = _reachable(bounds, [ex.scope for ex in results], spec_ids)
    shortfall = [t for t in unreached if reachable is not None and t in reachable]
    bad = next((ex for ex in results if ex.violation is not None), None)
    cx = lifted = None
    crash_text = None
    if bad is not None and bad.violation is not None and bad.violation.crashed:
        v = bad.violation
        crash_text = (f"The step after {' '.join(t for _, _, t in v.path[:-1])} raises: {v.crashed}\n"
                      f"(a core that raises is a failure of its own; the path is not lifted)\n")
        cx = {"format": "loopspec-crash/1", "path": [t for _, _, t in v.path], "error": v.crashed,
              "trace": {"path": [t for _, _, t in v.path[:-1]], "failed": None}}
    elif bad is not None and bad.violation is not None:
        v = bad.violation
        lifted = lift(bounds, bad.scope, sem, v.path, v.last_key, v.invariants)
        cx = counterexample_json(lifted)
    expected_diffs = []
    for ex in results:
        exp = ex.scope.expected
        got = _figures(ex)
        if exp and not args.bound and args.model == "fast" and ex.complete and sem is CORE:
            for k, v in got.items():
                if k in exp and exp[k] != v:
                    expected_diffs.append(f"{ex.scope.name}.{k}: expected {exp[k]}, found {v}")
            if ex.scope.reaches is not None and list(ex.scope.reaches) != got["reached"]:
                expected_diffs.append(f"{ex.scope.name}.reached: expected {', '.join(ex.scope.reaches)}, "
                                      f"found {', '.join(got['reached'])}")
    report: dict[str, Json] = {
        "format": "loopspec-verify/1",
        "semantics": sem.name,
        "bounds": bounds.path,
        "overrides": list(args.bound),
        "scopes": [ex.to_json() for ex in results],
        "coverage": {"transitions": {t: coverage.get(t, 0) for t in spec_ids},
                     # what the chosen scopes reach at the committed bounds (None: not recorded)
                     "reachable": reachable, "shortfall": shortfall, "complete": not shortfall},
        "unreached": unreached,
        "answers": {c: codes.get(c, 0) for c in ["ok", "ok (replay)", *(c.id for c in spec.codes)]},
        "stop_reasons": {r.id: stops.get(r.id, 0) for r in spec.stop_reasons},
        "violation": cx,
        "expected_differs": expected_diffs,
        "passed": bad is None,
    }
    if args.out:
        _write_out(Path(args.out), report, coverage, spec_ids, results, cx,
                   explain(lifted) if lifted else crash_text)
    if args.update_expected and bad is None:
        from ..checker.bounds import default_bounds_path, update_expected

        path = Path(args.bounds) if args.bounds else default_bounds_path()
        write_atomic(path, update_expected(path, {ex.scope.name: _figures(ex) for ex in results}))
        print(f"updated the expected figures in {path}", file=sys.stderr)
        expected_diffs = []
    step = suggestion(args, bool(report["passed"]))
    if args.format == "json":
        print(json.dumps({**report, "next": next_json(step)}, indent=2, ensure_ascii=False))
    else:
        _text(report, results, expected_diffs, explain(lifted) if lifted else crash_text, quiet=args.quiet)
        if step is not None:
            step.print()
    code = EXIT_OK if report["passed"] else EXIT_FOUND
    if args.html or args.junit:
        rep = verify_report(args, report, results, explain(lifted) if lifted else crash_text,
                            argv=getattr(args, "argv", None), seconds=time.perf_counter() - started, exit_code=code,
                            next_step=next_json(step))
        for path in write_reports(args, rep):
            print(f"loopspec verify: wrote {path}", file=sys.stderr)
    if expected_diffs:
        print("loopspec verify: the figures differ from [scope.*.expected] in the bounds file; if the change is "
              "intended, run `loopspec verify --update-expected` and commit it", file=sys.stderr)
    return EXIT_OK if report["passed"] else EXIT_FOUND


def _package_dir() -> Path:
    """The directory of the loopspec package this process imported."""
    return Path(__file__).resolve().parents[1]


def _check_writable_bounds(args: argparse.Namespace) -> None:
    """``--update-expected`` never writes into an installed loopspec (site-packages): the bounds file it would
    change must lie outside the package directory. A source checkout's ``spec/bounds.toml`` is outside it."""
    from ..checker.bounds import default_bounds_path

    path = (Path(args.bounds) if args.bounds else default_bounds_path()).resolve()
    if path.is_relative_to(_package_dir()):
        raise UsageError(
            f"--update-expected would write into the installed loopspec package ({path}); it records the "
            "figures of a spec you maintain. Copy the spec directory and run on the copy: "
            "`cp -r \"$(python -c 'import loopspec.spec.base as b; print(b.shipped_spec_path().parent)')\" my-spec && "
            "loopspec verify --spec my-spec/loop.toml --update-expected`")


def suggestion(args: argparse.Namespace, passed: bool) -> NextStep | None:
    """What to run after a failing verify (the text's last lines, the JSON's ``"next"``): the counterexample's
    path on the diagram, or the same check writing it. None when it passed."""
    from shlex import quote

    if passed:
        return None
    if args.out:
        trace = Path(args.out) / "trace.json"
        return NextStep(f"loopspec diagram --trace {quote(str(trace))} --out {default_out('diagram')}",
                        "the counterexample's path drawn on the spec machine",
                        ((f"cat {quote(str(Path(args.out) / 'counterexample.txt'))}", "the counterexample, explained"),),
                        "docs/verify.md; docs/cli.md#what-to-run-next")
    argv, typed = [], list(getattr(args, "argv", None) or ["verify"])
    while typed:  # the same check, whatever its report's format
        a = typed.pop(0)
        if a == "--format" and typed:
            typed.pop(0)
        elif not a.startswith("--format="):
            argv.append(a)
    return NextStep("loopspec " + " ".join(quote(a) for a in argv) + f" --out {default_out('verify')}",
                    "the same check, writing counterexample.json and trace.json (for loopspec diagram --trace)",
                    doc="docs/verify.md; docs/cli.md#what-to-run-next")


def _figures(ex: Any) -> dict[str, Any]:
    from ..spec.loader import load_spec

    spec_ids = [t.id for t in load_spec().transitions]
    return {"states": ex.states, "transitions": ex.transitions, "depth": ex.depth,
            "reached": [t for t in spec_ids if ex.coverage.get(t)]}


def _section6(spec: Any) -> frozenset[str]:
    """The transitions only a write whose outcome is unknown can take (SPEC.md section 6): escalating the
    code kind ``unknown``, or recording its stop reason."""
    unknown_stops = {c.stop_reason for c in spec.codes if c.kind == "unknown"}
    return frozenset(t.id for t in spec.transitions if t.escalates == "unknown" or t.stop_reason in unknown_stops)


def _reachable(bounds: Any, scopes: list[Any], spec_ids: list[str]) -> list[str] | None:
    """The transitions the chosen scopes reach at the committed bounds: the union of their recorded
    ``reached`` lists; every spec transition when all scopes of the file are chosen and none records
    one; None (coverage not judged) otherwise."""
    if all(sc.reaches is not None for sc in scopes):
        union = {t for sc in scopes for t in sc.reaches}
        return [t for t in spec_ids if t in union]
    if {sc.name for sc in scopes} == set(bounds.scopes):
        return list(spec_ids)
    return None


def _write_out(out: Path, report: dict[str, Json], coverage: Counter[str], spec_ids: list[str], results: list[Any],
               cx: dict[str, Json] | None, text: str | None) -> None:
    write_atomic(out / "verify.json", json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    cov = {"transitions": {t: coverage.get(t, 0) for t in spec_ids}, "runs": sum(ex.states for ex in results)}
    write_atomic(out / "coverage.json", json.dumps(cov, indent=2) + "\n")
    for ex in results:
        c = {"transitions": {t: ex.coverage.get(t, 0) for t in spec_ids}, "runs": ex.states}
        write_atomic(out / f"coverage-{ex.scope.name}.json", json.dumps(c, indent=2) + "\n")
    if cx is not None:
        write_atomic(out / "counterexample.json", json.dumps(cx, indent=2, ensure_ascii=False) + "\n")
        write_atomic(out / "trace.json", json.dumps(cx["trace"], indent=2) + "\n")
        if text is not None:
            write_atomic(out / "counterexample.txt", text)


def _text(report: dict[str, Json], results: list[Any], diffs: list[str], cx_text: str | None, *,
          quiet: bool = False) -> None:
    color = use_color()
    if quiet:
        if cx_text:
            print(cx_text, end="")
        for d in diffs:
            print(f"expected figures differ: {d}")
        verdict = "all invariants hold in every state within the bounds" if report["passed"] else \
            "a counterexample was found"
        print(f"{paint('PASS', '32;1', color) if report['passed'] else paint('FAIL', '31;1', color)}: {verdict}")
        return
    rows = []
    for ex in results:
        rows.append([
            ex.scope.name, str(ex.configs), f"{ex.states:,}", f"{ex.transitions:,}", str(ex.depth),
            f"{ex.seconds:.1f}s", f"{ex.states_per_second:,.0f}",
            f"{ex.orbit_states:,}" if ex.orbit_states else "-",
            paint("complete", "32", color) if ex.complete else paint("VIOLATION", "31;1", color),
        ])
    print(table(["scope", "configs", "states", "transitions", "depth", "time", "states/s", "before symmetry",
                 "result"], rows))
    cov = report["coverage"]["transitions"]
    reached = sum(1 for v in cov.values() if v)
    reachable, shortfall = report["coverage"]["reachable"], report["coverage"]["shortfall"]
    stopped = any(not ex.complete for ex in results)
    names = ", ".join(ex.scope.name for ex in results)
    line = f"\ntransitions reached: {reached}/{len(cov)}"
    if reachable is None:
        line += f" (what the scope(s) {names} can reach is not recorded in the bounds file: coverage not judged)"
    elif len(reachable) < len(cov):
        others = [t for t in cov if t not in reachable]
        line += (f" ({len(reachable) - len(shortfall)} of the {len(reachable)} that {names} can reach at the "
                 f"committed bounds; {', '.join(others)} only other scopes reach)")
    print(line)
    if shortfall:
        what = "not reached before the search stopped" if stopped else "not reached within these bounds"
        print(paint(f"coverage shortfall: {', '.join(shortfall)} {what}", "33;1", color)
              + ("" if stopped else " (the committed bounds reach them: raise --bound to cover them; not a violation)"))
    for kind, counts in (("answer codes", report["answers"]), ("stop reasons", report["stop_reasons"])):
        missing = [k for k, v in counts.items() if not v]
        print(f"{kind} reached: {len(counts) - len(missing)}/{len(counts)}"
              + (f"  (not reached: {', '.join(missing)})" if missing else ""))
    for d in diffs:
        print(f"expected figures differ: {d}")
    if cx_text:
        print()
        print(cx_text, end="")
    verdict = "all invariants hold in every state within the bounds" if report["passed"] else \
        "a counterexample was found"
    if report["passed"] and shortfall:
        verdict += f" (coverage incomplete: {len(shortfall)} reachable transition(s) not reached)"
    print(f"\n{paint('PASS', '32;1', color) if report['passed'] else paint('FAIL', '31;1', color)}: {verdict}")


def _mutants(args: argparse.Namespace) -> int:
    from ..checker.counterexample import counterexample_json
    from ..checker.explain import explain
    from ..checker.mutants import MUTANTS, SURVIVORS, check_mutant

    bounds, _ = _load(args)
    color = use_color()
    rows = []
    failures = []
    summaries = []
    for mt in MUTANTS + SURVIVORS:
        must = mt in MUTANTS
        r = check_mutant(mt, bounds)
        s = r.summary()
        summaries.append(s)
        lf = r.lifted
        ok = (lf is not None and lf.calls <= 4) if must else lf is None
        if not ok:
            failures.append(mt.semantics.name)
        rows.append([
            mt.semantics.name, mt.scope, "must fail" if must else "survivor (spec gap)",
            "caught" if lf is not None else "not caught", str(lf.calls) if lf else "-", str(len(lf.steps)) if lf else "-",
            ", ".join(lf.violated) if lf else "-",
            paint("ok", "32", color) if ok else paint("UNEXPECTED", "31;1", color),
        ])
        if args.out and lf is not None:
            out = Path(args.out) / "mutants"
            write_atomic(out / f"{mt.semantics.name}.json", json.dumps(counterexample_json(lf), indent=2) + "\n")
            write_atomic(out / f"{mt.semantics.name}.txt", explain(lf))
    if args.format == "json":
        print(json.dumps({"format": "loopspec-verify-mutants/1", "mutants": summaries, "unexpected": failures}, indent=2))
    else:
        print(table(["variant", "scope", "kind", "result", "calls", "steps", "violated", "verdict"], rows))
        print(f"\n{len(MUTANTS)} must-fail variants, {len(SURVIVORS)} known survivors; unexpected: "
              f"{', '.join(failures) if failures else 'none'}")
    return EXIT_FOUND if failures else EXIT_OK


def _crosscheck(args: argparse.Namespace) -> int:
    from ..checker.crosscheck import fast_vs_reference, tree_vs_dedup
    from ..checker.semantics import CORE

    bounds, scopes = _load(args)
    sem = CORE
    if args.variant:
        from ..checker.mutants import UnknownVariant, by_name

        try:
            sem = by_name(args.variant).semantics
        except UnknownVariant as exc:
            raise UsageError(str(exc)) from None
    problems: dict[str, list[str]] = {}
    for scope in scopes:
        checks = [("tree-vs-dedup", tree_vs_dedup)]
        if sem.local:
            checks.insert(0, ("fast-vs-reference", fast_vs_reference))
        for name, fn in checks:
            try:
                diffs = fn(bounds, scope, sem)
            except RuntimeError as exc:
                raise UsageError(f"{exc} (e.g. --bound {scope.name}.calls=2)") from None
            problems[f"{scope.name}/{name}"] = diffs
            print(f"{scope.name:8} {name:18} {'agree' if not diffs else 'DIFFER'}")
            for d in diffs:
                print(f"  {d}")
    if args.format == "json":
        print(json.dumps({"format": "loopspec-verify-crosscheck/1", "semantics": sem.name, "problems": problems}, indent=2))
    return EXIT_FOUND if any(problems.values()) else EXIT_OK


def _writes(args: argparse.Namespace) -> int:
    """``--writes``: the model checker of section 6 (:mod:`loopspec.checker.writes`)."""
    from ..checker.writes import explore_writes, load_write_scopes
    from ..core import writes as w
    from ..spec.writes import load_write_spec

    if args.bound or args.bounds or args.update_expected or args.crosscheck or args.model != "fast":
        raise UsageError("--writes takes --scope, --variant, --mutants, --format and --out only")
    try:
        all_scopes = load_write_scopes()
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(f"cannot read writes-bounds.toml: {exc}") from None
    unknown = [n for n in args.scope if n not in all_scopes]
    if unknown:
        raise UsageError(f"no write scope {unknown[0]!r}; scopes: {', '.join(all_scopes)}")
    if args.variant and args.variant not in w.VARIANTS:
        raise UsageError(f"no write variant {args.variant!r}; variants: {', '.join(w.VARIANTS)}")
    scopes = [all_scopes[n] for n in args.scope] if args.scope else [s for s in all_scopes.values() if not s.slow]
    variants = list(w.VARIANTS) if args.mutants else [args.variant or "correct"]
    docs = {i.id: i.doc for i in load_write_spec().invariants}
    rows: list[dict[str, Json]] = []
    lines: list[str] = []
    failed = False
    for sc in scopes:
        for v in variants:
            r = explore_writes(sc, v)
            want = {k: x for k, x in sc.expected.items() if k != "variants"}
            row: dict[str, Json] = {"scope": sc.name, "variant": v, **r.figures(), "violated": r.violation,
                                    "counterexample": r.path}
            uncaught = sc.uncaught.get(v) if args.mutants else None
            if v == "correct":
                row["matchesExpected"] = r.figures() == want if want else None
                failed |= r.violation is not None
            elif uncaught is not None:  # [scope.NAME.uncaught]: this scope cannot catch it, and says why
                row["uncaught"] = uncaught
            else:
                failed |= r.violation is None if args.mutants else r.violation is not None
            rows.append(row)
            head = f"writes [{sc.name}{'' if v == 'correct' else ', variant ' + v}]: {r.states:,} states, " \
                   f"{r.transitions:,} transitions, {r.terminal:,} terminal"
            if r.violation is None:
                lines.append(f"{head}: every invariant of section 6 holds"
                             + ("" if v == "correct" else f" (not caught here, as expected: {uncaught})" if uncaught
                                else " (the variant was NOT caught)"))
                if row.get("matchesExpected") is False:
                    lines.append(f"  note: the committed figures of [scope.{sc.name}.expected] are {want}")
            else:
                lines.append(f"{head}: counterexample in {len(r.path or [])} steps")
                lines += [f"  Let {n}. {step}" for n, step in enumerate(r.path or [], start=1)]
                lines += [f"  Then {inv} breaks: {docs.get(inv, '')}" for inv in r.violation]
    report = {"format": "loopspec-verify-writes/1", "passed": not failed, "runs": rows}
    if args.out:
        write_atomic(Path(args.out) / "verify-writes.json", json.dumps(report, indent=1) + "\n")
    if args.format == "json":
        print(json.dumps(report, indent=1))
    else:
        print("\n".join(lines))
    return EXIT_FOUND if failed else EXIT_OK
