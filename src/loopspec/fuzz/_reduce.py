"""Stage 4 of a campaign, reduction: a finding becomes a minimal case that fails in a fresh process.

The reducer is the project's own (delta debugging over the step data), and every candidate is
re-run against an implementation — never decided from the data alone:

1. :func:`minimize` deletes steps (large chunks first), calls, model rounds, script entries,
   argument keys and unused tools, and lowers budgets and limits, keeping a change whenever the
   candidate still fails with the same rule — on the campaign's live process (each ``batch.run`` /
   ``loop.run`` starts fresh by the protocol, so a live process is as good as a new one for a
   correct-in-that-respect implementation, and much faster);
2. :class:`Reducer` re-checks the result in a **fresh** process. A case that only fails after
   what the live process ran before is re-reduced with that history, in fresh processes; one that
   never reproduces is reported as P7 (nondeterministic, or state kept between runs). It then names what
   the reduced case shows: a late message of the step before, state carried over between runs (R5), a
   re-send without lookup (R43) rather than a mark not durable (R39).

Running a candidate is stage 2's work: the reducer is handed a :class:`Runs` (the campaign's live
implementation, :class:`loopspec.fuzz._run.Live`) and never imports that stage, nor any other.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..judge.verdict import Verdict
from ..spec.loader import load_rules
from ._model import Finding, ReplayResult, Stats, as_finding, cause_name, unreadable

__all__ = ["Reducer", "Runs", "candidates", "carried_over", "minimize", "not_reproduced", "step_candidates",
           "trim_unused"]

Json = Any

Check = Callable[[list[dict[str, Json]]], "Finding | None"]


class Runs(Protocol):
    """How the reducer runs a case (stage 2 provides it): steps in order, stopping at the first divergence."""

    def live(self, steps: Sequence[Mapping[str, Json]]) -> ReplayResult:
        """On the campaign's live implementation, which stays open after them."""
        ...

    def fresh(self, steps: Sequence[Mapping[str, Json]]) -> ReplayResult:
        """In a fresh implementation, without waiting for a late message after the last answer."""
        ...

    def replay(self, steps: Sequence[Mapping[str, Json]]) -> ReplayResult:
        """In a fresh implementation, as a saved case is replayed (waiting a moment for a late message)."""
        ...


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
    return out + _readable_candidates(calls)


def _readable_candidates(calls: Sequence[Json]) -> list[list[Json]]:
    """The calls with one unreadable id made plain (``c1``, ``c2``…, every call that carries it, so replays and
    conflicts keep their relation), or one unreadable string argument made ``a``: kept only while the case still
    fails with the same cause, so a character that is the cause stays."""
    out: list[list[Json]] = []
    ids = [c.get("id") for c in calls if isinstance(c, dict)]
    plain = [f"c{n}" for n in range(1, len(calls) + 2) if f"c{n}" not in ids]
    for cid in dict.fromkeys(i for i in ids if isinstance(i, str) and unreadable(i)):
        out.append([{**c, "id": plain[0]} if isinstance(c, dict) and c.get("id") == cid else c for c in calls])
    for j, c in enumerate(calls):
        if isinstance(c, dict) and isinstance(c.get("arguments"), dict):
            for key, v in c["arguments"].items():
                if isinstance(v, str) and unreadable(v):
                    out.append([*calls[:j], {**c, "arguments": {**c["arguments"], key: "a"}}, *calls[j + 1:]])
    return out


def step_candidates(step: dict[str, Json], *, keep_tools: bool = False) -> list[dict[str, Json]]:
    """Every step obtained from ``step`` by removing or lowering one part. ``keep_tools``: the tools are the
    implementation's declared registry, never dropped."""
    out: list[dict[str, Json]] = []
    cfg = step["config"]
    script = step.get("script", [])
    if step.get("kind") == "writes":
        return _writes_candidates(step, keep_tools=keep_tools)
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
    if not keep_tools:
        out += [{**step, "config": {**cfg, "tools": _drop(tools, j)}}
                for j in range(len(tools)) if tools[j]["name"] not in used and len(tools) > 1]
    for j, t in enumerate(tools):
        if t.get("maxExecutions") is not None:
            out.append({**step, "config": {**cfg, "tools": [*tools[:j], {k: v for k, v in t.items()
                                                                        if k != "maxExecutions"}, *tools[j + 1:]]}})
    if step.get("kind", "batch") == "loop":
        out += _fewer_requests(step)
    return out


