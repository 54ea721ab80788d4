"""The fast model: compact states, stepped by the real core on a window, memoised by local view.

A compact state (:mod:`loopspec.checker.state`) is ``(L, records)``. A step can only involve one
call id: the current request's (while it is being decided) or the id of the call the model
proposes next (at ``decided`` and ``returned``). So a step's result depends on ``L`` and that one
record — its *local view* — and not on the other records, which it leaves untouched (the window
enforces this: see :mod:`loopspec.checker.window`). The fast model therefore

1. materialises the local view as a windowed RunState,
2. enumerates every successor with the real :func:`~loopspec.checker.semantics.step` (the
   core's guards and effect functions, or a variant's),
3. reads each successor back into a compact local view, updating the ghosts incrementally,
4. decides each invariant of loop.toml that reads a field the step changed (found in the core's
   source: :mod:`loopspec.checker.readsets`) with the core's own invariant function, evaluated on
   a small *synthetic* RunState: the window's items after a placeholder past built from the
   ghosts so that the verdict equals the verdict on the real history (each construction is argued
   in :meth:`FastModel._verdicts`, and tested against the reference model, which evaluates every
   invariant on whole histories),

and caches the result by local view. A local view at a machine state leaves out the counters and
limits the core does not read there (``VIEWS``): the step at ``returned`` does not read the
execution budget, so runs with budgets 1, 2 and 3 share it. What a view leaves out is *poisoned*
in the materialised state: any use of it raises ``NonLocal``, and that local view falls back to
the whole ``L``. The views are therefore a speed hint, never a soundness assumption.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from ..core import rules as core
from ..core.rules import Answer, Binding, Execution, Limits, Outcome, Request, RunConfig, RunState
from .readsets import ALL_FIELDS, invariant_read_sets
from .semantics import CORE, FINAL_TEXT, UNRECONCILED_KEY, Env, Machine, Semantics, tables, tool_output
from .state import (
    FIELDS,
    IDX,
    SPEC_OF_FIELDS,
    TERMINAL,
    Encoder,
    Ghosts,
    NonLocal,
    _order,
    answer_live,
    canonical,
    is_limit,
    project,
    records,
    request_live,
    swap_values,
)
from .universe import INVALID_VALUE, NOT_AN_OBJECT, Universe
from .window import AtLeast, Bindings, LowerBounds, Poison, PoisonDict, Sealed, Tail, is_poison

__all__ = ["VIEWS", "FastModel"]

Json = Any
Choice = tuple[tuple[str, str], ...]
Label = tuple[str | None, str | None]
Result = tuple[Choice, str, Json, Json, tuple[str, ...], Label]

_I = IDX


class _Hole:
    """A field of L a local view left out: the successor keeps the state's own value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "HOLE"


HOLE = _Hole()
_FALLBACK: list[Result] = []  # marks a local view that is not enough: use the whole L

#: L fields a view may leave out, and the configuration attributes it may leave out.
OPTIONAL_FIELDS = ("nexec", "per_tool", "gtool", "mreq", "round", "retries", "gretries")
CONFIG_ATTRS = ("batch", "principal", "mode", "on_limit", "tool_limits", "max_rounds", "max_executions",
                "max_tool_executions", "max_requests", "max_retries", "deadline")
_LIMIT_ATTRS = ("max_rounds", "max_executions", "max_tool_executions", "max_requests", "max_retries", "deadline")

#: Per machine state: the optional L fields and the configuration attributes its local view keeps
#: (what the core's step there and the invariants it can affect read). A hint: see the module doc.
VIEWS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "decided": (frozenset({"mreq", "round"}), frozenset({"max_rounds", "deadline", "max_requests"})),
    # the check at `proposed` reads the clock: an error answer records whether it is late
    "proposed": (frozenset({"mreq", "round"}), frozenset({"max_requests", "max_rounds", "batch", "deadline"})),
    "validated": (frozenset(OPTIONAL_FIELDS), frozenset(CONFIG_ATTRS) - {"mode", "on_limit", "batch"}),
    "executing": (frozenset(OPTIONAL_FIELDS), frozenset(CONFIG_ATTRS) - {"mode", "on_limit", "batch"}),
    "returned": (frozenset({"mreq", "round"}), frozenset({"mode", "on_limit", "max_requests", "max_rounds"})),
}


def _dict_of(U: Universe, counts: tuple[int, ...]) -> dict[str, int]:
    return {t.name: n for t, n in zip(U.tools, counts, strict=True) if n}


def _config_value(c: RunConfig, attr: str) -> Any:
    v = getattr(c.limits, attr) if attr in _LIMIT_ATTRS else getattr(c, attr)
    return tuple(sorted(v.items())) if isinstance(v, dict) else v


def _poisoned_config(c: RunConfig, keep: frozenset[str]) -> RunConfig:
    """A copy of ``c`` whose attributes outside ``keep`` are poisons (validation bypassed)."""
    lim = object.__new__(Limits)
    for f in dataclasses.fields(Limits):
        v = getattr(c.limits, f.name)
        object.__setattr__(lim, f.name, v if f.name in keep else Poison(f"config.{f.name}"))
    out = object.__new__(RunConfig)
    for f in dataclasses.fields(RunConfig):
        if f.name == "limits":
            v: Any = lim
        elif f.name == "tool_limits" and "tool_limits" not in keep:
            v = PoisonDict("config.tool_limits")
        elif f.name in CONFIG_ATTRS and f.name not in keep:
            v = Poison(f"config.{f.name}")
        else:
            v = getattr(c, f.name)
        object.__setattr__(out, f.name, v)
    return out


class _Window:
    """One materialised local view: the windowed RunState and what its past looked like."""

    __slots__ = ("L", "covered_pre", "focus", "focus_rec", "past_gexp", "past_gfirst", "past_gretries",
                 "past_gtool", "pre_ans", "pre_exe", "pre_exec", "pre_live", "pre_req")


