"""LangGraph behind the adapter protocol.

* Batch level: a graph ``START → ToolNode(tools) → END`` invoked with one ``AIMessage`` whose
  ``tool_calls`` are the proposal (``{"name", "args", "id", "type": "tool_call"}``). A call whose
  arguments are not a JSON object cannot be a ``ToolCall`` (``args`` is a dict): it goes where
  LangChain's output parsers put such calls, ``AIMessage.invalid_tool_calls`` (``args`` = the JSON text).
* Loop level: the prebuilt ReAct agent (``langgraph.prebuilt.create_react_agent``) with a scripted
  chat model (a ``BaseChatModel`` whose ``_generate`` asks the harness's ``model.next``); the budget is
  ``recursion_limit``: a round is two super-steps (the model node, then the tools node), so
  ``maxRounds = R`` is ``recursion_limit = 2R``, and ``GraphRecursionError`` ends the run (MAX_ROUNDS).
* Tools are ``StructuredTool.from_function(coroutine=...)`` with the signature built from the harness's
  schema, the call id injected with ``InjectedToolCallId`` and the trusted principal read from the
  run's ``RunnableConfig`` (``configurable.principal``, R16). They are ``async`` and the graph is run
  with ``ainvoke``, so the tools of one message run as tasks in a deterministic order.
* Mode: ``continue`` uses ``ToolNode(handle_tool_errors=True)`` (every failure becomes an error
  ``ToolMessage``); ``abort`` keeps the default, which answers invalid arguments and unknown tools with
  an error ``ToolMessage`` and re-raises tool failures (they end the run).
* Answers are the ``ToolMessage``s the graph appends, matched to requests by ``tool_call_id`` (and
  tool name) in order: ``status == "success"`` → ok with the content (the tool returns JSON text);
  ``status == "error"`` → ``UNKNOWN_TOOL`` for a tool that is not registered, the tool's failure
  category when its body failed, else ``INVALID_ARGUMENT``.
* LangGraph has no execution, per-tool or request budget and does not retry a failed tool.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, ClassVar

from .._adapter import ModelFailure, ModelFn
from ._common import FrameworkExecutor, Run, ToolFailed, error, given, ok, python_signature, reply_kind

Json = Any

__all__ = ["LangGraphExecutor"]


class _Invalid(Exception):
    pass


class LangGraphExecutor(FrameworkExecutor):
    framework = "langgraph"
    name = "langgraph"
    limit_support: ClassVar[dict[str, str]] = {
        "maxRounds": "recursion_limit = 2 × maxRounds (loop level; a round is a model step and a tools step)",
        "maxExecutions": "none: LangGraph has no execution budget",
        "maxToolExecutions": "none: no per-tool execution limit",
        "maxRequests": "none: no limit on tool requests",
        "maxRetries": "none: ToolNode does not retry a failed tool",
        "deadline": "none: not fuzzed",
    }

    def __init__(self) -> None:
        from importlib.metadata import version

        self.version = f"langgraph {version('langgraph')}, langgraph-prebuilt {version('langgraph-prebuilt')}, " \
                       f"langchain-core {version('langchain-core')}"

    def unrepresentable(self, call: Json) -> str | None:
        why = super().unrepresentable(call)
        if why is None and "id" not in call:
            return "a call without an id (the instrumented tool needs its id through InjectedToolCallId)"
        return why

    def normalize_step(self, step: dict[str, Json]) -> dict[str, Json]:
        """As for every adapter, plus: recursion_limit must be at least 1, so maxRounds = 0 (no model
        request at all) is not expressible and is left off."""
        step = super().normalize_step(step)
        lim = (step.get("config") or {}).get("limits")
        if isinstance(lim, dict) and lim.get("maxRounds") == 0:
            step["config"] = {**step["config"], "limits": {**lim, "maxRounds": None}}
        return step

    # -- mapping -----------------------------------------------------------------------------
    @staticmethod
    def _message(calls: list[Json]) -> Any:
        from langchain_core.messages import AIMessage

        valid, invalid = [], []
        for c in calls:
            if isinstance(c.get("arguments"), dict):
                valid.append({"name": c["name"], "args": c["arguments"], "id": c["id"], "type": "tool_call"})
            else:
                invalid.append({"name": c["name"], "args": json.dumps(c["arguments"]) if "arguments" in c else None,
                                "id": c["id"], "error": "arguments are not a JSON object",
                                "type": "invalid_tool_call"})
        return AIMessage(content="", tool_calls=valid, invalid_tool_calls=invalid)

    def _tools(self, run: Run) -> list[Any]:
        import inspect

        from langchain_core.runnables import RunnableConfig
        from langchain_core.tools import InjectedToolCallId, StructuredTool

        tools = []
        for name, schema in run.tools.items():
            def make(name: str = name) -> Any:
                async def fn(tool_call_id: str, config: RunnableConfig, **kwargs: Any) -> str:
                    i = _index(run, tool_call_id, name)
                    principal = (config.get("configurable") or {}).get("principal")
                    return json.dumps(run.enter(i, tool_call_id, name, given(kwargs), principal))
                return fn

            body = make()
            first = [
                inspect.Parameter("tool_call_id", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                  annotation=Annotated[str, InjectedToolCallId]),
                inspect.Parameter("config", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=RunnableConfig),
            ]
            sig, ann = python_signature(schema, first, var_kwargs=False)  # pydantic ignores extras
            body.__signature__ = sig  # type: ignore[attr-defined]
            body.__annotations__ = {**ann, "return": str}
            tools.append(StructuredTool.from_function(coroutine=body, name=name, description=f"The tool {name}."))
        return tools

    def _read(self, run: Run, messages: list[Any]) -> None:
        from langchain_core.messages import ToolMessage

        for m in messages:
            if not isinstance(m, ToolMessage):
                continue
            i = _index(run, m.tool_call_id, m.name, answered=True)
            if i is None:
                continue
            cid = run.call(i).get("id")
            if m.status == "success":
                try:
                    run.answer(i, ok(cid, json.loads(m.content) if isinstance(m.content, str) else m.content))
                except ValueError:
                    run.answer(i, ok(cid, m.content))
            elif m.name not in run.tools:
                run.answer(i, error(cid, "UNKNOWN_TOOL"))
            else:
                run.answer(i, error(cid, run.failed_at.get(i, "INVALID_ARGUMENT")))

    def run_loop(self, run: Run, params: dict[str, Json], model_next: ModelFn, *, batch: bool) -> dict[str, Json]:
        from langgraph.errors import GraphRecursionError
        from langgraph.prebuilt import ToolNode

        abort = params.get("mode", "continue") == "abort"
        tools = self._tools(run)
        node = ToolNode(tools) if abort else ToolNode(tools, handle_tool_errors=True)
        config: dict[str, Any] = {"configurable": {"principal": run.principal}}
        if batch:
            return self._batch(run, node, model_next, config)
        from langgraph.prebuilt import create_react_agent

        model = _scripted_chat_model(run, model_next, self)
        limits = params.get("limits") or {}
        rounds = limits.get("maxRounds")
        config["recursion_limit"] = 2 * rounds if rounds is not None else 10**6
        try:
            agent = create_react_agent(model, tools=node)
        except TypeError:  # pragma: no cover - older signatures
            agent = create_react_agent(model, node)
        try:
            out = asyncio.run(agent.ainvoke({"messages": [("user", "go")]}, config))
            self._read(run, out["messages"])
            last = out["messages"][-1]
            run.final = last.content if isinstance(last.content, str) else json.dumps(last.content)
            return run.outcome("COMPLETED", "FINAL_ANSWER")
        except GraphRecursionError:
            return run.outcome("TRUNCATED", "MAX_ROUNDS")
        except (ModelFailure, _Invalid):
            return run.outcome("FAILED", "MODEL_ERROR")
        except ToolFailed:
            return self._failed(run)

    def _batch(self, run: Run, node: Any, model_next: ModelFn, config: dict[str, Any]) -> dict[str, Json]:
        from langgraph.graph import END, START, MessagesState, StateGraph

        reply = model_next(1, [])
        run.rounds = 1
        run.propose(reply["calls"])
        g = StateGraph(MessagesState)
        g.add_node("tools", node)
        g.add_edge(START, "tools")
        g.add_edge("tools", END)
        app = g.compile()
        try:
            out = asyncio.run(app.ainvoke({"messages": [self._message(reply["calls"])]}, config))
        except ToolFailed:
            return self._failed(run)
        self._read(run, out["messages"])
        return run.outcome("COMPLETED", "END_OF_BATCH")

    @staticmethod
    def _failed(run: Run) -> dict[str, Json]:
        failed = sorted(i for i in run.failed_at if i >= run.offsets[run.current])
        at = failed[0] if failed else None
        return run.outcome("FAILED", "TERMINAL_ERROR", (at, run.failed_at[at]) if at is not None else None)


def _index(run: Run, call_id: Json, name: Json, *, answered: bool = False) -> int | None:
    """The request of the current round with this id and name: the first one not yet answered (or, for
    an execution, not yet entered); LangGraph runs every call, duplicates included."""
    if run.current < 0:
        return None
    off = run.offsets[run.current]
    candidates = [off + j for j, c in enumerate(run.proposals[run.current])
                  if isinstance(c, dict) and c.get("id") == call_id and c.get("name") == name]
    taken = run.answers if answered else run.entered
    for i in candidates:
        if i not in taken:
            if not answered:
                run.entered.add(i)
            return i
    return candidates[0] if candidates else None


def _scripted_chat_model(run: Run, model_next: ModelFn, adapter: LangGraphExecutor) -> Any:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class Scripted(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "loopspec-scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
            if run.rounds > 0:
                adapter._read(run, messages)
            shown = run.round_results(run.current) if run.current >= 0 else []
            run.rounds += 1
            reply = model_next(run.rounds, shown)
            kind = reply_kind(reply)
            if kind == "final":
                msg = AIMessage(content=reply["final"])
            elif kind == "calls":
                run.propose(reply["calls"])
                msg = adapter._message(reply["calls"])
            else:
                raise _Invalid("the model answered with neither calls nor a final answer")
            return ChatResult(generations=[ChatGeneration(message=msg)])

    return Scripted()