def _fewer_requests(step: dict[str, Json]) -> list[dict[str, Json]]:
    """A loop step without one call and with ``maxRequests`` one lower, together: the request limit then still
    falls on the same request (every request counts, R19), which neither change alone keeps (a request-limit
    case needs as many requests before the limit as the limit allows). Tried after every single change."""
    limits = step["config"].get("limits", {})
    n = limits.get("maxRequests")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return []
    cfg = {**step["config"], "limits": {**limits, "maxRequests": n - 1}}
    model = step.get("model", [])
    return [{**step, "config": cfg, "model": [*model[:i], {"calls": _drop(reply["calls"], j)}, *model[i + 1:]]}
            for i, reply in enumerate(model) if isinstance(reply, dict) and isinstance(reply.get("calls"), list)
            for j in range(len(reply["calls"]))]


def _writes_candidates(step: dict[str, Json], *, keep_tools: bool = False) -> list[dict[str, Json]]:
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
    if not keep_tools:
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
    if v.violation is None or cause_name(v.violation.rule, v.violation.kind) != f.cause \
            or not all(judge_fn(t).ok for t in traces[:-1]):
        return f
    trimmed = dataclasses.replace(f, verdict=v, steps=steps, traces=traces)
    return trimmed if trimmed.size < f.size else f


def candidates(steps: list[dict[str, Json]], *, keep_tools: bool = False) -> list[list[dict[str, Json]]]:
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
        out += [[*steps[:i], new, *steps[i + 1:]] for new in step_candidates(step, keep_tools=keep_tools)]
    return out


def minimize(finding: Finding, check: Check, *, deadline: float, max_runs: int = 600,
             judge_fn: Callable[[dict[str, Json]], Verdict] | None = None,
             keep_tools: bool = False) -> tuple[Finding, int]:
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
        cands = candidates(best.steps, keep_tools=keep_tools)
        if writes and cands:
            start %= len(cands)
            cands = cands[start:] + cands[:start]
        for n, cand in enumerate(cands):
            if runs >= max_runs or time.monotonic() >= deadline:
                break
            runs += 1
            found = check(cand)
            if found is not None and found.cause == best.cause and found.size < best.size:
                best = trim(found)
                improved = True
                start = (start + n) % len(cands)
                break
    return best, runs


# --------------------------------------------------------------------------------------------
# The reduction of one finding
# --------------------------------------------------------------------------------------------


