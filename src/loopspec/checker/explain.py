"""A counterexample in words: each step, what the environment did, why the spec let it happen
(the transition id, its guards, the rules it cites, evaluation order R0), and how the invariant
broke (the invariant's text and the concrete values it reads)."""

from __future__ import annotations

import json
from typing import Any

from ..core import rules as core
from ..core.rules import RunState
from ..spec.loader import load_spec
from .counterexample import Lifted, Step
from .readsets import invariant_read_sets

__all__ = ["explain"]

Json = Any


def _c(v: Json, limit: int = 70) -> str:
    text = json.dumps(v, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _call(U: Any, label: str) -> str:
    call = U.calls[label]
    cid = call.get("id", "∅ (no id)")
    return f"id {_c(cid)} → {call.get('name')}({_c(call.get('arguments'))})"


def _environment(lf: Lifted, st: Step) -> list[str]:
    """What the environment did in this step, as clauses that follow "Let"."""
    out = []
    for point, label in st.choice:
        if point == "cancel" and label == "yes":
            out.append("the application cancel the run")
        elif point == "tick" and label == "yes":
            out.append("the injected clock reach the deadline")
        elif point == "auth":
            out.append(f"the authorization hook answer {'allow' if label == 'allow' else 'deny'}")
        elif point == "response":
            if label == "final":
                out.append("the model give its final answer")
            elif label == "error":
                out.append("the model fail (raise)")
            elif label == "[]":
                out.append("the model propose no call")
            else:
                out.append(f"the model propose {_call(lf.universe, label)}")
        elif point == "next":
            out.append("the proposal end here" if label == "end"
                       else f"the proposal's next call be {_call(lf.universe, label)}")
        elif point == "outcome":
            out.append({"ok": "the tool return a value", "late": "the run be cancelled while the tool runs"}.get(
                label, f"the tool fail with {label}"))
        elif point == "arrival" and label != "none":
            req, _, o = label[1:].partition(":")
            what = "a value" if o == "ok" else f"the failure {o}"
            out.append(f"the result of request {req} arrive next ({what}), whatever the others are doing")
    return out


def _facts(st: Step) -> list[str]:
    b, a = st.before.s, st.after.s
    out = []
    if len(a.requests) > len(b.requests):
        r = a.requests[-1]
        out.append(f"request {r.index} arrives: id {_c(r.call_id)}, {r.name}({_c(r.arguments)})")
    for cid, bd in a.bindings.items():
        old = b.bindings.get(cid)
        if old is None:
            out.append(f"id {_c(cid)} is bound to {bd.name}({bd.key.split(chr(0), 1)[1]})")
        elif old.key != bd.key:
            out.append(f"id {_c(cid)} is re-bound to {bd.name}({bd.key.split(chr(0), 1)[1]})")
        if bd.success is not None and (old is None or old.success is None):
            out.append(f"id {_c(cid)} stores the result {_c(bd.success[0])}")
    if len(a.executions) > len(b.executions):
        e = a.executions[-1]
        out.append(f"execution {e.ordinal} of request {e.request} starts ({e.tool}, principal {_c(e.principal)}); "
                   f"executed = {len(a.executions)}" + (" — after the deadline" if e.late else ""))
    elif a.executions and b.executions and a.executions[-1].attempts > b.executions[-1].attempts:
        out.append(f"attempt {a.executions[-1].attempts} of execution {a.executions[-1].ordinal} (a retry)"
                   + (" — after the deadline" if a.executions[-1].late_retries > b.executions[-1].late_retries else ""))
    if a.executions and b.executions and a.executions[-1].retry_skipped and not b.executions[-1].retry_skipped:
        e = a.executions[-1]
        out.append(f"execution {e.ordinal} ends failed after {e.attempts - 1} retr{'y' if e.attempts == 2 else 'ies'} "
                   f"of {a.config.limits.max_retries} allowed, before the deadline — a retry was due")
    if st.transition.effect == "run_on":
        out.append("it runs on in the background; in flight: " + ", ".join(f"#{x.request}" for x in core.in_flight(a)))
    for e in a.executions:
        old = next((x for x in b.executions if x.ordinal == e.ordinal), None)
        if old is not None and old.outcome is None and e.outcome is not None and not old.abandoned:
            res = f"ok {_c(e.outcome.output)}" if e.outcome.ok else str(e.outcome.category)
            out.append(f"the result of request {e.request} lands: {res}" + (" — after the deadline" if e.landed_late else ""))
        if e.abandoned and (old is None or not old.abandoned):
            out.append(f"execution {e.ordinal} of request {e.request} is abandoned (still running)")
    for i in sorted(set(a.held) - set(b.held)):
        out.append(f"request {i}'s answer ({a.held[i].code or 'ok'}) is known, and waits for the answers before it")
    if len(a.answers) > len(b.answers):
        for ans in a.answers[len(b.answers):]:
            what = (f"ok {_c(ans.output)}" + (" (replayed)" if ans.replayed else "")) if ans.status == "ok" else ans.code
            out.append(f"request {ans.index} is answered: {what}")
    elif len(a.answers) < len(b.answers):
        out.append(f"{len(b.answers) - len(a.answers)} answer(s) removed from the results")
    if a.late_model_requests > b.late_model_requests:
        out.append("the model is asked after the deadline")
    if a.status is not None and b.status is None:
        out.append(f"the run ends {a.status} ({a.stop_reason})" + (f", aborted at {a.aborted}" if a.aborted else ""))
    return out


def _state_excerpt(s: RunState, fields: frozenset[str]) -> list[str]:
    out = []
    lim = s.config.limits
    for f in sorted(fields):
        if f == "config":
            out.append(f"config: mode={s.config.mode} on_limit={s.config.on_limit} max_executions={lim.max_executions} "
                       f"max_requests={lim.max_requests} max_rounds={lim.max_rounds} principal={_c(s.config.principal)}")
        elif f == "requests":
            out.append("requests: " + "; ".join(f"{r.index}:{_c(r.call_id)} {r.name}({_c(r.arguments, 30)})"
                                                + ("" if r.authorized is not False else " [denied]") for r in s.requests))
        elif f == "answers":
            out.append("answers: " + "; ".join(
                f"{x.index}:{_c(x.call_id)} " + (f"ok {_c(x.output, 24)}" + (" replayed" if x.replayed else "")
                                                 if x.status == "ok" else str(x.code))
                + (" executed" if x.executed else "") + (" [after the deadline]" if x.late else "")
                for x in s.answers))
        elif f == "executions":
            out.append("executions: " + "; ".join(
                f"#{e.ordinal} request {e.request} {e.tool} principal={_c(e.principal)} attempts={e.attempts}"
                + (" [started after the deadline]" if e.late else "")
                + (f" [{e.late_retries} retr{'y' if e.late_retries == 1 else 'ies'} after the deadline]"
                   if e.late_retries else "")
                + (" [failed while a retry was due]" if e.retry_skipped else "")
                + (" [in flight]" if e.outcome is None and not e.abandoned else "")
                + (" [abandoned]" if e.abandoned else "")
                for e in s.executions))
        elif f == "aborted_answer":
            x = s.aborted_answer
            out.append("aborted_answer: " + ("null" if x is None else f"{x.index}:{_c(x.call_id)} {x.code}"))
        elif f == "held":
            out.append("held: " + ("{}" if not s.held else "; ".join(
                f"{i}:{_c(x.call_id)} {x.code or 'ok'}" for i, x in sorted(s.held.items()))))
        elif f == "bindings":
            out.append("bindings: " + "; ".join(f"{k}→{b.name}({b.key.split(chr(0), 1)[1]})"
                                                + (f" result {_c(b.success[0])}" if b.success else "")
                                                for k, b in s.bindings.items()))
        else:
            out.append(f"{f}: {_c(getattr(s, f))}")
    return out


def explain(lf: Lifted) -> str:
    spec = load_spec()
    effects = {e.id: e.doc for e in spec.effects}
    inv_doc = {i.id: i.doc for i in spec.invariants}
    rules = {r.id: r.title for r in _rules()}
    cfg = lf.config
    lines = [
        f"Counterexample — semantics {lf.semantics.name!r}, scope {lf.scope.name} ({cfg.label}): "
        f"{lf.calls} call(s), {len(lf.steps)} step(s).",
    ]
    if lf.semantics.overrides:
        lines.append(f"The variant replaces: {', '.join(lf.semantics.overrides)}.")
    if lf.semantics.doc and lf.semantics.name != "core":
        lines.append(f"  ({lf.semantics.doc})")
    lines.append(f"It breaks {', '.join(lf.violated)}.")
    if cfg.config.max_concurrency > 1:
        from .counterexample import schedule

        lines.append("Schedule: " + " · ".join(schedule(lf)))
    lines.append("")
    for st in lf.steps:
        t = st.transition
        group = spec.group(st.before.state, t.trigger)
        earlier = [x.id for x in group[: group.index(t)]] if t in group else []
        cited = ", ".join(f"{r} {rules[r]}" if r in rules else r for r in t.rules)
        lines.append(f"Step {st.index}: {t.id} {t.name}   {st.before.state} → {st.after.state}   [{cited}]")
        env = _environment(lf, st)
        if env:
            lines.append("  Let " + "; ".join(env) + ".")
        guard = f"{t.guard_label()} holds" if t.guard_label() else "it is the group's fallback (no guard)"
        why = f"  Then {t.id} fires on '{t.trigger}': {guard}"
        if earlier:
            labels = ", ".join(f"{x.id} {x.guard_label()}" for x in group[: group.index(t)])
            why += f"; the transitions before it in ({st.before.state}, {t.trigger}) are not enabled: {labels} (R0)"
        lines.append(why + ".")
        if t.code:
            lines.append(f"  The request is answered {t.code}: {core.CODE_TABLE[t.code][3]}")
        if t.effect:
            lines.append(f"  Effect {t.effect}: {effects.get(t.effect, '')}")
        for f in _facts(st):
            lines.append(f"  · {f}")
        if st.violated:
            reads = invariant_read_sets()
            for inv in st.violated:
                lines.append(f"  ✗ This state breaks {inv}: {inv_doc.get(inv, '')}")
                for ex in _state_excerpt(st.after.s, reads.get(inv, frozenset())):
                    lines.append(f"      {ex}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _rules() -> tuple[Any, ...]:
    from ..spec.loader import load_rules

    try:
        return load_rules()
    except Exception:  # SPEC.md missing or unreadable: cite ids only
        return ()
