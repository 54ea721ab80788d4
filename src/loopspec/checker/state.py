"""The compact state of a run and its canonical form under symmetry.

The checker deduplicates runs by a *compact state*: everything about a core RunState that can
influence what happens next or what an invariant says about a later state, and nothing else. A
RunState keeps its whole history (requests, answers, executions); the compact state keeps

* ``L`` — a tuple: the machine state, the configuration, the counters, the current request, its
  last answer and last execution in detail, and a few *ghost* variables: summaries of the history
  that the invariants of loop.toml recompute from it (the binding history of R5, the first
  success of each id and content, executions per tool, retries per execution, whether a limit
  code was answered);
* ``R`` — one record per call id of the pool: whether it is the current request's id, its
  binding in the core's state, its binding according to the history (a ghost) and its first
  successes (a ghost).

Ghosts exist so that an invariant can be decided from the compact state and the step that
reached it (:mod:`loopspec.checker.fast`); in the correct core a ghost equals the corresponding
piece of the core's state, so they cost no states.

Symmetry: call ids and argument values are interchangeable. The core compares ids only for
equality and uses them as dictionary keys; it compares argument values only for equality and
checks them against the schema by type, and every value of the pool has the same type; the
invariants do the same. So permuting the id pool, or the value pool, maps runs to runs and
preserves every invariant's verdict. The canonical form sorts the id records (ids then carry no
name) and takes the smaller of the form and its value-swapped image. Tool names are not
interchangeable: they differ in schema and allow-listing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core import rules as core
from ..core.rules import RunState
from ..spec.loader import load_spec
from .semantics import FINAL_TEXT
from .universe import INVALID_VALUE, NOT_AN_OBJECT, Universe

__all__ = ["Encoder", "NonLocal", "canonical", "swap_values"]

Json = Any


class NonLocal(Exception):
    """The state holds something the compact form cannot represent (a value outside the
    alphabet, an id not in the pool, an index pointing outside the window)."""


# argument forms
V0, V1 = ("v", 0), ("v", 1)


class Encoder:
    """Encodes the pieces of a RunState of one universe into plain comparable tuples."""

    def __init__(self, U: Universe) -> None:
        self.U = U
        self.id_index = {cid: i for i, cid in enumerate(U.ids)}
        self.tool_index = {t.name: i for i, t in enumerate(U.tools)}
        self.principal = U.bounds.principal
        # content keys of every well-formed allow-listed call of the alphabet
        self.key_enc: dict[str, tuple[int, Json]] = {}
        for call in U.calls.values():
            name, args = call.get("name"), call.get("arguments")
            if isinstance(args, dict) and core.canonical_json(args) is not None and name in self.tool_index:
                self.key_enc[core.content_key(name, args)] = (self.tool_index[name], self.args(name, args))

    # -- leaves ----------------------------------------------------------------------------
    def args(self, name: object, args: object) -> Json:
        if args == NOT_AN_OBJECT:
            return "str"
        if not isinstance(args, dict):
            raise NonLocal(f"arguments {args!r} outside the alphabet")
        if not args:
            return "empty"
        if len(args) == 1:
            (k, v), = args.items()
            t = self.U.tools[self.tool_index[name]] if name in self.tool_index else None
            if t is not None and k == t.argument:
                if isinstance(v, str) and v in self.U.values:
                    return ("v", self.U.values.index(v))
                if v == INVALID_VALUE and not isinstance(v, bool):
                    return "inv"
        raise NonLocal(f"arguments {args!r} outside the alphabet")

    def key(self, key: str) -> tuple[int, Json]:
        try:
            return self.key_enc[key]
        except KeyError:
            raise NonLocal(f"content key {key!r} outside the alphabet") from None

    def tool(self, name: object) -> Json:
        if isinstance(name, str) and name in self.tool_index:
            return self.tool_index[name]
        if name is None:
            return None
        raise NonLocal(f"tool name {name!r} outside the alphabet")

    @staticmethod
    def output(value: Json) -> Json:
        if value is None:
            return None
        if isinstance(value, dict) and set(value) == {"execution"} and type(value["execution"]) is int:
            return value["execution"]
        raise NonLocal(f"output {value!r} is not a tool output of the checker")

    def outcome(self, o: core.Outcome | None) -> Json:
        if o is None:
            return None
        if o.ok:
            return ("ok", self.output(o.output))
        return ("fail", o.category)

    def call_id(self, cid: object, current: object) -> Json:
        """An id relative to the current request's id: ``"cur"`` when equal, else the value."""
        if cid == current and isinstance(cid, str) and cid in self.id_index:
            return "cur"
        if cid is None or (isinstance(cid, str) and cid not in self.id_index):
            return ("raw", cid)
        raise NonLocal(f"id {cid!r} refers to another call id than the current one")

    # -- the pieces of L -------------------------------------------------------------------
    def call(self, call: Json) -> Json:
        """A proposed call (not yet a request): (id kind, tool, argument form)."""
        if not isinstance(call, dict):
            raise NonLocal(f"call {call!r} outside the alphabet")
        cid, name = call.get("id"), call.get("name")
        idk: Json
        if isinstance(cid, str) and cid in self.id_index:
            idk = "p"
        elif cid is None or isinstance(cid, str):
            idk = ("raw", cid)
        else:
            raise NonLocal(f"call id {cid!r}")
        return (idk, self.tool(name), self.args(name, call.get("arguments")))

    def request(self, s: RunState) -> Json:
        if not s.requests:
            return None
        r = s.requests[-1]
        nreq = len(s.requests)
        if type(r.index) is not int or type(r.round) is not int:
            raise NonLocal("request index")
        idk: Json
        if isinstance(r.call_id, str) and r.call_id in self.id_index:
            idk = "p"
        elif r.call_id is None or isinstance(r.call_id, str):
            idk = ("raw", r.call_id)
        else:
            raise NonLocal(f"call id {r.call_id!r}")
        return (idk, self.tool(r.name), self.args(r.name, r.arguments), r.authorized,
                nreq - 1 - r.index, s.model_requests - r.round)

    def answer(self, s: RunState) -> Json:
        """The last answer: in detail when it answers the current request's position."""
        if not s.answers:
            return None
        if len(s.answers) < len(s.requests):
            return "sealed"
        a = s.answers[-1]
        if type(a.index) is not int or type(a.round) is not int:
            raise NonLocal("answer index")
        cur = s.requests[-1].call_id if s.requests else None
        return (len(s.requests) - 1 - a.index, s.model_requests - a.round, self.call_id(a.call_id, cur),
                a.status, self.output(a.output), a.code, a.replayed, a.executed)

    def execution(self, s: RunState) -> Json:
        if not s.executions:
            return None
        e = s.executions[-1]
        if type(e.request) is not int or type(e.ordinal) is not int:
            raise NonLocal("execution index")
        rel = len(s.requests) - 1 - e.request
        if rel > 0:
            return "sealed"
        return (rel, self.tool(e.tool), e.principal == self.principal, e.ordinal - len(s.executions),
                e.attempts, self.outcome(e.outcome))

    def per_tool(self, counts: Mapping[str, int]) -> tuple[int, ...]:
        out = [0] * len(self.U.tools)
        for name, n in counts.items():
            if n:
                i = self.tool(name)
                if i is None:
                    raise NonLocal("per-tool count of a nameless tool")
                out[i] = n
        return tuple(out)

    def binding(self, b: core.Binding | None) -> Json:
        if b is None:
            return None
        t, form = self.key(b.key)
        if self.tool(b.name) != t:
            raise NonLocal("binding name differs from its key")
        return (t, form, None if b.success is None else ("s", self.output(b.success[0])))


