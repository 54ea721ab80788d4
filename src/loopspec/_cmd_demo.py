"""``loopspec demo``: the whole product at a glance, on the spec's own example cases."""

from __future__ import annotations

import argparse
from typing import Any

from ._text import compact, paint, table, use_color
from ._vectors import load_batch_vectors, run_batch_vector
from .cli import EXIT_FOUND, EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the reference engine over the spec's example cases and print the results")
    p.add_argument("--all", action="store_true", help="show every conformance case in detail, not only the seed cases")
    p.set_defaults(handler=handle)


def _call(c: Any) -> str:
    if not isinstance(c, dict):
        return compact(c, 30)
    cid = c.get("id", "∅")
    return f"{compact(cid, 12)} {c.get('name', '∅')}({compact(c.get('arguments', '∅'), 28)})"


def _result(r: dict[str, Any], replayed: bool) -> str:
    if r["status"] == "ok":
        return f"{compact(r['id'], 12)} → {compact(r['output'], 30)}" + (" (replay)" if replayed else "")
    return f"{compact(r['id'], 12)} → {r['code']}"


def batch_section(show_all: bool, color: bool) -> bool:
    doc = load_batch_vectors()
    results = [run_batch_vector(c, doc.get("toolsets", {})) for c in doc["cases"]]
    shown = [(c, r) for c, r in zip(doc["cases"], results, strict=True) if show_all or c["id"].startswith("seed-")]
    print(paint("== 1. One batch of tool calls: the seed cases of the spec", "1", color))
    print("Each case: the calls the model proposed, the execution budget and violation mode, what the")
    print("reference engine answered, how many executions it started, and whether that matches the")
    print("expectation written in spec/conformance/batch.json.\n")
    for case, res in shown:
        o = res.outcome
        verdict = paint("matches spec", "32", color) if res.passed else paint("DIFFERS FROM SPEC", "31;1", color)
        print(f"{paint(case['id'], '1', color)}  [{', '.join(case['rules'])}]  budget={case['budget']} mode={case['mode']}")
        print(f"  {case.get('doc', '')}")
        rows = []
        answers = {a.index: a for a in o.answers}
        for i, call in enumerate(case["calls"]):
            a = answers.get(i)
            if a is not None:
                out = _result(a.to_json(o.run_id), a.replayed)
                ran = "executed" if a.executed else ("replayed" if a.replayed else "not executed")
            elif o.aborted and o.aborted[0] == i:
                out = f"ABORT {o.aborted[1]}"
                ran = "executed" if i in o.executions else "not executed"
            else:
                out, ran = "(not reached)", "not executed"
            rows.append([str(i), _call(call), out, ran])
        print("  " + table(["#", "call", "answer", "tool"], rows).replace("\n", "\n  "))
        print(f"  executed={o.executed}  status={o.status}/{o.stop_reason}  coverage={o.coverage}  → {verdict}\n")
    passed = sum(r.passed for r in results)
    print(f"All {len(results)} batch conformance vectors: {passed} match the spec, {len(results) - passed} differ.\n")
    return passed == len(results)


def handle(args: argparse.Namespace) -> int:
    color = use_color()
    ok = batch_section(args.all, color)
    return EXIT_OK if ok else EXIT_FOUND
