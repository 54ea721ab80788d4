"""Reduction: a finding becomes a minimal case that fails in a fresh process.

The reducer is the project's own (delta debugging over the step data), and every candidate is
re-run against a live implementation — never decided from the data alone:

1. :func:`minimize` deletes steps (large chunks first), calls, model rounds, script entries,
   argument keys and unused tools, and lowers budgets and limits, keeping a change whenever the
   candidate still fails with the same rule — on the campaign's live process (each ``batch.run`` /
   ``loop.run`` starts fresh by the protocol, so a live process is as good as a new one for a
   correct-in-that-respect implementation, and much faster);
2. :func:`replay_case` re-checks the result in a **fresh** process. A case that only fails after
   what the live process ran before is re-reduced with that history, in fresh processes; one that
   never reproduces is reported as P7 (nondeterministic, or state kept between runs).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..judge.trace import judge
from ..judge.verdict import Verdict
from ._adapter import Impl, ImplFactory
from ._harness import LATE_GRACE, amend_late, failed_start_trace, late_message, run_step, trace_failed
from ._model import Finding, ReplayResult
from ._writes_harness import run_writes_step

__all__ = ["candidates", "minimize", "replay_case", "step_candidates"]

Json = Any

Check = Callable[[list[dict[str, Json]]], "Finding | None"]


# --------------------------------------------------------------------------------------------
# Running a case
# --------------------------------------------------------------------------------------------


def run_steps(steps: Sequence[Mapping[str, Json]], impl_for: Callable[[], Impl], release: Callable[[Impl], None],
              *, profile: str | None = None, judge_fn: Callable[..., Verdict] = judge,
              grace: float = LATE_GRACE, keep: bool = False, between: float = 0.002) -> ReplayResult:
    """Run ``steps`` in order on the implementation ``impl_for()`` gives (again after a protocol
    failure, after ``release`` of the broken one), stop at the first divergence. A message the
    implementation sends after an answer is that step's finding (waiting ``grace`` seconds after
    the last step's answer, ``between`` seconds before each next step: a message sent right after
    an answer can take that long to arrive). ``keep``: a live implementation stays open at the end."""
    verdicts: list[Verdict] = []
    traces: list[dict[str, Json]] = []
    impl: Impl | None = None
    try:
        for n, step in enumerate(steps):
            if impl is None:
                try:
                    impl = impl_for()
                except Exception as exc:
                    from ..protocol.rpc import ProtocolFailure

                    f = exc if isinstance(exc, ProtocolFailure) else ProtocolFailure("P1", "exited", str(exc))
                    trace = failed_start_trace(step, f)
                    traces.append(trace)
                    verdicts.append(judge_fn(trace, profile=profile))
                    break
            elif traces and traces[-1]["events"][-1].get("type") == "response":
                late = late_message(impl, f"{traces[-1]['kind']}.run", wait=between)
                if late is not None:  # the step before answered, then sent more: that step's finding
                    amend_late(traces[-1], late)
                    verdicts[-1] = judge_fn(traces[-1], profile=profile)
                    break
            if step.get("kind") == "writes":  # may restart the implementation (PROTOCOL.md W2)
                trace, after = run_writes_step(impl, step, impl_for, release)
                if after is None:
                    traces.append(trace)
                    verdicts.append(judge_fn(trace, profile=profile))
                    break
                impl = after
            else:
                trace = run_step(impl, step)
            if n == len(steps) - 1 and grace and trace["events"][-1].get("type") == "response":
                late = late_message(impl, f"{trace['kind']}.run", wait=grace)
                if late is not None:
                    amend_late(trace, late)
            traces.append(trace)
            failed = trace_failed(trace)
            v = judge_fn(trace, profile=profile)
            verdicts.append(v)
            if failed:
                release(impl)
                impl = None
            if not v.ok:
                break
    finally:
        if impl is not None and (not keep or not getattr(impl, "healthy", True)):
            release(impl)
    return ReplayResult(verdicts, traces)


def replay_case(case: Mapping[str, Json], factory: ImplFactory, *, profile: str | None = None) -> ReplayResult:
    """Run the steps of ``case`` in order against a fresh implementation; stop at the first divergence
    (judged under ``profile``, default: the case's own, else the strict spec)."""
    if profile is None and isinstance(case.get("profile"), str) and case["profile"] != "strict":
        profile = case["profile"]
    steps: Sequence[Mapping[str, Json]] = case["steps"]
    mode = steps[0].get("kind", "batch") if steps else "batch"
    return run_steps(steps, lambda: factory.open(mode), factory.release, profile=profile)


def as_finding(rr: ReplayResult, steps: Sequence[Mapping[str, Json]], rule: str | None = None) -> Finding | None:
    """The divergence of a run (with the steps up to it), if it is of ``rule`` (any rule when None)."""
    v = rr.verdict
    if v is None or v.violation is None or (rule is not None and v.violation.rule != rule):
        return None
    n = len(rr.verdicts)
    return Finding(v, [dict(s) for s in steps[:n]], rr.traces[:n])


# --------------------------------------------------------------------------------------------
# Candidates: every way to make a case smaller by one part
# --------------------------------------------------------------------------------------------


def _drop(seq: Sequence[Any], j: int) -> list[Any]:
    return [*seq[:j], *seq[j + 1:]]


def _argument_candidates(calls: Sequence[Json]) -> list[list[Json]]:
    out = []
    for j, c in enumerate(calls):
        if isinstance(c, dict) and isinstance(c.get("arguments"), dict):
            for key in c["arguments"]:
                args = {k: v for k, v in c["arguments"].items() if k != key}
                out.append([*calls[:j], {**c, "arguments": args}, *calls[j + 1:]])
    return out


def step_candidates(step: dict[str, Json]) -> list[dict[str, Json]]:
    """Every step obtained from ``step`` by removing or lowering one part."""
    out: list[dict[str, Json]] = []
    cfg = step["config"]
    script = step.get("script", [])
    if step.get("kind") == "writes":
        return _writes_candidates(step)
    if step.get("kind", "batch") == "loop":
        model = step.get("model", [])
        out += [{**step, "model": _drop(model, i)} for i in range(len(model))]
        for i, reply in enumerate(model):
            calls = reply.get("calls") if isinstance(reply, dict) else None
            if isinstance(calls, list):
                for j in range(len(calls)):
                    out.append({**step, "model": [*model[:i], {"calls": _drop(calls, j)}, *model[i + 1:]]})
                for new in _argument_candidates(calls):
                    out.append({**step, "model": [*model[:i], {"calls": new}, *model[i + 1:]]})
        limits = cfg.get("limits", {})
        for key, value in limits.items():
            if value is not None and key != "maxRetries":
                out.append({**step, "config": {**cfg, "limits": {**limits, key: None}}})
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                out.append({**step, "config": {**cfg, "limits": {**limits, key: value - 1}}})
        used = {c.get("name") for r in model if isinstance(r, dict) and isinstance(r.get("calls"), list)
                for c in r["calls"] if isinstance(c, dict)}
    else:
        calls = step.get("calls", [])
        out += [{**step, "calls": _drop(calls, j)} for j in range(len(calls))]
        out += [{**step, "calls": new} for new in _argument_candidates(calls)]
        budget = cfg.get("budget")
        if isinstance(budget, int) and not isinstance(budget, bool) and budget > 0:
            out.append({**step, "config": {**cfg, "budget": budget - 1}})
        used = {c.get("name") for c in calls if isinstance(c, dict)}
        sched = step.get("schedule")
        if isinstance(sched, list) and sched:  # towards start order (PROTOCOL.md C4)
            out.append({**step, "schedule": sched[:-1]})
            out += [{**step, "schedule": [*sched[:j], 0, *sched[j + 1:]]} for j in range(len(sched)) if sched[j]]
        conc = cfg.get("concurrency")
        if isinstance(conc, dict) and isinstance(conc.get("maxConcurrency"), int) and conc["maxConcurrency"] > 2:
            out.append({**step, "config": {**cfg, "concurrency": {**conc,
                                                                  "maxConcurrency": conc["maxConcurrency"] - 1}}})
    out += [{**step, "script": _drop(script, j)} for j in range(len(script))]
    tools = cfg["tools"]
    out += [{**step, "config": {**cfg, "tools": _drop(tools, j)}}
            for j in range(len(tools)) if tools[j]["name"] not in used and len(tools) > 1]
    for j, t in enumerate(tools):
        if t.get("maxExecutions") is not None:
            out.append({**step, "config": {**cfg, "tools": [*tools[:j], {k: v for k, v in t.items()
                                                                        if k != "maxExecutions"}, *tools[j + 1:]]}})
    return out


def _writes_candidates(step: dict[str, Json]) -> list[dict[str, Json]]:
    """A writes step made smaller by one part: a call, a script entry, an outage, a crash at a lookup, the
    budget, an unused tool; a restart turned into a lost answer (PROTOCOL.md W5). Calls keep their key
    arguments."""
    cfg = step["config"]
    calls = step.get("calls", [])
    script = step.get("script", [])
    outages = step.get("outages", [])
    out = [{**step, "calls": new} for new in _chunk_drops(calls)]  # halves first: most cases need 1-2 calls
    out += [{**step, "calls": _drop(calls, j)} for j in range(len(calls))]
    out += [{**step, "script": new} for new in _chunk_drops(script)]
    out += [{**step, "script": _drop(script, j)} for j in range(len(script))]
    out += [{**step, "outages": _drop(outages, j)} for j in range(len(outages))]
    crashes = step.get("crashes", [])
    out += [{**step, "crashes": _drop(crashes, j)} for j in range(len(crashes))]
    out += [{**step, "script": [*script[:j], {"lose": e["restart"]}, *script[j + 1:]]}
            for j, e in enumerate(script) if isinstance(e, dict) and "restart" in e]
    budget = cfg.get("budget")
    if isinstance(budget, int) and not isinstance(budget, bool) and budget > 0:
        if budget // 2 < budget - 1:  # halved first: a budget comes down in log steps, each a run
            out.append({**step, "config": {**cfg, "budget": budget // 2}})
        out.append({**step, "config": {**cfg, "budget": budget - 1}})
    used = {c.get("name") for c in calls if isinstance(c, dict)}
    tools = cfg["tools"]
    out += [{**step, "config": {**cfg, "tools": _drop(tools, j)}}
            for j in range(len(tools)) if tools[j]["name"] not in used and len(tools) > 1]
    return out


def _chunk_drops(seq: Sequence[Any]) -> list[list[Any]]:
    """``seq`` without one chunk of at least two entries: halves, then quarters, ... (ddmin)."""
    out = []
    size = len(seq) // 2
    while size >= 2:
        out += [[*seq[:i], *seq[i + size:]] for i in range(0, len(seq), size) if len(seq) - i >= 2]
        size //= 2
    return out


def trim_unused(f: Finding, judge_fn: Callable[[dict[str, Json]], Verdict]) -> Finding:
    """``f`` without the parts of its writes steps the run never reached: script entries past the last
    dispatch, crashes and outages past the last lookup (PROTOCOL.md W2, W3). The harness reads them by
    index, so the same run gives the same trace but for the environment it records; the trace is re-judged
    (no process runs) and the trimmed finding kept only if it fails with the same rule. The case is still
    re-checked in a fresh process like any reduced case."""
    steps, traces = [dict(s) for s in f.steps], [dict(t) for t in f.traces]
    changed = False
    for st, tr in zip(steps, traces, strict=False):
        if st.get("kind") != "writes" or not isinstance(tr.get("events"), list):
            continue
        evs = tr["events"]
        if not evs or not isinstance(evs[-1], dict) or evs[-1].get("type") != "response":
            continue  # a run cut short (protocol failure, failed start): leave it to the runs
        k = sum(1 for e in evs if isinstance(e, dict) and e.get("type") == "execute")
        n = sum(1 for e in evs if isinstance(e, dict) and e.get("type") == "lookup")
        script, outages, crashes = st.get("script", []), st.get("outages", []), st.get("crashes")
        if not (isinstance(script, list) and isinstance(outages, list) and isinstance(crashes, list | None)):
            continue
        new_out = [x for x in outages if not (isinstance(x, int) and x > n)]
        new_cr = [x for x in crashes or [] if not (isinstance(x, int) and x > n)]
        if len(script) <= k and new_out == outages and new_cr == (crashes or []):
            continue
        changed = True
        st["script"] = script[:k]
        st["outages"] = new_out
        if crashes is not None:
            st["crashes"] = new_cr
        env: dict[str, Json] = {"outages": list(new_out)}
        if new_cr:
            env["crashes"] = list(new_cr)
        tr["environment"] = env  # as the harness records a step's (run_writes_step)
    if not changed:
        return f
    v = judge_fn(traces[-1])
    if v.violation is None or v.violation.rule != f.rule or not all(judge_fn(t).ok for t in traces[:-1]):
        return f
    trimmed = dataclasses.replace(f, verdict=v, steps=steps, traces=traces)
    return trimmed if trimmed.size < f.size else f


def candidates(steps: list[dict[str, Json]]) -> list[list[dict[str, Json]]]:
    """Every case obtained by removing one part of ``steps``: the last step alone first, then
    chunks of steps (ddmin: a long history shrinks in logarithmic time), single steps, then the
    parts of each step."""
    out: list[list[dict[str, Json]]] = []
    if len(steps) > 1:
        out.append(steps[-1:])
    size = len(steps) // 2
    while size >= 2:
        out += [steps[:i] + steps[i + size:] for i in range(0, len(steps), size)]
        size //= 2
    if len(steps) > 1:
        out += [_drop(steps, i) for i in range(len(steps))]
    for i, step in enumerate(steps):
        out += [[*steps[:i], new, *steps[i + 1:]] for new in step_candidates(step)]
    return out


def minimize(finding: Finding, check: Check, *, deadline: float, max_runs: int = 600,
             judge_fn: Callable[[dict[str, Json]], Verdict] | None = None) -> tuple[Finding, int]:
    """Greedy delta debugging: take the first candidate that is smaller and still fails with the
    same rule (as ``check`` says, running it), until no candidate is, the deadline passes or
    ``max_runs`` runs were made. Returns the smallest finding and the number of runs.

    A case of writes steps (each candidate run may restart the implementation, a new process: the
    costly part) is reduced in passes that go on from the candidate taken instead of starting over, so
    a candidate that failed to reproduce is not run again before the others had their turn; it ends
    after a whole pass takes none, so the result is as minimal as before. With ``judge_fn``, what a
    writes step's run never reached is dropped without a run (:func:`trim_unused`)."""
    writes = bool(finding.steps) and all(s.get("kind") == "writes" for s in finding.steps)
    trim = (lambda f: trim_unused(f, judge_fn)) if writes and judge_fn is not None else (lambda f: f)
    best = trim(finding)
    runs = 0
    start = 0
    improved = True
    while improved and runs < max_runs and time.monotonic() < deadline:
        improved = False
        cands = candidates(best.steps)
        if writes and cands:
            start %= len(cands)
            cands = cands[start:] + cands[:start]
        for n, cand in enumerate(cands):
            if runs >= max_runs or time.monotonic() >= deadline:
                break
            runs += 1
            found = check(cand)
            if found is not None and found.rule == best.rule and found.size < best.size:
                best = trim(found)
                improved = True
                start = (start + n) % len(cands)
                break
    return best, runs
