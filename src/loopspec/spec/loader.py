"""Load and validate the normative spec (``spec/loop.toml``) into frozen, typed objects.

A malformed spec is rejected with a :class:`SpecError` that names the offending entry, its
field and, when it can be found, the line of the file ("spec/loop.toml:412: transition T12:
dest: unknown state 'nowhere'"). Structural checks follow the diagram tools of
python-statemachine: an unreachable state, a non-terminal trap state or a terminal state with
an exit is a definition error, not a warning.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..support import safejson
from .base import _CHOSEN, SpecError, default_spec_path

__all__ = [
    "EVIDENCE",
    "Choice",
    "Code",
    "Concurrency",
    "Effect",
    "Guard",
    "Invariant",
    "Parameter",
    "Profile",
    "Rule",
    "Spec",
    "State",
    "StopReason",
    "Transition",
    "default_spec",
    "load_rules",
    "load_spec",
    "parse_spec",
    "using_spec",
]

CODE_KINDS: Final = ("violation", "failure", "limit", "unknown")
NEXT_ACTIONS: Final = ("FIX_INPUT", "STOP", "RETRY_WITH_BUDGET", "WAIT_FOR_RECONCILIATION")
STATUSES: Final = ("COMPLETED", "TRUNCATED", "REJECTED", "FAILED", "CANCELLED")
_RULE_ID = re.compile(r"^R\d+$")
_INV_ID = re.compile(r"^INV-[A-Z0-9-]+$")
_IDENT = re.compile(r"^[a-z][a-z0-9_]*$")
_UPPER = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclass(frozen=True, slots=True)
class State:
    id: str
    phase: str
    doc: str
    initial: bool = False
    status: str | None = None

    @property
    def terminal(self) -> bool:
        return self.phase == "terminal"


@dataclass(frozen=True, slots=True)
class Guard:
    id: str
    doc: str


@dataclass(frozen=True, slots=True)
class Effect:
    id: str
    doc: str


@dataclass(frozen=True, slots=True)
class Code:
    id: str
    kind: str
    next_action: str
    stop_reason: str
    message: str


@dataclass(frozen=True, slots=True)
class StopReason:
    id: str
    status: str
    doc: str


@dataclass(frozen=True, slots=True)
class Transition:
    id: str
    name: str
    trigger: str
    sources: tuple[str, ...]
    dest: str
    when: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()
    effect: str | None = None
    code: str | None = None
    stop_reason: str | None = None
    escalates: str | None = None
    rules: tuple[str, ...] = ()

    @property
    def guards(self) -> tuple[str, ...]:
        return self.when + self.unless

    def guard_label(self) -> str:
        """Guards in the bracket notation used by the diagrams: ``[a ∧ ¬b]``."""
        parts = [*self.when, *(f"¬{g}" for g in self.unless)]
        return "[" + " ∧ ".join(parts) + "]" if parts else ""


@dataclass(frozen=True, slots=True)
class Invariant:
    id: str
    doc: str


@dataclass(frozen=True, slots=True)
class Rule:
    """A numbered rule of SPEC.md: its id, strength (MUST/SHOULD), title and cited invariants."""

    id: str
    strength: str
    title: str
    invariants: tuple[str, ...]
    line: int
    section: int = 0  # the number of the `## N.` section it is in


#: SPEC.md's section 6 (write tools that survive crashes): its rules are about the operation ledger, not the
#: run ledger or the loop machine; the oracle and the fuzzer, which judge the loop, leave them out.
WRITE_SECTION: Final = 6


@dataclass(frozen=True, slots=True)
class Parameter:
    """A profile parameter (SPEC.md section 4): a point where frameworks legitimately choose; the
    first of ``values`` is the strict default."""

    id: str
    rules: tuple[str, ...]
    values: tuple[str, ...]
    doc: str
    meaning: Mapping[str, str]
    texts: tuple[str, ...] = ()  # the values a choice must give a text for (the framework's fixed wording)

    @property
    def default(self) -> str:
        return self.values[0]


#: How a profile choice is known (SPEC.md P-EVIDENCE), strongest first.
EVIDENCE = ("documented", "source", "observed")


@dataclass(frozen=True, slots=True)
class Choice:
    """One choice of a profile: a parameter's value, with its evidence graded (P-EVIDENCE):

    * ``documented``: ``quote`` is an exact sentence of the framework's documentation at ``source`` (a
      link), shipped in the pinned package in the file ``shipped`` (the docstring the page renders);
    * ``source``: ``quote`` is a line of the function ``function`` of the file ``shipped`` in the
      framework's installed source (``source`` links to it);
    * ``observed``: neither says it; only the runs show it (``source`` may link to related text).
    """

    parameter: str
    value: str
    source: str | None
    note: str
    text: str | None = None  # the framework's fixed text, for a value that needs one (Parameter.texts)
    evidence: str = "observed"
    quote: str | None = None
    shipped: str | None = None  # the file of the installed framework that holds the quote
    function: str | None = None  # evidence = source: the function (Class.method) holding the quoted line

    @property
    def promised(self) -> bool:
        """Does the framework promise this behaviour (documented or in its source), beyond the runs?"""
        return self.evidence != "observed"


@dataclass(frozen=True, slots=True)
class Profile:
    """A named set of choices (the strict default for every parameter it does not set)."""

    id: str
    framework: str
    tested: str
    doc: str
    choices: tuple[Choice, ...]

    def value(self, parameter: str, spec: Spec) -> str:
        for c in self.choices:
            if c.parameter == parameter:
                return c.value
        return spec.parameter(parameter).default

    def text(self, parameter: str) -> str | None:
        for c in self.choices:
            if c.parameter == parameter:
                return c.text
        return None


@dataclass(frozen=True, slots=True)
class Concurrency:
    """Section 5 of SPEC.md as data: the MCP hints with their defaults, the overlap policies (each
    with its meaning) and the defaults of a run (``[defaults.concurrency]``)."""

    hints: Mapping[str, bool]
    overlap: tuple[str, ...]
    meaning: Mapping[str, str]
    max_concurrency: int = 1
    default_overlap: str = "read-only"


@dataclass(frozen=True, slots=True)
class Spec:
    name: str
    version: str
    phases: tuple[str, ...]
    states: tuple[State, ...]
    guards: tuple[Guard, ...]
    effects: tuple[Effect, ...]
    codes: tuple[Code, ...]
    stop_reasons: tuple[StopReason, ...]
    transitions: tuple[Transition, ...]
    invariants: tuple[Invariant, ...]
    modes: Mapping[str, tuple[str, ...]]
    defaults: Mapping[str, Mapping[str, Any]]
    parameters: tuple[Parameter, ...] = ()
    profiles: tuple[Profile, ...] = ()
    concurrency: Concurrency = field(default_factory=lambda: Concurrency({}, ("read-only",), {}))
    path: str = ""
    _index: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False, compare=False)

    # -- lookups -------------------------------------------------------------------------
    @property
    def initial(self) -> State:
        return next(s for s in self.states if s.initial)

    @property
    def terminal_states(self) -> tuple[State, ...]:
        return tuple(s for s in self.states if s.terminal)

    def state(self, sid: str) -> State:
        return self._index["state"][sid]  # type: ignore[no-any-return]

    def code(self, cid: str) -> Code:
        return self._index["code"][cid]  # type: ignore[no-any-return]

    def stop_reason(self, rid: str) -> StopReason:
        return self._index["stop_reason"][rid]  # type: ignore[no-any-return]

    def parameter(self, pid: str) -> Parameter:
        for p in self.parameters:
            if p.id == pid:
                return p
        raise KeyError(pid)

    def profile(self, pid: str) -> Profile:
        """A profile by id; ``strict`` is the strict default (no choices)."""
        if pid == "strict":
            return Profile("strict", "", "", "The strict spec: every parameter at its default.", ())
        for p in self.profiles:
            if p.id == pid:
                return p
        raise KeyError(pid)

    def transition(self, tid: str) -> Transition:
        return self._index["transition"][tid]  # type: ignore[no-any-return]

    def codes_of_kind(self, kind: str) -> tuple[Code, ...]:
        return tuple(c for c in self.codes if c.kind == kind)

    def group(self, source: str, trigger: str) -> tuple[Transition, ...]:
        """The transitions leaving ``source`` on ``trigger``, in evaluation order (rule R0)."""
        return tuple(t for t in self.transitions if source in t.sources and t.trigger == trigger)

    def triggers_from(self, source: str) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for t in self.transitions:
            if source in t.sources:
                seen.setdefault(t.trigger, None)
        return tuple(seen)

    def as_dict(self) -> dict[str, Any]:
        """The machine as a plain dict (the shape of transitions' ``MarkupMachine.markup``)."""
        return {
            "name": self.name,
            "version": self.version,
            "initial": self.initial.id,
            "states": [
                {"name": s.id, "phase": s.phase, "status": s.status, "doc": s.doc}
                for s in self.states
            ],
            "transitions": [
                {
                    "id": t.id,
                    "name": t.name,
                    "trigger": t.trigger,
                    "source": list(t.sources),
                    "dest": t.dest,
                    "conditions": list(t.when),
                    "unless": list(t.unless),
                    "after": t.effect,
                    "code": t.code,
                    "stop_reason": t.stop_reason,
                    "escalates": t.escalates,
                    "rules": list(t.rules),
                }
                for t in self.transitions
            ],
        }


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


_DEFAULT: dict[Path | None, Spec] = {}


def default_spec() -> Spec:
    """The default spec (:func:`default_spec_path`), loaded once per choice: cheap enough for hot paths."""
    key = _CHOSEN[-1] if _CHOSEN else None
    spec = _DEFAULT.get(key)
    if spec is None:
        spec = _DEFAULT[key] = load_spec()
    return spec


@contextlib.contextmanager
def using_spec(path: str | Path | None) -> Iterator[Spec]:
    """Within the block the spec at ``path`` is the default everywhere (the engine, the judge, the model
    checker, the oracle, and the files looked for next to it); ``None`` keeps the current default.
    The spec is loaded and validated first (:class:`SpecError` when it is not usable)."""
    if path is None:
        yield load_spec()
        return
    p = Path(path).resolve()
    spec = load_spec(p)
    _CHOSEN.append(p)
    try:
        yield spec
    finally:
        _CHOSEN.pop()


_CACHE: dict[str, Spec] = {}


def load_spec(path: str | Path | None = None) -> Spec:
    """Load and validate a spec file (default: the shipped one). Results are cached per path."""
    p = Path(path) if path is not None else default_spec_path()
    key = str(p.resolve())
    if key in _CACHE:
        return _CACHE[key]
    try:
        text = safejson.read_text(p, what="spec")
    except safejson.JsonInputError as exc:
        raise SpecError(f"cannot read the spec: {exc.message()}", path=str(p), line=exc.line or 0) from None
    spec = parse_spec(text, path=str(p))
    _CACHE[key] = spec
    return spec


def _table_lines(text: str) -> dict[tuple[str, str], int]:
    """Map (table, id) -> 1-based line of the entry's ``id = "..."`` line."""
    lines: dict[tuple[str, str], int] = {}
    table = ""
    header = re.compile(r"^\s*\[\[\s*([A-Za-z_]+)\s*\]\]")
    idline = re.compile(r'^\s*id\s*=\s*"([^"]*)"')
    for n, line in enumerate(text.splitlines(), start=1):
        if m := header.match(line):
            table = m.group(1)
        elif m := idline.match(line):
            lines.setdefault((table, m.group(1)), n)
    return lines


class _Ctx:
    def __init__(self, text: str, path: str) -> None:
        self.path = path
        self.lines = _table_lines(text)

    def error(self, table: str, eid: str, fld: str, message: str) -> SpecError:
        return SpecError(
            message,
            entry=f"{table} {eid}" if eid else table,
            field=fld,
            path=self.path,
            line=self.lines.get((table, eid), 0),
        )


def _entries(ctx: _Ctx, doc: Mapping[str, Any], table: str) -> list[dict[str, Any]]:
    raw = doc.get(table, [])
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        raise ctx.error(table, "", "", f"expected an array of tables [[{table}]]")
    seen: dict[str, None] = {}
    for i, entry in enumerate(raw):
        eid = entry.get("id")
        if not isinstance(eid, str) or not eid:
            raise ctx.error(table, f"#{i + 1}", "id", "missing or non-string id")
        if eid in seen:
            raise ctx.error(table, eid, "id", f"duplicate id {eid!r}")
        seen[eid] = None
    return raw


def _str(ctx: _Ctx, table: str, e: Mapping[str, Any], key: str, *, required: bool = True) -> str:
    v = e.get(key)
    if v is None and not required:
        return ""
    if not isinstance(v, str) or (required and not v):
        raise ctx.error(table, str(e.get("id", "")), key, "missing or not a non-empty string")
    return v


def _strs(ctx: _Ctx, table: str, e: Mapping[str, Any], key: str) -> tuple[str, ...]:
    v = e.get(key, [])
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise ctx.error(table, str(e.get("id", "")), key, "expected a list of strings")
    return tuple(v)


def _known(ctx: _Ctx, table: str, eid: str, fld: str, value: str, known: Iterable[str], what: str) -> None:
    if value not in set(known):
        raise ctx.error(table, eid, fld, f"unknown {what} {value!r}")


def parse_spec(text: str, *, path: str = "<spec>") -> Spec:
    """Parse and validate spec text. Raises :class:`SpecError` naming the bad entry."""
    try:
        return _parse_spec(text, path)
    except SpecError:
        raise
    except (TypeError, KeyError, AttributeError, ValueError, IndexError) as exc:  # a value of an unexpected shape
        raise SpecError(f"a value of the wrong type or shape where the spec expects another "
                        f"({type(exc).__name__}: {exc})", path=path) from None


def _parse_spec(text: str, path: str) -> Spec:
    ctx = _Ctx(text, path)
    try:  # TOML under the limits JSON input gets (depth, integer digits, finite numbers)
        doc = safejson.parse_toml(text)
    except safejson.JsonInputError as exc:
        raise SpecError(exc.message(), path=path, line=exc.line or 0) from None

    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise ctx.error("meta", "", "", "expected a table")
    phases = _strs(ctx, "meta", meta, "phases")
    if "terminal" not in phases:
        raise ctx.error("meta", "", "phases", "must include 'terminal'")

    # -- states --------------------------------------------------------------------------
    states: list[State] = []
    for e in _entries(ctx, doc, "state"):
        sid = e["id"]
        if not _IDENT.match(sid):
            raise ctx.error("state", sid, "id", "state ids are lower_snake_case")
        phase = _str(ctx, "state", e, "phase")
        _known(ctx, "state", sid, "phase", phase, phases, "phase")
        status = e.get("status")
        if phase == "terminal":
            if status not in STATUSES:
                raise ctx.error("state", sid, "status", f"a terminal state needs a status in {STATUSES}")
        elif status is not None:
            raise ctx.error("state", sid, "status", "only terminal states carry a status")
        initial = e.get("initial", False)
        if not isinstance(initial, bool):
            raise ctx.error("state", sid, "initial", "expected true or false")
        states.append(State(sid, phase, _str(ctx, "state", e, "doc"), initial, status))
    initials = [s for s in states if s.initial]
    if len(initials) != 1:
        raise ctx.error("state", "", "initial", f"exactly one initial state is required, found {len(initials)}")
    if initials[0].terminal:
        raise ctx.error("state", initials[0].id, "initial", "the initial state cannot be terminal")
    statuses = [s.status for s in states if s.terminal]
    for st in STATUSES:
        if statuses.count(st) != 1:
            raise ctx.error("state", "", "status", f"status {st} needs exactly one terminal state, found {statuses.count(st)}")

    guards = tuple(Guard(e["id"], _str(ctx, "guard", e, "doc")) for e in _entries(ctx, doc, "guard"))
    effects = tuple(Effect(e["id"], _str(ctx, "effect", e, "doc")) for e in _entries(ctx, doc, "effect"))
    for g in guards:
        if not _IDENT.match(g.id):
            raise ctx.error("guard", g.id, "id", "guard ids are lower_snake_case")

    stop_reasons: list[StopReason] = []
    for e in _entries(ctx, doc, "stop_reason"):
        st = _str(ctx, "stop_reason", e, "status")
        _known(ctx, "stop_reason", e["id"], "status", st, STATUSES, "status")
        stop_reasons.append(StopReason(e["id"], st, _str(ctx, "stop_reason", e, "doc")))
    reason_ids = {r.id for r in stop_reasons}

    codes: list[Code] = []
    for e in _entries(ctx, doc, "code"):
        cid = e["id"]
        if not _UPPER.match(cid):
            raise ctx.error("code", cid, "id", "codes are UPPER_SNAKE_CASE")
        kind = _str(ctx, "code", e, "kind")
        _known(ctx, "code", cid, "kind", kind, CODE_KINDS, "kind")
        na = _str(ctx, "code", e, "next_action")
        _known(ctx, "code", cid, "next_action", na, NEXT_ACTIONS, "next action")
        sr = _str(ctx, "code", e, "stop_reason")
        _known(ctx, "code", cid, "stop_reason", sr, reason_ids, "stop reason")
        codes.append(Code(cid, kind, na, sr, _str(ctx, "code", e, "message")))

    invariants: list[Invariant] = []
    for e in _entries(ctx, doc, "invariant"):
        if not _INV_ID.match(e["id"]):
            raise ctx.error("invariant", e["id"], "id", "invariant ids look like INV-NAME")
        invariants.append(Invariant(e["id"], _str(ctx, "invariant", e, "doc")))

    # -- transitions ---------------------------------------------------------------------
    state_ids = {s.id for s in states}
    by_id = {s.id: s for s in states}
    guard_ids = {g.id for g in guards}
    effect_ids = {f.id for f in effects}
    code_ids = {c.id for c in codes}
    transitions: list[Transition] = []
    names: set[str] = set()
    for e in _entries(ctx, doc, "transition"):
        tid = e["id"]
        name = _str(ctx, "transition", e, "name")
        if name in names:
            raise ctx.error("transition", tid, "name", f"duplicate transition name {name!r}")
        names.add(name)
        trigger = _str(ctx, "transition", e, "trigger")
        if not _IDENT.match(trigger):
            raise ctx.error("transition", tid, "trigger", "triggers are lower_snake_case")
        sources = _strs(ctx, "transition", e, "source")
        if not sources:
            raise ctx.error("transition", tid, "source", "missing source state")
        for s in sources:
            _known(ctx, "transition", tid, "source", s, state_ids, "state")
            if by_id[s].terminal:
                raise ctx.error("transition", tid, "source", f"terminal state {s!r} cannot have an exit")
        dest = _str(ctx, "transition", e, "dest")
        _known(ctx, "transition", tid, "dest", dest, state_ids, "state")
        when = _strs(ctx, "transition", e, "when")
        unless = _strs(ctx, "transition", e, "unless")
        for g in when + unless:
            _known(ctx, "transition", tid, "when/unless", g, guard_ids, "guard")
        effect = e.get("effect")
        if effect is not None:
            _known(ctx, "transition", tid, "effect", effect, effect_ids, "effect")
        code = e.get("code")
        if code is not None:
            _known(ctx, "transition", tid, "code", code, code_ids, "code")
        sr = e.get("stop_reason")
        esc = e.get("escalates")
        if sr is not None:
            _known(ctx, "transition", tid, "stop_reason", sr, reason_ids, "stop reason")
        if esc is not None:
            _known(ctx, "transition", tid, "escalates", esc, CODE_KINDS, "code kind")
        rules = _strs(ctx, "transition", e, "rules")
        for r in rules:
            if not _RULE_ID.match(r):
                raise ctx.error("transition", tid, "rules", f"rule ids look like R12, got {r!r}")
        d = by_id[dest]
        if d.terminal:
            if (sr is None) == (esc is None):
                raise ctx.error("transition", tid, "stop_reason", "a transition into a terminal state needs exactly one of stop_reason / escalates")
            if sr is not None and {r.id: r for r in stop_reasons}[sr].status != d.status:
                raise ctx.error("transition", tid, "stop_reason", f"stop reason {sr} has status {next(r.status for r in stop_reasons if r.id == sr)}, but {dest!r} is {d.status}")
            if esc is not None:
                for c in codes:
                    if c.kind == esc and {r.id: r for r in stop_reasons}[c.stop_reason].status != d.status:
                        raise ctx.error("transition", tid, "escalates", f"code {c.id} ({esc}) stops with {c.stop_reason}, whose status is not {d.status}")
        elif sr is not None or esc is not None:
            raise ctx.error("transition", tid, "stop_reason", "only transitions into terminal states carry a stop reason")
        transitions.append(
            Transition(tid, name, trigger, sources, dest, when, unless, effect, code, sr, esc, rules)
        )

    # Fallback (unguarded) transitions come last in their (source, trigger) group.
    groups: dict[tuple[str, str], list[Transition]] = {}
    for t in transitions:
        for s in t.sources:
            groups.setdefault((s, t.trigger), []).append(t)
    for (s, trig), ts in groups.items():
        for i, t in enumerate(ts):
            if not t.guards and i != len(ts) - 1:
                raise ctx.error("transition", t.id, "when", f"unguarded fallback must be the last transition from {s!r} on {trig!r}; {ts[i + 1].id} can never fire")

    # Every declared guard and effect is used (a dead declaration is a definition error).
    used_guards = {g for t in transitions for g in t.guards}
    for g in guards:
        if g.id not in used_guards:
            raise ctx.error("guard", g.id, "id", "declared but used by no transition")
    used_effects = {t.effect for t in transitions}
    for f in effects:
        if f.id not in used_effects:
            raise ctx.error("effect", f.id, "id", "declared but used by no transition")

    # Reachability from the initial state; every non-terminal state must reach a terminal one.
    succ: dict[str, set[str]] = {s.id: set() for s in states}
    for t in transitions:
        for s in t.sources:
            succ[s].add(t.dest)
    reach = _closure({initials[0].id}, succ)
    for s in states:
        if s.id not in reach:
            raise ctx.error("state", s.id, "id", f"unreachable from the initial state {initials[0].id!r}")
    terminal_ids = {s.id for s in states if s.terminal}
    for s in states:
        if s.terminal:
            continue
        if not succ[s.id]:
            raise ctx.error("state", s.id, "id", "non-terminal trap state: no transition leaves it")
        if not (_closure({s.id}, succ) & terminal_ids):
            raise ctx.error("state", s.id, "id", "non-terminal trap: no terminal state is reachable from it")

    modes_raw = doc.get("modes", {})
    modes = {k: tuple(v) for k, v in modes_raw.items()} if isinstance(modes_raw, dict) else {}
    for key in ("mode", "on_limit"):
        if key not in modes:
            raise ctx.error("modes", "", key, "missing")
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict) or not {"batch", "loop"} <= set(defaults):
        raise ctx.error("defaults", "", "", "needs [defaults.batch] and [defaults.loop]")

    parameters, profiles = _parse_profiles(ctx, doc)
    concurrency = _parse_concurrency(ctx, doc, defaults)

    spec = Spec(
        name=_str(ctx, "meta", meta, "name"),
        version=_str(ctx, "meta", meta, "spec_version"),
        phases=phases,
        states=tuple(states),
        guards=guards,
        effects=effects,
        codes=tuple(codes),
        stop_reasons=tuple(stop_reasons),
        transitions=tuple(transitions),
        invariants=tuple(invariants),
        modes=modes,
        parameters=parameters,
        profiles=profiles,
        concurrency=concurrency,
        defaults=defaults,
        path=path,
    )
    spec._index.update(
        state={s.id: s for s in states},
        code={c.id: c for c in codes},
        stop_reason={r.id: r for r in stop_reasons},
        transition={t.id: t for t in transitions},
    )
    return spec


