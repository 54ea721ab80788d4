"""The "Let … Then …" explanation of a ledger violation, in the judge's style.

*Let* states the run's configuration (the judge's own description of a loop configuration) and the
calls of the round in which it broke; then every conforming step (the last ones of a long run), each
with the spec transition it took and the guard conditions that allowed it — read from the spec: the
earlier transitions of the same group did not fire, the chosen one's guards held — marking the
conditions taken as the ledger reports them; *Then* what the spec does next and what the ledger
shows instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...support.text import compact
from .._divergence import Divergence
from .._tables import Tables
from .ledger import RunChecker, StepRecord

#: Guards whose value the ledger reports rather than the oracle recomputing it (see the Checks).
_ASSUMED_GUARDS = {"arguments_valid": "R4", "authorized": "R24"}


def _cond(g: str, want: bool) -> str:
    return g if want else f"not {g}"


def reason_text(t: Tables, tid: str, assumed: set[str]) -> str:
    conds = t.reasons.get(tid, ())
    if not conds:
        return "unguarded"
    parts = []
    for g, want in conds:
        mark = "*" if g in assumed else ""
        parts.append(_cond(g, want) + mark)
    return ", ".join(parts)


def _args(item: object) -> str:
    if not isinstance(item, dict):
        return "<not an object>"
    if "arguments" in item:
        return compact(item["arguments"], 40)
    if item.get("argsObject"):
        return str(item.get("argsDigest"))
    return "<arguments not an object>"


def let_text(chk: RunChecker) -> str:
    what = "batch" if chk.config.batch else "run"
    head = f"Let a {what} {chk.run_id!r} with {chk.loop_config.describe()}"
    s = chk.s
    if not chk.items_round:
        tail = {"final": f" meet a model that gives its final answer in round {s.round}",
                "failed": f" meet a model that fails in round {s.round}"}.get(chk.reply, "")
        return head + tail + "."
    lines = [head + f" meet a model that proposes, in round {chk.items_round}:"]
    limit = 12
    for k, item in enumerate(chk.items[:limit]):
        if isinstance(item, dict) and item.get("item", "object") == "object":
            cid = item.get("callId")
            cid_s = repr(cid) if isinstance(cid, str) else f"<id {item.get('callIdType', 'missing')}>"
            tool = item.get("tool") if isinstance(item.get("tool"), str) else "<no tool name>"
            lines.append(f"  #{chk.items_first + k} {cid_s} {tool}({_args(item)})")
        else:
            lines.append(f"  #{chk.items_first + k} <not an object>")
    if len(chk.items) > limit:
        lines.append(f"  … ({len(chk.items) - limit} more calls)")
    if s.round > chk.items_round:
        later = {"final": f"and then, in round {s.round}, its final answer",
                 "failed": f"and then fails in round {s.round}"}.get(chk.reply, f"(the latest of {s.round} rounds)")
        lines.append(f"  {later}")
    return "\n".join(lines) + "."


def steps_text(t: Tables, chk: RunChecker, prefix: Sequence[StepRecord], omitted: int) -> list[str]:
    assumed: set[str] = set()
    if chk.checks.args_assumed:
        assumed.add("arguments_valid")
    if chk.checks.auth_assumed:
        assumed.add("authorized")
    out = []
    if omitted:
        out.append(f"  … {omitted} earlier step(s) conformed (not kept: the oracle keeps the last {len(prefix)})")
    for rec in prefix:
        tr = t.by_id[rec.tid]
        detail = f": {rec.detail}" if rec.detail else ""
        out.append(f"  {rec.number}. {tr.id} {tr.name} (line {rec.line}){detail} — {reason_text(t, rec.tid, assumed)}")
    return out


def explanation(t: Tables, chk: RunChecker, d: Divergence, prefix: Sequence[StepRecord], omitted: int) -> str:
    lines = [let_text(chk)]
    body = steps_text(t, chk, prefix, omitted)
    if body:
        lines.append("Each step the ledger took, and why the spec allowed it:")
        lines += body
    else:
        lines.append("No step conformed before this one.")
    lines.append(d.then)
    if any("*" in b for b in body):
        marks = []
        if chk.checks.args_assumed:
            marks.append("arguments_valid as the ledger reports it (arguments recorded only as digests, R4)")
        if chk.checks.auth_assumed:
            marks.append("authorized as the ledger reports it (the hook's answers are not recorded, R24)")
        lines.append("(* " + "; ".join(marks) + ")")
    return "\n".join(lines)