class FastModel:
    """Explores canonical compact states; each step is the semantics' step on a window."""

    def __init__(self, U: Universe, sem: Semantics = CORE, *, views: bool = True) -> None:
        if any(c.config.max_concurrency > 1 for c in U.configs):
            # a step with executions in flight involves several requests: not one window
            raise ValueError("the fast model explores the sequential machine only (max_concurrency 1); "
                             "use the concurrent model (loopspec.checker.concurrent)")
        self.U = U
        self.sem = sem
        self.enc = Encoder(U)
        self.tb = tables()
        self.focus = U.ids[0]
        self.n_values = len(U.values)
        self.use_views = views
        self.memo: dict[tuple[Any, ...], list[Result]] = {}
        self.misses = 0
        self.hits = 0
        self.fallbacks = 0
        self.reads = invariant_read_sets()
        self._L: list[Json] = []
        self._L_id: dict[Json, int] = {}
        self._L_terminal: list[bool] = []
        self._L_live: list[bool] = []
        self._L_vkey: list[Any] = []
        self._L_swap: dict[int, int] = {}
        self._R: list[Json] = []
        self._R_id: dict[Json, int] = {}
        self._R_swap: dict[int, int] = {}
        self._patches: list[tuple[tuple[int, Json], ...]] = []
        self._patch_id: dict[tuple[tuple[int, Json], ...], int] = {}
        self._applied: dict[tuple[int, int], int] = {}
        # per configuration: environments restricted to calls on the focus id / without a pool id
        self.env_focus: list[Env] = []
        self.env_none: list[Env] = []
        for c in U.configs:
            env = c.env
            focus_calls = {k: v for k, v in env.calls.items() if isinstance(v, dict) and v.get("id") == self.focus}
            none_calls = {k: v for k, v in env.calls.items()
                          if not (isinstance(v, dict) and v.get("id") in self.enc.id_index)}
            self.env_focus.append(dataclasses.replace(env, calls=focus_calls, call_order=tuple(focus_calls)))
            self.env_none.append(dataclasses.replace(env, calls=none_calls, call_order=tuple(none_calls)))
        self.focus_labels: frozenset[str] = frozenset().union(*(e.calls for e in self.env_focus))
        # per machine state: the indices of L its view keeps, and per configuration its config view
        self.view_idx: dict[str, tuple[int, ...]] = {}
        self.cfg_view: dict[tuple[str, int], tuple[Any, ...]] = {}
        self.cfg_poisoned: dict[tuple[str, int], RunConfig] = {}
        for ms, (fields, attrs) in VIEWS.items():
            self.view_idx[ms] = tuple(i for i, f in enumerate(FIELDS) if f not in (*OPTIONAL_FIELDS, "config")
                                      or f in fields)
            for c in U.configs:
                self.cfg_view[(ms, c.index)] = tuple(_config_value(c.config, a) for a in sorted(attrs))
                self.cfg_poisoned[(ms, c.index)] = _poisoned_config(c.config, attrs)

    # -- interning ------------------------------------------------------------------------------
    # A state of the search is a tuple of small integers: the id of L, then the ids of the records
    # in ascending order (the order of ids is arbitrary but fixed for the run, so the smaller of a
    # state and its value-swapped image is a canonical form). decode() gives the readable form.
    def _lid(self, L: Json) -> int:
        i = self._L_id.get(L)
        if i is None:
            i = self._L_id[L] = len(self._L)
            self._L.append(L)
            ms = L[0]
            terminal = ms in TERMINAL or ms in ("VIOLATION", "ERROR")  # never expanded
            self._L_terminal.append(terminal)
            self._L_live.append(not terminal and (L[_I["cur"]] is not None or L[_I["pending"]] is not None))
            self._L_vkey.append(None if terminal else
                                (ms, tuple(L[j] for j in self.view_idx[ms]), self.cfg_view[(ms, L[1])]))
        return i

    def _rid(self, r: Json) -> int:
        i = self._R_id.get(r)
        if i is None:
            i = self._R_id[r] = len(self._R)
            self._R.append(r)
        return i

    def _swap_l(self, i: int) -> int:
        j = self._L_swap.get(i)
        if j is None:
            j = self._L_swap[i] = self._lid(swap_values(self._L[i]))
        return j

    def _swap_r(self, i: int) -> int:
        j = self._R_swap.get(i)
        if j is None:
            j = self._R_swap[i] = self._rid(swap_values(self._R[i]))
        return j

    def _state(self, lid: int, rids: list[int]) -> tuple[int, ...]:
        rids.sort()
        a = (lid, *rids)
        if self.n_values != 2:
            return a
        b_rids = sorted(self._swap_r(r) for r in rids)
        b = (self._swap_l(lid), *b_rids)
        return a if a <= b else b

    def decode(self, state: tuple[int, ...]) -> Json:
        """The readable canonical form of a state, the one the reference model uses."""
        L = self._L[state[0]]
        if self._L_terminal[state[0]]:
            return (L, ())
        return canonical(L, [self._R[r] for r in state[1:]], self.n_values)

    # -- BFS interface ----------------------------------------------------------------------
    def initial(self) -> list[tuple[Json, Json]]:
        out = []
        for c in self.U.configs:
            L, recs = project(self.enc, self.tb.spec.initial.id, RunState(c.config), c.index)
            k = self._state(self._lid(L), [self._rid(r) for r in recs])
            out.append((k, k))
        return out

    def is_terminal(self, state: tuple[int, ...]) -> bool:
        return self._L_terminal[state[0]]

    def expand(self, state: tuple[int, ...]) -> Iterator[Result]:
        lid = state[0]
        if self._L_terminal[lid]:
            return
        rids = state[1:]
        if self._L_live[lid]:
            flags = self._R_live
            pos = next((i for i, r in enumerate(rids) if flags(r)), None)
            yield from self._apply(lid, rids, pos, "cur", None if pos is None else rids[pos])
        else:
            yield from self._apply(lid, rids, None, "none", None)
            seen: set[int] = set()
            for i, r in enumerate(rids):
                if r not in seen:
                    seen.add(r)
                    yield from self._apply(lid, rids, i, "new", r)

    def _R_live(self, r: int) -> bool:
        return bool(self._R[r][0])

    def _results(self, lid: int, role: str, rid: int | None) -> list[tuple[Choice, str, int, int, int | None, tuple[str, ...]]]:
        results = None
        if self.use_views:
            pkey = (role, self._L_vkey[lid], rid)
            results = self.memo.get(pkey)
            if results is None:
                self.misses += 1
                try:
                    results = self._intern_results(lid, self._compute(role, self._L[lid], self._rec(rid), self._L[lid][0]),
                                                   self._L[lid][0])
                except NonLocal:
                    results = _FALLBACK
                    self.fallbacks += 1
                self.memo[pkey] = results
            else:
                self.hits += 1
        if results is None or results is _FALLBACK:
            fkey = (role, "full", lid, rid)
            results = self.memo.get(fkey)
            if results is None:
                self.misses += 1
                results = self._intern_results(lid, self._compute(role, self._L[lid], self._rec(rid), None), None)
                self.memo[fkey] = results
            else:
                self.hits += 1
        return results

    def _rec(self, rid: int | None) -> Json:
        return None if rid is None else self._R[rid]

    def _intern_results(self, lid: int, results: list[Result], view: str | None) -> list[Any]:
        """Each successor as (choice, transition, kind, L id or patch id, record id, violated).

        kind 0: a terminal (or violating) successor whose L id is given; kind 1: a patch — the
        fields that differ from the state's own L (fields the view left out stay as they are)."""
        L = self._L[lid]
        keep = set(self.view_idx[L[0]]) if view is not None else set(range(len(L)))
        out = []
        for choice, tid, L2, rec2, bad, label in results:
            rid2 = None if rec2 is None else self._rid(rec2)
            if L2[0] in TERMINAL or L2[0] == "VIOLATION" or L2[0] == "ERROR":
                out.append((choice, tid, 0, self._lid(L2), rid2, bad, label))
                continue
            patch = tuple((i, v) for i, v in enumerate(L2) if v is not HOLE and (i not in keep or v != L[i]))
            pid = self._patch_id.get(patch)
            if pid is None:
                pid = self._patch_id[patch] = len(self._patches)
                self._patches.append(patch)
            out.append((choice, tid, 1, pid, rid2, bad, label))
        return out

    def _apply(self, lid: int, rids: tuple[int, ...], pos: int | None, role: str, rid: int | None) -> Iterator[Result]:
        applied = self._applied
        for choice, tid, kind, ref, rid2, bad, label in self._results(lid, role, rid):
            if kind == 0:
                lid2 = ref
                k: tuple[int, ...] = (lid2,) if self._L_terminal[lid2] else (lid2, *rids)
            else:
                lid2 = applied.get((lid, ref))  # type: ignore[assignment]
                if lid2 is None:
                    lst = list(self._L[lid])
                    for i, v in self._patches[ref]:
                        lst[i] = v
                    lid2 = applied[(lid, ref)] = self._lid(tuple(lst))
                r2 = list(rids)
                if pos is not None:
                    r2[pos] = rid2  # type: ignore[call-overload]
                k = self._state(lid2, r2)
            yield choice, tid, k, k, bad, label

    # -- one local view -----------------------------------------------------------------------
    def _compute(self, role: str, L: Json, rec: Json, view: str | None) -> list[Result]:
        from .reference import enumerate_steps

        cfg = L[_I["config"]]
        env = self.U.configs[cfg].env if role == "cur" else (self.env_focus[cfg] if role == "new" else self.env_none[cfg])
        m, win = self._materialise(L, rec, view)
        pre_fp = _fingerprint(m.s)
        out: list[Result] = []
        for sc in enumerate_steps(self.sem, env, m):
            if role == "new" and not any(p in ("response", "next") and lab in self.focus_labels for p, lab in sc.choice):
                continue  # reported under the "none" view
            if sc.transition is None:
                if sc.error and sc.error.startswith("NonLocal"):
                    raise NonLocal(sc.error)
                out.append((sc.choice, "ERROR", ("ERROR", sc.error), None, (f"CRASH: {sc.error}",), (None, None)))
                continue
            ms2, s2 = sc.machine.state, sc.machine.s
            changed = {f for f in _FIELDS if pre_fp[f] != _fp(f, getattr(s2, f))}
            bad = self._verdicts(win, s2, changed)
            label = _label(m.s, s2)
            if ms2 in TERMINAL and s2.status is not None:
                out.append((sc.choice, sc.transition.id, (ms2, s2.stop_reason), None, bad, label))
                continue
            try:
                L2, rec2 = self._project(win, ms2, s2, changed, view)
            except NonLocal:
                if bad:  # a violating state is never expanded: its key does not matter
                    out.append((sc.choice, sc.transition.id, ("VIOLATION", ms2), None, bad, label))
                    continue
                raise
            out.append((sc.choice, sc.transition.id, L2, rec2, bad, label))
        return out

    def _materialise(self, L: Json, rec: Json, view: str | None) -> tuple[Machine, _Window]:
        U = self.U
        cfg_index = L[_I["config"]]
        keep = VIEWS[view][0] if view is not None else frozenset(OPTIONAL_FIELDS)
        c = self.cfg_poisoned[(view, cfg_index)] if view is not None else U.configs[cfg_index].config

        def val(name: str) -> Any:
            return L[_I[name]] if name in keep else Poison(name)

        nreq, gap = L[_I["nreq"]], L[_I["gap"]]
        nans = nreq - gap
        nexec = val("nexec")
        mreq = val("mreq")
        win = _Window()
        win.L = L
        win.focus = rec is not None
        win.focus_rec = rec
        cur = L[_I["cur"]]
        pend = L[_I["pending"]]
        rnd_now = (mreq + L[_I["round"]]) if "round" in keep and not is_poison(mreq) else Poison("round")
        # requests
        if nreq == 0:
            requests = Tail("requests", 0, [])
        elif cur is not None:
            idk, tool, form, auth, rel, rrel = cur
            if idk == "p":
                if rec is None:
                    raise NonLocal("a live pool id without its record")
                call_id: object = self.focus
            else:
                call_id = idk[1]
            name = None if tool is None else U.tools[tool].name
            rnd = Poison("round") if is_poison(mreq) else mreq - rrel
            requests = Tail("requests", nreq - 1, [Request(nreq - 1 - rel, rnd, call_id, name, self._args(tool, form), auth)])
        else:
            lr = L[_I["last_rrel"]]
            known = {} if lr is None or is_poison(rnd_now) else {"round": rnd_now - lr}
            requests = Tail("requests", nreq - 1, [Sealed("request", nreq - 1, known)])
        # answers
        ans = L[_I["answer"]]
        if ans is not None:
            rel, code = ans
            answers = Tail("answers", nans - 1, [Sealed("answer", nreq - 1 - rel, {"code": code})])
        elif nans > 0:
            answers = Tail("answers", nans - 1, [Sealed("answer", nans - 1)])
        else:
            answers = Tail("answers", 0, [])
        # executions
        ex = L[_I["execution"]]
        win.pre_exec = []
        if ex is not None:
            if is_poison(nexec):
                raise NonLocal("a live execution needs the execution count")
            rel, tool, principal_ok, ordrel, attempts, oc = ex
            e = Execution(nreq - 1 - rel, U.tools[tool].name, c.principal if principal_ok else "#someone-else",
                          nexec + ordrel, attempts, _outcome(oc))
            executions = Tail("executions", nexec - 1, [e])
            win.pre_exec = [e]
        elif is_poison(nexec):
            executions = Tail("executions", nexec, [])  # type: ignore[arg-type]
        elif nexec > 0:
            # a past execution has its outcome (in the sequential machine only the newest can be
            # running, and then it is live): what terminate() reads to find executions in flight
            executions = Tail("executions", nexec - 1, [Sealed("execution", None, _PAST_EXECUTION)])
        else:
            executions = Tail("executions", 0, [])
        # bindings: only the focus id is inside the window
        data = {}
        if rec is not None and rec[1] is not None:
            t, form, succ = rec[1]
            tname = U.tools[t].name
            data[self.focus] = Binding(tname, core.content_key(tname, self._args(t, form)), None,  # type: ignore[arg-type]
                                       None if succ is None else (_output(succ[1]),), None)
        bindings = Bindings(frozenset({self.focus}) if rec is not None else frozenset(), data)
        resp = L[_I["response"]]
        response: Any = None
        admitted = -1
        if resp == "end":
            response = ()
        elif resp == "admitted":
            response, admitted = (_PLACEHOLDER,), 0
        elif resp == "pending":
            idk, tool, form = pend
            if idk == "p" and rec is None:
                raise NonLocal("a pending pool id without its record")
            call: dict[str, Json] = {"id": self.focus} if idk == "p" else ({} if idk[1] is None else {"id": idk[1]})
            call.update({"name": None if tool is None else U.tools[tool].name, "arguments": self._args(tool, form)})
            response = (call,)
        dl = U.configs[cfg_index].config.limits.deadline
        per_tool = _dict_of(U, L[_I["per_tool"]]) if "per_tool" in keep else PoisonDict("per_tool")
        s = RunState(
            config=c,
            now=float(dl) if L[_I["deadline"]] and dl is not None else 0.0,
            bindings=bindings,
            requests=requests,  # type: ignore[arg-type]
            answers=answers,  # type: ignore[arg-type]
            executions=executions,  # type: ignore[arg-type]
            per_tool=per_tool,
            model_requests=mreq,
            retries=val("retries"),
            round=rnd_now,
            response=response,
            final=FINAL_TEXT if L[_I["final"]] else None,
            model_failed=L[_I["model_failed"]],
            input_exhausted=L[_I["input_exhausted"]],
            cursor=0,
            admitted_cursor=admitted,
            # dead outside `executing` (see state.py): a poison, which the core only tests by identity
            # there (terminate(): is an execution running?)
            outcome=_outcome(L[_I["outcome"]]) if L[_I["state"]] == "executing" else Poison("outcome"),
            status=L[_I["status"]],
            stop_reason=L[_I["stop_reason"]],
            aborted=None if L[_I["aborted"]] is None else (nreq - 1 - L[_I["aborted"]][0], L[_I["aborted"]][1]),
            terminations=L[_I["terminations"]],
            final_at=None if L[_I["final_rel"]] is None else nreq - L[_I["final_rel"]],
            unreconciled=UNRECONCILED_KEY if L[_I["unreconciled"]] else (),
        )
        ms = L[_I["state"]]
        win.pre_req = requests.positions()
        win.pre_ans = answers.positions()
        win.pre_exe = executions.positions()
        win.covered_pre = nans - (1 if ans is not None else 0)
        win.pre_live = {name: (live is None or live(ms, s)) for name, _, live, _ in SPEC_OF_FIELDS}
        # the past (everything before the window), as the ghosts summarise it
        cur_hist = L[_I["cur_hist"]]
        gexp = rec[2] if rec is not None else None
        win.past_gexp = (cur_hist[0] if cur_hist is not None else gexp) if cur is not None else gexp
        gfirst = rec[3] if rec is not None else ()
        gtool, gretries = val("gtool"), val("gretries")
        win.past_gtool = None if is_poison(gtool) else dict(_dict_of(U, gtool))
        win.past_gretries = None if is_poison(gretries) else gretries
        for e in win.pre_exec:
            if win.past_gtool is None or win.past_gretries is None:
                raise NonLocal("a live execution needs the execution ghosts")
            win.past_gtool[e.tool] -= 1
            win.past_gretries -= e.attempts - 1
            if e.outcome is not None and e.outcome.ok:
                tok = Encoder.output(e.outcome.output)
                gfirst = tuple(x for x in gfirst if x[1] != tok)
        win.past_gfirst = gfirst
        return Machine(ms, s), win

    def _args(self, tool: int | None, form: Json) -> Json:
        if form == "str":
            return NOT_AN_OBJECT
        if form == "empty":
            return {}
        assert tool is not None
        t = self.U.tools[tool]
        if form == "inv":
            return {t.argument: INVALID_VALUE}
        return {t.argument: self.U.values[form[1]]}

    # -- reading a successor back --------------------------------------------------------------
    def _project(self, win: _Window, ms: str, s: RunState, changed: set[str], view: str | None) -> tuple[Json, Json]:
        """The successor's L (HOLE where a left-out field is unchanged) and the focus record.

        A field whose sources the step did not change, and that was and is live, keeps its value
        (the state's own, HOLE when left out of the view); every other field is read afresh —
        which raises NonLocal when it would need a left-out value.
        """
        gh = _WindowGhosts(self, win, ms, s, changed)
        L = win.L
        out: list[Json] = [ms, HOLE if view is not None else L[1]]
        for idx in range(2, len(FIELDS)):
            name, sources, live, get = SPEC_OF_FIELDS[idx]
            if live is not None and not live(ms, s):
                out.append(None)
            elif name in _GHOST_FIELDS:
                out.append(gh.field(name))
            elif win.pre_live[name] and not (sources & changed):
                out.append(L[idx] if name not in OPTIONAL_FIELDS or view is None or name in VIEWS[view][0] else HOLE)
            else:
                assert get is not None
                out.append(get(self.enc, s, gh))
        rec2 = records(self.enc, ms, s, gh, [self.focus])[0] if win.focus else None
        return tuple(out), rec2

    # -- invariants ------------------------------------------------------------------------------
    def _verdicts(self, win: _Window, w: RunState, changed: set[str]) -> tuple[str, ...]:
        """Every invariant of loop.toml that reads a changed field, decided by the core's own
        function on a synthetic state; the others still hold.

        The past (positions before the window) satisfied every invariant when it was the
        present, and none of it can change (the window refuses it). So each invariant, which is
        a condition on every item of the history plus a few counters, is decided by the window's
        items, the counters, and the summaries the ghosts keep. For each invariant we build the
        smallest RunState that has exactly the window's items and a past with the same summary:

        * EXEC-BUDGET, ABORT-PREFIX, ONE-TERMINAL, NO-CALL-AFTER-FINAL read counters only: the
          window itself;
        * REQUEST-BUDGET, SAFE-ERRORS, TRUSTED-PRINCIPAL are conditions on each request, answer or
          execution on its own: the window's items alone;
        * TOOL-BUDGET and RETRY-BUDGET compare totals: past executions stand in with the past's
          tools and retries (``gtool``, ``gretries``);
        * ONE-ANSWER-IN-ORDER pairs answers with requests by position: past positions are
          filled with answered placeholders;
        * EXEC-ACCOUNTING: past executions stand in as executions of the first requests, whose
          answers say so (none are needed when the window holds no execution: a changed answer
          then concerns a request without one);
        * CHECKED-BEFORE-EXEC, BINDING-STABLE, CONFLICT-NO-REUSE, REPLAY-NO-EXEC and
          NO-CACHED-FAILURE recompute the binding history: a placeholder past request binds the
          focus id to what the past bound it to, and executed successfully with the same output
          when the past did; the other placeholders are malformed and bind nothing;
        * PARTIAL-COVERAGE asks whether any answer carried a limit code: a placeholder answer
          with one when ``glimit`` says so;
        * DEADLINE is a condition on a counter and on each execution: the window's executions;
        * RETRY-DUE is a condition on each execution (a failure made final while a retry was due):
          the window's executions — a past one had the fact false, or its state was a violation and
          never expanded;
        * ESCALATION: an escalating answer other than the one just given breaks the invariant in
          the step that moves the run on from ``returned``, where the window still knows its code
          (``answer`` is live there); so in a state the search expands, an answer whose code the
          window does not know is not escalating and stands in as an ``ok`` placeholder. Views
          that leave out the mode and the limit policy get the verdict for every value of the two
          (a finite domain), and are refused when the verdicts differ;
        * DECISION recomputes R1 for each request from its facts and a summary of the past: the
          window's requests with their answers and executions after :meth:`_decided_past`. When
          the step left every request's facts as they were (only sealed items, in place or moved to
          ``aborted_answer``), the verdict is unchanged; when it touched a sealed one, the view is
          refused.
        """
        todo = [name for name in core.INVARIANTS if self.reads[name] & changed]
        if not todo:
            return ()
        U = self.U
        cfg = w.config
        nreq, nans = len(w.requests), len(w.answers)
        reqs = w.requests.positions()  # type: ignore[attr-defined]
        anss = w.answers.positions()  # type: ignore[attr-defined]
        exes = w.executions.positions()  # type: ignore[attr-defined]
        real_req = {i: r for i, r in reqs if not isinstance(r, Sealed)}
        real_ans = [(i, a) for i, a in anss if not isinstance(a, Sealed)]
        real_exe = [(i, e) for i, e in exes if not isinstance(e, Sealed)]
        first_req = reqs[0][0] if reqs else nreq
        first_ans = anss[0][0] if anss else nans
        window_answers = [a for _, a in real_ans]
        window_execs = [e for _, e in real_exe]
        cache: dict[str, RunState] = {}

        def synth(**kw: Any) -> RunState:
            base = dict(
                config=cfg, now=w.now, bindings={}, requests=[], answers=[], executions=[],
                per_tool=w.per_tool, model_requests=w.model_requests, retries=w.retries, round=w.round,
                final=w.final, model_failed=w.model_failed, input_exhausted=w.input_exhausted,
                status=w.status, stop_reason=w.stop_reason, aborted=w.aborted, terminations=w.terminations,
                final_at=w.final_at, cursor=w.cursor, admitted_cursor=w.admitted_cursor,
                late_model_requests=w.late_model_requests, unreconciled=w.unreconciled,
            )
            base.update(kw)
            return RunState(**base)

        def req_id(i: int) -> object:
            r = real_req.get(i)
            return core.answer_id(r.call_id) if r is not None else f"#{i}"

        def neutral_requests(binder: bool) -> list[Request]:
            """Every position filled: the window's own requests, malformed placeholders elsewhere,
            and — when the past bound the focus id — a placeholder binding it at position 0."""
            rs = [Request(i, 0, None, None, None) for i in range(first_req)]
            rs += [r if not isinstance(r, Sealed) else Request(i, 0, None, None, None) for i, r in reqs]
            if binder and win.past_gexp is not None:
                if not rs or rs[0].call_id is not None:
                    raise NonLocal("the past binds an id but holds no request")
                t, form = win.past_gexp
                rs[0] = Request(0, 0, self.focus, U.tools[t].name, self._args(t, form), True)
            return rs

        def window() -> RunState:
            return w

        def request_budget() -> RunState:
            return synth(requests=[r if not isinstance(r, Sealed) else Request(i, 0, None, None, None) for i, r in reqs],
                         answers=window_answers, executions=window_execs)

        def tool_budget() -> RunState:
            if win.past_gtool is None:
                raise NonLocal("executions per tool are outside the memo key")
            past = [Execution(-1, t, cfg.principal, 0) for t, n in win.past_gtool.items() for _ in range(n)]
            return synth(executions=past + window_execs)

        def retry_budget() -> RunState:
            if win.past_gretries is None:
                raise NonLocal("retries are outside the memo key")
            past, left = [], win.past_gretries
            for _ in range(len(w.executions) - len(real_exe)):
                k = min(left, cfg.limits.max_retries)
                past.append(Execution(-1, "#past", cfg.principal, 0, 1 + k))
                left -= k
            if left:
                raise NonLocal("past retries cannot be spread over past executions")
            return synth(executions=past + window_execs)

        def one_answer() -> RunState:
            rs = [Request(i, 0, f"#{i}", None, None) for i in range(first_req)]
            rs += [r if not isinstance(r, Sealed) else Request(i, 0, f"#{i}", None, None) for i, r in reqs]
            ans_ = [Answer(i, 0, req_id(i), "ok") for i in range(first_ans)]
            ans_ += [Answer(i, 0, req_id(i), "ok") if isinstance(a, Sealed) else a for i, a in anss]
            return synth(requests=rs, answers=ans_)

        def exec_accounting() -> RunState:
            k = len(w.executions) - len(real_exe) if real_exe else 0
            past = [Execution(i, "#past", cfg.principal, i + 1) for i in range(k)]
            ans_ = [Answer(i, 0, None, "ok", executed=i < k) for i in range(first_ans)]
            ans_ += [Answer(i, 0, None, "ok", executed=i < k) if isinstance(a, Sealed) else a for i, a in anss]
            return synth(executions=past + window_execs, answers=ans_)

        def binding_world() -> RunState:
            if "world" in cache:
                return cache["world"]
            rs = neutral_requests(True)
            execs = list(window_execs)
            if win.past_gfirst:
                if win.past_gexp is None or any(k != win.past_gexp for k, _ in win.past_gfirst):
                    raise NonLocal("a past success of content the id was not bound to")
                (_, tok), = win.past_gfirst
                execs = [Execution(0, rs[0].name, cfg.principal, 0, 1, Outcome.success(_output(tok))), *execs]  # type: ignore[arg-type]
            b = w.bindings.own() if win.focus else {}  # type: ignore[attr-defined]
            ans_ = [Answer(i, 0, None, "ok") for i in range(nans - len(window_answers))] + window_answers
            cache["world"] = synth(requests=rs, executions=execs, answers=ans_, bindings=b)
            return cache["world"]

        def coverage() -> RunState:
            if nans < win.covered_pre:
                raise NonLocal("an answer summarised by glimit was removed")
            past = [Answer(-1, 0, None, "error", code="BUDGET_EXHAUSTED")] if win.L[_I["glimit"]] else []
            extra = [Answer(a.index, 0, None, "error" if a.code else "ok", code=a.code)
                     for i, a in anss if isinstance(a, Sealed) and i >= win.covered_pre]
            return synth(answers=past + extra + window_answers)

        def deadline() -> RunState:
            return synth(executions=window_execs)

        def retry_due() -> RunState:
            return synth(executions=window_execs)

        def in_flight() -> RunState:
            # section 5 is out of this model's reach (see __init__): only the window's execution can
            # be in flight or abandoned, the past ones have their outcomes and were not abandoned
            return synth(executions=window_execs)

        def escalation() -> RunState:
            ans_ = [Answer(i, 0, None, "ok") for i in range(first_ans)]
            for i, a in anss:
                if not isinstance(a, Sealed):
                    ans_.append(a)
                elif a.knows("code") and a.code is not None:
                    ans_.append(Answer(a.index, 0, None, "error", code=a.code))
                else:  # not escalating: see the docstring
                    ans_.append(Answer(i, 0, None, "ok"))
            return synth(answers=ans_, requests=w.requests)

        def decision() -> RunState | None:
            if not _past_intact(win, w):
                raise NonLocal("INV-DECISION: the step changed the facts of a request outside the window")
            real_abort = w.aborted_answer is not None and not isinstance(w.aborted_answer, Sealed)
            if not (real_req or real_ans or real_exe or real_abort):
                return None  # every request's facts are as they were: the verdict is unchanged
            decided = {r.index for r in real_req.values()}
            items = [*window_answers, *window_execs] + ([w.aborted_answer] if real_abort else [])
            if any((x.index if isinstance(x, Answer) else x.request) not in decided for x in items):
                raise NonLocal("INV-DECISION: an answer or execution of a request outside the window")
            first_real = min(real_req)
            if any(isinstance(r, Sealed) for i, r in reqs if i > first_real):
                raise NonLocal("INV-DECISION: a request outside the window after one inside it")
            rs, ans_, exs, dcfg = self._decided_past(win, w, first_real, len(real_exe))
            rs += [r for _, r in reqs if not isinstance(r, Sealed)]
            return synth(config=dcfg, requests=rs, answers=ans_ + window_answers, executions=exs + window_execs,
                         aborted_answer=w.aborted_answer if real_abort else None)

        checks: dict[str, Callable[[], RunState | None]] = {
            "INV-EXEC-BUDGET": window,
            "INV-ABORT-PREFIX": window,
            "INV-ONE-TERMINAL": window,
            "INV-NO-CALL-AFTER-FINAL": window,
            "INV-REQUEST-BUDGET": request_budget,
            "INV-SAFE-ERRORS": lambda: synth(answers=window_answers),
            "INV-TRUSTED-PRINCIPAL": lambda: synth(executions=window_execs),
            "INV-TOOL-BUDGET": tool_budget,
            "INV-RETRY-BUDGET": retry_budget,
            "INV-ONE-ANSWER-IN-ORDER": one_answer,
            "INV-EXEC-ACCOUNTING": exec_accounting,
            "INV-CHECKED-BEFORE-EXEC": binding_world,
            "INV-BINDING-STABLE": binding_world,
            "INV-CONFLICT-NO-REUSE": binding_world,
            "INV-REPLAY-NO-EXEC": binding_world,
            "INV-NO-CACHED-FAILURE": binding_world,
            "INV-PARTIAL-COVERAGE": coverage,
            "INV-DECISION": decision,
            "INV-ESCALATION": escalation,
            "INV-DEADLINE": deadline,
            "INV-RETRY-DUE": retry_due,
            "INV-CONCURRENCY-BOUND": in_flight,
            "INV-TAKE-UP-ORDER": window,
            "INV-ABANDON": in_flight,
        }
        out: list[str] = []
        for name in todo:
            st = checks[name]()
            if st is None:
                continue
            if name in _POLICY_FREE:
                ok = _for_every_policy(core.INVARIANTS[name], st)
            else:
                try:
                    ok = core.INVARIANTS[name](st)
                except NonLocal:
                    raise
                except Exception:
                    ok = False
            if not ok:
                out.append(name)
        return tuple(out)

    def _decided_past(self, win: _Window, w: RunState, n: int, n_window_exec: int
                      ) -> tuple[list[Request], list[Answer], list[Execution], RunConfig]:
        """``n`` placeholder requests decided as R1 says, with the summary of the real past that
        INV-DECISION reads for a later request: what the focus id is bound to and whether it
        succeeded (``gexp``, ``gfirst``) and how many executions started, per tool (``nexec``,
        ``gtool``). Placeholder executions come first; the rest are malformed calls.

        When the view leaves out the execution counts, only the executions the focus id's success
        needs are placed; when it leaves out a count or a budget, the budgets become lower bounds
        (:class:`~loopspec.checker.window.AtLeast`): every real budget admitted the real past's
        executions (INV-EXEC-BUDGET and INV-TOOL-BUDGET held), so it is at least the number placed,
        and a check of a later request against it is undecided (NonLocal if decide reaches it)."""
        U, cfg = self.U, w.config
        lim = cfg.limits
        off = w.executions.offset  # type: ignore[attr-defined]
        exact = win.past_gtool is not None and not is_poison(off)
        if exact:
            counts = dict(win.past_gtool)  # type: ignore[arg-type]
            if sum(counts.values()) != len(w.executions) - n_window_exec:
                raise NonLocal("INV-DECISION: the past executions and their ghost disagree")
        else:
            counts = {}
            if win.past_gexp is not None and win.past_gfirst:
                counts[U.tools[win.past_gexp[0]].name] = 1
        placed = dict(counts)
        rs: list[Request] = []
        ans_: list[Answer] = []
        exs: list[Execution] = []

        def executed(i: int, cid: str, name: str, args: Json, outcome: Outcome) -> None:
            counts[name] -= 1
            rs.append(Request(i, 0, cid, name, args, True))
            exs.append(Execution(i, name, cfg.principal, len(exs) + 1, 1, outcome))
            ans_.append(Answer(i, 0, cid, "ok", output=outcome.output, executed=True) if outcome.ok else
                        Answer(i, 0, cid, "error", code=outcome.category, executed=True))

        if win.past_gexp is not None:
            t, form = win.past_gexp
            name, args = U.tools[t].name, self._args(t, form)
            if win.past_gfirst:
                if any(k != win.past_gexp for k, _ in win.past_gfirst) or counts.get(name, 0) < 1:
                    raise NonLocal("INV-DECISION: a past success the past cannot have had")
                (_, tok), = win.past_gfirst
                executed(0, self.focus, name, args, Outcome.success(_output(tok)))
            elif counts.get(name, 0) >= 1:
                executed(0, self.focus, name, args, Outcome.failure("INTERNAL_ERROR"))
            else:  # bound, then refused by the authorization hook
                rs.append(Request(0, 0, self.focus, name, args, False))
                ans_.append(Answer(0, 0, self.focus, "error", code="NOT_FOUND_OR_NOT_ACCESSIBLE"))
        elif win.past_gfirst:
            raise NonLocal("INV-DECISION: a past success of an unbound id")
        by_name = {t.name: t for t in U.tools}
        for name in sorted(counts):
            while counts[name] > 0:
                i = len(rs)
                executed(i, f"#past{i}", name, {by_name[name].argument: U.values[0]},
                         Outcome.success(tool_output(-1 - i)))
        if len(rs) > n:
            raise NonLocal("INV-DECISION: the past holds fewer requests than its executions need")
        for i in range(len(rs), n):
            rs.append(Request(i, 0, None, None, None))
            code = "INVALID_CALL" if core.within(i, lim.max_requests) else "REQUEST_LIMIT"
            ans_.append(Answer(i, 0, None, "error", code=code))
        budgets_known = not (is_poison(lim.max_executions) or is_poison(lim.max_tool_executions)
                             or isinstance(cfg.tool_limits, PoisonDict))
        if exact and budgets_known:
            return rs, ans_, exs, cfg
        bounded = object.__new__(Limits)
        for f in dataclasses.fields(Limits):
            object.__setattr__(bounded, f.name, getattr(lim, f.name))
        object.__setattr__(bounded, "max_executions", AtLeast("config.max_executions", sum(placed.values())))
        out = object.__new__(RunConfig)
        for f in dataclasses.fields(RunConfig):
            object.__setattr__(out, f.name, getattr(cfg, f.name))
        object.__setattr__(out, "limits", bounded)
        object.__setattr__(out, "tool_limits", LowerBounds("config.tool_limits", placed))
        return rs, ans_, exs, out


