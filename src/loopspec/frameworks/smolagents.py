"""Hugging Face smolagents (``ToolCallingAgent``) behind the adapter protocol.

* The model is a :class:`smolagents.models.Model` subclass scripted by the harness: each ``generate``
  asks ``model.next`` and returns a ``ChatMessage`` whose ``tool_calls`` are the proposal
  (``ChatMessageToolCall(id, function=ChatMessageToolCallFunction(name, arguments))``). A final answer is
  smolagents' own way of ending a run: a call to its built-in ``final_answer`` tool.
* Tools are :class:`smolagents.Tool` subclasses whose ``inputs`` are the harness's schema (an optional
  property is ``nullable``) and whose ``forward`` counts the execution and calls the harness's tool; the
  trusted principal is the run's, bound when the tool is built (smolagents has no per-run context).
* Budgets: ``maxRounds`` → ``ToolCallingAgent(max_steps=...)``. When the steps are used up smolagents
  asks the model once more, without tools, for a final answer (``provide_final_answer``): the adapter
  forwards that request to the harness like any other.
* Answers are read from what smolagents puts in front of the model in the next request: the step's
  ``Observation:`` text (one line per executed call, **sorted by call id**, not in request order), or
  its ``Error:`` text (the first error of the step, with the exception's text; the step's other results
  are not shown). Which call an error belongs to is recorded by observing ``execute_tool_call`` (the
  adapter calls the original unchanged).
* Settings (the settings matrix): ``max_tool_threads``: 1 (the calls of a step one at a time, as the other
  adapters run them), or smolagents' default thread pool.

What smolagents cannot express, and the fuzzer therefore does not propose or vary:

* abort mode: every tool error, unknown tool and invalid argument is shown to the model and the run
  goes on; the adapter runs every step in continue mode;
* a call without an id, or whose arguments are not a JSON object (``arguments`` as text is handed to a
  single-input tool as its value, which the harness's schemas never have);
* an execution budget, per-tool limits, a limit on requests, retries of a failed tool, deadlines, and
  the ``error-result`` limit policy (``max_steps`` is the only limit);
* a tool named ``final_answer`` (smolagents' own final-answer tool has that name).
"""

from __future__ import annotations

import contextvars
import json
import logging
from typing import Any, ClassVar

from ..fuzz._adapter import ModelFailure, ModelFn
from ._common import FrameworkExecutor, Run, ToolFailed, ok, reply_kind, shown

Json = Any

__all__ = ["SmolagentsExecutor"]

_TYPES = {"string": "string", "integer": "integer", "boolean": "boolean"}


class _Invalid(Exception):
    pass


#: the request whose call smolagents is executing in this thread's context (see Observed.execute_tool_call)
_RUNNING: contextvars.ContextVar[int | None] = contextvars.ContextVar("loopspec_smolagents_call", default=None)


