"""Probes: small fixed cases, each already minimal, that show one consequence a user cares about (a call
executed twice across rounds, an exception shown to the model, a lost result, ...). docs/frameworks.md
runs them on every framework beside the campaigns and puts each strict divergence in its risk view, so
that a risk a campaign of limited size happened not to meet is still reported (and said to come from a
probe). The tests run the same steps (tests/test_frameworks_fuzz.py).
"""

from __future__ import annotations

from typing import Any

Json = Any

__all__ = ["PROBES", "probe_step"]

TOOLS = [{"name": "lookup", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}}]
LIMITS = {"maxRounds": None, "maxExecutions": None, "maxToolExecutions": None, "maxRequests": None,
          "maxRetries": 0, "deadline": None}
C1 = {"id": "c1", "name": "lookup", "arguments": {"q": "a"}}
C1B = {"id": "c1", "name": "lookup", "arguments": {"q": "b"}}
C2 = {"id": "c2", "name": "lookup", "arguments": {"q": "b"}}
SHELL = {"id": "c3", "name": "shell", "arguments": {}}


def _loop(model: list[Json], script: tuple[Json, ...] = (), mode: str = "continue", **limits: Json) -> dict[str, Json]:
    return {"kind": "loop", "config": {"tools": TOOLS, "limits": {**LIMITS, **limits}, "mode": mode,
                                       "onLimit": "throw", "principal": "alice"},
            "model": model, "script": list(script)}


#: name -> (what it shows, the step)
PROBES: dict[str, tuple[str, dict[str, Json]]] = {
    "replay-across-rounds": ("the same call (id and content) in a later round",
                             _loop([{"calls": [C1]}, {"calls": [C1]}, {"final": "done"}])),
    "conflict-across-rounds": ("the same id with other content in a later round",
                               _loop([{"calls": [C1]}, {"calls": [C1B]}, {"final": "done"}])),
    "repeated-id-in-one-response": ("the same id twice in one response, other content",
                                    _loop([{"calls": [C1, C1B]}, {"final": "done"}])),
    "failing-tool": ("a tool that raises (its message carries a canary) beside a sibling that succeeds",
                     _loop([{"calls": [C1, C2]}, {"final": "done"}], script=({"fail": "INTERNAL_ERROR"},))),
    "unknown-tool-beside-a-call": ("a call to an unregistered tool beside a valid call",
                                   _loop([{"calls": [SHELL, C2]}, {"final": "done"}])),
    "final-answer-at-the-last-round": ("a final answer at the last allowed model request",
                                       _loop([{"calls": [C1]}, {"final": "done"}], maxRounds=2)),
}


def probe_step(name: str) -> dict[str, Json]:
    return PROBES[name][1]
