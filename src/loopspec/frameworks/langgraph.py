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
* Answers are the ``ToolMessage``s the graph appends after the round's ``AIMessage``: ToolNode returns
  one per tool call, in the order of ``tool_calls`` (call ids may repeat, so they are matched by
  position): ``status == "success"`` → ok with the content (the tool returns JSON text);
  ``status == "error"`` → ``UNKNOWN_TOOL`` for a tool that is not registered, the tool's failure
  category when its body failed, else ``INVALID_ARGUMENT``. Calls in ``invalid_tool_calls`` are no
  requests for LangGraph (``Run.dropped``).
* An execution is attributed to its request through the ToolNode's documented interceptor
  ``awrap_tool_call``, which only records the raw tool call it is about to run (a context variable the
  tool body reads) and calls ``execute`` unchanged: ids may repeat in one message.
* ToolNode runs the calls of a message concurrently (``asyncio.gather``), so a tool failure that ends
  the run in abort mode does not stop the others; the graph then raises and the message's
  ToolMessages are lost (profile ``tool_execution = concurrent``). By default each body answers before
  it yields, so the calls complete in start order; ``langgraph[completion=harness]`` holds the answers
  (the bodies await them) and the harness picks the completion order (protocol v1.1, batch steps).
* LangGraph has no execution, per-tool or request budget and does not retry a failed tool.
"""

from __future__ import annotations

import json
import warnings
from contextvars import ContextVar
from typing import Annotated, Any, ClassVar

from ..protocol.executor import ModelFailure, ModelFn
from ._common import FrameworkExecutor, Run, ToolFailed, given, ok, python_signature, shown

Json = Any

__all__ = ["LangGraphExecutor"]


#: handle_tool_errors = text: what an application that hides exceptions from the model would pass
FIXED_ERROR_TEXT = "The tool failed."


class _Invalid(Exception):
    pass


class LangGraphExecutor(FrameworkExecutor):
    framework = "langgraph"
    name = "langgraph"
    #: recursion_limit: 2 × maxRounds (even, the profile's setting) or one less (odd); handle_tool_errors:
    #: True in continue mode and ToolNode's default in abort mode (by-mode), True in every mode, or a fixed text
    #: completion: ToolNode always gathers a message's calls; "at-once" answers each body before it
    #: yields (so they run one after the other, the adapter's default), "harness" holds the answers and
    #: the harness picks the completion order (ToolNode's concurrency as a user sees it, protocol v1.1)
    SETTINGS: ClassVar[dict[str, tuple[str, ...]]] = {"recursion_limit": ("even", "odd"),
                                                      "handle_tool_errors": ("by-mode", "true", "text"),
                                                      "completion": ("at-once", "harness")}
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

    def concurrent(self) -> bool:
        return self.setting("completion") == "harness"

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
                    i = _entering(run, _RUNNING.get(), tool_call_id, name)
                    principal = (config.get("configurable") or {}).get("principal")
                    return json.dumps(await run.aenter(i, tool_call_id, name, given(kwargs), principal))
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
        """The ToolMessages after the last AIMessage: the answers of the current round, by position."""
        from langchain_core.messages import AIMessage, ToolMessage

        last = max((k for k, m in enumerate(messages) if isinstance(m, AIMessage)), default=-1)
        answers = [m for m in messages[last + 1:] if isinstance(m, ToolMessage)]
        if run.current < 0:
            return
        for i, m in zip(self._valid[run.current], answers, strict=False):
            cid = run.call(i).get("id")
            if m.status == "success":
                try:
                    run.answer(i, ok(cid, json.loads(m.content) if isinstance(m.content, str) else m.content))
                except ValueError:
                    run.answer(i, ok(cid, m.content))
            elif m.name not in run.tools:  # the content: ToolNode's text, whatever its type
                run.answer(i, shown(cid, "UNKNOWN_TOOL", m.content))
            else:
                run.answer(i, shown(cid, run.failed_at.get(i, "INVALID_ARGUMENT"), m.content))

    def _propose(self, run: Run, calls: list[Json]) -> Any:
        """Record the round and build its AIMessage; calls that cannot be ToolCalls are no requests."""
        run.propose(calls)
        off = run.offsets[-1]
        valid = [off + j for j, c in enumerate(calls) if isinstance(c.get("arguments"), dict)]
        self._valid.append(valid)
        run.dropped.update(off + j for j in range(len(calls)) if off + j not in valid)
        return self._message(calls)

    def run_loop(self, run: Run, params: dict[str, Json], model_next: ModelFn, *, batch: bool) -> dict[str, Json]:
        from langgraph.errors import GraphRecursionError
        from langgraph.prebuilt import ToolNode

        abort = params.get("mode", "continue") == "abort"
        tools = self._tools(run)
        self._valid: list[list[int]] = []  # per round: the positions of the calls that are ToolCalls
        handling = self.setting("handle_tool_errors")
        if handling == "text":  # a fixed text in every mode: no failure ends the run, none shows its exception
            node = ToolNode(tools, handle_tool_errors=FIXED_ERROR_TEXT, awrap_tool_call=_observe)
        elif handling == "true" or not abort:
            node = ToolNode(tools, handle_tool_errors=True, awrap_tool_call=_observe)
        else:  # by-mode in abort mode: ToolNode's default handler (tool failures are re-raised)
            node = ToolNode(tools, awrap_tool_call=_observe)
        config: dict[str, Any] = {"configurable": {"principal": run.principal}}
        if batch:
            return self._batch(run, node, model_next, config)
        from langgraph.prebuilt import create_react_agent

        model = _scripted_chat_model(run, model_next, self)
        limits = params.get("limits") or {}
        rounds = limits.get("maxRounds")
        odd = self.setting("recursion_limit") == "odd"
        config["recursion_limit"] = 2 * rounds - (1 if odd else 0) if rounds is not None else 10**6
        with warnings.catch_warnings():
            # LangGraph 1.x points to langchain.agents.create_agent (another package); the prebuilt agent
            # is still LangGraph's own ReAct loop, and the one the issue asks for
            warnings.simplefilter("ignore")
            agent = create_react_agent(model, tools=node)
        try:
            out = _quietly(run, agent.ainvoke({"messages": [("user", "go")]}, config))
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
        message = self._propose(run, reply["calls"])
        g = StateGraph(MessagesState)
        g.add_node("tools", node)
        g.add_edge(START, "tools")
        g.add_edge("tools", END)
        app = g.compile()
        try:
            out = _quietly(run, app.ainvoke({"messages": [message]}, config))
        except ToolFailed:
            return self._failed(run)
        self._read(run, out["messages"])
        return run.outcome("COMPLETED", "END_OF_BATCH")

    @staticmethod
    def _failed(run: Run) -> dict[str, Json]:
        failed = sorted(i for i in run.failed_at if i >= run.offsets[run.current])
        at = failed[0] if failed else None
        return run.outcome("FAILED", "TERMINAL_ERROR", (at, run.failed_at[at]) if at is not None else None)


def _quietly(run: Run, coro: Any) -> Any:
    """Run the graph; pydantic warns that the ABSENT default of an optional property is not serializable."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run.run_async(coro)