def _closure(start: set[str], succ: Mapping[str, set[str]]) -> set[str]:
    seen = set(start)
    todo = list(start)
    while todo:
        for n in succ.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


# --------------------------------------------------------------------------------------------
# SPEC.md rules
# --------------------------------------------------------------------------------------------

_RULE_HEAD = re.compile(r"^#{2,4}\s+(R\d+)\s+\((MUST|SHOULD|MAY)\)\s+(.+?)\s*$")
_SECTION_HEAD = re.compile(r"^##\s+(\d+)\.\s")
_CHECKS = re.compile(r"^\s*Checked by:\s*(.+?)\s*$")


def load_rules(path: str | Path | None = None, spec: Spec | None = None) -> tuple[Rule, ...]:
    """Parse the numbered rules of SPEC.md and check that each cites known invariants.

    A rule is a heading ``### R7 (MUST) title`` followed, within its section, by a line
    ``Checked by: INV-A, INV-B`` (or ``Checked by: conformance vectors``).
    """
    p = Path(path) if path is not None else default_spec_path().with_name("SPEC.md")
    try:
        text = safejson.read_text(p, what="rules text")
    except safejson.JsonInputError as exc:
        if exc.reason == "no such file":
            raise SpecError("no such file (the rules text, SPEC.md, is looked for next to the spec; "
                            "give --rules FILE)", path=str(p)) from None
        raise SpecError(f"cannot read the rules: {exc.message()}", path=str(p), line=exc.line or 0) from None
    spec = spec or load_spec()
    inv_ids = {i.id for i in spec.invariants} | _write_invariant_ids(p.with_name("writes.toml"))
    rules: list[Rule] = []
    current: dict[str, Any] | None = None

    def close() -> None:
        if current is None:
            return
        if current["checks"] is None:
            raise SpecError("rule has no 'Checked by:' line", entry=f"rule {current['id']}", path=str(p), line=current["line"])
        rules.append(Rule(current["id"], current["strength"], current["title"], tuple(current["checks"]), current["line"],
                          current["section"]))

    section = 0
    for n, line in enumerate(text.splitlines(), start=1):
        if m := _SECTION_HEAD.match(line):
            section = int(m.group(1))
        if m := _RULE_HEAD.match(line):
            close()
            if any(r.id == m.group(1) for r in rules):
                raise SpecError(f"duplicate rule id {m.group(1)}", entry=f"rule {m.group(1)}", path=str(p), line=n)
            current = {"id": m.group(1), "strength": m.group(2), "title": m.group(3), "checks": None, "line": n,
                       "section": section}
        elif line.startswith("#") and current is not None and not line.startswith("####"):
            close()
            current = None
        elif current is not None and (m := _CHECKS.match(line)):
            cited = [c.strip().strip("`") for c in m.group(1).split(",")]
            invs = [c for c in cited if c.startswith("INV-")]
            for c in invs:
                if c not in inv_ids:
                    raise SpecError(f"cites unknown invariant {c}", entry=f"rule {current['id']}", path=str(p), line=n)
            current["checks"] = invs
    close()
    return tuple(rules)


