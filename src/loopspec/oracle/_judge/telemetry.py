"""What a telemetry run can witness, decided from what its spans record (messages, executions, tool definitions
or schemas): which rules its verdict verifies, which it takes as assumed, which it cannot see.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...core import rules as core
from .._items import TelemetryRun
from .._records import Judged
from .._tables import Tables
from .conversation import check_items


def run_checks(recorded: Sequence[str], tools: Mapping[str, core.ToolSchema | None] | None,
               schemas: Mapping[str, core.ToolSchema | None], all_rules: Sequence[str]) -> dict[str, list[str]]:
    verified: list[str] = []
    assumed: list[str] = []
    msgs = "messages" in recorded
    execs = "executions" in recorded
    if msgs:
        verified += ["R11", "R28"]
        if execs:
            verified += ["R2", "R6", "R7", "R12", "R32"]  # answers in request order whatever the completion order
        else:
            assumed += ["R2", "R6", "R7"]
        if execs and tools is not None:
            verified.append("R3")
        known = dict(schemas) if tools is None else dict(tools)
        if execs and known and all(v is not None for v in known.values()):
            verified.append("R4")
    if execs:
        verified.append("R33")  # executions of one call id never overlap (their spans' times)
    order = {r: k for k, r in enumerate(all_rules)}
    verified.sort(key=lambda r: order.get(r, 999))
    assumed.sort(key=lambda r: order.get(r, 999))
    return {"verified": verified, "assumed": assumed,
            "notWitnessed": [r for r in all_rules if r not in verified and r not in assumed and r != "R0"]}




def judge_run(r: TelemetryRun, fmt: str, t: Tables) -> Judged:
    """The verdict on a telemetry run (read: ``r.items`` is not None): its conversation and executions walked
    by the conversation judge, with what its spans record deciding the rules it witnesses."""
    assert r.items is not None
    tools = r.tools if r.tools is not None else (r.schemas or None)
    tv = check_items(fmt, r.id, r.items, r.spans, t.rules, allow_incomplete=True, tools=tools,
                     allow_list=r.tools is not None)
    checks = run_checks(r.recorded, r.tools, r.schemas, t.rule_ids)
    summ: dict[str, Any] = {"calls": tv.calls, "results": tv.results, "executions": tv.executions}
    if r.agent is not None:
        summ["agent"] = r.agent
    summ["recorded"] = r.recorded
    if r.notes:
        summ["notes"] = r.notes
    if tv.violation is None:
        return Judged(r.id, fmt, "conforms", r.spans, r.lines, summ, checks)
    return Judged(r.id, fmt, "violates", r.spans, r.lines, summ, checks, tv.violation,
                  {"event": tv.item_pos, "path": tv.path, "line": tv.line}, {"events": tv.item_pos, "steps": tv.steps})
