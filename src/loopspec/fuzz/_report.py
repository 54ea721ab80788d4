"""The conformance report of ``loopspec fuzz --report``: data (JSON) first, then Markdown.

Per rule of SPEC.md: **conforms** (no campaign found a divergence), **design choice** (the strict
campaign found one, and its shrunk counterexample conforms to the framework's profile: the profile's
documented choices, named, explain it) or **deviates** (a divergence from the profile itself — or
from the strict spec when no profile is given), each with its shrunk counterexample.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any, Final

from ..core.profiles import params_for
from ..judge.trace import judge
from ..spec.loader import WRITE_SECTION, load_rules, load_spec
from ..support.text import compact, write_atomic
from ._declared import NOT_EXERCISED
from ._exercised import describe, exercised_total
from ._model import CampaignResult, Finding, json_text, step_calls

Json = Any

__all__ = ["REPORT_FORMAT", "render_finding", "render_report", "replay_command", "report_data", "write_report"]

REPORT_FORMAT = "loopspec-conformance-report/1"


def _explained_by(f: Finding, profile: str) -> list[str]:
    """The profile parameters that, each alone, make the finding's failing trace conform."""
    spec = load_spec()
    params = params_for(spec, profile)
    trace = f.traces[-1]
    return [pid for pid in params.differs(spec) if judge(trace, profile=params.only(spec, [pid])).ok]


def _finding_json(f: Finding, out: Path | None, sub: str = "") -> dict[str, Json]:
    v = f.verdict.violation
    assert v is not None
    return {"rule": v.rule, "kind": v.kind, "cause": f.cause, "invariant": v.invariant, "calls": f.calls,
            "steps": len(f.steps), "reproduced": f.reproduced, "explanation": v.explanation,
            "case": str(out / sub / f"{f.cause}.json") if out is not None else None}


