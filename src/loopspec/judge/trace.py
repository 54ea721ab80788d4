"""Judge one ``loopspec-trace/1`` document of any kind (:func:`judge`): a batch, a loop or a writes trace
goes to its own judge, under the strict spec or a profile's documented choices (SPEC.md section 4). Under
the strict spec the view without the error answers' own texts is judged first, so that a message that
merely is not the code's fixed text (R15) is reported only when nothing else diverges.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.profiles import Params, params_for
from ..spec.loader import Profile, Spec
from .batch import judge_batch
from .verdict import TRACE_FORMAT, TraceError, Verdict, _need, default_spec, shows_canary

Json = Any

__all__ = ["judge"]

def _error_text_view(trace: Mapping[str, Json], keep_canary: bool) -> Mapping[str, Json]:
    """The trace with the message of every error answer set aside, except (``keep_canary``) a message that
    shows a tool exception's canary. Under a profile with ``error_text`` other than ``fixed`` (SPEC.md
    section 4) that is how the trace is judged: the framework's own text is accepted. Under the strict
    spec, :func:`judge` judges this view first, so that a message that is merely not the code's fixed text
    (R15) is reported only when nothing else diverges."""

    def answers(rs: Json) -> Json:
        if not isinstance(rs, list):
            return rs
        return [{k: v for k, v in r.items() if k != "message"}
                if isinstance(r, dict) and r.get("status") == "error" and "message" in r
                and not (keep_canary and shows_canary(r["message"])) else r for r in rs]

    events = trace.get("events")
    if not isinstance(events, list):
        return trace
    out = []
    for ev in events:
        if isinstance(ev, dict) and ev.get("type") == "model" and "results" in ev:
            ev = {**ev, "results": answers(ev["results"])}
        elif isinstance(ev, dict) and ev.get("type") == "response" and isinstance(ev.get("result"), dict) \
                and "results" in ev["result"]:  # (a rejection of the whole batch has none, R47)
            ev = {**ev, "result": {**ev["result"], "results": answers(ev["result"].get("results"))}}
        out.append(ev)
    return {**trace, "events": out}


def judge(trace: Json, *, spec: Spec | None = None, profile: Profile | str | None = None) -> Verdict:
    """Judge one trace (batch or loop), against the strict spec or under a profile's documented
    choices (SPEC.md section 4). Raises :class:`TraceError` for a malformed trace."""
    _need(isinstance(trace, dict), "trace", "must be an object")
    _need(trace.get("format") == TRACE_FORMAT, "trace.format", f"must be {TRACE_FORMAT!r}")
    kind = trace.get("kind")
    params = None
    if profile is not None and not (isinstance(profile, Params)):
        params = params_for(spec or default_spec(), profile)
    elif isinstance(profile, Params):
        params = profile
    if params is not None and params.strict(spec or default_spec()):
        params = None  # the strict default is exactly the core's reference
    if kind == "writes":  # protocol v1.2 (PROTOCOL.md section 8): section 6's judge; no profiles
        from .writes import judge_writes

        return judge_writes(trace, spec=spec)
    if kind not in ("batch", "loop"):
        raise TraceError("trace.kind", "must be \"batch\", \"loop\" or \"writes\"")
    if kind == "batch":
        run = judge_batch
    else:
        from .loop import judge_loop as run
    if params is not None and params["error_text"] != "fixed":
        return run(_error_text_view(trace, params["error_text"] != "exception-text"), spec=spec, params=params)
    view = _error_text_view(trace, True)
    if view == trace:
        return run(trace, spec=spec, params=params)
    v = run(view, spec=spec, params=params)
    return run(trace, spec=spec, params=params) if v.ok else v
