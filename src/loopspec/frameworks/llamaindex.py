"""LlamaIndex's ``FunctionAgent`` (``llama-index-core``'s agent workflow) behind the adapter protocol.

* The model is a ``FunctionCallingLLM`` subclass scripted by the harness: each ``achat`` asks
  ``model.next`` and answers with an assistant ``ChatMessage`` whose calls ``get_tool_calls_from_response``
  hands to the agent as ``ToolSelection(tool_id, tool_name, tool_kwargs)``; a final answer is a message
  without calls.
* Tools are ``FunctionTool.from_defaults(async_fn=...)`` with the signature built from the harness's
  schema; the body counts the execution and calls the harness's tool. The trusted principal is the run's,
  bound when the tool is built. LlamaIndex does not validate the arguments against the schema: it calls
  the function with them (a Python ``TypeError`` for a missing or undeclared argument is the answer).
* Budgets: ``maxRounds`` → ``agent.run(max_iterations=...)`` (settings: the rounds, or one more), with
  ``early_stopping_method`` ``force`` (raise) or ``generate`` (the model is asked for a final answer).
* Answers are the ``role="tool"`` messages the agent sends to the model next (``tool_call_id`` in
  ``additional_kwargs``, the content as text: the tool's output, or the exception's text for a failure,
  ``Tool ... not found`` for an unknown tool). The request a tool body runs for is the first call of the
  round with that tool and those arguments not yet entered (the body does not see the call id).

* ``llamaindex[completion=harness]``: the bodies await the answers the harness holds and the harness
  picks the completion order (protocol v1.1, batch steps; every call of a response may overlap).

What LlamaIndex cannot express, and the fuzzer therefore does not propose or vary:

* abort mode: every tool exception and unknown tool becomes an error result the model sees and the run
  goes on; every step runs in continue mode;
* a call without an id, or whose arguments are not a JSON object (``ToolSelection.tool_kwargs`` is a dict);
* an execution budget, per-tool limits, a limit on requests, retries of a failed tool, deadlines, and the
  ``error-result`` limit policy (``max_iterations`` is the only limit).
"""

from __future__ import annotations

import inspect
import json
import warnings
from typing import Any, ClassVar

from ..protocol.executor import ModelFailure, ModelFn
from ._common import FrameworkExecutor, Run, ok, python_signature, shown

Json = Any

__all__ = ["LlamaIndexExecutor"]


class _Invalid(Exception):
    pass