def report_data(*, impl: str, info: Mapping[str, Json], mode: str, profile: str | None, result: CampaignResult,
                strict: CampaignResult | None, out: Path | None) -> dict[str, Json]:
    spec = load_spec()
    rules = [r.id for r in load_rules() if r.section != WRITE_SECTION]  # section 6 is not fuzzed (yet)
    deviations: dict[str, Finding] = {}
    causes: dict[str, list[str]] = {}  # rule -> every distinct cause found under it
    for f in result.findings:
        deviations.setdefault(f.rule, f)
        causes.setdefault(f.rule, []).append(f.cause)
    choices: dict[str, tuple[Finding, list[str]]] = {}
    unpromised: dict[str, list[str]] = {}  # rule -> the observed choices that alone explain its finding
    if profile is not None and strict is not None:
        promised = {c.parameter for c in spec.profile(profile).choices if c.promised}
        for f in strict.findings:
            if f.rule in deviations:
                continue
            if judge(f.traces[-1], profile=profile).ok:
                params = _explained_by(f, profile)
                if any(pid in promised for pid in params):
                    choices[f.rule] = (f, [pid for pid in params if pid in promised])
                elif not params and judge(f.traces[-1], profile=params_for(spec, profile).only(
                        spec, sorted(promised))).ok:  # no choice alone: the documented ones together
                    choices[f.rule] = (f, [])
                else:  # P-EVIDENCE: only what nothing promises explains it: a deviation
                    deviations[f.rule] = f
                    unpromised[f.rule] = params
            else:  # the strict campaign's counterexample deviates from the profile too
                deviations[f.rule] = f
    unwitnessed: dict[str, list[str]] = {}
    if profile is not None:
        for pid in params_for(spec, profile).differs(spec):
            for rid in spec.parameter(pid).rules:
                unwitnessed.setdefault(rid, []).append(pid)
    counts: Counter[str] = Counter((result.stats or {}).get("exercised") or {})
    declared = (result.params or {}).get("declared") or {}
    unsupported: dict[str, list[str]] = {}  # rule -> the declared unsupported features that keep it unexercised
    for feature in declared.get("unsupported") or ():
        for r in NOT_EXERCISED.get(feature, ()):
            unsupported.setdefault(r, []).append(feature)
    if strict is not None:
        counts.update((strict.stats or {}).get("exercised") or {})
    per_rule = []
    for rid in rules + sorted(r for r in deviations if r not in rules):
        if rid in deviations:
            entry = {"rule": rid, "status": "deviates", **_finding_json(deviations[rid], out,
                                                                        "" if deviations[rid] in result.findings
                                                                        else "strict")}
            if rid in unpromised:  # conforms to the profile only through choices nothing documents
                entry["observedOnly"] = unpromised[rid]
            if len(causes.get(rid, ())) > 1:
                entry["causes"] = causes[rid]
        elif rid in choices:
            f, params = choices[rid]
            entry = {"rule": rid, "status": "design-choice", "parameters": params, **_finding_json(f, out, "strict")}
        elif counts and exercised_total(rid, counts) == 0:  # never met: "conforms" would claim what was not seen
            entry = {"rule": rid, "status": "not-exercised"}
            seen = describe(rid, counts)
            if seen is not None:
                entry["exercised"] = seen
            if rid in unsupported:
                entry["unsupported"] = unsupported[rid]
        else:
            entry = {"rule": rid, "status": "conforms"}
            if unwitnessed.get(rid):  # the profile differs here, but no campaign met a case that shows it
                entry["profileDiffersUnwitnessed"] = unwitnessed[rid]
            seen = describe(rid, counts)
            if seen is not None:  # how strong "conforms" is: the rule's preconditions the campaigns met
                entry["exercised"] = seen
        per_rule.append(entry)
    prof = spec.profile(profile) if profile else None
    return {
        "format": REPORT_FORMAT, "date": date.today().isoformat(), "impl": impl, "implInfo": dict(info),
        "mode": mode, "profile": profile or "strict",
        "profileChoices": [{"parameter": c.parameter, "value": c.value, "evidence": c.evidence, "source": c.source,
                            "quote": c.quote, "shipped": c.shipped, "function": c.function, "note": c.note}
                           for c in prof.choices] if prof else [],
        "seed": result.seed, "stats": result.stats, "strictStats": strict.stats if strict else None,
        "rules": per_rule,
    }