class Reducer:
    """Reduces each finding a campaign reports (see the module docstring). ``found``: the findings kept so far
    (a finding that does not reproduce is a symptom of an R5 state leak already reported)."""

    def __init__(self, runs: Runs, *, judge_fn: Callable[[dict[str, Json]], Verdict], mode: str,
                 shrink_seconds: float, stats: Stats, found: Mapping[str, Finding], keep_tools: bool = False) -> None:
        self.runs = runs
        self.keep_tools = keep_tools  # the tools are the implementation's declared registry: never dropped
        self.judge_fn = judge_fn
        self.mode = mode
        self.shrink_seconds = shrink_seconds
        self.stats = stats
        self.found = found

    def _live_check(self, cause: str) -> Check:
        def check(steps: list[dict[str, Json]]) -> Finding | None:
            self.stats.reduce_runs += 1
            return as_finding(self.runs.live(steps), steps, cause)

        return check

    def _fresh_check(self, cause: str) -> Check:
        def check(steps: list[dict[str, Json]]) -> Finding | None:
            self.stats.reduce_runs += 1
            return as_finding(self.runs.fresh(steps), steps, cause)  # re-checked with the grace (replay)

        return check

    def reduce(self, f: Finding) -> Finding:
        """Minimize on the live process, re-check in a fresh one (with the history that explains it
        when it needs one), then name what the reduced case shows: a late message of the step before,
        or state carried over between runs (R5). A writes finding is minimized first and re-checked
        after (:meth:`_live_first`), the usual way only when the reduced case does not reproduce."""
        deadline = time.monotonic() + self.shrink_seconds
        rule = f.cause  # a candidate is kept when it fails with the same cause (rule and kind)
        hang = f.rule == "P2"
        runs = 12 if hang else 600
        fresh = self._fresh_check(rule)

        def explained(rr: Any, steps: list[dict[str, Json]]) -> Finding | None:
            """A fresh run that fails differently because a step before answered, then sent more:
            that is the finding (P4 late-request, of the step it belongs to)."""
            other = as_finding(rr, steps)
            if other is not None and other.kind == "late-request":
                return dataclasses.replace(other, steps=other.steps[-1:], traces=other.traces[-1:], reproduced=True,
                                           shrunk=True)
            return None

        quick = self._live_first(f, deadline, runs) if self.mode == "writes" and not hang else None
        if quick is not None:
            return self._named(quick)
        self.stats.reduce_runs += 1
        rr_alone = self.runs.replay(f.steps)
        alone = as_finding(rr_alone, f.steps, rule)  # the example's own steps, in a fresh process
        if alone is None and (late := explained(rr_alone, f.steps)) is not None:
            return late
        if alone is None and any(c.startswith("R5-") for c in self.found):  # another symptom of the state leak already reported
            return not_reproduced(f)
        if alone is None:  # it needs what the live process ran before it (state kept across runs)
            steps = [*f.prefix, *f.steps]
            rr = self.runs.replay(steps) if f.prefix else None
            whole = as_finding(rr, steps, rule) if rr is not None else None
            if whole is None and rr is not None and (late := explained(rr, steps)) is not None:
                return late
            if whole is None:  # not even with its history: reported as it was seen (P7)
                return not_reproduced(f)
            small, _ = minimize(whole, fresh, deadline=deadline, max_runs=runs // 2,
                                    keep_tools=self.keep_tools)
            best = dataclasses.replace(small, reproduced=True)
        else:
            small, _ = minimize(alone, self._live_check(rule), deadline=deadline, max_runs=runs,
                                judge_fn=self.judge_fn, keep_tools=self.keep_tools)  # re-checked fresh below
            again = fresh(small.steps) if small is not alone else alone
            if again is None:  # the live process's state helped: reduce in fresh processes instead
                again, _ = minimize(alone, fresh, deadline=deadline, max_runs=runs // 2,
                                    keep_tools=self.keep_tools)
            best = dataclasses.replace(again, reproduced=True)
        return self._named(best)

    def _live_first(self, f: Finding, deadline: float, runs: int) -> Finding | None:
        """A writes finding (each run of it restarts processes, the costly part) minimized on the live process
        straight away, and the reduced case replayed in a fresh process as a case is replayed (with the grace
        for a late message): the replay of the whole example in a fresh process that :meth:`reduce` starts
        with is left out when the reduced case reproduces. None when it does not: then :meth:`reduce` takes
        its usual way (the example alone, its history, fresh processes)."""
        small, _ = minimize(f, self._live_check(f.cause), deadline=deadline, max_runs=runs, judge_fn=self.judge_fn,
                            keep_tools=self.keep_tools)
        self.stats.reduce_runs += 1
        again = as_finding(self.runs.replay(small.steps), small.steps, f.cause)
        return dataclasses.replace(again, reproduced=True) if again is not None else None

    def _named(self, best: Finding) -> Finding:
        """A reduced, reproduced finding, named by what it shows: a re-send without lookup (R43) rather than a
        mark not durable (R39), a late message of the step before, or state carried over between runs (R5)."""
        rule = best.rule
        best.shrunk = True
        if rule == "R39" and best.kind == "resent-after-restart":
            blind = self._without_restart(best)
            if blind is not None:
                return blind
        if len(best.steps) >= 2 and not rule.startswith("P"):
            late = as_finding(self.runs.replay([best.steps[-2]]), [best.steps[-2]])
            if late is not None and late.kind == "late-request":
                return dataclasses.replace(late, reproduced=True, shrunk=True)
            alone = self.runs.replay([best.steps[-1]])
            if alone.ok:
                return carried_over(best)
        return best

    def _without_restart(self, f: Finding) -> Finding | None:
        """A blind re-send after a restart (R39) has two possible causes: the dispatch mark was not durable
        before the send, or the implementation re-sends without a lookup whatever happened (R43). Tell them
        apart: the same step with each restart turned into a lost answer in the same process, and the cut
        call proposed once more at the end. If that re-sends blind too, the finding is R43 (PROTOCOL.md W4)."""
        step = f.steps[-1]
        cut = next((e.get("callId") for e in f.traces[-1].get("events", [])
                    if e.get("type") == "execute" and (e.get("outcome") or {}).get("status") == "restart"), None)
        again = next((c for c in step.get("calls", []) if c.get("id") == cut), None)
        if again is None:
            return None
        ids = {c.get("id") for c in step["calls"]}
        new_id = next(f"r{n}" for n in range(1, len(ids) + 2) if f"r{n}" not in ids)
        probe = {**step, "calls": [*step["calls"], {**again, "id": new_id}],
                 "script": [{"lose": e["restart"]} if isinstance(e, dict) and "restart" in e else e
                            for e in step.get("script", [])]}
        found = self._fresh_check("R43-blind-redispatch")([*f.steps[:-1], probe])
        if found is None:
            return None
        return dataclasses.replace(found, reproduced=True, shrunk=True)