class SmolagentsExecutor(FrameworkExecutor):
    framework = "smolagents"
    name = "smolagents"
    SETTINGS: ClassVar[dict[str, tuple[str, ...]]] = {"max_tool_threads": ("1", "default")}
    limit_support: ClassVar[dict[str, str]] = {
        "maxRounds": "ToolCallingAgent(max_steps=...) (then one more model request for a final answer)",
        "maxExecutions": "none: smolagents has no execution budget",
        "maxToolExecutions": "none: no per-tool execution limit",
        "maxRequests": "none: no limit on tool requests",
        "maxRetries": "none: smolagents does not retry a failed tool by itself",
        "deadline": "none: not fuzzed",
    }

    def __init__(self) -> None:
        from importlib.metadata import version

        logging.getLogger("smolagents").setLevel(logging.CRITICAL)
        self.version = version("smolagents")

    def unrepresentable(self, call: Json) -> str | None:
        why = super().unrepresentable(call)
        if why is None and "id" not in call:
            return "a call without an id (ChatMessageToolCall.id is required)"
        if why is None and not isinstance(call.get("arguments"), dict):
            return "arguments that are not a JSON object"
        if why is None and call.get("name") == "final_answer":
            return "a call to a tool named final_answer (smolagents' own final-answer tool)"
        return why

    def normalize_step(self, step: dict[str, Json]) -> dict[str, Json]:
        """As for every adapter, plus: abort mode cannot be expressed (every error is shown to the model and
        the run goes on), so every step runs in continue mode."""
        step = super().normalize_step(step)
        step["config"] = {**step["config"], "mode": "continue"}
        lim = step["config"].get("limits")
        if isinstance(lim, dict) and lim.get("maxRounds") == 0:  # smolagents asks the model at least once
            step["config"]["limits"] = {**lim, "maxRounds": None}
        if step.get("kind") == "loop":
            step["config"]["tools"] = [t for t in step["config"]["tools"] if t.get("name") != "final_answer"]
        return step

    # -- mapping -----------------------------------------------------------------------------
    def _tools(self, run: Run) -> list[Any]:
        from smolagents import Tool

        tools = []
        for name, schema in run.tools.items():
            if name == "final_answer" or not name.isidentifier():
                continue  # smolagents requires a Python identifier as the tool name
            props = (schema or {}).get("properties", {}) or {}
            required = set((schema or {}).get("required", []) or [])
            inputs = {k: {"type": _TYPES[v["type"]], "description": k, **({} if k in required else {"nullable": True})}
                      for k, v in props.items()}

            def forward(self: Any, *args: Any, _name: str = name, **kwargs: Any) -> str:
                received = dict(kwargs)
                i = _RUNNING.get()  # set by the observed execute_tool_call of this call (its own thread context)
                if i is None:
                    i = _calling(run, _name, received)
                return json.dumps(run.enter(i, run.call(i).get("id") if i is not None else None, _name, received,
                                            run.principal))

            attrs = {"name": name, "description": f"The tool {name}.", "inputs": inputs, "output_type": "string",
                     "forward": forward, "skip_forward_signature_validation": True}
            tools.append(type(f"HarnessTool_{name}", (Tool,), attrs)())
        return tools

    def run_loop(self, run: Run, params: dict[str, Json], model_next: ModelFn, *, batch: bool) -> dict[str, Json]:
        from smolagents import ToolCallingAgent
        from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, Model
        from smolagents.monitoring import LogLevel

        errors: list[tuple[str, Json, BaseException]] = []  # (tool, arguments, error) in the step, in order
        sent: dict[int, int] = {}  # id() of the arguments object of each call -> its request index
        keep: list[Any] = []

        def read(messages: list[Any]) -> None:
            """The answers of the current round, from the text smolagents shows the model."""
            if run.current < 0:
                return
            text = "\n".join(_text(m) for m in messages[_last_call(messages) + 1:])
            positions = list(run.round_positions())
            calls = [run.call(i) for i in positions]
            if "Observation:\n" in text and "\nError:\n" not in text:
                ids = {}
                for i, c in zip(positions, calls, strict=True):
                    ids[c["id"]] = i  # smolagents keeps one call per id: the last
                order = [ids[k] for k in sorted(ids)]
                lines = text.split("Observation:\n", 1)[1].split("\n")
                for i, line in zip(order, lines, strict=False):
                    try:
                        run.answer(i, ok(run.call(i)["id"], json.loads(line)))
                    except ValueError:
                        run.answer(i, ok(run.call(i)["id"], line))
                run.shown_order[run.current] = order
            elif "Error:\n" in text:
                at = _erring(run, errors)
                if at is not None:
                    i, code = at
                    run.answer(i, shown(run.call(i)["id"], code, text))
            errors.clear()

        class Scripted(Model):  # type: ignore[misc]
            def generate(self, messages: list[Any], stop_sequences: Any = None, response_format: Any = None,
                         tools_to_call_from: Any = None, **kw: Any) -> Any:
                if run.rounds > 0:
                    read(messages)
                shown_now = run.round_results(run.current) if run.current >= 0 else []
                run.rounds += 1
                reply = model_next(run.rounds, shown_now)
                kind = reply_kind(reply)
                if kind == "final":
                    run.final = reply["final"]
                    call = ChatMessageToolCall(
                        function=ChatMessageToolCallFunction(name="final_answer", arguments={"answer": reply["final"]}),
                        id=f"final-{run.rounds}", type="function")
                    return ChatMessage(role="assistant", content=reply["final"], tool_calls=[call])
                if kind != "calls":
                    raise _Invalid("the model answered with neither calls nor a final answer")
                run.propose(reply["calls"])
                calls = []
                for j, c in enumerate(reply["calls"]):
                    args = dict(c["arguments"])
                    sent[id(args)] = run.offsets[-1] + j
                    keep.append(args)  # alive for the run, so that no other object reuses its id()
                    calls.append(ChatMessageToolCall(function=ChatMessageToolCallFunction(name=c["name"], arguments=args),
                                                     id=c["id"], type="function"))
                return ChatMessage(role="assistant", content="", tool_calls=calls)

        class Observed(ToolCallingAgent):  # type: ignore[misc]
            def execute_tool_call(self, tool_name: str, arguments: Any) -> Any:
                # observed only: which request this is (smolagents hands on the very arguments object the model's
                # call carried; the tool body does not see the call id), then the original, unchanged
                token = _RUNNING.set(sent.get(id(arguments)))
                try:
                    return super().execute_tool_call(tool_name, arguments)
                except Exception as exc:  # recorded only: smolagents handles it as it would
                    errors.append((tool_name, arguments, exc))
                    raise
                finally:
                    _RUNNING.reset(token)

        limits = params.get("limits") or {}
        threads = 1 if self.setting("max_tool_threads") == "1" else None  # None: smolagents' own thread pool
        rounds = limits.get("maxRounds")
        agent = Observed(tools=self._tools(run), model=Scripted(model_id="loopspec-scripted"),
                         max_steps=rounds if rounds is not None else 10**6, verbosity_level=LogLevel.OFF,
                         max_tool_threads=threads)
        try:
            result = agent.run("go", return_full_result=True)
        except (ModelFailure, _Invalid):
            return run.outcome("FAILED", "MODEL_ERROR")
        except Exception as exc:  # smolagents wraps the model's failures (AgentGenerationError)
            if isinstance(exc.__cause__, ModelFailure | _Invalid) or "Error while generating output" in str(exc):
                return run.outcome("FAILED", "MODEL_ERROR")
            raise
        if result.state == "max_steps_error":
            return run.outcome("TRUNCATED", "MAX_ROUNDS")
        out = result.output
        run.final = out if isinstance(out, str) else json.dumps(out)
        return run.outcome("COMPLETED", "FINAL_ANSWER")