class LlamaIndexExecutor(FrameworkExecutor):
    framework = "llamaindex"
    name = "llamaindex"
    #: max_iterations: maxRounds (the natural mapping) or one more; early_stopping_method: force or generate
    SETTINGS: ClassVar[dict[str, tuple[str, ...]]] = {
        "max_iterations": ("rounds", "rounds+1"),
        "early_stopping_method": ("force", "generate"),
        # completion: each body answers before it yields (the adapter's default) or the bodies await the
        # answers the harness holds and it picks the completion order (protocol v1.1, batch steps)
        "completion": ("at-once", "harness"),
    }
    def concurrent(self) -> bool:
        return self.setting("completion") == "harness"

    limit_support: ClassVar[dict[str, str]] = {
        "maxRounds": "agent.run(max_iterations=...)",
        "maxExecutions": "none: LlamaIndex has no execution budget",
        "maxToolExecutions": "none: no per-tool execution limit",
        "maxRequests": "none: no limit on tool requests",
        "maxRetries": "none: LlamaIndex does not retry a failed tool by itself",
        "deadline": "none: not fuzzed",
    }

    def __init__(self) -> None:
        from importlib.metadata import version

        self.version = version("llama-index-core")

    def unrepresentable(self, call: Json) -> str | None:
        why = super().unrepresentable(call)
        if why is None and "id" not in call:
            return "a call without an id (ToolSelection.tool_id is required)"
        if why is None and not isinstance(call.get("arguments"), dict):
            return "arguments that are not a JSON object (ToolSelection.tool_kwargs is a dict)"
        return why

    def normalize_step(self, step: dict[str, Json]) -> dict[str, Json]:
        """As for every adapter, plus: abort mode cannot be expressed (every tool error is shown to the model
        and the run goes on), and max_iterations is at least 1."""
        step = super().normalize_step(step)
        step["config"] = {**step["config"], "mode": "continue"}
        lim = step["config"].get("limits")
        if isinstance(lim, dict) and lim.get("maxRounds") == 0:
            step["config"]["limits"] = {**lim, "maxRounds": None}
        return step

    def _tools(self, run: Run) -> list[Any]:
        from llama_index.core.tools import FunctionTool

        tools = []
        for name, schema in run.tools.items():
            if not name.isidentifier():
                continue

            async def body(_name: str = name, **kwargs: Any) -> str:
                i = _calling(run, _name, kwargs)
                return json.dumps(await run.aenter(i, run.call(i).get("id") if i is not None else None, _name, dict(kwargs),
                                            run.principal))

            sig, ann = python_signature(schema, var_kwargs=False)
            params = [p.replace(default=None) if p.default is not inspect.Parameter.empty else p
                      for p in sig.parameters.values()]

            def make(body: Any = body, name: str = name, params: list[Any] = params, ann: Any = ann) -> Any:
                async def fn(**kwargs: Any) -> str:
                    return await body(_name=name, **kwargs)
                fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
                fn.__annotations__ = {**ann, "return": str}
                fn.__name__ = name
                fn.__doc__ = f"The tool {name}."
                return fn

            tools.append(FunctionTool.from_defaults(async_fn=make(), name=name, description=f"The tool {name}."))
        return tools

    def run_loop(self, run: Run, params: dict[str, Json], model_next: ModelFn, *, batch: bool) -> dict[str, Json]:
        from llama_index.core.agent.workflow import FunctionAgent
        from llama_index.core.base.llms.types import ChatMessage, ChatResponse, LLMMetadata
        from llama_index.core.llms.function_calling import FunctionCallingLLM
        from llama_index.core.llms.llm import ToolSelection

        def read(messages: list[Any]) -> None:
            if run.current < 0:
                return
            last = max((k for k, m in enumerate(messages) if str(getattr(m.role, "value", m.role)) == "assistant"),
                       default=-1)
            used: set[int] = set()
            order = []
            for m in messages[last + 1:]:
                if str(getattr(m.role, "value", m.role)) != "tool":
                    continue
                cid = (m.additional_kwargs or {}).get("tool_call_id")
                i = next((i for i in run.round_positions() if run.call(i).get("id") == cid and i not in used), None)
                if i is None:
                    continue
                used.add(i)
                order.append(i)
                content = m.content
                call = run.call(i)
                if i in run.failed_at:
                    run.answer(i, shown(cid, run.failed_at[i], content))
                elif call.get("name") not in run.tools:
                    run.answer(i, shown(cid, "UNKNOWN_TOOL", content))
                elif i not in run.entered:
                    run.answer(i, shown(cid, "INVALID_ARGUMENT", content))
                else:
                    try:
                        run.answer(i, ok(cid, json.loads(content)))
                    except (TypeError, ValueError):
                        run.answer(i, ok(cid, content))
            if order and order != sorted(order):
                run.shown_order[run.current] = order

        async def respond(messages: list[Any]) -> Any:
            if run.rounds > 0:
                read(messages)
            reply, kind = run.next_reply(model_next)
            if kind == "final":
                run.final = reply["final"]
                return ChatResponse(message=ChatMessage(role="assistant", content=reply["final"]))
            if kind != "calls":
                raise _Invalid("the model answered with neither calls nor a final answer")
            run.propose(reply["calls"])
            calls = [{"tool_id": c["id"], "tool_name": c["name"], "tool_kwargs": dict(c["arguments"])}
                     for c in reply["calls"]]
            return ChatResponse(message=ChatMessage(role="assistant", content="",
                                                    additional_kwargs={"tool_calls": calls}))

        class Scripted(FunctionCallingLLM):  # type: ignore[misc]
            @property
            def metadata(self) -> Any:
                return LLMMetadata(is_function_calling_model=True, model_name="loopspec-scripted")

            def _prepare_chat_with_tools(self, tools: Any, user_msg: Any = None, chat_history: Any = None,
                                         verbose: bool = False, allow_parallel_tool_calls: bool = False,
                                         tool_required: bool = False, **kw: Any) -> dict[str, Any]:
                messages = list(chat_history or [])
                if user_msg is not None:
                    messages.append(ChatMessage(role="user", content=user_msg) if isinstance(user_msg, str) else user_msg)
                return {"messages": messages}

            def get_tool_calls_from_response(self, response: Any, error_on_no_tool_call: bool = True,
                                             **kw: Any) -> list[Any]:
                return [ToolSelection(**c) for c in response.message.additional_kwargs.get("tool_calls", [])]

            async def achat(self, messages: Any, **kw: Any) -> Any:
                return await respond(list(messages))

            def chat(self, messages: Any, **kw: Any) -> Any:
                raise NotImplementedError

            def complete(self, *a: Any, **k: Any) -> Any:
                raise NotImplementedError

            def stream_chat(self, *a: Any, **k: Any) -> Any:
                raise NotImplementedError

            def stream_complete(self, *a: Any, **k: Any) -> Any:
                raise NotImplementedError

            async def acomplete(self, *a: Any, **k: Any) -> Any:
                raise NotImplementedError

            async def astream_chat(self, *a: Any, **k: Any) -> Any:
                raise NotImplementedError

            async def astream_complete(self, *a: Any, **k: Any) -> Any:
                raise NotImplementedError

        limits = params.get("limits") or {}
        rounds = limits.get("maxRounds")
        iterations = 10**6 if rounds is None else rounds + (1 if self.setting("max_iterations") == "rounds+1" else 0)
        async def go() -> Any:
            agent = FunctionAgent(tools=self._tools(run), llm=Scripted(), streaming=False)
            return await agent.run(user_msg="go", max_iterations=iterations,
                                   early_stopping_method=self.setting("early_stopping_method"))

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pydantic deprecations raised inside llama-index
                out = run.run_async(go())
        except (ModelFailure, _Invalid):
            return run.outcome("FAILED", "MODEL_ERROR")
        except Exception as exc:
            if "Max iterations" in str(exc):
                return run.outcome("TRUNCATED", "MAX_ROUNDS")
            if isinstance(exc.__cause__, ModelFailure | _Invalid) or isinstance(exc.__context__, ModelFailure | _Invalid):
                return run.outcome("FAILED", "MODEL_ERROR")
            raise
        content = getattr(getattr(out, "response", None), "content", None)
        run.final = content if isinstance(content, str) else ""
        return run.outcome("COMPLETED", "FINAL_ANSWER")


def _calling(run: Run, name: str, received: dict[str, Json]) -> int | None:
    """The first call of the current round with this tool and these arguments whose body was not entered yet.

    The body sees an optional property as ``None`` whether the call gave ``null`` or left it out (its
    parameters default to ``None``), so both sides are compared without ``None`` values: a call
    ``{"tenant": null}`` is not mistaken for a later ``{}`` of the same round (that made an R12 of our own)."""
    given = _without_none(received)
    for exact in (True, False):
        for i in run.round_positions():
            c = run.call(i)
            if c.get("name") == name and i not in run.entered and (not exact or _without_none(c.get("arguments")) == given):
                run.entered.add(i)
                return i
    return None


def _without_none(arguments: Json) -> Json:
    return {k: v for k, v in arguments.items() if v is not None} if isinstance(arguments, dict) else arguments
