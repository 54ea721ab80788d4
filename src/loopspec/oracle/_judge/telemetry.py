"""What a telemetry run can witness, decided from what its spans record: which rules its verdict verifies, which
it takes as assumed, which it cannot see — each with the reason, in the run's own terms (model outputs recorded
or not, a later request carrying the results or not, executions recorded or not, the run's start seen or not).
A rule is listed as verified only when the spans show what it needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ...core import rules as core
from .._items import TelemetryRun
from .._records import Judged
from .._tables import Tables
from .conversation import check_items

#: Why the rules no GenAI trace records are not witnessed.
NOT_IN_A_TRACE: Final = ("budgets, limits, modes, identity, outcomes and the concurrency configuration are not in a "
                         "GenAI trace")

ERROR_BY_CONTENT: Final = ("no execution is recorded: whether a result is an error is read from its content (a "
                           "loopspec error object), and whether a call ran at all is not seen")


def run_checks(recorded: Sequence[str], tools: Mapping[str, core.ToolSchema | None] | None,
               schemas: Mapping[str, core.ToolSchema | None], all_rules: Sequence[str],
               facts: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run's checks: ``verified``, ``assumed``, ``notWitnessed`` (rule ids) and ``why`` (rule -> reason; the
    rules without one of their own are not in a GenAI trace: ``why["others"]``)."""
    f = dict(facts or {})
    msgs = "messages" in recorded
    execs = "executions" in recorded
    n_calls = f.get("modelCalls", 0)
    out_missing = f.get("outputsMissing", 0)
    proposals = f.get("proposals", 0)
    answered = f.get("answered", 0)
    n_exec = f.get("executions", 0)
    ids = f.get("executionIds", 0)
    why: dict[str, str] = {}
    verified: list[str] = []
    assumed: list[str] = []
    unseen: dict[str, str] = {}

    def put(rules: Sequence[str], where: list[str] | None, reason: str) -> None:
        for r in rules:
            if where is None:
                unseen[r] = reason
            else:
                where.append(r)
            why[r] = reason

    if not msgs:
        put(["R2", "R6", "R7", "R11", "R12", "R28", "R32", "R3", "R4"], None,
            "no message content is recorded (content capture off, or model-call spans that hold none): neither the "
            "calls the model proposed nor the "
            "results sent back are in the spans")
    else:
        outputs_known = out_missing == 0
        props = (f"{out_missing} of {n_calls} model call(s) have no recorded output: the calls they proposed are "
                 "unknown")
        if answered and outputs_known:
            tail = "" if answered == proposals else (f"; {proposals - answered} later proposal(s) are followed by "
                                                     "no request of this run")
            h_ans = f.get("historyAnswered", 0)
            src = "" if not h_ans else (
                " (from history: all of them are earlier rounds the first request carries, judged as a transcript)"
                if h_ans == answered else f" ({h_ans} from history — earlier rounds the first request carries, judged "
                f"as a transcript — and {answered - h_ans} from spans)")
            put(["R11"], verified, f"{answered} proposal(s) are followed by a later request of this run, whose input "
                                   f"shows what was sent back for them{src}{tail}")
        else:
            unrecorded = f.get("unrecordedInputs", 0)
            put(["R11"], None, props if not outputs_known else (
                (f"the input of the model call after each proposal is not recorded ({unrecorded} model call(s) "
                 "without input messages): what was sent back for the calls is unknown") if unrecorded
                else "no proposal of this run is followed by a request carrying its results" if proposals
                else "no model call proposed a tool call"))
        if f.get("final"):
            put(["R28"], verified, "the final answer is recorded, and no call or execution of this run comes after it")
        else:
            put(["R28"], None, "no final answer is recorded" + ("" if outputs_known else f" ({props})"))
        if not outputs_known:
            put(["R2", "R6", "R7", "R12", "R32", "R3", "R4"], None, props)
        elif not proposals:
            put(["R2", "R6", "R7", "R12", "R32", "R3", "R4"], None, "no model call proposed a tool call")
        elif execs:
            how = "by call id" if ids == n_exec else (
                f"by call id for {ids} of {n_exec}, by tool name and arguments for the others (their spans record "
                "no call id)" if ids else "by tool name and arguments (the tool spans record no call id)")
            chunked = f.get("chunkCalls", 0)
            where = "" if not chunked else (f" (for {chunked} model call(s), in its recorded output chunks: its "
                                            "output messages hold no tool call)")
            put(["R2", "R6", "R7", "R12"], verified,
                f"every proposed call is in the model's recorded output{where}, and every execution is a tool span, "
                f"matched to its call {how}")
            if answered:
                put(["R32"], verified, "the answers' order is read from the requests, the completion order from "
                                       "the tool spans' times")
            else:
                put(["R32"], None, "no request after an execution carries its results")
            if tools is not None:
                put(["R3"], verified, "the tools offered to the model are recorded (gen_ai.tool.definitions)")
            else:
                put(["R3"], None, "the tools offered to the model are not recorded")
            known = dict(schemas) if tools is None else dict(tools)
            if known and all(v is not None for v in known.values()):
                put(["R4"], verified, "every tool's input schema is recorded and in R4's subset")
            else:
                put(["R4"], None, "the tools' input schemas are not recorded (or not in R4's subset)")
        else:
            if answered:
                put(["R2", "R6", "R7"], assumed, ERROR_BY_CONTENT)
            else:
                put(["R2", "R6", "R7"], None, "no execution is recorded and no request carries the results")
            put(["R12", "R32", "R3", "R4"], None, "no tool execution is recorded (no tool spans)")
    if execs and ids:
        put(["R33"], verified, "executions of one call id never overlap: the tool spans' times")
    elif execs:
        put(["R33"], None, "the tool spans record no call id")
    h_props = f.get("historyProposals", 0)
    source = "history" if proposals and h_props == proposals else "spans and history" if h_props else "spans"
    evidence = {r: ("spans" if r in ("R28", "R12", "R33", "R3", "R4") else source)
                for r in (*verified, *assumed)}
    order = {r: k for k, r in enumerate(all_rules)}
    verified.sort(key=lambda r: order.get(r, 999))
    assumed.sort(key=lambda r: order.get(r, 999))
    not_w = [r for r in all_rules if r not in verified and r not in assumed and r != "R0"]
    why = {r: why[r] for r in sorted(why, key=lambda r: order.get(r, 999))}
    why["others"] = NOT_IN_A_TRACE
    out: dict[str, Any] = {"verified": verified, "assumed": assumed, "notWitnessed": not_w, "why": why}
    if h_props:  # a run that starts mid-conversation: which rules rest on the history its first request carries
        out["from"] = {r: evidence[r] for r in sorted(evidence, key=lambda r: order.get(r, 999))}
    return out


