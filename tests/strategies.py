"""Shared Hypothesis strategies: small pools so replays, conflicts and budget edges are frequent."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from loopspec import Tool, ToolContext, ToolFailure
from loopspec.core.rules import FAILURE_CATEGORIES
from loopspec.fuzz import _strategies as _fuzz

ID_POOL = ("a", "b", "c")
MALFORMED_IDS = (None, "", "  ", 7)
TEXT_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
               "additionalProperties": False}
KNOWN_TOOLS = ("length", "echo")
UNKNOWN_TOOLS = ("shell",)

call_ids = st.one_of(st.sampled_from(ID_POOL), st.sampled_from(ID_POOL), st.sampled_from(MALFORMED_IDS))
tool_names = st.sampled_from(KNOWN_TOOLS + KNOWN_TOOLS + UNKNOWN_TOOLS)
valid_arguments = st.sampled_from([{"text": "x"}, {"text": "yy"}])
invalid_arguments = st.sampled_from([{"text": 1}, {}, {"text": "x", "extra": True}, "not-an-object"])
arguments = st.one_of(valid_arguments, valid_arguments, valid_arguments, invalid_arguments)


@st.composite
def calls(draw: st.DrawFn) -> dict[str, Any]:
    """One proposed call; occasionally missing a field altogether."""
    call: dict[str, Any] = {"id": draw(call_ids), "name": draw(tool_names), "arguments": draw(arguments)}
    if draw(st.integers(0, 15)) == 0:
        del call[draw(st.sampled_from(["id", "name", "arguments"]))]
    return call


batches = st.lists(calls(), max_size=8)
budgets = st.integers(0, 4)
modes = st.sampled_from(["abort", "continue"])
failures = st.dictionaries(st.integers(1, 6), st.sampled_from(FAILURE_CATEGORIES), max_size=3)


class Recorder:
    """Tools whose every real execution is recorded (call id, tool, arguments, principal, output)."""

    def __init__(self, fail_at: dict[int, str] | None = None) -> None:
        self.fail_at = dict(fail_at or {})
        self.log: list[dict[str, Any]] = []

    def _run(self, name: str, args: dict[str, Any], ctx: ToolContext) -> Any:
        n = len(self.log) + 1
        entry = {"n": n, "callId": ctx.call_id, "tool": name, "arguments": args, "principal": ctx.principal}
        self.log.append(entry)
        if n in self.fail_at:
            entry["failed"] = self.fail_at[n]
            raise ToolFailure(self.fail_at[n], f"secret detail {n}")
        out = len(args["text"]) if name == "length" else {"echo": args, "execution": n}
        entry["output"] = out
        return out

    def tools(self) -> list[Tool]:
        return [Tool.define(n, lambda a, c, n=n: self._run(n, a, c), TEXT_SCHEMA) for n in KNOWN_TOOLS]


# --------------------------------------------------------------------------------------------
# loopspec verify (the model checker)
# --------------------------------------------------------------------------------------------

#: The environment's answers for a walk through the checker's stepper: at each question the walk
#: takes option ``index % len(options)``; once the list is used up it takes option 0.
oracle_answers = st.lists(st.integers(min_value=0, max_value=63), max_size=80)

# -- the fuzzer's strategies are product code (loopspec.fuzz._strategies, over the vocabulary `loopspec fuzz` draws from) --
fuzz_batch_steps = _fuzz.batch_steps
fuzz_batch_configs = _fuzz.batch_configs
fuzz_call_lists = _fuzz.call_lists
fuzz_schemas = _fuzz.schemas
fuzz_scripts = _fuzz.scripts