_RUNNING: ContextVar[Any] = ContextVar("loopspec_langgraph_tool_call", default=None)


async def _observe(request: Any, execute: Any) -> Any:
    """ToolNode's ``awrap_tool_call``: note which raw tool call runs in this task, change nothing."""
    token = _RUNNING.set(request.tool_call)
    try:
        return await execute(request)
    finally:
        _RUNNING.reset(token)


def _entering(run: Run, tool_call: Any, call_id: Json, name: Json) -> int | None:
    """The request whose tool body is being entered: the first of the current round not entered yet
    with this raw tool call's id, name and arguments."""
    if run.current < 0:
        return None
    args = tool_call.get("args") if isinstance(tool_call, dict) else None
    for i in run.round_positions():
        c = run.call(i)
        if i in run.entered or not isinstance(c, dict) or i in run.dropped:
            continue
        if c.get("id") == call_id and c.get("name") == name and (args is None or c.get("arguments") == args):
            run.entered.add(i)
            return i
    return None


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
            reply, kind = run.next_reply(model_next)
            if kind == "final":
                msg = AIMessage(content=reply["final"])
            elif kind == "calls":
                msg = adapter._propose(run, reply["calls"])
            else:
                raise _Invalid("the model answered with neither calls nor a final answer")
            return ChatResult(generations=[ChatGeneration(message=msg)])

    return Scripted()