def _write_invariant_ids(path: Path) -> set[str]:
    """The invariants of section 6 (``writes.toml`` beside SPEC.md), which its rules may cite; none when
    there is no such file (a user's spec without section 6)."""
    if not path.is_file():
        return set()
    from .writes import load_write_spec  # section 6's own loader (it imports this module)

    return {i.id for i in load_write_spec(path).invariants}


_HINTS: Final = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def _parse_concurrency(ctx: _Ctx, doc: Mapping[str, Any], defaults: Mapping[str, Any]) -> Concurrency:
    """``[concurrency]`` (the MCP hints and the overlap policies) and ``[defaults.concurrency]``."""
    raw = doc.get("concurrency")
    if raw is None:
        return Concurrency({h: False for h in _HINTS}, ("read-only",), {"read-only": ""})
    if not isinstance(raw, dict):
        raise ctx.error("concurrency", "", "", "expected a table")
    hints = raw.get("hints")
    if not isinstance(hints, dict) or set(hints) != set(_HINTS) or not all(isinstance(v, bool) for v in hints.values()):
        raise ctx.error("concurrency", "", "hints", f"a default (true or false) for each of {', '.join(_HINTS)}")
    overlap = _strs(ctx, "concurrency", raw, "overlap")
    if not overlap or len(set(overlap)) != len(overlap):
        raise ctx.error("concurrency", "", "overlap", "a non-empty list of distinct policy names")
    meaning = raw.get("meaning")
    if not isinstance(meaning, dict) or set(meaning) != set(overlap) or not all(
            isinstance(v, str) and v for v in meaning.values()):
        raise ctx.error("concurrency", "", "meaning", "a non-empty text for each overlap policy, and nothing else")
    d = defaults.get("concurrency", {})
    if not isinstance(d, dict):
        raise ctx.error("defaults", "", "concurrency", "expected a table")
    mc = d.get("max_concurrency", 1)
    if isinstance(mc, bool) or not isinstance(mc, int) or mc < 1:
        raise ctx.error("defaults", "", "concurrency.max_concurrency", "a positive integer")
    pol = d.get("overlap", overlap[0])
    if pol not in overlap:
        raise ctx.error("defaults", "", "concurrency.overlap", f"one of {', '.join(overlap)}")
    return Concurrency(dict(hints), overlap, dict(meaning), mc, pol)