def not_reproduced(f: Finding) -> Finding:
    """A divergence seen on the live process that a fresh process does not reproduce, even after the
    earlier runs kept as its history: P7 (state carried across runs from further back, or
    nondeterminism), with what was seen."""
    v = f.verdict.violation
    assert v is not None
    note = (f"\nReplayed in a fresh process, even after the earlier runs the campaign kept ({len(f.prefix)} "
            f"step(s)), this case does not diverge (P7): the implementation keeps state across runs from "
            f"further back, or is nondeterministic. Seen: {v.rule} {v.kind}.")
    p7 = dataclasses.replace(v, rule="P7", kind="not-reproduced", explanation=v.explanation + note, invariant=None,
                             checked_by=())
    return Finding(dataclasses.replace(f.verdict, violation=p7), f.steps, f.traces, False, False)


def carried_over(f: Finding) -> Finding:
    """A finding whose failing step alone, in a fresh process, matches the spec: state kept from the
    earlier steps in the same process. One root cause, reported as R5 (each run starts fresh)."""
    v = f.verdict.violation
    assert v is not None
    note = (f"\nThe failing step alone, in a fresh process, matches the spec: the divergence comes from state "
            f"the implementation kept from the earlier step(s) in the same process. Each "
            f"{'batch.run' if f.steps[-1].get('kind', 'batch') == 'batch' else 'loop.run'} starts fresh: "
            f"id bindings and stored results last for their batch or run (R5), budgets and counts too "
            f"(R9, R12). Symptom: {v.rule} {v.kind}.")
    merged = dataclasses.replace(v, rule="R5", kind="state-carried-over", explanation=v.explanation + note,
                                 invariant="INV-BINDING-STABLE", checked_by=_checked_by("R5"))
    return Finding(dataclasses.replace(f.verdict, violation=merged), f.steps, f.traces, f.reproduced, f.shrunk)


def _checked_by(rule_id: str) -> tuple[str, ...]:
    try:
        return next((r.invariants for r in load_rules() if r.id == rule_id), ())
    except Exception:
        return ()