_STATUS = {"conforms": "conforms", "design-choice": "design choice", "deviates": "**deviates**",
           "not-exercised": "not exercised"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def evidence_text(c: Mapping[str, Json]) -> str:
    """A choice's evidence in one table cell: the quote with its link, the source line with its function."""
    if c.get("evidence") == "documented":
        return f"documented: “{_cell(c['quote'])}” ([docs]({c['source']}))"
    if c.get("evidence") == "source":
        return (f"source: `{c['shipped']}`, `{c['function']}`: `{_cell(c['quote'])}` "
                f"([source]({c['source']}))")
    return "**observed** (nothing documents it)"


def render_report(data: Mapping[str, Json]) -> str:
    spec = load_spec()
    titles = {r.id: r.title for r in load_rules()}
    prof = data["profile"]
    st = data["stats"]
    lines = [
        f"# Conformance report: {data['impl']} ({data['mode']} mode)",
        "",
        f"- implementation: {data['implInfo'].get('name', data['impl'])} {data['implInfo'].get('version', '')}".rstrip(),
        f"- judged under the profile `{prof}`" + ("" if prof == "strict" else
                                                 " and, for the design choices, the strict spec"),
        f"- date: {data['date']}; seed {data['seed']}; {st['examples']} examples, {st['steps']} steps, "
        f"{st['executionsObserved']} executions observed, {st['seconds']} s"
        + (f" (strict campaign: {data['strictStats']['seconds']} s)" if data.get("strictStats") else ""),
        "",
    ]
    if data["profileChoices"]:
        lines += ["## The profile's choices and their evidence", "",
                  "Evidence: **documented** quotes the framework's documentation, **source** a line of its "
                  "installed source, both checked against the pinned version; **observed**: nothing says it, "
                  "only the runs show it (a finding explained only by such a choice is a deviation).", "",
                  "| parameter | value | meaning | evidence |", "|---|---|---|---|"]
        for c in data["profileChoices"]:
            meaning = spec.parameter(c["parameter"]).meaning[c["value"]]
            lines.append(f"| `{c['parameter']}` | `{c['value']}` | {meaning} {c['note']} | {evidence_text(c)} |")
        lines.append("")
    counts = {s: sum(1 for r in data["rules"] if r["status"] == s) for s in _STATUS}
    lines += ["## Per rule", "",
              f"{counts['conforms']} conform, {counts['design-choice']} differ by a documented choice, "
              f"{counts['deviates']} deviate" + (f", {counts['not-exercised']} were not exercised"
                                                 if counts['not-exercised'] else "") + ".", "",
              "| rule | | result |", "|---|---|---|"]
    for r in data["rules"]:
        extra = ""
        if r["status"] == "design-choice":
            extra = (" — conforms to its profile, which differs from the strict default in "
                     + (", ".join(f"`{p}`" for p in r["parameters"]) or "a combination of its choices"))
        elif r.get("profileDiffersUnwitnessed"):
            extra = (" — no campaign met a case where its profile's "
                     + ", ".join(f"`{p}`" for p in r["profileDiffersUnwitnessed"])
                     + " differs from the strict default")
        elif r["status"] == "deviates" and r.get("observedOnly"):
            extra = (f" — {r['kind']}: explained only by the observed (undocumented) choice "
                     + ", ".join(f"`{p}`" for p in r["observedOnly"]) if r["observedOnly"] else
                     f" — {r['kind']}: explained only by a combination of choices that needs an observed one")
        elif r["status"] == "deviates":
            extra = (f" — {r['kind']}: deviates from its documented profile" if prof != "strict"
                     else f" — {r['kind']}")
        if r["status"] == "conforms" and r.get("exercised"):
            extra += f" ({r['exercised']})"
        if r["status"] == "not-exercised":
            extra += (f" — declared unsupported: {', '.join(r['unsupported'])}" if r.get("unsupported")
                      else " — no campaign met its preconditions" + (f" ({r['exercised']})" if r.get("exercised") else ""))
        lines.append(f"| {r['rule']} | {titles.get(r['rule'], '')} | {_STATUS[r['status']]}{extra} |")
    lines.append("")
    shown = [r for r in data["rules"] if r["status"] in ("deviates", "design-choice")]
    if shown:
        lines += ["## Counterexamples (shrunk)", ""]
    for r in shown:
        head = "deviation" if r["status"] == "deviates" else "design choice"
        lines += [f"### {r['rule']} {r['kind']} ({head})", ""]
        if r.get("invariant"):
            lines += [f"Invariant: {r['invariant']}. "]
        lines += ["```", r["explanation"], "```", ""]
        if r.get("case"):
            lines += [f"Case: `{r['case']}` ({r['calls']} call(s) in {r['steps']} step(s)"
                      + (", did not reproduce in a fresh run: P7" if r.get("reproduced") is False else "") + ")", ""]
    return "\n".join(lines)


def write_report(path: str | Path, **kw: Any) -> list[str]:
    data = report_data(**kw)
    p = Path(path)
    write_atomic(p.with_suffix(".json"), json_text(data))
    write_atomic(p, render_report(data) + "\n")
    return [str(p), str(p.with_suffix(".json"))]


# --------------------------------------------------------------------------------------------
# One finding, readable
# --------------------------------------------------------------------------------------------


def replay_command(case_path: str, impl: str) -> str:
    """The command that reruns a case: ``impl`` is a command line, a framework name or a
    ``module:attr`` entry point (resolved from the current directory, like ``python -m pytest``). An object
    no command line can name (``in-process X``: a class defined inside a function, an instance) is rerun
    from Python: ``loopspec.fuzz.replay(case, target)``."""
    import shlex

    if impl.startswith("in-process "):
        return f"from Python: loopspec.fuzz.replay({case_path!r}, {impl.removeprefix('in-process ')})"
    return f"loopspec replay {shlex.quote(case_path)} --impl {shlex.quote(impl)}"


def _rule_title(rule_id: str) -> str:
    if rule_id.startswith("P"):
        from ..judge.verdict import PROTOCOL_CODES

        return f"adapter protocol: {PROTOCOL_CODES.get(rule_id, '')}"
    try:
        for r in load_rules():
            if r.id == rule_id:
                return f"{r.strength} {r.title}"
    except Exception:
        pass
    return ""


def render_finding(f: Finding, impl: str, case_path: str, provisional: bool = False, *,
                   replay_impl: str | None = None) -> str:
    v = f.verdict.violation
    assert v is not None
    spec = load_spec()
    lines = [
        f"loopspec fuzz: divergence {v.rule} ({v.kind})" + (f", invariant {v.invariant}" if v.invariant else ""),
        f"cause:          {f.cause}",
        f"rule:           {v.rule} {_rule_title(v.rule)}",
    ]
    if v.transition:
        t = spec.transition(v.transition)
        lines.append(f"transition:     {t.id} {t.name} ({', '.join(t.sources)} → {t.dest})")
    lines += [
        f"implementation: {impl}",
        f"case:           {f.calls} call(s) in {len(f.steps)} step(s)"
        + (" (shrunk)" if f.shrunk else " (provisional: shrinking was still running)" if provisional else ""),
        f"replay:         {replay_command(case_path, replay_impl or impl)}",
    ]
    if f.reproduced is False:
        lines.append("note:           this divergence did NOT reproduce when the case was replayed in a fresh "
                     "process (P7): the implementation is nondeterministic or keeps state between runs")
    lines.append("")
    if len(f.steps) > 1:
        lines.append(f"Before the failing step, the same process answered {len(f.steps) - 1} step(s) correctly:")
        for i, s in enumerate(f.steps[:-1]):
            lines.append(f"  step {i + 1}: {_step_summary(s)}")
        lines.append("")
    lines.append(v.explanation)
    lines.append("")
    notes = char_notes(f.steps[-1] if f.steps else {})
    if notes:
        lines.append("Characters that matter here (R2: blank means Unicode White_Space only; ids and names compare "
                     "exactly):")
        lines += [f"  {n}" for n in notes]
        lines.append("")
    exp = f.verdict.expected
    if exp:
        lines.append("What the spec requires (reference run, fed the same tool outcomes):")
        for k in ("results", "executed", "aborted", "status", "stopReason"):
            if k in exp:
                lines.append(f"  {k}: {compact(exp[k], 200)}")
    lines.append("The divergence:")
    lines.append(f"  the spec:           {compact(v.expected, 200)}")
    lines.append(f"  the implementation: {compact(v.observed, 200)}")
    lines.append("What the implementation did:")
    obs = f.verdict.observed
    if obs.get("executions") is not None:
        lines.append(f"  executions seen by the harness: {len(obs['executions'])}")
        for k, e in enumerate(obs["executions"], start=1):
            lines.append(f"    {k}. request #{e.get('request')}: {compact(e.get('callId'), 14)} {e.get('name')}"
                         f"({compact(e.get('arguments'), 40)}) principal={compact(e.get('principal'), 16)} → "
                         f"{compact(e.get('outcome'), 50)}")
    if obs.get("response") is not None:
        lines.append(f"  response: {compact(obs['response'], 300)}")
    if obs.get("protocolError") is not None:
        pe = obs["protocolError"]
        lines.append(f"  protocol error: {pe.get('code')} {pe.get('kind')}: {pe.get('detail')}")
    if v.invariants:
        lines.append(f"  invariants violated by the observed behaviour: {', '.join(v.invariants)}")
    return "\n".join(lines) + "\n"


#: The names Unicode gives the C0 controls a runtime's blank test may count (unicodedata has none for them).
_CONTROL_NAMES: Final = {0x09: "CHARACTER TABULATION", 0x0A: "LINE FEED", 0x0B: "LINE TABULATION",
                         0x0C: "FORM FEED", 0x0D: "CARRIAGE RETURN", 0x1C: "INFORMATION SEPARATOR FOUR",
                         0x1D: "INFORMATION SEPARATOR THREE", 0x1E: "INFORMATION SEPARATOR TWO",
                         0x1F: "INFORMATION SEPARATOR ONE", 0x85: "NEXT LINE"}


def _java_whitespace(ch: str) -> bool:
    """Java's Character.isWhitespace (what String.isBlank and strip use)."""
    import unicodedata

    if ch in "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f":
        return True
    return unicodedata.category(ch) in ("Zs", "Zl", "Zp") and ch not in "\u00a0\u2007\u202f"


def char_notes(step: Mapping[str, Json]) -> list[str]:
    """For each character of a call's id or name that is not printable ASCII: its code point and name, whether
    R2 counts it as white space, and where a common runtime's own test disagrees (Java's isBlank, Python's
    str.isspace): the reason a reduced case keeps such a character."""
    import unicodedata

    from ..core.rules import WHITE_SPACE

    calls = step.get("calls") if step.get("kind", "batch") != "loop" else [
        c for r in step.get("model", []) if isinstance(r, dict) and isinstance(r.get("calls"), list) for c in r["calls"]]
    out: list[str] = []
    seen: set[str] = set()
    for k, c in enumerate(calls or []):
        if not isinstance(c, dict):
            continue
        for field in ("id", "name"):
            text = c.get(field)
            if not isinstance(text, str):
                continue
            for ch in text:
                if (" " < ch < "\x7f") or ch in seen:
                    continue
                seen.add(ch)
                name = unicodedata.name(ch, _CONTROL_NAMES.get(ord(ch), "a control character"
                                                               if unicodedata.category(ch) == "Cc" else "unnamed"))
                ws = ch in WHITE_SPACE
                java, py = _java_whitespace(ch), ch.isspace()
                verdict = ("Unicode White_Space: an id made only of such characters is blank, so malformed (R2)" if ws
                           else "not Unicode White_Space: an id made of it is valid (R2)")
                others = []
                if java != ws:
                    others.append(f"Java's isBlank() {'counts it as white space' if java else 'does not count it'}")
                if py != ws:
                    others.append(f"Python's str.isspace() {'counts it as white space' if py else 'does not'}")
                out.append(f"U+{ord(ch):04X} {name} (in the {field} of #{k}): {verdict}"
                           + (f"; but {' and '.join(others)}" if others else ""))
    return out


def _step_summary(step: Mapping[str, Json]) -> str:
    cfg = step.get("config", {})
    if step.get("kind") == "writes":
        calls = step.get("calls", [])
        return (f"writes.run budget={cfg.get('budget')} with {len(calls)} call(s), script "
                f"{compact(step.get('script', []), 120)}, outages {step.get('outages', [])}"
                + (f", crashes at lookups {step['crashes']}" if step.get("crashes") else "") + ": "
                + "; ".join(compact(c, 50) for c in calls[:6]))
    if step.get("kind", "batch") == "batch":
        calls = step.get("calls", [])
        return (f"batch.run budget={cfg.get('budget')} mode={cfg.get('mode')} with {len(calls)} call(s): "
                + "; ".join(compact(c, 50) for c in calls[:6]))
    lim = {k: v for k, v in cfg.get("limits", {}).items() if v is not None}
    return (f"loop.run {compact(lim, 80)} mode={cfg.get('mode')} onLimit={cfg.get('onLimit')} with a "
            f"{len(step.get('model', []))}-round model script ({step_calls(step)} call(s))")
