"""Microsoft AutoGen AgentChat's ``AssistantAgent`` behind the adapter protocol.

* The model is an ``autogen_core.models.ChatCompletionClient`` subclass scripted by the harness: each
  ``create`` asks ``model.next`` and returns a ``CreateResult`` whose content is a list of
  ``FunctionCall(id, arguments=JSON text, name)`` (finish reason ``function_calls``) or the final text.
* Tools are ``FunctionTool``s (``autogen_core.tools``) with the signature built from the harness's schema;
  AutoGen validates the arguments with the Pydantic model it builds from it. The body counts the execution
  and calls the harness's tool; the trusted principal is the run's, bound when the tool is built.
* Budgets: ``maxRounds`` → ``AssistantAgent(max_tool_iterations=...)``: after its last tool iteration the
  agent does not ask the model again; it returns the tool results as its response (a
  ``ToolCallSummaryMessage``), or, with ``reflect_on_tool_use``, asks the model once more (settings).
* Answers are the ``FunctionExecutionResult``s AutoGen sends to the model next (its
  ``FunctionExecutionResultMessage``: ``call_id``, ``is_error``, the content as text, the exception's text
  for a failure), or, after the last iteration, the run's ``ToolCallExecutionEvent``.

* ``autogen[completion=harness]``: the bodies await the answers the harness holds and the harness
  picks the completion order (protocol v1.1, batch steps; every call of a response may overlap).

What AutoGen cannot express, and the fuzzer therefore does not propose or vary:

* abort mode: every tool exception and unknown tool is a result the model sees and the run goes on;
  every step runs in continue mode;
* a call without an id (``FunctionCall.id`` is required);
* an execution budget, per-tool limits, a limit on requests, retries of a failed tool, deadlines, and the
  ``error-result`` limit policy (``max_tool_iterations`` is the only limit).
"""

from __future__ import annotations

import contextvars
import inspect
import json
import warnings
from typing import Any, ClassVar

from ..protocol.executor import ModelFailure, ModelFn
from ._common import FrameworkExecutor, Run, ok, python_signature, shown

Json = Any

__all__ = ["AutoGenExecutor"]


class _Invalid(Exception):
    pass


#: the call id AutoGen is running a tool for, in this task's context (see _Observed.run_json)
_CALL_ID: contextvars.ContextVar[tuple[str | None, dict[str, Any]] | None] = contextvars.ContextVar(
    "loopspec_autogen_call", default=None)