_SWAP: dict[Json, Json] = {}
_ORDER: dict[Json, str] = {}


def _swap(x: Json) -> Json:
    if x == V0:
        return V1
    if x == V1:
        return V0
    if isinstance(x, tuple):
        return tuple(_swap(y) for y in x)
    return x


def swap_values(x: Json) -> Json:
    """The image of an encoded piece under the value swap (argument values 0 <-> 1). Cached."""
    try:
        return _SWAP[x]
    except KeyError:
        y = _SWAP[x] = _swap(x)
        return y


def _order(x: Json) -> str:
    try:
        return _ORDER[x]
    except KeyError:
        o = _ORDER[x] = repr(x)
        return o


def canonical(L: tuple[Json, ...], recs: Sequence[Json], n_values: int) -> tuple[tuple[Json, ...], tuple[Json, ...]]:
    """The canonical form of a compact state: records sorted; the smaller of it and its
    value-swapped image (with two values; with one value there is nothing to swap)."""
    a = tuple(sorted(recs, key=_order))
    if n_values != 2:
        return L, a
    L2 = swap_values(L)
    b = tuple(sorted((swap_values(r) for r in recs), key=_order))
    ka = (_order(L), *map(_order, a))
    kb = (_order(L2), *map(_order, b))
    return (L, a) if ka <= kb else (L2, b)