def judge_run(r: TelemetryRun, fmt: str, t: Tables) -> Judged:
    """The verdict on a telemetry run (read: ``r.items`` is not None): its conversation and executions walked
    by the conversation judge, with what its spans record deciding the rules it witnesses."""
    assert r.items is not None
    tools = r.tools if r.tools is not None else (r.schemas or None)
    tv = check_items(fmt, r.id, r.items, r.spans, t.rules, allow_incomplete=True, tools=tools,
                     allow_list=r.tools is not None)
    checks = run_checks(r.recorded, r.tools, r.schemas, t.rule_ids, r.facts)
    summ: dict[str, Any] = {"calls": tv.calls, "results": tv.results, "executions": tv.executions}
    if r.agent is not None:
        summ["agent"] = r.agent
    summ["recorded"] = r.recorded
    if r.stitched:
        summ["stitched"] = r.stitched
    if r.notes:
        summ["notes"] = r.notes
    if tv.violation is None:
        return Judged(r.id, fmt, "conforms", r.spans, r.lines, summ, checks)
    rule = tv.violation.rule
    if rule not in checks["verified"]:  # a violation the spans show is witnessed, whatever else they lack
        checks["verified"] = sorted([*checks["verified"], rule], key=lambda x: t.rule_ids.index(x)
                                    if x in t.rule_ids else 999)
        checks["assumed"] = [x for x in checks["assumed"] if x != rule]
        checks["notWitnessed"] = [x for x in checks["notWitnessed"] if x != rule]
        hist = r.facts.get("history")
        in_history = (isinstance(hist, dict) and tv.line == hist.get("line") and isinstance(tv.path, str)
                      and tv.path.startswith(hist.get("path", "\0")))
        checks["why"][rule] = ("the violation below is in the history the run's first request carries (earlier "
                               "rounds, judged as a transcript)" if in_history
                               else "the violation below is in the recorded spans")
        if "from" in checks:
            checks["from"][rule] = "history" if in_history else "spans"
    return Judged(r.id, fmt, "violates", r.spans, r.lines, summ, checks, tv.violation,
                  {"event": tv.item_pos, "path": tv.path, "line": tv.line}, {"events": tv.item_pos, "steps": tv.steps})