_URL = re.compile(r"^https?://\S+$")


def _parse_profiles(ctx: _Ctx, doc: Mapping[str, Any]) -> tuple[tuple[Parameter, ...], tuple[Profile, ...]]:
    """``[[parameter]]`` and ``[[profile]]`` (SPEC.md section 4), validated: parameters name rules and
    give a meaning for each value; a profile sets known parameters to one of their non-default values,
    each at most once, with its evidence graded (P-EVIDENCE: a quote for documented and source)."""
    parameters: list[Parameter] = []
    for e in _entries(ctx, doc, "parameter"):
        pid = e["id"]
        if not _IDENT.match(pid):
            raise ctx.error("parameter", pid, "id", "parameter ids are lower_snake_case")
        rules = _strs(ctx, "parameter", e, "rules")
        if not rules:
            raise ctx.error("parameter", pid, "rules", "a parameter names the rules it relaxes")
        for r in rules:
            if not _RULE_ID.match(r):
                raise ctx.error("parameter", pid, "rules", f"rule ids look like R12, got {r!r}")
        values = _strs(ctx, "parameter", e, "values")
        if len(values) < 2 or len(set(values)) != len(values):
            raise ctx.error("parameter", pid, "values", "at least two distinct values; the first is the strict default")
        meaning = e.get("meaning")
        if not isinstance(meaning, dict) or set(meaning) != set(values) or not all(
                isinstance(v, str) and v for v in meaning.values()):
            raise ctx.error("parameter", pid, "meaning", "a non-empty text for each value, and nothing else")
        texts = _strs(ctx, "parameter", e, "texts") if "texts" in e else ()
        if not set(texts) <= set(values) - {values[0]}:
            raise ctx.error("parameter", pid, "texts", "only non-default values of this parameter can need a text")
        parameters.append(Parameter(pid, rules, values, _str(ctx, "parameter", e, "doc"), dict(meaning), texts))
    by_id = {p.id: p for p in parameters}
    profiles: list[Profile] = []
    for e in _entries(ctx, doc, "profile"):
        pid = e["id"]
        if pid == "strict":
            raise ctx.error("profile", pid, "id", "'strict' is reserved for the strict default")
        raw = e.get("choice", [])
        if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
            raise ctx.error("profile", pid, "choice", "expected an array of tables [[profile.choice]]")
        choices: list[Choice] = []
        for n, c in enumerate(raw, start=1):
            fld = f"choice[{n}]"
            param = c.get("parameter")
            if not isinstance(param, str) or param not in by_id:
                raise ctx.error("profile", pid, f"{fld}.parameter", f"unknown parameter {param!r}")
            if any(x.parameter == param for x in choices):
                raise ctx.error("profile", pid, f"{fld}.parameter", f"parameter {param!r} is set twice")
            value = c.get("value")
            if value not in by_id[param].values:
                raise ctx.error("profile", pid, f"{fld}.value",
                                f"{param} takes one of {', '.join(by_id[param].values)}, got {value!r}")
            if value == by_id[param].default:
                raise ctx.error("profile", pid, f"{fld}.value", f"{value!r} is the strict default: not a choice")
            evidence = c.get("evidence")
            if evidence not in EVIDENCE:
                raise ctx.error("profile", pid, f"{fld}.evidence", f"one of {', '.join(EVIDENCE)}, got {evidence!r}")
            source = c.get("source")
            if (source is not None or evidence != "observed") and (not isinstance(source, str) or not _URL.match(source)):
                raise ctx.error("profile", pid, f"{fld}.source", "a link (http or https URL) to the framework's "
                                "documentation or source")
            quote, shipped, function = c.get("quote"), c.get("shipped"), c.get("function")
            if evidence in ("documented", "source"):
                what = "the exact sentence quoted" if evidence == "documented" else "the quoted source line"
                if not isinstance(quote, str) or not quote.strip():
                    raise ctx.error("profile", pid, f"{fld}.quote", f"evidence = {evidence} needs {what}")
                if not isinstance(shipped, str) or not shipped:
                    raise ctx.error("profile", pid, f"{fld}.shipped", f"evidence = {evidence} needs the file of the "
                                    "installed framework that holds the quote")
            elif quote is not None or shipped is not None:
                raise ctx.error("profile", pid, f"{fld}.quote", "evidence = observed has no quote: nothing says it")
            if evidence == "source":
                if not isinstance(function, str) or not function:
                    raise ctx.error("profile", pid, f"{fld}.function", "evidence = source needs the function "
                                    "(or Class.method) that holds the quoted line")
            elif function is not None:
                raise ctx.error("profile", pid, f"{fld}.function", f"evidence = {evidence} names no function")
            note = c.get("note")
            if not isinstance(note, str) or not note:
                raise ctx.error("profile", pid, f"{fld}.note", "missing or not a non-empty string")
            text = c.get("text")
            if value in by_id[param].texts:
                if not isinstance(text, str) or not text:
                    raise ctx.error("profile", pid, f"{fld}.text", f"{param} = {value} needs the framework's text")
            elif text is not None:
                raise ctx.error("profile", pid, f"{fld}.text", f"{param} = {value} takes no text")
            choices.append(Choice(param, value, source, note, text, evidence, quote, shipped, function))
        profiles.append(Profile(pid, _str(ctx, "profile", e, "framework"), _str(ctx, "profile", e, "tested"),
                                _str(ctx, "profile", e, "doc"), tuple(choices)))
    return tuple(parameters), tuple(profiles)
