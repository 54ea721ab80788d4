"""Synthetic ledger corpora: real reference-engine runs, relabelled and interleaved.

For benchmarks, memory tests and the sharded (Dask) check: :func:`template_runs` runs the reference
engine on varied, seeded scripts (replays, conflicts, malformed and unknown calls, failures,
retries, budgets, limits, both modes, batches and loops) and keeps each run's ledger lines;
:func:`write_corpus` writes any number of events by replaying those templates under fresh run ids,
``interleave`` runs at a time, in a seeded random order — streaming, never holding the file.
:func:`shard_by_run` splits a ledger into shards that each hold whole runs (runs are independent, so
shards can be checked anywhere).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from ..core.ledger import Ledger, dumps_event
from ..engine.base import ToolFailure
from ..engine.reference import Limits, Tool, run_batch, run_loop

Json = Any

_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"],
           "additionalProperties": False}


def _tools(fail: dict[int, str], counter: list[int]) -> list[Tool]:
    def run(name: str, args: dict[str, Json], ctx: Any) -> Json:
        counter[0] += 1
        cat = fail.get(counter[0])
        if cat is not None:
            raise ToolFailure(cat)
        return {"tool": name, "q": args.get("q"), "n": counter[0]}

    return [Tool.define(n, lambda a, c, n=n: run(n, a, c), _SCHEMA) for n in ("lookup", "echo")] + [
        Tool.define("ping", lambda a, c: "pong", {"type": "object", "properties": {}}, max_executions=2)]


def _call(rng: random.Random) -> Json:
    r = rng.random()
    if r < 0.04:
        return {"id": rng.choice(["", "  ", None, 7]), "name": "lookup", "arguments": {"q": "x"}}
    if r < 0.07:
        return {"id": rng.choice("abcdef"), "name": "shell", "arguments": {}}
    if r < 0.11:
        return {"id": rng.choice("abcdef"), "name": "lookup", "arguments": {"q": 1}}
    if r < 0.13:
        return "not a call"
    name = rng.choice(["lookup", "lookup", "echo", "ping"])
    args: Json = {} if name == "ping" else {"q": rng.choice(["x", "y", "z"])}
    return {"id": rng.choice("abcdefgh"), "name": name, "arguments": args}


def _one_run(rng: random.Random, run_id: str, record_arguments: bool) -> list[dict[str, Json]]:
    led = Ledger()
    counter = [0]
    fail = {k: rng.choice(["DEPENDENCY_TEMPORARY", "INTERNAL_ERROR", "NOT_FOUND_OR_NOT_ACCESSIBLE"])
            for k in rng.sample(range(1, 12), rng.randint(0, 3))}
    tools = _tools(fail, counter)
    mode = rng.choice(["abort", "continue"])
    if rng.random() < 0.3:
        calls = [_call(rng) for _ in range(rng.randint(0, 8))]
        run_batch(calls, tools=tools, budget=rng.randint(0, 5), mode=mode, ledger=led, run_id=run_id,
                  principal="p", record_arguments=record_arguments)
    else:
        rounds = [[_call(rng) for _ in range(rng.randint(0, 4))] for _ in range(rng.randint(1, 4))]
        script: list[Json] = [*rounds, {"final": "done"}]
        tick = [0.0]

        def clock() -> float:
            tick[0] += 0.25
            return tick[0]

        limits = Limits(max_rounds=rng.choice([None, 2, 3, 8]), max_executions=rng.choice([None, 2, 4, 16]),
                        max_tool_executions=rng.choice([None, 3, 8]), max_requests=rng.choice([None, 5, 12, 32]),
                        max_retries=rng.choice([0, 1, 2]), deadline=rng.choice([None, None, 6.0, 60.0]))
        run_loop(lambda turn: script[min(turn.round, len(script)) - 1], tools=tools, limits=limits, mode=mode,
                 on_limit=rng.choice(["throw", "error-result"]), principal="p", clock=clock, ledger=led,
                 run_id=run_id, record_arguments=record_arguments)
    events = led.events
    for e in events:
        if "durationMs" in e:
            e["durationMs"] = 0.0
    return events


def template_runs(n: int = 200, seed: int = 7, record_arguments: bool = False) -> list[list[str]]:
    """``n`` engine runs as lists of NDJSON lines (run id ``tmpl-<k>``)."""
    rng = random.Random(seed)
    return [[dumps_event(e) for e in _one_run(rng, f"tmpl-{k}", record_arguments)] for k in range(n)]


def write_corpus(out: IO[str], events: int, *, templates: Sequence[list[str]] | None = None, interleave: int = 16,
                 seed: int = 11, prefix: str = "run") -> dict[str, int]:
    """Write at least ``events`` ledger lines (whole runs); returns {"events": ..., "runs": ...}."""
    tmpl = list(templates) if templates is not None else template_runs()
    rng = random.Random(seed)
    written = 0
    runs = 0
    slots: list[Iterator[str]] = []

    def start() -> Iterator[str]:
        nonlocal runs
        k = runs
        runs += 1
        t = tmpl[rng.randrange(len(tmpl))]
        old = t[0].split('"run":', 1)[1].split(",", 1)[0]
        new = json.dumps(f"{prefix}-{k}")
        return (line.replace(f'"run":{old}', f'"run":{new}', 1) for line in t)

    while written < events or slots:
        while written < events and len(slots) < interleave:
            slots.append(start())
        if not slots:
            break
        i = rng.randrange(len(slots))
        line = next(slots[i], None)
        if line is None:
            slots.pop(i)
            continue
        out.write(line + "\n")
        written += 1
    return {"events": written, "runs": runs}


def shard_by_run(src: str | Path, out_dir: str | Path, shards: int) -> list[Path]:
    """Split a ledger into ``shards`` files by a hash of the run id (each shard holds whole runs)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"shard-{k:04d}.ndjson" for k in range(shards)]
    handles = [p.open("w", encoding="utf-8") for p in paths]
    try:
        with Path(src).open(encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                run = line.split('"run":', 1)[1].split(",", 1)[0] if '"run":' in line else ""
                k = int.from_bytes(hashlib.blake2b(run.encode(), digest_size=4).digest(), "big") % shards
                handles[k].write(line if line.endswith("\n") else line + "\n")
    finally:
        for h in handles:
            h.close()
    return paths