def _text(message: Any) -> str:
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _last_call(messages: list[Any]) -> int:
    """The position of the last message of the model's previous step (its output, or the tool calls smolagents
    shows it): what follows is what smolagents answered."""
    def role(m: Any) -> str:
        r = getattr(m, "role", "")
        return str(getattr(r, "value", r))

    return max((k for k, m in enumerate(messages) if role(m) in ("tool-call", "assistant")), default=-1)


def _calling(run: Run, name: str, received: dict[str, Json]) -> int | None:
    """The request of the current round a tool body runs for: the last call with this tool and these arguments
    (smolagents keeps the last call of a repeated id; the body does not see the id)."""
    found = None
    for i in run.round_positions():
        c = run.call(i)
        if c.get("name") == name and c.get("arguments") == received and i not in run.entered:
            found = i
    if found is None:
        for i in run.round_positions():
            c = run.call(i)
            if c.get("name") == name and i not in run.entered:
                found = i
    if found is not None:
        run.entered.add(found)
    return found


def _erring(run: Run, errors: list[tuple[str, Json, BaseException]]) -> tuple[int, str] | None:
    """The request whose error smolagents showed the model (the first error raised in the step) and its code."""
    from smolagents.utils import AgentToolCallError

    if not errors:
        return None
    name, arguments, exc = errors[0]
    candidates = [i for i in run.round_positions()
                  if run.call(i).get("name") == name and run.call(i).get("arguments") == arguments]
    if not candidates:
        return None
    failed = [i for i in candidates if i in run.failed_at]
    if failed:
        return failed[-1], run.failed_at[failed[-1]]
    if isinstance(exc.__cause__, ToolFailed):
        return candidates[-1], exc.__cause__.category
    if name not in run.tools:
        return candidates[-1], "UNKNOWN_TOOL"
    return candidates[-1], "INVALID_ARGUMENT" if isinstance(exc, AgentToolCallError) else "INTERNAL_ERROR"
