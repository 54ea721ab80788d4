"""Judging a ``loopspec-trace/1`` document (what the fuzzer records): by the fuzzer's judge itself."""

from __future__ import annotations

from typing import Any

from ...judge.trace import judge
from ...judge.verdict import TraceError
from ...spec.loader import Spec
from .._records import Judged

Json = Any


def trace_id(trace: Json, number: int) -> str:
    """The trace's id, or its position in the file."""
    return trace["id"] if isinstance(trace, dict) and isinstance(trace.get("id"), str) else f"trace-{number}"


def trace_events(trace: Json) -> int:
    return len(trace["events"]) if isinstance(trace, dict) and isinstance(trace.get("events"), list) else 0


def judge_trace(trace: Json, number: int, line: int, spec: Spec) -> Judged:
    """The verdict on the trace at ``line`` (the ``number``-th of its file)."""
    rid = trace_id(trace, number)
    n_events = trace_events(trace)
    try:
        verdict = judge(trace, spec=spec)
    except TraceError as exc:
        return Judged(rid, "trace", "unreadable", n_events, (line, line), error=f"{exc.where}: {exc.message}",
                      error_line=line)
    v = verdict.violation
    if v is None:
        return Judged(rid, "trace", "conforms", n_events, (line, line), dict(verdict.expected), {})
    return Judged(rid, "trace", "violates", n_events, (line, line), dict(verdict.expected), {}, v,
                  {"event": None, "seq": None, "line": line, "observedTransition": None})