# --------------------------------------------------------------------------------------------
# Projection: RunState -> compact state
# --------------------------------------------------------------------------------------------

FIELDS = (
    "state", "config", "nreq", "gap", "nexec", "per_tool", "gtool", "mreq", "round", "retries", "gretries",
    "deadline", "final", "final_rel", "model_failed", "input_exhausted", "response", "outcome", "status",
    "stop_reason", "aborted", "terminations", "cur", "cur_hist", "cur_first", "answer", "glimit",
    "execution", "pending", "last_rrel", "unreconciled",
)
IDX = {f: i for i, f in enumerate(FIELDS)}

TERMINAL = frozenset(st.id for st in load_spec().terminal_states)
#: Machine states at which the current request is still being decided (its details are live).
LIVE_REQUEST = frozenset({"validated", "executing"})


def response_state(s: RunState) -> str:
    """``none`` (no proposal), ``end`` (past its last call), ``pending`` (the call at the cursor has
    not become a request yet: ``admit_pending`` will take it up) or ``admitted``."""
    if s.response is None:
        return "none"
    if s.cursor >= len(s.response):
        return "end"
    if s.admitted_cursor == s.cursor and s.requests and s.requests[-1].round == s.round:
        return "admitted"
    return "pending"


def request_live(ms: str, s: RunState) -> bool:
    """Is the newest request still to be answered? (At ``proposed`` only once it was taken up.)"""
    return bool(s.requests) and (ms in LIVE_REQUEST or (ms == "proposed" and response_state(s) == "admitted"))


def pending_live(ms: str, s: RunState) -> bool:
    """Is there a proposed call at the cursor that the next step takes up?"""
    return ms == "proposed" and response_state(s) == "pending"


def last_round_live(ms: str, s: RunState) -> bool:
    """``admit_pending`` compares the newest request's round with the current one at ``proposed``
    (read there, and never overwritten before: live wherever there is a request)."""
    return bool(s.requests)


def answer_live(ms: str, s: RunState) -> bool:
    """Is the last answer still read in detail? (At ``returned``: escalation reads its code.)"""
    return ms == "returned" and bool(s.answers) and len(s.answers) >= len(s.requests)


def is_limit(code: object) -> bool:
    return isinstance(code, str) and code in core.CODE_TABLE and core.code_kind(code) == "limit"


class Ghosts:
    """The history summaries the compact state keeps (see the module docstring)."""

    gtool: Mapping[str, int]
    gretries: int
    glimit: bool  # a limit code among the answers that are not kept in detail
    cur_hist: Json  # the binding history of the live current request: None | (prior, key)
    cur_first: Json  # the first success of its id and content before it, as a token

    def gexp(self, cid: str) -> Json:
        raise NotImplementedError

    def gfirst(self, cid: str) -> tuple[Json, ...]:
        raise NotImplementedError


class FullGhosts(Ghosts):
    """Ghosts recomputed from a whole history with the invariants' own helpers of the core."""

    def __init__(self, enc: Encoder, ms: str, s: RunState) -> None:
        hist = _history(enc, s)
        self._gexp: dict[object, Json] = {}
        for r in s.requests:
            h = hist.get(r.index)
            if h is not None:
                self._gexp.setdefault(r.call_id, h[1])
        self._firsts = _firsts(enc, s)
        self.cur_hist = self.cur_first = None
        if request_live(ms, s):
            r = s.requests[-1]
            h = hist.get(r.index)
            if h is not None:
                self.cur_hist = h
                f = self._firsts.get((r.call_id, h[1]))
                self.cur_first = f[1] if f is not None and f[0] < r.index else None
        gtool: dict[str, int] = {}
        for e in s.executions:
            gtool[e.tool] = gtool.get(e.tool, 0) + 1
        self.gtool = gtool
        self.gretries = sum(e.attempts - 1 for e in s.executions)
        covered = s.answers[:-1] if answer_live(ms, s) else s.answers
        self.glimit = any(is_limit(a.code) for a in covered)

    def gexp(self, cid: str) -> Json:
        return self._gexp.get(cid)

    def gfirst(self, cid: str) -> tuple[Json, ...]:
        return tuple(sorted(((k, tok) for (i, k), (_, tok) in self._firsts.items() if i == cid), key=_order))


