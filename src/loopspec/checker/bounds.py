"""The bounds of the model checker: ``spec/bounds.toml`` loaded into frozen objects.

A bad bounds file is a usage error (:class:`BoundsError`, exit 2) that names the file, the entry
and the field. ``--bound scope.key=value`` overrides a field of a scope from the command line.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core.rules import (
    FAILURE_CATEGORIES,
    LIMIT_POLICIES,
    MODES,
    ToolDefinitionError,
    ToolSchema,
    parse_schema,
)
from ..spec.base import default_spec_path
from ..spec.loader import default_spec
from ..support import safejson

__all__ = ["Bounds", "BoundsError", "Scope", "ToolDef", "apply_overrides", "default_bounds_path", "load_bounds"]

Json = Any


class BoundsError(ValueError):
    """A bounds file (or override) the checker cannot use."""


@dataclass(frozen=True, slots=True)
class ToolDef:
    name: str
    allow_listed: bool
    argument: str
    input_schema: Mapping[str, Json] | None
    max_executions: int | None
    schema: ToolSchema = field(default_factory=ToolSchema)
    read_only: bool = False  # its MCP readOnlyHint: under the default overlap policy its calls overlap (R30)
    #: section 6: a write, run through the operation ledger — its outcome can be unknown (OUTCOME_UNKNOWN, R42), and
    #: the end-of-run reconciliation may leave it so (R46). In a scope only when the scope names it in ``tools``.
    write: bool = False


@dataclass(frozen=True, slots=True)
class Scope:
    """One exploration: a batch or a loop, its call bound and the configurations it starts from."""

    name: str
    kind: str  # "batch" | "loop"
    calls: int
    ids: int
    budgets: tuple[int, ...]
    modes: tuple[str, ...]
    on_limit: tuple[str, ...] = ()  # loop only; a batch's policy follows its mode (R20)
    failures: tuple[str, ...] = FAILURE_CATEGORIES
    malformed: bool = True
    max_rounds: int | None = None
    max_requests: int | None = None
    max_retries: int = 0
    deadline: float | None = None
    cancel: bool = False
    authorize: bool = False
    model_error: bool = False
    final: bool = False
    expected: Mapping[str, int] = field(default_factory=dict)
    #: the spec transitions this scope reaches at the committed bounds (``reached`` in its expected
    #: table, written by ``--update-expected``): what coverage of this scope is judged against
    reaches: tuple[str, ...] | None = None
    # -- section 5: concurrent execution (the defaults leave a scope sequential) ------------
    concurrency: tuple[int, ...] = (1,)  # the max_concurrency values explored
    tools: tuple[str, ...] | None = None  # the tools of the alphabet (default: every [[tool]])
    values: int | None = None  # how many of the argument values (default: all)
    invalid: bool = True  # calls with an invalid argument value are in the alphabet
    tool_limits: Mapping[str, int] | None = None  # per-tool limits instead of the [[tool]] ones (loop only)
    cancel_in_flight: bool = False  # cancellation only while executions are in flight
    slow: bool = False  # explored only when named (--scope): a larger bound the test suite marks slow

    @property
    def batch(self) -> bool:
        return self.kind == "batch"

    @property
    def concurrent(self) -> bool:
        return any(c > 1 for c in self.concurrency)

    def describe(self) -> dict[str, Json]:
        out: dict[str, Json] = {
            "kind": self.kind, "calls": self.calls, "ids": self.ids, "budgets": list(self.budgets),
            "modes": list(self.modes), "failures": list(self.failures), "malformed": self.malformed,
        }
        if self.concurrent:
            out.update({"concurrency": list(self.concurrency), "tools": list(self.tools) if self.tools else None,
                        "values": self.values, "invalid": self.invalid,
                        "tool_limits": dict(self.tool_limits) if self.tool_limits is not None else None,
                        "cancel_in_flight": self.cancel_in_flight})
        if not self.batch:
            out.update({
                "on_limit": list(self.on_limit), "max_rounds": self.max_rounds, "max_requests": self.max_requests,
                "max_retries": self.max_retries, "deadline": self.deadline, "cancel": self.cancel,
                "authorize": self.authorize, "model_error": self.model_error, "final": self.final,
            })
        return out


@dataclass(frozen=True, slots=True)
class Bounds:
    path: str
    principal: str
    values: tuple[str, ...]
    tools: tuple[ToolDef, ...]
    scopes: Mapping[str, Scope]

    def scope(self, name: str) -> Scope:
        try:
            return self.scopes[name]
        except KeyError:
            raise BoundsError(f"{self.path}: no scope {name!r} (have: {', '.join(self.scopes)})") from None

    def with_scope(self, scope: Scope) -> Bounds:
        scopes = dict(self.scopes)
        scopes[scope.name] = scope
        return replace(self, scopes=scopes)


def default_bounds_path() -> Path:
    return default_spec_path().with_name("bounds.toml")


_SCOPE_INTS = ("calls", "ids", "max_rounds", "max_requests", "max_retries")
_SCOPE_BOOLS = ("malformed", "cancel", "authorize", "model_error", "final", "invalid", "cancel_in_flight", "slow")


def _err(path: str, where: str, msg: str) -> BoundsError:
    return BoundsError(f"{path}: {where}: {msg}")


def _int(path: str, where: str, v: object, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _err(path, where, f"expected an integer in {lo}..{hi}, got {v!r}")
    return v


def _strs(path: str, where: str, v: object, allowed: Sequence[str] | None = None) -> tuple[str, ...]:
    if not isinstance(v, list) or not v or not all(isinstance(x, str) for x in v):
        raise _err(path, where, "expected a non-empty list of strings")
    if len(set(v)) != len(v):
        raise _err(path, where, "duplicate entries")
    if allowed is not None:
        for x in v:
            if x not in allowed:
                raise _err(path, where, f"{x!r} is not one of {', '.join(allowed)}")
    return tuple(v)


def _scope(path: str, name: str, raw: Mapping[str, Any]) -> Scope:
    where = f"scope.{name}"
    known = {"kind", "budgets", "modes", "on_limit", "failures", "deadline", "expected", "concurrency", "tools",
             "values", "tool_limits", *_SCOPE_INTS, *_SCOPE_BOOLS}
    for k in raw:
        if k not in known:
            raise _err(path, f"{where}.{k}", "unknown field")
    kind = raw.get("kind")
    if kind not in ("batch", "loop"):
        raise _err(path, f"{where}.kind", "must be 'batch' or 'loop'")
    calls = _int(path, f"{where}.calls", raw.get("calls"), 0, 12)
    ids = _int(path, f"{where}.ids", raw.get("ids"), 1, 6)
    budgets_raw = raw.get("budgets")
    if not isinstance(budgets_raw, list) or not budgets_raw:
        raise _err(path, f"{where}.budgets", "expected a non-empty list of integers")
    budgets = tuple(_int(path, f"{where}.budgets", b, 0, 12) for b in budgets_raw)
    modes = _strs(path, f"{where}.modes", raw.get("modes"), MODES)
    failures = _strs(path, f"{where}.failures", raw.get("failures", list(FAILURE_CATEGORIES)), FAILURE_CATEGORIES)
    kw: dict[str, Any] = {}
    for k in _SCOPE_BOOLS:
        if k in raw:
            if not isinstance(raw[k], bool):
                raise _err(path, f"{where}.{k}", "expected true or false")
            kw[k] = raw[k]
    if kind == "batch":
        for k in ("on_limit", "max_rounds", "max_requests", "max_retries", "deadline", "cancel", "authorize",
                  "model_error", "final"):
            if k in raw:
                raise _err(path, f"{where}.{k}", "a batch has no such setting (run_batch: calls, budget, mode)")
        on_limit: tuple[str, ...] = ()
    else:
        on_limit = _strs(path, f"{where}.on_limit", raw.get("on_limit"), LIMIT_POLICIES)
        for k in ("max_rounds", "max_requests"):
            if k in raw:
                kw[k] = _int(path, f"{where}.{k}", raw[k], 0, 12)
        if kw.get("max_rounds") is None:
            raise _err(path, f"{where}.max_rounds", "a loop scope needs a finite max_rounds")
        kw["max_retries"] = _int(path, f"{where}.max_retries", raw.get("max_retries", 0), 0, 4)
        if "deadline" in raw:
            d = raw["deadline"]
            if isinstance(d, bool) or not isinstance(d, int | float) or d <= 0:
                raise _err(path, f"{where}.deadline", "expected a positive number of seconds")
            kw["deadline"] = float(d)
    if "concurrency" in raw:
        cr = raw["concurrency"]
        if not isinstance(cr, list) or not cr:
            raise _err(path, f"{where}.concurrency", "expected a non-empty list of integers (max_concurrency values)")
        kw["concurrency"] = tuple(_int(path, f"{where}.concurrency", c, 1, 6) for c in cr)
    if "tools" in raw:
        kw["tools"] = _strs(path, f"{where}.tools", raw["tools"])
    if "values" in raw:
        kw["values"] = _int(path, f"{where}.values", raw["values"], 1, 6)
    if "tool_limits" in raw:
        tl = raw["tool_limits"]
        if kind == "batch" or not isinstance(tl, dict):
            raise _err(path, f"{where}.tool_limits", "a table of per-tool limits (loop scopes only)")
        kw["tool_limits"] = {str(k): _int(path, f"{where}.tool_limits.{k}", v, 0, 12) for k, v in tl.items()}
    expected_raw = raw.get("expected", {})
    if not isinstance(expected_raw, dict):
        raise _err(path, f"{where}.expected", "expected a table")
    expected: dict[str, int] = {}
    reaches: tuple[str, ...] | None = None
    for k, v in expected_raw.items():
        if k == "reached":
            reaches = _transitions(path, f"{where}.expected.reached", v)
        else:
            expected[k] = _int(path, f"{where}.expected.{k}", v, 0, 10**12)
    return Scope(name, kind, calls, ids, budgets, modes, on_limit, failures, expected=expected, reaches=reaches, **kw)


def _transitions(path: str, where: str, v: object) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v) or len(set(v)) != len(v):
        raise _err(path, where, "expected a list of distinct transition ids")
    known = [t.id for t in default_spec().transitions]
    for x in v:
        if x not in known:
            raise _err(path, where, f"{x!r} is not a transition of the spec")
    return tuple(sorted(v, key=known.index))


def parse_bounds(doc: Mapping[str, Any], path: str = "<bounds>") -> Bounds:
    known = {"principal", "values", "tool", "scope"}
    for k in doc:
        if k not in known:
            raise _err(path, k, "unknown field")
    principal = doc.get("principal")
    if not isinstance(principal, str) or not principal:
        raise _err(path, "principal", "expected a non-empty string")
    values = _strs(path, "values", doc.get("values"))
    if principal in values:
        raise _err(path, "values", "the principal must differ from every argument value (symmetry)")
    tools: list[ToolDef] = []
    raw_tools = doc.get("tool")
    if not isinstance(raw_tools, list) or not raw_tools:
        raise _err(path, "tool", "expected at least one [[tool]]")
    for i, t in enumerate(raw_tools):
        where = f"tool[{i}]"
        if not isinstance(t, dict):
            raise _err(path, where, "expected a table")
        for k in t:
            if k not in ("name", "allow_listed", "argument", "input_schema", "max_executions", "read_only", "write"):
                raise _err(path, f"{where}.{k}", "unknown field")
        name, arg = t.get("name"), t.get("argument")
        if not isinstance(name, str) or not name:
            raise _err(path, f"{where}.name", "expected a non-empty string")
        if not isinstance(arg, str) or not arg:
            raise _err(path, f"{where}.argument", "expected a property name")
        listed = t.get("allow_listed")
        if not isinstance(listed, bool):
            raise _err(path, f"{where}.allow_listed", "expected true or false")
        raw_schema = t.get("input_schema")
        schema = ToolSchema()
        if listed:
            try:
                schema = parse_schema(raw_schema, tool=name)
            except ToolDefinitionError as exc:
                raise _err(path, f"{where}.input_schema", str(exc)) from None
            if schema.type_of(arg) != "string":
                raise _err(path, f"{where}.argument", f"{arg!r} must be a string property of the input schema")
        me = t.get("max_executions")
        if me is not None:
            me = _int(path, f"{where}.max_executions", me, 0, 12)
        ro = t.get("read_only", False)
        if not isinstance(ro, bool):
            raise _err(path, f"{where}.read_only", "expected true or false")
        wr = t.get("write", False)
        if not isinstance(wr, bool) or (wr and (ro or not listed)):
            raise _err(path, f"{where}.write", "expected true or false; a write is allow-listed and not read-only (R36)")
        tools.append(ToolDef(name, listed, arg, raw_schema, me, schema, ro, wr))
    if len({t.name for t in tools}) != len(tools):
        raise _err(path, "tool", "duplicate tool names")
    if not any(t.allow_listed for t in tools):
        raise _err(path, "tool", "at least one tool must be allow-listed")
    raw_scopes = doc.get("scope")
    if not isinstance(raw_scopes, dict) or not raw_scopes:
        raise _err(path, "scope", "expected at least one [scope.NAME]")
    scopes = {}
    for name, raw in raw_scopes.items():
        if not _SCOPE_NAME.fullmatch(name):  # it is printed, given to --scope and used in file names
            raise _err(path, f"scope.{name!r}", "a scope name is letters, digits, '_' and '-'")
        if not isinstance(raw, dict):
            raise _err(path, f"scope.{name}", "expected a table")
        scopes[name] = _scope(path, name, raw)
        _check_scope_tools(path, scopes[name], tools, values)
    return Bounds(path, principal, values, tuple(tools), scopes)


def _check_scope_tools(path: str, sc: Scope, tools: Sequence[ToolDef], values: Sequence[str]) -> None:
    names = {t.name for t in tools}
    for n in sc.tools or ():
        if n not in names:
            raise _err(path, f"scope.{sc.name}.tools", f"no [[tool]] named {n!r}")
    if sc.tools is not None and not any(t.allow_listed and t.name in sc.tools for t in tools):
        raise _err(path, f"scope.{sc.name}.tools", "at least one allow-listed tool")
    for n in sc.tool_limits or {}:
        if n not in names:
            raise _err(path, f"scope.{sc.name}.tool_limits", f"no [[tool]] named {n!r}")
    if sc.values is not None and sc.values > len(values):
        raise _err(path, f"scope.{sc.name}.values", f"at most {len(values)} (the values listed)")


_SCOPE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def load_bounds(path: str | Path | None = None) -> Bounds:
    p = Path(path) if path is not None else default_bounds_path()
    try:  # TOML under the limits every input gets (size, UTF-8, depth, integer digits, finite numbers)
        doc = safejson.load_toml(p, what="bounds file")
    except safejson.JsonInputError as exc:
        raise BoundsError(str(exc)) from None
    return parse_bounds(doc, str(p))


def apply_overrides(bounds: Bounds, overrides: Sequence[str]) -> Bounds:
    """Apply ``scope.key=value`` overrides (value in TOML syntax: ``4``, ``[0,1]``, ``true``)."""
    for ov in overrides:
        key, sep, value = ov.partition("=")
        scope_name, dot, fld = key.strip().partition(".")
        if not sep or not dot or not fld:
            raise BoundsError(f"--bound {ov!r}: expected SCOPE.FIELD=VALUE, e.g. batch.calls=4")
        scope = bounds.scope(scope_name)
        try:
            parsed = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            parsed = value.strip()
        raw = _scope_to_raw(scope)
        raw[fld] = parsed
        raw.pop("expected", None)  # expected figures belong to the committed bounds only
        # ... but what the scope reaches at them stays: coverage within smaller bounds is judged against it
        new = replace(_scope(f"--bound {ov}", scope_name, raw), reaches=scope.reaches)
        _check_scope_tools(f"--bound {ov}", new, bounds.tools, bounds.values)
        bounds = bounds.with_scope(new)
    return bounds


def _scope_to_raw(s: Scope) -> dict[str, Any]:
    raw: dict[str, Any] = {"kind": s.kind, "calls": s.calls, "ids": s.ids, "budgets": list(s.budgets),
                           "modes": list(s.modes), "failures": list(s.failures), "malformed": s.malformed}
    if not s.batch:
        raw.update({"on_limit": list(s.on_limit), "max_retries": s.max_retries, "cancel": s.cancel,
                    "authorize": s.authorize, "model_error": s.model_error, "final": s.final})
        if s.max_rounds is not None:
            raw["max_rounds"] = s.max_rounds
        if s.max_requests is not None:
            raw["max_requests"] = s.max_requests
        if s.deadline is not None:
            raw["deadline"] = s.deadline
        if s.tool_limits is not None:
            raw["tool_limits"] = dict(s.tool_limits)
    if s.concurrency != (1,):
        raw["concurrency"] = list(s.concurrency)
    if s.tools is not None:
        raw["tools"] = list(s.tools)
    if s.values is not None:
        raw["values"] = s.values
    if not s.invalid:
        raw["invalid"] = False
    if s.cancel_in_flight:
        raw["cancel_in_flight"] = True
    if s.slow:
        raw["slow"] = True
    return raw


def expected_table(scope: str, figures: Mapping[str, int | Sequence[str]]) -> str:
    body = "".join(f"{k} = {json.dumps(list(v)) if not isinstance(v, int) else v}\n" for k, v in figures.items())
    return f"[scope.{scope}.expected]\n{body}"


def update_expected(path: str | Path, figures: Mapping[str, Mapping[str, int | Sequence[str]]]) -> str:
    """The text of the bounds file at ``path`` with ``[scope.NAME.expected]`` replaced (or added)."""
    text = Path(path).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    for scope, figs in figures.items():
        header = f"[scope.{scope}.expected]"
        start = next((i for i, ln in enumerate(lines) if ln.strip() == header), None)
        block = expected_table(scope, figs).splitlines(keepends=True)
        if start is None:
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            lines += ["\n", *block]
        else:
            end = start + 1
            while end < len(lines) and not lines[end].lstrip().startswith("["):
                end += 1
            tail_blank = ["\n"] if end < len(lines) else []
            lines[start:end] = block + tail_blank
    out = "".join(lines)
    parse_bounds(tomllib.loads(out), str(path))  # never write a file we cannot read back
    return out
