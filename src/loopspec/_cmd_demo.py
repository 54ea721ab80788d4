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
    p.add_argument("--no-ledger", action="store_true", help="do not print the example run's ledger")
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


def loop_section(color: bool, show_ledger: bool) -> bool:
    from . import Limits, Turn, run_loop
    from ._core import violated_invariants
    from .examples.merchants import CANARY, MerchantDirectory

    print(paint("== 2. A whole run of the loop: the example merchant directory", "1", color))
    print("The principal is tenant-a (given by the application). A scripted model asks for its own")
    print("merchant, another tenant's, a missing one and a malformed id; then replays a call while the")
    print("store has a brief outage; then answers. Every spec invariant is checked after every step.\n")
    directory = MerchantDirectory()

    def call(cid: str, tool: str, **args: Any) -> dict[str, Any]:
        return {"id": cid, "name": tool, "arguments": args}

    script: list[Any] = [
        [call("c1", "get_merchant", merchantId="1001"), call("c2", "get_merchant", merchantId="1002"),
         call("c3", "get_merchant", merchantId="9999"), call("c4", "get_merchant", merchantId=1001)],
        [call("c1", "get_merchant", merchantId="1001"), call("c5", "list_merchants")],
        {"final": "Harbour Tea House (Lisbon) is open 09:00-18:00."},
    ]

    def model(turn: Turn) -> Any:
        if turn.round == 2:
            directory.unavailable = 1  # the next store query fails temporarily
        return script[turn.round - 1]

    broken: list[str] = []
    out = run_loop(model, tools=directory.tools(), authorize=directory.authorize, principal="tenant-a",
                   limits=Limits(max_rounds=4, max_executions=6, max_requests=12, max_retries=1), mode="continue",
                   observer=lambda st, t: broken.extend(f"{t.id}:{v}" for v in violated_invariants(st)))
    flat = [c for r in script if isinstance(r, list) for c in r]
    rows = []
    for a in out.answers:
        r = a.to_json(out.run_id)
        what = "replayed" if a.replayed else ("executed" if a.executed else "not executed")
        shown = compact(r["output"], 46) if r["status"] == "ok" else f"{r['code']} → {r['next_action']}"
        rows.append([str(a.index), str(a.round), _call(flat[a.index]), shown, what])
    print("  " + table(["#", "round", "call", "answer (what the model sees)", "tool"], rows).replace("\n", "\n  "))
    c = out.counters
    print(f"\n  status={out.status}/{out.stop_reason} coverage={out.coverage} final={out.final!r}")
    print(f"  model requests={c['modelRequests']} requests={c['requests']} executions={c['executed']} "
          f"attempts={c['attempts']} (store saw {directory.attempts}) replays={c['replays']} rejections={c['rejections']}")
    visible = __import__("json").dumps(out.to_json()) + out.ledger.to_ndjson()  # type: ignore[union-attr]
    print(f"  canary {CANARY!r} in anything visible: {CANARY in visible}; invariant violations: {len(broken)}")
    if show_ledger:
        print(paint("\n  The run ledger (NDJSON, one event per line; arguments only as digests):", "1", color))
        for line in out.ledger.to_ndjson().splitlines():  # type: ignore[union-attr]
            print("  " + (line if len(line) <= 160 else line[:159] + "…"))

    print(paint("\n== 3. Budgets stop a runaway model, not the prompt", "1", color))
    runaway = run_loop(lambda turn: [call("same", "get_merchant", merchantId="1001")], tools=MerchantDirectory().tools(),
                       principal="tenant-a", limits=Limits(max_rounds=None, max_requests=6))
    rc = runaway.counters
    print(f"  a model that re-sends the same call forever: status={runaway.status}/{runaway.stop_reason} "
          f"coverage={runaway.coverage}, {rc['requests']} requests, {rc['executed']} execution, {rc['replays']} replays\n")
    ok = (out.status == "COMPLETED" and not broken and CANARY not in visible
          and runaway.stop_reason == "MAX_REQUESTS" and runaway.executed == 1)
    return ok


def handle(args: argparse.Namespace) -> int:
    color = use_color()
    ok = batch_section(args.all, color)
    ok = loop_section(color, not args.no_ledger) and ok
    print(paint("demo: everything matches the spec" if ok else "demo: MISMATCH (see above)", "32" if ok else "31;1", color))
    return EXIT_OK if ok else EXIT_FOUND