_PLACEHOLDER = Sealed("response item", None)
#: Invariants that read the run's mode and limit policy, which some views leave out: decided for
#: every value the two can take (a finite domain) and refused when the verdicts differ.
_POLICY_FREE = frozenset({"INV-ESCALATION"})


def _for_every_policy(inv: Callable[[RunState], bool], st: RunState) -> bool:
    cfg = st.config
    if not (is_poison(cfg.mode) or is_poison(cfg.on_limit)):
        configs = [cfg]
    else:
        configs = [_with_policy(cfg, m, p) for m in core.MODES for p in core.LIMIT_POLICIES
                   if (is_poison(cfg.mode) or m == cfg.mode) and (is_poison(cfg.on_limit) or p == cfg.on_limit)]
    verdicts = set()
    for c in configs:
        st.config = c
        try:
            verdicts.add(bool(inv(st)))
        except NonLocal:
            raise
        except Exception:
            verdicts.add(False)
    st.config = cfg
    if len(verdicts) != 1:
        raise NonLocal("the verdict depends on the mode or the limit policy, outside the memo key")
    return verdicts.pop()


def _with_policy(c: RunConfig, mode: str, on_limit: str) -> RunConfig:
    out = object.__new__(RunConfig)
    for f in dataclasses.fields(RunConfig):
        object.__setattr__(out, f.name, mode if f.name == "mode" else on_limit if f.name == "on_limit"
                           else getattr(c, f.name))
    return out