class AutoGenExecutor(FrameworkExecutor):
    framework = "autogen"
    name = "autogen"
    #: completion: each body answers before it yields (the adapter's default) or the bodies await the
    #: answers the harness holds and it picks the completion order (protocol v1.1, batch steps)
    SETTINGS: ClassVar[dict[str, tuple[str, ...]]] = {"reflect_on_tool_use": ("false", "true"),
                                                      "completion": ("at-once", "harness")}
    def concurrent(self) -> bool:
        return self.setting("completion") == "harness"

    limit_support: ClassVar[dict[str, str]] = {
        "maxRounds": "AssistantAgent(max_tool_iterations=...)",
        "maxExecutions": "none: AutoGen has no execution budget",
        "maxToolExecutions": "none: no per-tool execution limit",
        "maxRequests": "none: no limit on tool requests",
        "maxRetries": "none: AutoGen does not retry a failed tool by itself",
        "deadline": "none: not fuzzed",
    }

    def __init__(self) -> None:
        from importlib.metadata import version

        self.version = f"autogen-agentchat {version('autogen-agentchat')}, autogen-core {version('autogen-core')}"

    def unrepresentable(self, call: Json) -> str | None:
        why = super().unrepresentable(call)
        if why is None and "id" not in call:
            return "a call without an id (FunctionCall.id is required)"
        return why

    def normalize_step(self, step: dict[str, Json]) -> dict[str, Json]:
        """As for every adapter, plus: abort mode cannot be expressed, and max_tool_iterations is at least 1."""
        step = super().normalize_step(step)
        step["config"] = {**step["config"], "mode": "continue"}
        lim = step["config"].get("limits")
        if isinstance(lim, dict) and lim.get("maxRounds") == 0:
            step["config"]["limits"] = {**lim, "maxRounds": None}
        return step

    def _tools(self, run: Run) -> list[Any]:
        from autogen_core.tools import FunctionTool

        class _Observed(FunctionTool):  # type: ignore[misc]
            """Records the call id AutoGen passes (for tracing) and the call's arguments in the task's context;
            runs the tool unchanged."""

            async def run_json(self, args: Any, cancellation_token: Any, call_id: str | None = None) -> Any:
                _CALL_ID.set((call_id, dict(args)))  # the call's own arguments, before validation
                return await super().run_json(args, cancellation_token, call_id=call_id)

        tools = []
        for name, schema in run.tools.items():
            if not name.isidentifier():
                continue
            sig, ann = python_signature(schema, var_kwargs=False)
            params = [p.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                default=None if p.default is not inspect.Parameter.empty else p.default)
                      for p in sig.parameters.values()]
            params.sort(key=lambda p: p.default is not inspect.Parameter.empty)

            def make(name: str = name, params: list[Any] = params, ann: Any = ann) -> Any:
                async def fn(**kwargs: Any) -> str:
                    given = {k: v for k, v in kwargs.items() if v is not None}
                    seen = _CALL_ID.get()
                    i = _calling(run, name, seen[1] if seen else given, seen[0] if seen else None)
                    return json.dumps(await run.aenter(i, run.call(i).get("id") if i is not None else None, name, given,
                                                run.principal))
                fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
                fn.__annotations__ = {**{p.name: ann[p.name] for p in params}, "return": str}
                fn.__name__ = name
                return fn

            tools.append(_Observed(make(), description=f"The tool {name}.", name=name))
        return tools

    def run_loop(self, run: Run, params: dict[str, Json], model_next: ModelFn, *, batch: bool) -> dict[str, Json]:
        from autogen_agentchat.agents import AssistantAgent
        from autogen_agentchat.messages import ToolCallExecutionEvent
        from autogen_core import FunctionCall
        from autogen_core.models import (
            ChatCompletionClient,
            CreateResult,
            FunctionExecutionResultMessage,
            RequestUsage,
        )

        def read(results: list[Any]) -> None:
            if run.current < 0:
                return
            used: set[int] = set()
            for r in results:
                i = next((i for i in run.round_positions() if run.call(i).get("id") == r.call_id and i not in used),
                         None)
                if i is None:
                    continue
                used.add(i)
                cid = run.call(i)["id"]
                if r.is_error:
                    code = (run.failed_at.get(i) or ("UNKNOWN_TOOL" if run.call(i).get("name") not in run.tools
                                                     else "INVALID_ARGUMENT"))
                    run.answer(i, shown(cid, code, r.content))
                else:
                    try:
                        run.answer(i, ok(cid, json.loads(r.content)))
                    except (TypeError, ValueError):
                        run.answer(i, ok(cid, r.content))

        async def respond(messages: list[Any]) -> Any:
            if run.rounds > 0:
                last = [m for m in messages if isinstance(m, FunctionExecutionResultMessage)]
                if last and messages and messages[-1] is last[-1]:
                    read(list(last[-1].content))
            reply, kind = run.next_reply(model_next)
            usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
            if kind == "final":
                run.final = reply["final"]
                return CreateResult(finish_reason="stop", content=reply["final"], usage=usage, cached=False)
            if kind != "calls":
                raise _Invalid("the model answered with neither calls nor a final answer")
            run.propose(reply["calls"])
            calls = [FunctionCall(id=c["id"], name=c["name"],
                                  arguments=json.dumps(c["arguments"]) if "arguments" in c else "")
                     for c in reply["calls"]]
            if not calls:
                return CreateResult(finish_reason="stop", content="", usage=usage, cached=False)
            return CreateResult(finish_reason="function_calls", content=calls, usage=usage, cached=False)

        class Scripted(ChatCompletionClient):  # type: ignore[misc]
            async def create(self, messages: Any, *, tools: Any = (), tool_choice: Any = "auto", json_output: Any = None,
                             extra_create_args: Any = None, cancellation_token: Any = None, **kw: Any) -> Any:
                return await respond(list(messages))

            def create_stream(self, *a: Any, **k: Any) -> Any:
                raise NotImplementedError("the scripted model does not stream")

            async def close(self) -> None:
                return None

            def actual_usage(self) -> Any:
                return RequestUsage(prompt_tokens=0, completion_tokens=0)

            def total_usage(self) -> Any:
                return RequestUsage(prompt_tokens=0, completion_tokens=0)

            def count_tokens(self, *a: Any, **k: Any) -> int:
                return 0

            def remaining_tokens(self, *a: Any, **k: Any) -> int:
                return 10**9

            @property
            def capabilities(self) -> Any:
                return self.model_info

            @property
            def model_info(self) -> Any:
                return {"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
                        "structured_output": False}

        limits = params.get("limits") or {}
        rounds = limits.get("maxRounds")

        async def go() -> Any:
            agent = AssistantAgent("loopspec", model_client=Scripted(), tools=self._tools(run),
                                   max_tool_iterations=rounds if rounds is not None else 10**6,
                                   reflect_on_tool_use=self.setting("reflect_on_tool_use") == "true")
            return await agent.run(task="go")

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = run.run_async(go())
        except (ModelFailure, _Invalid):
            return run.outcome("FAILED", "MODEL_ERROR")
        except Exception as exc:
            if isinstance(exc.__cause__, ModelFailure | _Invalid) or isinstance(exc.__context__, ModelFailure | _Invalid):
                return run.outcome("FAILED", "MODEL_ERROR")
            raise
        events = [m for m in result.messages if isinstance(m, ToolCallExecutionEvent)]
        if events:  # the last iteration's results, which no model request showed
            read(list(events[-1].content))
        last = result.messages[-1] if result.messages else None
        content = getattr(last, "content", "")
        run.final = content if isinstance(content, str) else json.dumps(content, default=str)
        return run.outcome("COMPLETED", "FINAL_ANSWER")


def _calling(run: Run, name: str, received: dict[str, Json], call_id: str | None = None) -> int | None:
    """The first call of the current round with this tool (and this call id, when AutoGen passed one) whose body
    was not entered yet, in request order: with arguments that hold these (AutoGen drops undeclared ones),
    else any."""
    def holds(args: Json) -> bool:
        return isinstance(args, dict) and all(k in args and args[k] == v for k, v in received.items())

    for match in (lambda a: a == received, holds, lambda a: True):  # in request order, as AutoGen starts them
        for i in run.round_positions():
            c = run.call(i)
            if (c.get("name") == name and i not in run.entered and match(c.get("arguments"))
                    and (call_id is None or c.get("id") == call_id)):
                run.entered.add(i)
                return i
    return None
