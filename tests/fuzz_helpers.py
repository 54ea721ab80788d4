"""Helpers shared by the fuzzer/judge tests: building traces from the reference engine, mutating them."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from loopspec.fuzz._adapter import InProcessImpl
from loopspec.fuzz._harness import run_batch_step
from loopspec.protocol.executor import ReferenceExecutor

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "python" / "executor.py"
SCHEMA_DIR = ROOT / "spec" / "schema"

Json = Any

LOOKUP = {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}, "required": ["q"],
          "additionalProperties": False}
OPEN = {"type": "object", "properties": {}}


def example_cmd(bug: str | None = None) -> str:
    return f"{sys.executable} {EXAMPLE}" + (f" --bug {bug}" if bug else "")


def step(calls: list[Json], *, budget: int = 2, mode: str = "continue", principal: str = "alice",
         tools: list[dict[str, Json]] | None = None, script: list[dict[str, Json]] | None = None) -> dict[str, Json]:
    return {
        "kind": "batch",
        "config": {"tools": tools if tools is not None else [{"name": "lookup", "inputSchema": LOOKUP},
                                                               {"name": "write", "inputSchema": OPEN}],
                   "budget": budget, "mode": mode, "principal": principal},
        "calls": calls,
        "script": script or [],
    }


def call(cid: Json, name: Json = "lookup", **args: Json) -> dict[str, Json]:
    return {"id": cid, "name": name, "arguments": args}


def reference_trace(st: dict[str, Json]) -> dict[str, Json]:
    """The trace of the reference engine (in process) answering ``st`` — correct by construction."""
    return run_batch_step(InProcessImpl(ReferenceExecutor()), st)


def clone(trace: dict[str, Json]) -> dict[str, Json]:
    return copy.deepcopy(trace)


def response(trace: dict[str, Json]) -> dict[str, Json]:
    ev = trace["events"][-1]
    assert ev["type"] == "response", ev
    return ev["result"]  # type: ignore[no-any-return]


def executions(trace: dict[str, Json]) -> list[dict[str, Json]]:
    return [e for e in trace["events"] if e["type"] == "execute"]


def load_schema(name: str) -> Json:
    return json.loads((SCHEMA_DIR / name).read_text(encoding="utf-8"))


def schema_validator(name: str, ref: str | None = None) -> Any:
    """A jsonschema validator for spec/schema/<name> (optionally one of its $defs), with the other
    schema files of spec/schema/ resolvable by their relative names."""
    import jsonschema
    from referencing import Registry, Resource

    resources = []
    for p in SCHEMA_DIR.glob("*.schema.json"):
        doc = json.loads(p.read_text(encoding="utf-8"))
        if "$id" in doc:  # the protocol schemas refer to each other by $id
            resources.append((doc["$id"], Resource.from_contents(doc)))
    registry = Registry().with_resources(resources)
    root = load_schema(name)
    schema = root if ref is None else {"$schema": root["$schema"], "$ref": f"{root['$id']}#/$defs/{ref}"}
    cls = jsonschema.validators.validator_for(root)
    return cls(schema, registry=registry)


def case_path(out: Path, rule: str, suffix: str = ".json") -> Path:
    """The case file a campaign wrote in ``out`` for (the first cause, by name, of) ``rule``: cases are named by
    their cause, ``R7-conflict-reused.json``."""
    found = sorted(p for p in out.glob(f"{rule}-*.json") if not p.name.endswith(".path.json"))
    assert found, f"no case for {rule} in {out}: {sorted(p.name for p in out.iterdir())}"
    return found[0].with_name(found[0].name.removesuffix(".json") + suffix)