def _past_intact(win: _Window, w: RunState) -> bool:
    """Are the items outside the window (sealed) where they were, so that the facts of every past
    request are unchanged? An answer popped from the end may have become ``aborted_answer``."""
    for pre, post in ((win.pre_req, w.requests), (win.pre_exe, w.executions)):
        have = dict(post.positions())  # type: ignore[attr-defined]
        if any(isinstance(x, Sealed) and have.get(i) is not x for i, x in pre):
            return False
    have = dict(w.answers.positions())  # type: ignore[attr-defined]
    return all(have.get(i) is x or (x is w.aborted_answer and i == len(w.answers))
               for i, x in win.pre_ans if isinstance(x, Sealed))


_FIELDS = tuple(sorted(ALL_FIELDS))
#: What a sealed past execution is known to hold (see _materialise).
_PAST_EXECUTION = {"outcome": Outcome(True, "#past"), "abandoned": False}
_GHOST_FIELDS = frozenset({"gtool", "gretries", "cur_hist", "cur_first", "glimit"})


def _output(tok: Json) -> Json:
    return None if tok is None else tool_output(tok)


def _label(before: RunState, after: RunState) -> Label:
    """The answer a step gave and the stop reason it ended the run with (the window's view)."""
    code = None
    if len(after.answers) > len(before.answers):
        a = after.answers[-1]
        code = a.code if a.status != "ok" else ("ok (replay)" if a.replayed else "ok")
    stop = after.stop_reason if after.status is not None and before.status is None else None
    return code, stop


