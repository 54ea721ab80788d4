"""Section 6 of the spec as data: ``spec/writes.toml`` loaded and validated.

The tool kinds, what an external system offers to reconcile, the states and transitions of one
operation in the operation ledger, the crash points, the answer code and stop reason of section 6,
its invariants and the broken variants the model checker must catch. Definition errors are
:class:`~loopspec.spec.base.SpecError` naming the entry and field.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..support import safejson
from .base import SpecError, default_spec_path

__all__ = ["OpState", "OpTransition", "WriteSpec", "load_write_spec", "write_spec_path"]


@dataclass(frozen=True, slots=True)
class OpState:
    id: str
    doc: str
    initial: bool = False
    final: bool = False


@dataclass(frozen=True, slots=True)
class OpTransition:
    id: str
    name: str
    sources: tuple[str, ...]
    dest: str
    rules: tuple[str, ...]
    doc: str


@dataclass(frozen=True, slots=True)
class Item:
    """A crash point, invariant, broken variant, code or stop reason: an id, its text and its fields."""

    id: str
    doc: str
    fields: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class WriteSpec:
    path: str
    version: str
    kinds: tuple[str, ...]
    reconcile: tuple[str, ...]
    scopes: tuple[str, ...]
    default_scope: str
    states: tuple[OpState, ...]
    transitions: tuple[OpTransition, ...]
    crash_points: tuple[Item, ...]
    codes: tuple[Item, ...]
    stop_reasons: tuple[Item, ...]
    invariants: tuple[Item, ...]
    variants: tuple[Item, ...]

    def transition(self, name: str) -> OpTransition:
        return next(t for t in self.transitions if t.name == name)


def write_spec_path() -> Path:
    """``writes.toml`` beside the default spec (the shipped one unless ``--spec`` chose another)."""
    return default_spec_path().with_name("writes.toml")


def _err(path: str, entry: str, field: str, msg: str) -> SpecError:
    return SpecError(msg, entry=entry, field=field, path=path)


def _str(path: str, entry: str, raw: Mapping[str, Any], field: str) -> str:
    v = raw.get(field)
    if not isinstance(v, str) or not v:
        raise _err(path, entry, field, "expected a non-empty string")
    return v


def _strs(path: str, entry: str, raw: Mapping[str, Any], field: str) -> tuple[str, ...]:
    v = raw.get(field)
    if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v) or len(set(v)) != len(v):
        raise _err(path, entry, field, "expected a non-empty list of distinct strings")
    return tuple(v)


def _items(path: str, doc: Mapping[str, Any], table: str, fields: tuple[str, ...], text: str = "doc") -> tuple[Item, ...]:
    raw = doc.get(table)
    if not isinstance(raw, list) or not raw:
        raise _err(path, table, "", "expected a non-empty array of tables")
    out: list[Item] = []
    for n, e in enumerate(raw):
        if not isinstance(e, dict):
            raise _err(path, f"{table} #{n + 1}", "", "expected a table")
        iid = _str(path, f"{table} #{n + 1}", e, "id")
        entry = f"{table} {iid}"
        if any(i.id == iid for i in out):
            raise _err(path, entry, "id", "duplicate id")
        out.append(Item(iid, _str(path, entry, e, text), {f: _str(path, entry, e, f) for f in fields}))
    return tuple(out)


def parse_write_spec(text: str, path: str = "writes.toml") -> WriteSpec:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"not TOML: {exc}", path=path) from None
    meta = doc.get("meta")
    if not isinstance(meta, dict):
        raise _err(path, "meta", "", "expected a table")
    kinds_t = doc.get("kinds")
    if not isinstance(kinds_t, dict):
        raise _err(path, "kinds", "", "expected a table")
    kinds = _strs(path, "kinds", kinds_t, "kinds")
    reconcile = _strs(path, "kinds", kinds_t, "reconcile")
    scopes = _strs(path, "kinds", kinds_t, "scopes")
    default_scope = _str(path, "kinds", kinds_t, "default_scope")
    if default_scope not in scopes:
        raise _err(path, "kinds", "default_scope", f"not one of the scopes {list(scopes)}")

    raw_states = doc.get("op_state")
    if not isinstance(raw_states, list) or not raw_states:
        raise _err(path, "op_state", "", "expected a non-empty array of tables")
    states: list[OpState] = []
    for n, e in enumerate(raw_states):
        sid = _str(path, f"op_state #{n + 1}", e, "id")
        if any(s.id == sid for s in states):
            raise _err(path, f"op_state {sid}", "id", "duplicate id")
        states.append(OpState(sid, _str(path, f"op_state {sid}", e, "doc"), bool(e.get("initial", False)),
                              bool(e.get("final", False))))
    if sum(s.initial for s in states) != 1:
        raise _err(path, "op_state", "initial", "exactly one state is initial")
    state_ids = {s.id for s in states}

    raw_t = doc.get("op_transition")
    if not isinstance(raw_t, list) or not raw_t:
        raise _err(path, "op_transition", "", "expected a non-empty array of tables")
    transitions: list[OpTransition] = []
    for n, e in enumerate(raw_t):
        tid = _str(path, f"op_transition #{n + 1}", e, "id")
        entry = f"op_transition {tid}"
        if any(t.id == tid for t in transitions):
            raise _err(path, entry, "id", "duplicate id")
        name = _str(path, entry, e, "name")
        if any(t.name == name for t in transitions):
            raise _err(path, entry, "name", "duplicate name")
        sources = _strs(path, entry, e, "from")
        dest = _str(path, entry, e, "to")
        for s in (*sources, dest):
            if s not in state_ids:
                raise _err(path, entry, "from" if s in sources else "to", f"unknown state {s!r}")
        rules = _strs(path, entry, e, "rules")
        transitions.append(OpTransition(tid, name, sources, dest, rules, _str(path, entry, e, "doc")))
    for s in states:
        if s.final and any(s.id in t.sources and t.dest != s.id for t in transitions):
            raise _err(path, f"op_state {s.id}", "final", "a final state has no transition to another state")
    reached = {next(s.id for s in states if s.initial)}
    grew = True
    while grew:
        new = {t.dest for t in transitions if set(t.sources) & reached} - reached
        reached |= new
        grew = bool(new)
    if reached != state_ids:
        raise _err(path, "op_state", "", f"unreachable from the initial state: {sorted(state_ids - reached)}")

    names = {t.name for t in transitions} | {"send", "answer", "lookup"}
    crash_points = _items(path, doc, "crash_point", ("after",))
    for c in crash_points:
        if c.fields["after"] not in names:
            raise _err(path, f"crash_point {c.id}", "after",
                       f"not a transition name, `send`, `answer` or `lookup`: {c.fields['after']!r}")
    for table in ("code", "stop_reason"):  # one table of codes and stop reasons: loop.toml's
        if table in doc:
            raise _err(path, table, "", f"section 6's {table}s are in loop.toml's [[{table}]] table, not here")
    codes: tuple[Item, ...] = ()
    stop_reasons: tuple[Item, ...] = ()
    invariants = _items(path, doc, "invariant", ())
    for i in invariants:
        if not i.id.startswith("INV-W-"):
            raise _err(path, f"invariant {i.id}", "id", "section 6 invariant ids start with INV-W-")
    variants = _items(path, doc, "variant", ("breaks",))
    return WriteSpec(path, _str(path, "meta", meta, "spec_version"), kinds, reconcile, scopes, default_scope,
                     tuple(states), tuple(transitions), crash_points, codes, stop_reasons, invariants, variants)


_CACHE: dict[str, WriteSpec] = {}


def load_write_spec(path: str | Path | None = None) -> WriteSpec:
    """Load and validate ``writes.toml`` (default: beside the default spec). Cached per path."""
    p = Path(path) if path is not None else write_spec_path()
    key = str(p.resolve())
    if key not in _CACHE:
        try:
            text = safejson.read_text(p, what="spec")
        except safejson.JsonInputError as exc:
            raise SpecError(f"cannot read the write spec: {exc.message()}", path=str(p), line=exc.line or 0) from None
        _CACHE[key] = parse_write_spec(text, str(p))
    return _CACHE[key]