def _answer(s: RunState) -> Json:
    a = s.answers[-1]
    if type(a.index) is not int:
        raise NonLocal("answer index")
    return (len(s.requests) - 1 - a.index, a.code)


def _aborted(s: RunState) -> Json:
    if s.aborted is None:
        return None
    idx, code = s.aborted
    if type(idx) is not int:
        raise NonLocal("aborted index")
    return (len(s.requests) - 1 - idx, code)


Extractor = Callable[[Encoder, RunState, Ghosts], Json]

#: For each field of L: the RunState fields it is read from, when it is live (None: always), and
#: how it is read. Ghost fields come from the Ghosts. A dead field holds None.
SPEC_OF_FIELDS: tuple[tuple[str, frozenset[str], Callable[[str, RunState], bool] | None, Extractor | None], ...] = (
    ("state", frozenset(), None, None),
    ("config", frozenset(), None, None),
    ("nreq", frozenset({"requests"}), None, lambda e, s, g: len(s.requests)),
    ("gap", frozenset({"requests", "answers"}), None, lambda e, s, g: len(s.requests) - len(s.answers)),
    ("nexec", frozenset({"executions"}), None, lambda e, s, g: len(s.executions)),
    ("per_tool", frozenset({"per_tool"}), None, lambda e, s, g: e.per_tool(s.per_tool)),
    ("gtool", frozenset({"executions"}), None, lambda e, s, g: e.per_tool(g.gtool)),
    ("mreq", frozenset({"model_requests"}), None, lambda e, s, g: s.model_requests),
    ("round", frozenset({"round", "model_requests"}), None, lambda e, s, g: s.round - s.model_requests),
    ("retries", frozenset({"retries"}), None, lambda e, s, g: s.retries),
    ("gretries", frozenset({"executions"}), None, lambda e, s, g: g.gretries),
    ("deadline", frozenset({"now"}), None, lambda e, s, g: core.GUARDS["deadline_passed"](s)),
    ("final", frozenset({"final"}), None, lambda e, s, g: _final(s.final)),
    ("final_rel", frozenset({"final_at", "requests"}), None,
     lambda e, s, g: None if s.final_at is None else len(s.requests) - s.final_at),
    ("model_failed", frozenset({"model_failed"}), None, lambda e, s, g: s.model_failed),
    ("input_exhausted", frozenset({"input_exhausted"}), None, lambda e, s, g: s.input_exhausted),
    ("response", frozenset({"response", "cursor", "admitted_cursor", "requests", "round"}), None,
     lambda e, s, g: response_state(s)),
    ("outcome", frozenset({"outcome"}), lambda ms, s: ms == "executing", lambda e, s, g: e.outcome(s.outcome)),
    ("status", frozenset({"status"}), None, lambda e, s, g: s.status),
    ("stop_reason", frozenset({"stop_reason"}), None, lambda e, s, g: s.stop_reason),
    ("aborted", frozenset({"aborted", "requests"}), None, lambda e, s, g: _aborted(s)),
    ("terminations", frozenset({"terminations"}), None, lambda e, s, g: s.terminations),
    ("cur", frozenset({"requests", "model_requests"}), request_live, lambda e, s, g: e.request(s)),
    ("cur_hist", frozenset({"requests", "executions", "bindings"}), request_live, lambda e, s, g: g.cur_hist),
    ("cur_first", frozenset({"requests", "executions", "bindings"}), request_live, lambda e, s, g: g.cur_first),
    ("answer", frozenset({"answers", "requests"}), answer_live, lambda e, s, g: _answer(s)),
    ("glimit", frozenset({"answers", "requests"}), None, lambda e, s, g: g.glimit),
    ("execution", frozenset({"executions", "requests"}), lambda ms, s: ms == "executing",
     lambda e, s, g: e.execution(s)),
    ("pending", frozenset({"response", "cursor", "admitted_cursor", "requests", "round"}), pending_live,
     lambda e, s, g: e.call(s.response[s.cursor])),  # type: ignore[index]
    ("last_rrel", frozenset({"requests", "round"}), last_round_live, lambda e, s, g: s.round - s.requests[-1].round),
    # section 6: a write of the run is unknown (the model's one abstract key; always False without write tools)
    ("unreconciled", frozenset({"unreconciled"}), None, lambda e, s, g: bool(s.unreconciled)),
)
assert tuple(f for f, *_ in SPEC_OF_FIELDS) == FIELDS