def _outcome(enc: Json) -> Outcome | None:
    if enc is None:
        return None
    if enc[0] == "ok":
        return Outcome(True, _output(enc[1]), None)
    return Outcome(False, None, enc[1])


def _fp(f: str, v: Any) -> Any:
    """What a field of a windowed RunState holds (poisons by identity), to tell what a step changed."""
    if type(v) is Poison:
        return ("poison", id(v))
    if isinstance(v, Tail):
        off = ("poison", id(v.offset)) if type(v.offset) is Poison else v.offset
        if f == "executions":
            return (off, tuple(x if isinstance(x, Sealed) else
                               (x.request, x.tool, x.principal, x.ordinal, x.attempts, x.outcome, x.retry_skipped,
                                x.abandoned, x.landed_late)
                               for x in v.items))
        return (off, tuple(id(x) for x in v.items))
    if isinstance(v, PoisonDict):
        return ("poison", id(v))
    if isinstance(v, Bindings):
        return {k: (b.name, b.key, b.bound_at, b.success, b.success_at) for k, b in v.own().items()}
    if isinstance(v, RunConfig):
        return id(v)
    if isinstance(v, dict):
        return dict(v)
    return v


def _fingerprint(s: RunState) -> dict[str, Any]:
    return {f: _fp(f, getattr(s, f)) for f in _FIELDS}


