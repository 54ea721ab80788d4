"""``--html FILE`` and ``--junit FILE``: what ``fuzz``, ``check`` and ``verify`` found, as a page and a CI report.

Each command hands its result here; this module turns it into a :class:`~loopspec.render.report.Report`
(plain data: rows with their step tables, paths and replay commands, and JUnit cases) and the renderers of
:mod:`loopspec.render` write the files. It sits with the commands because it reads each driver's result, and
the drivers never import each other.

* fuzz: one row per finding; one JUnit case per rule of the spec (a deviation fails with its explanation
  and its replay command, a rule whose preconditions the campaign never met is skipped), and per protocol
  check (P1–P7);
* check: one row and one JUnit case per run (a violation fails, an unreadable run is an error), streamed:
  a check of a million runs lists every case in the JUnit file and bounds the page's rows;
* verify: one row per counterexample; one JUnit case per rule whose invariants the model checker checks.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..support.text import compact, write_atomic
from ._common import UsageError

if TYPE_CHECKING:
    from ..render.junit import JunitWriter
    from ..render.report import Report, StepTable

# the renderers are imported by the functions that use them: registering the options for `loopspec --help`
# imports none of them

__all__ = [
    "CheckReports",
    "add_report_options",
    "check_report_paths",
    "fuzz_report",
    "verify_report",
    "write_reports",
]

Json = Any


# --------------------------------------------------------------------------------------------
# The options
# --------------------------------------------------------------------------------------------


def add_report_options(p: argparse.ArgumentParser) -> None:
    """``--html FILE`` and ``--junit FILE`` (fuzz, check, verify, monitor)."""
    p.add_argument("--html", metavar="FILE",
                   help="also write a self-contained HTML report (one file, no network): the verdict, every finding "
                        "with its reduced case, explanation and path on the spec machine, coverage, filters")
    p.add_argument("--junit", metavar="FILE",
                   help="also write a JUnit XML report for a CI system's test tab (one test case per rule, or per run "
                        "for check; a failure carries the explanation and the replay command)")


def check_report_paths(args: argparse.Namespace) -> None:
    """Refuse, before any work, an ``--html``/``--junit`` path that cannot be written (exit 2)."""
    for flag in ("html", "junit"):
        value = getattr(args, flag, None)
        if not value:
            continue
        p = Path(value)
        if p.is_dir():
            raise UsageError(f"--{flag} {value}: is a directory (give a file name, e.g. {value.rstrip('/')}/report."
                             f"{'html' if flag == 'html' else 'xml'})")
        probe = p.parent if str(p.parent) else Path(".")
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if not probe.is_dir():
            raise UsageError(f"--{flag} {value}: {probe} is not a directory")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise UsageError(f"--{flag} {value}: cannot write in {probe}")


def _version() -> str:
    from .. import __version__

    return str(__version__)


def _now() -> str:
    return datetime.now().replace(microsecond=0).isoformat()


def command_line(command: str, argv: Sequence[str] | None) -> str:
    """The command as a user would type it again (``argv``: the arguments after ``loopspec``)."""
    return shlex.join(["loopspec", *(argv if argv else [command])])


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def machine_svg() -> tuple[Any, str | None, str]:
    """The spec machine (the model the page draws) and its SVG from Graphviz (None, with the reason, when
    Graphviz's ``dot`` cannot run)."""
    import graphviz

    from ..render import extract_machine, machine_dot
    from ..spec.loader import default_spec, load_rules

    spec = default_spec()
    try:
        rules = load_rules(None, spec)
    except Exception:  # a --spec without its SPEC.md: the machine is drawn without rule names
        rules = ()
    machine = extract_machine(spec, rules)
    try:
        svg = graphviz.pipe("dot", "svg", machine_dot(machine).encode("utf-8"), quiet=True).decode("utf-8")
    except graphviz.ExecutableNotFound:
        return machine, None, ("No diagram: Graphviz's `dot` is not installed (Debian/Ubuntu: apt-get install -y "
                               "graphviz; macOS: brew install graphviz). The path tables show every step.")
    except graphviz.CalledProcessError as exc:
        return machine, None, f"No diagram: Graphviz failed ({exc.returncode})."
    return machine, svg, ""


def write_html(path: str | Path, report: Report) -> Path:
    from ..render.html import report_html

    machine, svg, note = machine_svg()
    write_atomic(Path(path), report_html(report, machine, svg, diagram_note=note))
    return Path(path)


def write_reports(args: argparse.Namespace, report: Report, junit: JunitWriter | None = None) -> list[str]:
    """Write what ``--html`` and ``--junit`` ask for; returns the paths written. ``junit``: a writer the
    command already streamed its cases into (check)."""
    from ..render.junit import write_junit

    written = []
    if getattr(args, "html", None):
        written.append(str(write_html(args.html, report)))
    if junit is not None:
        written.append(str(junit.finish(seconds=report.seconds, timestamp=report.timestamp)))
    elif getattr(args, "junit", None):
        written.append(str(write_junit(args.junit, report)))
    return written


def _rule_titles() -> dict[str, str]:
    from ..judge.verdict import PROTOCOL_CODES
    from ..spec.loader import load_rules

    try:
        titles = {r.id: f"{r.strength} {r.title}" for r in load_rules()}
    except Exception:
        titles = {}
    titles.update({p: f"adapter protocol: {t}" for p, t in PROTOCOL_CODES.items()})
    return titles


# --------------------------------------------------------------------------------------------
# Step tables
# --------------------------------------------------------------------------------------------


def _call(c: Json) -> str:
    """A proposed call as the page shows it: ``"c1" lookup({"q":"a"})`` (the id quoted, so a blank or odd
    one shows; a missing field as ∅)."""
    if not isinstance(c, dict):
        return compact(c, 60)
    name = c.get("name", "∅")
    shown = name if isinstance(name, str) and name.isidentifier() else compact(name, 24)
    return f"{compact(c.get('id', '∅'), 16)} {shown}({compact(c.get('arguments', '∅'), 60)})"


def _answer(a: Json) -> str:
    if not isinstance(a, dict):
        return compact(a, 60)
    if a.get("status") == "ok":
        return f"ok {compact(a.get('output'), 60)}"
    if a.get("status") == "error":
        return f"error {compact(a.get('code'), 40)}"
    return compact(a, 80)


def _calls_of(trace: Mapping[str, Json]) -> list[tuple[int | None, Json]]:
    """The requests of a trace, in request order, with their round (None in a batch)."""
    if trace.get("kind") == "loop":
        out: list[tuple[int | None, Json]] = []
        for e in trace.get("events", []):
            if e.get("type") == "model" and isinstance(e.get("reply"), dict) and isinstance(e["reply"].get("calls"), list):
                out += [(e.get("round"), c) for c in e["reply"]["calls"]]
        return out
    return [(None, c) for c in trace.get("calls", []) or []]


def _position_answers(results: Json, aborted: Json, n: int) -> list[str]:
    """Answers by request index: ``results`` fill the requests in order, the aborting request says so."""
    out = ["(not reached)"] * n
    ab = aborted.get("index") if isinstance(aborted, dict) else None
    it = iter(results if isinstance(results, list) else [])
    for i in range(n):
        if i == ab:
            out[i] = f"ABORT {aborted.get('code')}"
            break
        nxt = next(it, None)
        if nxt is None:
            break
        out[i] = _answer(nxt)
    extra = list(it)
    if extra:
        out.append(f"+{len(extra)} answer(s) more than requests: " + "; ".join(_answer(a) for a in extra[:3]))
    return out


def _step_config(step: Mapping[str, Json]) -> str:
    cfg = step.get("config", {}) or {}
    tools = ", ".join(str(t.get("name")) for t in cfg.get("tools", []) if isinstance(t, dict))
    if step.get("kind", "batch") == "loop":
        lim = {k: v for k, v in (cfg.get("limits") or {}).items() if v is not None}
        return f"loop.run limits {compact(lim, 120)}, mode {cfg.get('mode')}, onLimit {cfg.get('onLimit')}, tools [{tools}]"
    if step.get("kind") == "writes":
        return f"writes.run budget {cfg.get('budget')}, tools [{tools}]"
    return (f"batch.run budget {cfg.get('budget')}, mode {cfg.get('mode')}, principal {compact(cfg.get('principal'), 20)}"
            f", tools [{tools}]")


def fuzz_step_tables(finding: Any) -> tuple[StepTable, ...]:
    """A finding's reduced case, one table per step: each request with the spec's answer (the reference
    run, fed the same tool outcomes) beside the implementation's, and the executions each got."""
    from ..render.report import StepTable

    tables = []
    v = finding.verdict.violation
    for k, (step, trace) in enumerate(zip(finding.steps, finding.traces, strict=False)):
        last = k == len(finding.steps) - 1
        title = f"Step {k + 1} of {len(finding.steps)}: {_step_config(step)}" + ("" if last else " (answered as the spec says)")
        if trace.get("kind") == "writes":
            rows = tuple((str(i + 1), str(e.get("type")), compact({x: y for x, y in e.items() if x != "type"}, 160))
                         for i, e in enumerate(trace.get("events", [])))
            tables.append(StepTable(title, ("#", "event", "detail"), rows))
            continue
        calls = _calls_of(trace)
        execs: Counter[int] = Counter()
        for e in (finding.verdict.observed.get("executions") or []) if last else []:
            if isinstance(e.get("request"), int):
                execs[e["request"]] += 1
        response = next((e.get("result") for e in trace.get("events", []) if e.get("type") == "response"), None)
        observed = _position_answers((response or {}).get("results"), (response or {}).get("aborted"), len(calls)) \
            if isinstance(response, dict) else ["(no answer: see the protocol finding)"] * max(len(calls), 1)
        loop = trace.get("kind") == "loop"
        if last:
            exp = finding.verdict.expected
            expected = _position_answers(exp.get("results"), exp.get("aborted"), len(calls)) if exp else [""] * len(calls)
            spec_execs = Counter(exp.get("executions") or []) if exp else Counter()
            cols = ("#", *(("round",) if loop else ()), "call", "the spec answers", "the implementation answered",
                    "executions (spec / seen)")
            rows = []
            for i in range(max(len(calls), len(observed), len(expected))):
                rnd, call = calls[i] if i < len(calls) else (None, None)
                rows.append((str(i), *((str(rnd or ""),) if loop else ()), _call(call) if i < len(calls) else "",
                             expected[i] if i < len(expected) else "", observed[i] if i < len(observed) else "",
                             f"{spec_execs.get(i, 0)} / {execs.get(i, 0)}" if i < len(calls) else ""))
            failing = v.index if v is not None and isinstance(v.index, int) and v.index < len(rows) else None
            tables.append(StepTable(title, cols, tuple(rows), failing))
        else:
            cols = ("#", *(("round",) if loop else ()), "call", "answer")
            rows = [(str(i), *((str(rnd or ""),) if loop else ()), _call(c), observed[i] if i < len(observed) else "")
                    for i, (rnd, c) in enumerate(calls)]
            tables.append(StepTable(title, cols, tuple(rows)))
    return tuple(tables)


# --------------------------------------------------------------------------------------------
# fuzz
# --------------------------------------------------------------------------------------------


def _load(path: Path) -> Json:
    from ..support.safejson import load_json

    try:
        return load_json(path)
    except Exception:
        return None


def fuzz_report(args: argparse.Namespace, result: Any, out: Path, *, impl_info: Mapping[str, Json] | None,
                profile: str | None, strict: Any = None, argv: Sequence[str] | None = None,
                seconds: float | None = None, exit_code: int = 0, next_step: str | None = None) -> Report:
    """A fuzz campaign's report: its findings (rows), a JUnit case per rule and per protocol check; ``next_step``
    the command the text's ``next:`` line and the JSON's ``"next"`` name (one :class:`NextStep` for all three)."""
    from ..fuzz._outputs import finding_summary
    from ..fuzz._report import replay_command, report_data
    from ..judge.verdict import PROTOCOL_CODES
    from ..render.report import Case, Item, PathTrace, Report, rule_sort_key
    from ..spec.loader import WRITE_SECTION, load_rules

    titles = _rule_titles()
    st = result.stats or {}
    mode = args.mode
    report = Report(
        command="fuzz", title=f"loopspec fuzz: {args.impl} ({mode} mode)", command_line=command_line("fuzz", argv),
        outcome="failed" if not result.ok else "interrupted" if result.interrupted else "passed", exit_code=exit_code,
        rules=titles, seconds=seconds, timestamp=_now(), version=_version(), item_noun="finding",
    )
    report.summary = [
        ("implementation", f"{(impl_info or {}).get('name', args.impl)} {(impl_info or {}).get('version', '')}".strip()),
        ("mode", mode), ("profile", profile or "strict"), ("seed", str(result.seed)),
        ("examples", f"{st.get('examples', 0):,}"), ("steps", f"{st.get('steps', 0):,}"),
        ("executions observed", f"{st.get('executionsObserved', 0):,}"),
        ("findings", str(len(result.findings))), ("seconds", str(st.get("seconds", ""))),
    ]
    if st.get("stoppedBy") == "time-budget":
        report.notes.append(f"--time-budget reached after {st.get('examples')} examples.")
    if result.interrupted:
        report.notes.append("The campaign was interrupted: what it found so far is listed.")
    impl_for_replay = args.impl
    by_rule: dict[str, list[Any]] = {}
    for f in result.findings:
        v = f.verdict.violation
        summ = finding_summary(f, out)
        case_path = summ.get("case") or str(out / f"{f.rule}.json")
        stem = Path(case_path).name.removesuffix(".json")
        path_doc = _load(out / f"{stem}.path.json")
        replay = replay_command(case_path, impl_for_replay)
        facts = [("kind", f.kind), ("invariant", v.invariant or "—"), ("case", f"{f.calls} call(s) in {len(f.steps)} step(s)"
                                                                     + (" (shrunk)" if f.shrunk else ""))]
        if v.transition:
            facts.append(("spec transition", v.transition))
        if f.reproduced is False:
            facts.append(("reproduced", "no: the divergence did not reproduce in a fresh process (P7)"))
        files = tuple(str(out / f"{stem}{suffix}") for suffix in (".json", ".txt", ".path.json")
                      if (out / f"{stem}{suffix}").is_file())
        report.items.add(Item(
            key=stem, verdict="fails", rule=f.rule,
            title=f"{f.rule} {f.kind}" + (f" ({v.invariant})" if v.invariant else ""),
            where=f"request #{v.index}" if v.index is not None else "", explanation=v.explanation,
            tables=fuzz_step_tables(f), path=PathTrace.from_json(path_doc), replay=replay, files=files,
            facts=tuple(facts)))
        by_rule.setdefault(f.rule, []).append((f, replay, case_path))
    # per rule: what the conformance report says (exercised counts, design choices under a profile)
    try:
        data = report_data(impl=args.impl, info=impl_info or {}, mode=mode, profile=profile, result=result,
                           strict=strict, out=out)
        statuses = {r["rule"]: r for r in data["rules"]}
    except Exception:  # the report is a view: a problem here never hides the campaign's findings
        statuses = {}
    rule_ids = [r.id for r in load_rules() if (r.section == WRITE_SECTION) == (mode == "writes")]
    classname = f"loopspec.fuzz.{mode}"
    for rid in sorted(dict.fromkeys([*rule_ids, *by_rule, *PROTOCOL_CODES]), key=rule_sort_key):
        name = f"{rid} {titles.get(rid, '')}".strip()
        if rid in by_rule:
            texts, kinds = [], []
            for f, replay, case_path in by_rule[rid]:
                v = f.verdict.violation
                kinds.append(f.kind)
                texts.append(f"{v.explanation}\n\ncase: {case_path}\nreplay: {replay}")
            report.cases.append(Case(name, classname, "failed", f"{rid} {', '.join(kinds)}: "
                                     + by_rule[rid][0][0].verdict.violation.explanation.splitlines()[-1],
                                     "\n\n".join(texts), kind=f"{rid} {kinds[0]}"))
            continue
        entry = statuses.get(rid, {})
        if rid.startswith("P"):
            report.cases.append(Case(name, classname, "passed", text="no protocol finding"))
        elif entry.get("status") == "design-choice":
            params = ", ".join(entry.get("parameters") or []) or "its documented choices"
            report.cases.append(Case(name, classname, "passed", text=f"differs from the strict spec by the profile's "
                                     f"documented choice ({params}): {entry.get('explanation', '')}"))
        elif mode == "writes":
            report.cases.append(Case(name, classname, "passed",
                                     text=f"no divergence in {st.get('examples', 0)} examples"))
        elif entry.get("exercised") and any(int(n) for n in re.findall(r"\d+", str(entry["exercised"]).replace(",", ""))):
            report.cases.append(Case(name, classname, "passed", text=f"conforms ({entry['exercised']})"))
        else:
            report.cases.append(Case(name, classname, "skipped",
                                     f"not exercised: no {mode} step of this campaign met this rule's preconditions"))
    if result.interrupted:
        report.cases.append(Case("campaign", classname, "error", "the campaign was interrupted before it finished",
                                 f"{st.get('examples', 0)} of {args.max_examples} examples ran", kind="interrupted"))
    cov = _load(out / "coverage.json")
    if isinstance(cov, dict) and isinstance(cov.get("transitions"), dict) and mode != "writes":
        report.coverage = {str(k): int(v) for k, v in cov["transitions"].items() if isinstance(v, int)}
        report.coverage_label = str(cov.get("label", ""))
    report.next_step = next_step or ""
    return report


# --------------------------------------------------------------------------------------------
# check
# --------------------------------------------------------------------------------------------


class CheckReports:
    """Collects ``loopspec check``'s records as they stream: rows for the page (bounded), a JUnit case per
    run (spooled), and the coverage of the recorded paths."""

    def __init__(self, args: argparse.Namespace, argv: Sequence[str] | None = None, *, command: str = "check",
                 sources: Sequence[str] | None = None) -> None:
        from ..render.junit import JunitWriter
        from ..render.report import Report

        self.args = args
        self.started = time.perf_counter()
        files = list(args.files if sources is None else sources)
        self.sources = ", ".join(files)
        self.report = Report(command=command, title=f"loopspec {command}: " + ", ".join(files[:3])
                             + (f" and {len(files) - 3} more" if len(files) > 3 else ""),
                             command_line=command_line(command, argv), outcome="passed", exit_code=0,
                             rules=_rule_titles(), timestamp=_now(), version=_version(), item_noun="run")
        self.junit = JunitWriter(args.junit, suite=self.report.title,
                                 properties=[("command", self.report.command_line), ("loopspec", _version())]) \
            if getattr(args, "junit", None) else None
        self.coverage: Counter[str] = Counter()
        self.errors: dict[str, list[str]] = {}

    def record(self, rec: Any) -> None:
        from ..render.report import Case, Item, PathTrace
        from ..support.text import printable

        a, b = rec.lines
        where = f"{rec.file}:{a}" + (f"-{b}" if b != a else "")
        key = f"{rec.file}#{rec.run}"
        classname = "loopspec.check." + Path(rec.file).name.replace(".", "_")
        v = rec.violation
        facts: list[tuple[str, str]] = [("input", rec.input), ("events", str(rec.events))]
        c = rec.checks or {}
        if c:
            facts += [("verified", " ".join(c.get("verified", ())) or "none"),
                      ("taken as reported", " ".join(c.get("assumed", ())) or "none")]
            if c.get("notWitnessed"):
                facts.append(("not witnessed", " ".join(c.get("notWitnessed", ()))))
        if rec.verdict == "conforms":
            s = rec.summary or {}
            what = f"{s.get('status')}/{s.get('stopReason')}" if s.get("status") else (
                f"{s.get('calls', 0)} call(s), {s.get('results', 0)} result(s)" if "calls" in s else "conforms")
            if s.get("incomplete"):
                what = "incomplete (no terminal event)"
            item = Item(key=key, verdict="passes", title=printable(what), where=where, facts=tuple(facts))
            case = Case(printable(str(rec.run)), classname, "passed", text=f"{where}: conforms ({printable(what)})")
        elif rec.verdict == "unreadable":
            item = Item(key=key, verdict="unreadable", title=printable(rec.error or "unreadable"),
                        where=f"{rec.file}:{rec.error_line}", facts=tuple(facts))
            case = Case(printable(str(rec.run)), classname, "error", printable(rec.error or "unreadable"),
                        f"{rec.file}:{rec.error_line}: {rec.error}", kind="unreadable")
        else:
            at = rec.at or {}
            loc = [f"event {at['event']}" if at.get("event") is not None else "",
                   f"line {at['line']}" if at.get("line") is not None else ""]
            where_at = where + (f" ({', '.join(x for x in loc if x)})" if any(loc) else "")
            if rec.prefix and "events" in rec.prefix:
                facts.append(("longest conforming prefix", f"{rec.prefix['events']} event(s)"))
            path = PathTrace.from_json(rec.trace)
            replay = (shlex.join(["loopspec", "diagram", "--trace", rec.file, "--run", str(rec.run)])
                      if rec.input == "ledger" and rec.trace is not None else
                      shlex.join(["loopspec", "check", rec.file, "--format", "json"]))
            title = f"{v.rule} {v.kind}" + (f" ({v.invariant})" if v.invariant else "")
            item = Item(key=key, verdict="fails", rule=v.rule, title=printable(title), where=where_at,
                        explanation=v.explanation, path=path, replay=replay, facts=tuple(facts))
            case = Case(printable(str(rec.run)), classname, "failed", f"{title}: {v.explanation.splitlines()[-1]}",
                        f"{where_at}\n\n{v.explanation}\n\nnext: {replay}", kind=f"{v.rule} {v.kind}")
            if path is not None:
                self.coverage.update(path.path)
        if rec.verdict == "conforms" and rec.trace is not None:
            tr = PathTrace.from_json(rec.trace)
            if tr is not None:
                self.coverage.update(tr.path)
        self.report.items.add(item, replaces=bool(rec.amends))
        if self.junit is not None:
            self.junit.add(case, key=key)

    def error(self, err: Any) -> None:
        self.errors.setdefault(err.file, []).append(err.text())

    def finish(self, summary: Any, exit_code: int, next_step: str | None = None) -> list[str]:
        """Write the reports; ``next_step`` the command the text's ``next:`` line and the JSON's ``"next"`` name
        (``check``); None: the first failing run's own command (``monitor``, which prints no ``next:`` line)."""
        from ..render.report import Case, Item, rule_sort_key

        for file, texts in self.errors.items():
            case = Case("input errors", "loopspec.check." + Path(file).name.replace(".", "_"), "error",
                        f"{len(texts)} input error(s) in {file}", "\n".join(texts[:100]), kind="unreadable-input")
            self.report.items.add(Item(key=f"{file}#input", verdict="unreadable", title=f"{len(texts)} input error(s)",
                                       where=file, explanation="\n".join(texts[:100])))
            if self.junit is not None:
                self.junit.add(case)
        r = self.report
        r.exit_code = exit_code
        r.outcome = "incomplete" if exit_code == 2 else "failed" if exit_code == 1 else "passed"
        r.seconds = time.perf_counter() - self.started
        r.summary = [("files", str(summary.files)) if r.command == "check" else ("endpoint", self.sources),
                     ("runs", f"{summary.runs:,}"), ("conform", f"{summary.conform:,}"),
                     ("violate", f"{summary.violate:,}"), ("unreadable", f"{summary.unreadable:,}"),
                     ("input errors", f"{summary.input_errors:,}")]
        if summary.by_rule:
            r.summary.append(("by rule", ", ".join(f"{k} {n}" for k, n in sorted(summary.by_rule.items(),
                                                                               key=lambda x: rule_sort_key(x[0])))))
        if self.coverage:
            from ..spec.loader import default_spec

            r.coverage = {t.id: self.coverage.get(t.id, 0) for t in default_spec().transitions}
            r.coverage_label = "the paths of the recorded runs that have one (ledgers)"
        if next_step is None:
            first = next((it for it in r.items if it.verdict == "fails"), None)
            next_step = first.replay if first is not None else None
        r.next_step = next_step or ""
        return write_reports(self.args, r, self.junit)

    def abandon(self) -> None:
        if self.junit is not None:
            self.junit.close()


# --------------------------------------------------------------------------------------------
# verify
# --------------------------------------------------------------------------------------------


def verify_report(args: argparse.Namespace, report: Mapping[str, Json], results: Sequence[Any],
                  explanation: str | None, *, argv: Sequence[str] | None = None, seconds: float | None = None,
                  exit_code: int = 0, next_step: str | None = None) -> Report:
    """``loopspec verify``'s report: the counterexample (a row), a JUnit case per rule whose invariants the
    model checker checks, coverage of the spec transitions."""
    from ..render.report import Case, Item, PathTrace, Report, StepTable
    from ..spec.loader import load_rules

    titles = _rule_titles()
    r = Report(command="verify", title="loopspec verify: " + ", ".join(ex.scope.name for ex in results),
               command_line=command_line("verify", argv), outcome="passed" if report["passed"] else "failed",
               exit_code=exit_code, rules=titles, seconds=seconds, timestamp=_now(), version=_version(),
               item_noun="counterexample")
    states = sum(ex.states for ex in results)
    r.summary = [("semantics", str(report.get("semantics"))), ("scopes", ", ".join(ex.scope.name for ex in results)),
                 ("states", f"{states:,}"), ("transitions explored", f"{sum(ex.transitions for ex in results):,}"),
                 ("bounds", str(report.get("bounds")))]
    if report.get("overrides"):
        r.summary.append(("overrides", ", ".join(report["overrides"])))
    cx = report.get("violation")
    violated: set[str] = set()
    if isinstance(cx, dict):
        violated = {v["id"] for v in cx.get("violated", []) if isinstance(v, dict)}
        rows = []
        for s in cx.get("steps", []):
            rows.append((str(s.get("step")), f"{s.get('transition')} {s.get('name')}", f"{s.get('from')} → {s.get('to')}",
                         _call(s["request"]) if "request" in s else "", _answer(s["answer"]) if "answer" in s else "",
                         compact(s.get("execution"), 60) if "execution" in s else "",
                         ", ".join(s.get("violated", []))))
        failed = next((i for i, s in enumerate(cx.get("steps", [])) if s.get("violated")), None)
        table = StepTable(f"The shortest counterexample: scope {cx.get('scope', '')}, {cx.get('calls', '?')} call(s)",
                          ("step", "transition", "from → to", "request", "answer", "execution", "invariants broken"),
                          tuple(rows), failed)
        citing = [rl.id for rl in load_rules() if violated & set(rl.invariants)]
        files = tuple(str(Path(args.out) / n) for n in ("counterexample.json", "counterexample.txt", "trace.json")) \
            if args.out else ()
        r.items.add(Item(key="counterexample", verdict="fails", rule=None,
                         title="invariant(s) broken: " + ", ".join(sorted(violated)) if violated else
                         str(cx.get("error", "the core raised")),
                         where=f"scope {cx.get('scope', '')}", explanation=explanation or "",
                         tables=(table,) if rows else (), path=PathTrace.from_json(cx.get("trace")),
                         replay=command_line("verify", argv), files=files,
                         facts=(("rules citing the broken invariants", ", ".join(citing) or "none"),)))
    complete = all(ex.complete for ex in results)
    checked_invariants = {i for ex in results for i in getattr(ex, "invariants", ())} or None
    for rule in load_rules():
        if rule.section == 6 or not rule.invariants or not any(i.startswith("INV-") for i in rule.invariants):
            continue
        name = f"{rule.id} {titles.get(rule.id, rule.title)}"
        broken = violated & set(rule.invariants)
        if broken:
            r.cases.append(Case(name, "loopspec.verify", "failed",
                                f"{rule.id}: {', '.join(sorted(broken))} broken in scope {cx.get('scope')}",
                                (explanation or "") + "\n\nreplay: " + command_line("verify", argv),
                                kind="counterexample"))
        elif not complete:
            r.cases.append(Case(name, "loopspec.verify", "skipped",
                                "the search stopped at the first counterexample before exhausting the bounds"))
        elif checked_invariants is not None and not set(rule.invariants) & checked_invariants:
            r.cases.append(Case(name, "loopspec.verify", "skipped", "its invariants are not checked in these scopes"))
        else:
            r.cases.append(Case(name, "loopspec.verify", "passed",
                                text=f"{', '.join(rule.invariants)} hold in every one of the {states:,} states "
                                     "reached within the bounds"))
    cov = report.get("coverage", {}).get("transitions")
    if isinstance(cov, dict):
        r.coverage = {k: int(v) for k, v in cov.items()}
        r.coverage_label = f"states explored in {', '.join(ex.scope.name for ex in results)}"
    shortfall = report.get("coverage", {}).get("shortfall") or []
    if shortfall:
        r.notes.append(f"Coverage shortfall (not a violation): {', '.join(shortfall)} not reached within these bounds.")
    for d in report.get("expected_differs") or []:
        r.notes.append(f"Expected figures differ: {d}")
    r.next_step = next_step or ""
    return r