def project(
    enc: Encoder, ms: str, s: RunState, cfg_index: int, gh: Ghosts | None = None, ids: Sequence[str] | None = None
) -> tuple[tuple[Json, ...], list[Json]]:
    """The compact state of a RunState: ``(L, records)``, records for ``ids`` (default: the pool).

    Without ``gh`` the ghosts are recomputed from the history (a whole RunState). Variables of
    the core that are *dead* at ``ms`` — overwritten before they are read again — are left out
    (live-variable reduction): the current request's details once it is answered, the latest
    outcome and the last execution outside ``executing``, the last answer's details outside
    ``returned`` (only "a limit code was answered" survives, in ``glimit``), and everything in a
    terminal state (no step follows; its invariants were checked when it was reached).
    """
    if ms in TERMINAL and s.status is not None:
        return (ms, s.stop_reason), []
    if gh is None:
        gh = FullGhosts(enc, ms, s)
    L: list[Json] = [ms, cfg_index]
    for _, _, live, get in SPEC_OF_FIELDS[2:]:
        assert get is not None
        L.append(get(enc, s, gh) if live is None or live(ms, s) else None)
    return tuple(L), records(enc, ms, s, gh, ids)


def records(enc: Encoder, ms: str, s: RunState, gh: Ghosts, ids: Sequence[str] | None = None) -> list[Json]:
    """One record per id: (is it the live call's id, its binding, its ghost binding, its ghost
    first successes). The live call is the newest request while it is being decided, or the
    proposed call the next step takes up."""
    if request_live(ms, s):
        live_id: object = s.requests[-1].call_id
    elif pending_live(ms, s):
        call = s.response[s.cursor]  # type: ignore[index]
        live_id = call.get("id") if isinstance(call, dict) else None
    else:
        live_id = None
    return [(cid == live_id, enc.binding(s.bindings.get(cid)), gh.gexp(cid), gh.gfirst(cid))
            for cid in (enc.U.ids if ids is None else ids)]


def _final(final: str | None) -> bool:
    if final is None:
        return False
    if final != FINAL_TEXT:
        raise NonLocal("final answer text")
    return True


def _history(enc: Encoder, s: RunState) -> dict[int, Json]:
    """``core.rules._binding_history`` with the keys encoded (the invariants' own recomputation)."""
    out: dict[int, Json] = {}
    for idx, h in core._binding_history(s).items():
        out[idx] = None if h is None else (enc.key(h[0]) if h[0] else None, enc.key(h[1]))
    return out


def _firsts(enc: Encoder, s: RunState) -> dict[tuple[object, Json], tuple[int, Json]]:
    """``core.rules._first_success`` with keys and outputs encoded."""
    try:
        firsts = core._first_success(s)
    except (AssertionError, IndexError) as exc:
        raise NonLocal(f"first successes: {type(exc).__name__}") from None
    return {(cid, enc.key(key)): (idx, enc.output(out)) for (cid, key), (idx, out) in firsts.items()}


def orbit_size(key: Json, n_values: int) -> int:
    """How many concrete states the canonical ``key`` stands for (its orbit under the symmetry):
    the distinct assignments of its records to the ids, times two when the value swap yields a
    different state. A terminal key stands for itself."""
    L, recs = key
    if not recs:
        return 1
    counts: dict[Json, int] = {}
    for r in recs:
        counts[r] = counts.get(r, 0) + 1
    n = math.factorial(len(recs))
    for c in counts.values():
        n //= math.factorial(c)
    if n_values == 2:
        L2, recs2 = swap_values(L), tuple(sorted((swap_values(r) for r in recs), key=_order))
        if (L2, recs2) != (L, tuple(sorted(recs, key=_order))):
            n *= 2
    return n