class _WindowGhosts(Ghosts):
    """The ghosts after a step, from the ghosts before it and the window's items."""

    def __init__(self, fm: FastModel, win: _Window, ms: str, s: RunState, changed: set[str]) -> None:
        enc, L = fm.enc, win.L
        focus = fm.focus
        self._fields: dict[str, Json] = {}
        # executions in the window after the step (the past ones are sealed and unchanged)
        exes = [e for _, e in s.executions.positions() if not isinstance(e, Sealed)]  # type: ignore[attr-defined]
        if "executions" in changed or win.pre_exec:
            if win.past_gtool is None or win.past_gretries is None:
                raise NonLocal("executions changed but their ghosts are outside the memo key")
            gtool = dict(win.past_gtool)
            gretries = win.past_gretries
            for e in exes:
                gtool[e.tool] = gtool.get(e.tool, 0) + 1
                gretries += e.attempts - 1
            self.gtool = gtool
            self.gretries = gretries
            self._fields["gtool"] = enc.per_tool(gtool)
            self._fields["gretries"] = gretries
        else:
            self._fields["gtool"] = L[_I["gtool"]] if win.past_gtool is not None else HOLE
            self._fields["gretries"] = L[_I["gretries"]] if win.past_gretries is not None else HOLE
        # first successes of the focus id
        reqs = s.requests.positions()  # type: ignore[attr-defined]
        by_index = {r.index: r for _, r in reqs if not isinstance(r, Sealed)}
        rec = win.focus_rec
        gexp = rec[2] if rec is not None else None
        gfirst = win.past_gfirst
        for e in exes:
            if e.outcome is not None and e.outcome.ok:
                r = by_index.get(e.request)
                if r is None:
                    raise NonLocal("a successful execution of a request outside the window")
                if r.call_id != focus or not isinstance(r.name, str) or not isinstance(r.arguments, dict):
                    raise NonLocal("a successful execution of another id or of a malformed call")
                key = enc.key(core.content_key(r.name, r.arguments))
                if all(k != key for k, _ in gfirst):
                    gfirst = tuple(sorted((*gfirst, (key, enc.output(e.outcome.output))), key=_order))
        # the binding history: the request admitted by this step, if any
        self.cur_hist = L[_I["cur_hist"]]
        self.cur_first = L[_I["cur_first"]]
        pre_positions = {i for i, _ in win.pre_req}
        new = [r for i, r in reqs if i not in pre_positions]
        if len(new) > 1:
            raise NonLocal("more than one request admitted in one step")
        if (not new and L[_I["cur"]] is not None and request_live(ms, s) and "requests" in changed
                and enc.request(s)[:3] != L[_I["cur"]][:3]):
            raise NonLocal("the current request changed")
        limit = s.config.limits.max_requests
        for r in new:
            if L[_I["cur"]] is not None or L[_I["gap"]] != 0:
                raise NonLocal("a request admitted while the previous one is unanswered")
            h = None
            if core.within(r.index, limit) and core._passes_structure(s.config, r):
                if r.call_id != focus:
                    raise NonLocal("a valid request of an id outside the window")
                key = enc.key(core.content_key(r.name, r.arguments))  # type: ignore[arg-type]
                h = (gexp, key)
                if gexp is None:
                    gexp = key
            self.cur_hist = h
            self.cur_first = None if h is None else next((tok for k, tok in win.past_gfirst if k == h[1]), None)
        self._gexp = gexp
        self._gfirst = gfirst
        self._fields["cur_hist"] = self.cur_hist
        self._fields["cur_first"] = self.cur_first
        # limit codes among the answers that are no longer kept in detail
        glimit = bool(L[_I["glimit"]])
        post_live = answer_live(ms, s)
        if "answers" in changed or post_live != win.pre_live["answer"] or "requests" in changed:
            covered_pre = win.covered_pre
            if len(s.answers) < covered_pre:
                raise NonLocal("an answer summarised by glimit was removed")
            pre_objs = dict(win.pre_ans)
            last = len(s.answers) - 1
            for i, a in s.answers.positions():  # type: ignore[attr-defined]
                if i < covered_pre:
                    if pre_objs.get(i) is not a:
                        raise NonLocal("an answer summarised by glimit was replaced")
                    continue
                if post_live and i == last:
                    continue
                glimit = glimit or is_limit(a.code)
        self.glimit = glimit
        self._fields["glimit"] = glimit

    def field(self, name: str) -> Json:
        return self._fields[name]

    def gexp(self, cid: str) -> Json:
        return self._gexp

    def gfirst(self, cid: str) -> tuple[Json, ...]:
        return self._gfirst
