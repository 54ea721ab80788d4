"""A precise one-line reason why an event is not a ledger event, read from the ledger's own JSON Schema.

The checker's hot path trusts the shapes it reads and only calls this when something does not fit
(or for every event with ``--validate``): it names the first field that breaks
``spec/schema/ledger-event.schema.json`` (missing, wrong type, not in the enum, an extra field). It
implements the subset of JSON Schema that file uses (type, const, enum, required, properties,
additionalProperties, items, minimum, pattern, oneOf) — no dependency needed at run time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..spec.base import default_spec_path
from ._tables import EVENT_TYPES

Json = Any

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def _ledger_schema() -> dict[str, Json]:
    # next to the default spec (the shipped one, or the one chosen with --spec)
    return _ledger_schema_at(default_spec_path())


@lru_cache(maxsize=4)
def _ledger_schema_at(spec_path: Path) -> dict[str, Json]:
    path = spec_path.parent / "schema" / "ledger-event.schema.json"
    with path.open(encoding="utf-8") as fh:
        doc: dict[str, Json] = json.load(fh)
    return {s["title"]: s for s in doc["oneOf"]}


def _type_name(v: Json) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPES[name](v):
            return name
    return type(v).__name__


def problem(value: Json, schema: Mapping[str, Json], where: str) -> str | None:
    """The first way ``value`` breaks ``schema`` as ``where: reason``, or None."""
    if "oneOf" in schema:
        reasons = [problem(value, alt, where) for alt in schema["oneOf"]]
        if all(r is not None for r in reasons):
            return next((r for r in reasons if r is not None and not r.endswith("got " + _type_name(value))),
                        reasons[0])
        return None
    if "const" in schema and value != schema["const"]:
        return f"{where}: expected {json.dumps(schema['const'])}, got {_short(value)}"
    if "enum" in schema and value not in schema["enum"]:
        opts = ", ".join(json.dumps(x) for x in schema["enum"][:12])
        return f"{where}: expected one of {opts}, got {_short(value)}"
    typ = schema.get("type")
    if typ is not None:
        types = typ if isinstance(typ, list) else [typ]
        if not any(_TYPES[t](value) for t in types):
            return f"{where}: expected {' or '.join(types)}, got {_type_name(value)}"
    if isinstance(value, int | float) and not isinstance(value, bool) and "minimum" in schema \
            and value < schema["minimum"]:
        return f"{where}: must be at least {schema['minimum']}, got {value}"
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        return f"{where}: {_short(value)} does not match {schema['pattern']}"
    if isinstance(value, dict):
        for k in schema.get("required", ()):
            if k not in value:
                return f"{where}.{k}: missing"
        props = schema.get("properties", {})
        for k, v in value.items():
            if k in props:
                p = problem(v, props[k], f"{where}.{k}")
                if p is not None:
                    return p
            elif schema.get("additionalProperties") is False:
                return f"{where}.{k}: not a field of {where.split('.')[0]}"
            elif isinstance(schema.get("additionalProperties"), dict):
                p = problem(v, schema["additionalProperties"], f"{where}.{k}")
                if p is not None:
                    return p
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            p = problem(v, schema["items"], f"{where}[{i}]")
            if p is not None:
                return p
    return None


def ledger_problem(ev: Json) -> str | None:
    """Why ``ev`` is not a ledger event (v1), or None when it is one."""
    if not isinstance(ev, dict):
        return f"a ledger event must be a JSON object, got {_type_name(ev)}"
    schemas = _ledger_schema()
    typ = ev.get("type")
    if typ not in schemas:
        return f"unknown event type {_short(typ)}"
    return problem(ev, schemas[typ], str(typ))


def unknown_type(ev: Mapping[str, Json]) -> str:
    """Why an event whose ``type`` is not a ledger v1 event type cannot be read."""
    typ = ev.get("type")
    if typ is None:
        return 'the event has no "type"'
    return f"unknown event type {typ!r} (ledger v1 knows: {', '.join(sorted(EVENT_TYPES))})"


def bad_event(ev: Mapping[str, Json], exc: BaseException) -> str:
    """Why an event the checker could not use cannot be read: the field the schema says is wrong, else the
    error it raised."""
    msg = ledger_problem(ev)
    if msg is not None:
        return msg
    return f"{ev.get('type')} event could not be read ({type(exc).__name__}: {exc})"


def _short(v: Json, n: int = 40) -> str:
    try:
        text = json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(v)
    return text if len(text) <= n else text[: n - 1] + "…"
