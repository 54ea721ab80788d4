"""pydantic-ai (``pydantic-ai-slim``) behind the adapter protocol.

* The model is pydantic-ai's own :class:`~pydantic_ai.models.function.FunctionModel`: each model
  request calls the harness's ``model.next`` and turns the reply into a ``ModelResponse`` with one
  ``ToolCallPart`` per proposed call (``TextPart`` for the final answer).
* Tools are registered through the agent (``Agent(tools=[Tool(fn, takes_ctx=True)])``); ``fn`` has the
  Python signature a user would write for the harness's schema, so pydantic-ai builds the schema and
  validates the arguments itself. The trusted principal travels as the run's ``deps`` (R16).
* Budgets: ``maxRounds`` → ``UsageLimits.request_limit``, ``maxExecutions`` (a batch's ``budget``)
  → ``UsageLimits.tool_calls_limit``. pydantic-ai has no per-tool limit, request limit or automatic
  retry of a tool failure, so the fuzzer leaves those off for this adapter.
* Mode: ``abort`` runs the agent with no tool retries (``retries={"tools": 0}``: the first invalid call
  ends the run with ``UnexpectedModelBehavior``) and tool failures raised as plain exceptions (they
  end the run); ``continue`` gives violations a large retry budget (each is answered to the model) and
  raises ``ToolFailed`` for failures (a failed tool result the model sees). The output retry budget is
  large in both modes: a response with no parts is not a violation, pydantic-ai asks the model again
  (R18), and only the tool budget says what a violation does.
* pydantic-ai validates every call of a response before it runs any (``call_checks = upfront``): the
  request a validation failure ends the run at is the first call of the response that pydantic-ai did
  not report valid, observed with an ``after_tool_validate`` hook (``capabilities=[Hooks(...)]``, which
  returns the arguments unchanged; validation runs in response order and stops at the first failure).
* Tool calls run with ``ToolManager.parallel_execution_mode('sequential')`` by default, so executions
  start in request order. ``pydantic-ai[parallel=parallel]`` (pydantic-ai's own default) or
  ``parallel_ordered_events`` runs them concurrently: the adapter announces ``concurrency``, the tool
  bodies are coroutines awaiting the answers the harness holds, and the harness picks the completion
  order (protocol v1.1, batch steps). pydantic-ai has no bound on the overlap and reads no MCP hints,
  so a concurrent step lets every call of the response overlap (R29, R30 are not fuzzed).
* Answers are read from the ``ToolReturnPart``s pydantic-ai sends to the model next: outcome
  ``success`` → ok with the content; ``retried`` → ``UNKNOWN_TOOL`` when the part names a tool that is
  not registered, else ``INVALID_ARGUMENT``; ``failed`` → the category the harness's tool failed with.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, ClassVar

from ..core.rules import CODE_TABLE
from ..protocol.executor import ModelFailure, ModelFn
from ._common import FrameworkExecutor, Run, ToolFailed, given, ok, python_signature, shown

Json = Any

__all__ = ["PydanticAIExecutor"]

_BIG = 10_000  # "unlimited" retries in continue mode


class _Refused(Exception):
    """The scripted model could not produce a response (R18)."""


class PydanticAIExecutor(FrameworkExecutor):
    framework = "pydantic-ai"
    name = "pydantic-ai"
    #: parallel: ToolManager.parallel_execution_mode (sequential is the adapter's; pydantic-ai's default is
    #: parallel); end_strategy: Agent(end_strategy=...); retries: the tool retry budget (0 in abort mode and
    #: unlimited in continue mode, or 1 in every mode)
    SETTINGS: ClassVar[dict[str, tuple[str, ...]]] = {
        "parallel": ("sequential", "parallel", "parallel_ordered_events"),
        "end_strategy": ("graceful", "early", "exhaustive"),
        "retries": ("by-mode", "1"),
    }
    limit_support: ClassVar[dict[str, str]] = {
        "maxRounds": "UsageLimits.request_limit",
        "maxExecutions": "UsageLimits.tool_calls_limit (counts successful tool calls; checked for a whole response)",
        "maxToolExecutions": "none: pydantic-ai has no per-tool execution limit",
        "maxRequests": "none: pydantic-ai has no limit on tool requests",
        "maxRetries": "none: pydantic-ai does not retry a failed tool by itself",
        "deadline": "none: not fuzzed",
    }

    def __init__(self) -> None:
        os.environ.setdefault("LOGFIRE_IGNORE_NO_CONFIG", "1")
        from importlib.metadata import version

        self.version = version("pydantic-ai-slim")

    def concurrent(self) -> bool:
        return self.setting("parallel") != "sequential"

    def unrepresentable(self, call: Json) -> str | None:
        return super().unrepresentable(call)  # ToolCallPart: str name, str id (generated when missing)

    # -- the mapping -------------------------------------------------------------------------
    def _parts(self, run: Run, calls: list[Json]) -> tuple[list[Any], dict[str, int]]:
        from pydantic_ai.messages import ToolCallPart

        parts = []
        generated: dict[str, int] = {}
        for j, c in enumerate(calls):
            args = c.get("arguments", None) if "arguments" in c else None
            if "arguments" in c and not isinstance(args, dict):
                args = json.dumps(args)  # the JSON text of a value that is not an object (pydantic-ai's wire form)
            if "id" in c:
                part = ToolCallPart(c["name"], args, tool_call_id=c["id"])
            else:
                part = ToolCallPart(c["name"], args)  # pydantic-ai generates the id
                generated[part.tool_call_id] = run.offsets[-1] + j
            parts.append(part)
        return parts, generated

    def run_loop(self, run: Run, params: dict[str, Json], model_next: ModelFn, *, batch: bool) -> dict[str, Json]:
        from pydantic_ai import Agent, RunContext, Tool, capture_run_messages
        from pydantic_ai.capabilities import Hooks
        from pydantic_ai.exceptions import ToolFailed as PaiToolFailed
        from pydantic_ai.exceptions import UnexpectedModelBehavior, UsageLimitExceeded
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolReturnPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel
        from pydantic_ai.tool_manager import ToolManager
        from pydantic_ai.usage import UsageLimits

        abort = params.get("mode", "continue") == "abort"
        limits = params.get("limits") or {}
        generated: dict[str, int] = {}  # ids pydantic-ai generated -> request index
        valid: set[int] = set()  # requests pydantic-ai validated (after_tool_validate)

        def index_of(call_id: str, name: str) -> int | None:
            if call_id in generated:
                return generated[call_id]
            return run.index_of(call_id, name)

        def read_answers(parts: list[Any]) -> None:
            for p in parts:
                if not isinstance(p, ToolReturnPart):
                    continue
                i = index_of(p.tool_call_id, p.tool_name)
                if i is None:
                    continue
                cid = run.call(i).get("id")
                if p.outcome == "success":
                    run.answer(i, ok(cid, p.content))
                elif p.outcome == "retried":  # the content is pydantic-ai's own text (a validation report)
                    run.answer(i, shown(cid, "INVALID_ARGUMENT" if p.tool_name in run.tools else "UNKNOWN_TOOL",
                                        p.content))
                else:
                    run.answer(i, shown(cid, run.failed_at.get(i, "INTERNAL_ERROR"), p.content))

        def model(messages: list[Any], info: AgentInfo) -> Any:
            if run.rounds > 0 and messages and isinstance(messages[-1], ModelRequest):
                read_answers(messages[-1].parts)
            reply, kind = run.next_reply(model_next)
            if kind == "final":
                run.final = reply["final"]
                return ModelResponse(parts=[TextPart(reply["final"])])
            if kind != "calls":
                raise _Refused("the model answered with neither calls nor a final answer")
            run.propose(reply["calls"])
            parts, gen = self._parts(run, reply["calls"])
            generated.update(gen)
            return ModelResponse(parts=parts)  # an empty proposal is an empty response: pydantic-ai decides

        def validated(ctx: Any, /, *, call: Any, tool_def: Any, args: Any) -> Any:
            i = index_of(call.tool_call_id, call.tool_name)
            if i is not None:
                valid.add(i)
            return args

        tools = []
        warnings.filterwarnings("ignore", message="Default value ABSENT")
        retries = 1 if self.setting("retries") == "1" else 0 if abort else _BIG
        for name, schema in run.tools.items():
            tools.append(Tool(self._body(run, name, schema, index_of, abort, PaiToolFailed, RunContext,
                                         run.held is not None),
                              name=name, takes_ctx=True, max_retries=retries))
        agent = Agent(FunctionModel(model), deps_type=str, tools=tools,
                      retries={"tools": retries, "output": _BIG}, end_strategy=self.setting("end_strategy"),
                      capabilities=[Hooks(after_tool_validate=validated)])
        usage = UsageLimits(request_limit=limits.get("maxRounds"), tool_calls_limit=limits.get("maxExecutions"))

        with warnings.catch_warnings(), capture_run_messages() as messages:
            warnings.simplefilter("ignore")
            try:
                with ToolManager.parallel_execution_mode(self.setting("parallel")):
                    result = run.run_async(agent.run("go", deps=run.principal, usage_limits=usage))
                run.final = result.output if isinstance(result.output, str) else json.dumps(result.output)
                return run.outcome("COMPLETED", "FINAL_ANSWER")
            except (ModelFailure, _Refused):
                self._late_answers(messages, read_answers, ModelRequest)
                return run.outcome("FAILED", "MODEL_ERROR")
            except UsageLimitExceeded as exc:
                self._late_answers(messages, read_answers, ModelRequest)
                if "tool_calls_limit" in str(exc):
                    return run.outcome("TRUNCATED", "MAX_EXECUTIONS", self._first_open(run, "BUDGET_EXHAUSTED"))
                return run.outcome("TRUNCATED", "MAX_ROUNDS")
            except UnexpectedModelBehavior as exc:
                self._late_answers(messages, read_answers, ModelRequest)
                if "unique `tool_call_id`" in str(exc):  # the whole response is refused
                    if batch:
                        return run.outcome("REJECTED", "ID_CONFLICT", self._first_open(run, "ID_CONFLICT"))
                    return run.outcome("FAILED", "MODEL_ERROR")
                # abort mode: the call pydantic-ai found invalid (no retries left) ends the run
                at = self._first_open(run, "", skip=valid)
                at = at[0] if at is not None else None
                call = run.call(at) if at is not None else None
                code = "INVALID_ARGUMENT" if isinstance(call, dict) and call.get("name") in run.tools else "UNKNOWN_TOOL"
                return run.outcome("REJECTED", code, (at, code) if at is not None else None)
            except ToolFailed:
                self._late_answers(messages, read_answers, ModelRequest)
                at = self._first_open(run, "")
                failed = sorted(i for i in run.failed_at if run.current >= 0 and i >= run.offsets[run.current])
                if run.held is not None and failed:  # run concurrently: the lowest failing request (R34)
                    at = (failed[0], "")
                code = run.failed_at.get(at[0], "INTERNAL_ERROR") if at is not None else "INTERNAL_ERROR"
                return run.outcome("FAILED", "TERMINAL_ERROR", (at[0], code) if at is not None else None)

    @staticmethod
    def _late_answers(messages: list[Any], read: Any, request_type: type) -> None:
        """Answers pydantic-ai recorded before the run raised (the last, unsent ModelRequest)."""
        if messages and isinstance(messages[-1], request_type):
            read(messages[-1].parts)

    @staticmethod
    def _first_open(run: Run, code: str, skip: set[int] | frozenset[int] = frozenset()) -> tuple[int, str] | None:
        """The first request of the current round without an answer (and not in ``skip``): where the run
        stopped."""
        if run.current < 0:
            return None
        off = run.offsets[run.current]
        for i in range(off, off + len(run.proposals[run.current])):
            if i not in run.answers and i not in skip:
                return i, code
        return None

    @staticmethod
    def _body(run: Run, name: str, schema: Json, index_of: Any, abort: bool, pai_failed: type,
              ctx_type: Any, held: bool = False) -> Any:
        import inspect

        def body(ctx: Any, **kwargs: Any) -> Any:
            call_id = ctx.tool_call_id
            try:
                return run.enter(index_of(call_id, name), call_id, name, given(kwargs), ctx.deps)
            except ToolFailed as exc:
                if abort:
                    raise  # a plain exception: pydantic-ai ends the run
                # a failed tool result the model sees, with the text the application chose: the code's safe message
                raise pai_failed(CODE_TABLE[exc.category][3]) from None

        async def abody(ctx: Any, **kwargs: Any) -> Any:  # a concurrent step: awaits the held answer
            call_id = ctx.tool_call_id
            try:
                return await run.aenter(index_of(call_id, name), call_id, name, given(kwargs), ctx.deps)
            except ToolFailed as exc:
                if abort:
                    raise
                raise pai_failed(CODE_TABLE[exc.category][3]) from None

        if held:
            body = abody  # type: ignore[assignment]

        first = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ctx_type[str])]
        sig, ann = python_signature(schema, first)
        body.__signature__ = sig  # type: ignore[attr-defined]
        body.__annotations__ = ann
        body.__name__ = name if name.isidentifier() else "tool"
        body.__qualname__ = body.__name__
        return body

