"""The OpenAI Agents SDK (``openai-agents``) behind the adapter protocol.

* The model is a :class:`agents.models.interface.Model` subclass scripted by the harness: each
  ``get_response`` calls ``model.next`` and returns a ``ModelResponse`` whose output holds one
  ``ResponseFunctionToolCall`` per proposed call (``call_id`` = the call's id, ``arguments`` = the
  JSON text of its arguments, which is the Responses API's wire form) or a ``ResponseOutputMessage``
  with the final answer. No network: ``OPENAI_API_KEY`` is set to a dummy and tracing is disabled.
* Tools are ``@function_tool`` functions (``strict_mode=False``, since the harness's schemas have
  optional properties) with the signature built from the harness's schema; they are ``async`` (sync
  tools run in threads). The trusted principal is the run's ``context`` (R16). The SDK starts every
  function call of a turn at once by default; the adapter runs them one at a time with its documented
  setting ``RunConfig(tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1))``, as the
  spec's loop does (and as the pydantic-ai adapter does), so that a failure stops the turn.
  ``openai-agents[concurrency=unbounded]`` is the SDK's default: the adapter announces ``concurrency``,
  the bodies await the answers the harness holds and the harness picks the completion order (protocol
  v1.1, batch steps; every call of a response may overlap: the SDK reads no MCP hints, R30 unfuzzed).
* Budgets: ``maxRounds`` → ``Runner.run(max_turns=...)``. The SDK has no execution, per-tool or
  request budget and does not retry a failed tool, so the fuzzer leaves those off.
* Mode: ``continue`` passes a ``failure_error_function`` (an error result the model sees; the adapter
  records the structured reason: the tool's failure category, or ``INVALID_ARGUMENT`` for the SDK's
  ``ModelBehaviorError`` on arguments that do not validate); ``abort`` passes
  ``failure_error_function=None``, so the first failure raises and ends the run.
* A response the SDK refuses as a whole (``ModelBehaviorError`` raised before any tool runs: an unknown
  tool, a reused or empty call id) ends the run: ``MODEL_ERROR`` in a loop; in a batch the refusal is
  reported at the proposal's first request with the code of the check the SDK's error names.
* Answers are the ``function_call_output`` items the SDK sends to the model next (only the items added
  since the previous model request: the SDK drops a call whose id already has an output, so an output
  may belong to an earlier round). When the run raises, the outputs of the turn are read from the
  exception's ``run_data.new_items``, and the request the run stopped at is the last one the SDK started
  (``RunHooks.on_tool_start``) without an output.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, ClassVar

from ..protocol.executor import ModelFailure, ModelFn
from ._common import FrameworkExecutor, Run, ToolFailed, given, ok, python_signature, shown

Json = Any

__all__ = ["OpenAIAgentsExecutor"]

#: ModelBehaviorError text -> the spec code of the check it reports (the SDK has no error codes)
_REFUSALS = (("not found", "UNKNOWN_TOOL"), ("call ID for a different", "ID_CONFLICT"),
             ("non-empty string call ID", "INVALID_CALL"), ("Invalid JSON", "INVALID_ARGUMENT"))


class _Invalid(Exception):
    pass


class OpenAIAgentsExecutor(FrameworkExecutor):
    framework = "openai-agents"
    name = "openai-agents"
    #: concurrency: ToolExecutionConfig.max_function_tool_concurrency (1 is the adapter's; the SDK's default
    #: starts every call at once); tool_use_behavior: Agent(tool_use_behavior=...); tool_not_found_behavior:
    #: RunConfig(tool_not_found_behavior=...)
    SETTINGS: ClassVar[dict[str, tuple[str, ...]]] = {
        "concurrency": ("1", "unbounded"),
        "tool_use_behavior": ("run_llm_again", "stop_on_first_tool"),
        "tool_not_found_behavior": ("raise_error", "return_error_to_model"),
    }
    limit_support: ClassVar[dict[str, str]] = {
        "maxRounds": "Runner.run(max_turns=...)",
        "maxExecutions": "none: the Agents SDK has no execution budget",
        "maxToolExecutions": "none: no per-tool execution limit",
        "maxRequests": "none: no limit on tool requests",
        "maxRetries": "none: the SDK does not retry a failed tool by itself",
        "deadline": "none: not fuzzed",
    }

    def __init__(self) -> None:
        os.environ.setdefault("OPENAI_API_KEY", "sk-loopspec-dummy")  # never used: the model is scripted
        from importlib.metadata import version

        from agents import set_tracing_disabled

        set_tracing_disabled(True)  # in this process only: the environment is left as it was
        self.version = version("openai-agents")

    def concurrent(self) -> bool:
        return self.setting("concurrency") == "unbounded"

    def unrepresentable(self, call: Json) -> str | None:
        why = super().unrepresentable(call)
        if why is None and "id" not in call:
            return "a call without an id (ResponseFunctionToolCall.call_id is required)"
        if why is None and "arguments" not in call:
            return "a call without arguments (ResponseFunctionToolCall.arguments is required)"
        return why

    def run_loop(self, run: Run, params: dict[str, Json], model_next: ModelFn, *, batch: bool) -> dict[str, Json]:
        from agents import Agent, RunConfig, RunHooks, Runner, function_tool
        from agents.exceptions import MaxTurnsExceeded, ModelBehaviorError
        from agents.items import ModelResponse, ToolCallItem, ToolCallOutputItem
        from agents.models.interface import Model
        from agents.run_config import ToolExecutionConfig
        from agents.tool import default_tool_error_function
        from agents.usage import Usage
        from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

        abort = params.get("mode", "continue") == "abort"
        limits = params.get("limits") or {}
        errors: dict[int, str] = {}  # request index -> code, recorded by the failure_error_function
        started: list[int] = []  # requests the SDK started (on_tool_start), in order
        seen = [0]  # how many input items the previous model request had: later ones are new

        def read_output(call_id: Json, output: Json) -> None:
            i = _open_index(run, call_id)
            if i is None:
                return
            cid = run.call(i).get("id")
            if i in errors:  # the output: the text the failure_error_function gave the model
                run.answer(i, shown(cid, errors[i], output))
            elif run.call(i).get("name") not in run.tools:  # tool_not_found_behavior = return_error_to_model
                run.answer(i, shown(cid, "UNKNOWN_TOOL", output))
            else:
                try:
                    run.answer(i, ok(cid, json.loads(output)))
                except (TypeError, ValueError):
                    run.answer(i, ok(cid, output))

        def read_answers(items: Any) -> None:
            """The outputs of the previous turn; a call of it without one was dropped by the SDK."""
            if not isinstance(items, list) or run.current < 0:
                return
            for it in items[seen[0]:]:
                if isinstance(it, dict) and it.get("type") == "function_call_output":
                    read_output(it.get("call_id"), it.get("output"))
            run.dropped.update(i for i in run.round_positions() if i not in run.answers)

        def stopped_at(position: int) -> int:
            """The run raised at this position of the turn: earlier calls without an output were dropped
            (run one at a time; run concurrently they were started, and their outputs are lost)."""
            if run.held is not None:
                return position
            run.dropped.update(i for i in run.round_positions() if i < position and i not in run.answers)
            return position

        def read_run_data(exc: BaseException) -> None:
            """The outputs of the turn the run raised in (``AgentsException.run_data``)."""
            read_turn(getattr(exc, "run_data", None))

        def read_turn(data: Any) -> None:
            """The outputs of the run's last turn (its ``new_items``), which no model request showed."""
            if data is None or run.current < 0:
                return
            prefix = f"fc_{run.rounds}_"
            this_turn = False
            for item in data.new_items:
                raw = getattr(item, "raw_item", None)
                if isinstance(item, ToolCallItem):
                    this_turn = str(getattr(raw, "id", "")).startswith(prefix)
                elif this_turn and isinstance(item, ToolCallOutputItem) and isinstance(raw, dict):
                    read_output(raw.get("call_id"), raw.get("output"))

        class Scripted(Model):
            async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                                   output_schema: Any, handoffs: Any, tracing: Any, **kw: Any) -> Any:
                if run.rounds > 0:
                    read_answers(input)
                seen[0] = len(input) if isinstance(input, list) else 0
                reply, kind = run.next_reply(model_next)
                if kind == "final":
                    msg = ResponseOutputMessage(id="msg", type="message", role="assistant", status="completed",
                                                content=[ResponseOutputText(type="output_text", text=reply["final"],
                                                                            annotations=[])])
                    return ModelResponse(output=[msg], usage=Usage(), response_id=None)
                if kind != "calls":
                    raise _Invalid("the model answered with neither calls nor a final answer")
                run.propose(reply["calls"])
                out = [ResponseFunctionToolCall(type="function_call", call_id=c["id"], name=c["name"],
                                                arguments=json.dumps(c["arguments"]), id=f"fc_{run.rounds}_{j}",
                                                status="completed")
                       for j, c in enumerate(reply["calls"])]
                return ModelResponse(output=out, usage=Usage(), response_id=None)

            def stream_response(self, *a: Any, **k: Any) -> Any:
                raise NotImplementedError("the scripted model does not stream")

        class Started(RunHooks):  # type: ignore[misc]
            async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
                i = _open_index(run, getattr(context, "tool_call_id", None))
                if i is not None:
                    started.append(i)

        def failure_fn(ctx: Any, exc: Exception) -> str:
            i = _open_index(run, getattr(ctx, "tool_call_id", None))
            if i is not None:
                errors[i] = run.failed_at.get(i) or ("INVALID_ARGUMENT" if isinstance(exc, ModelBehaviorError)
                                                     else "INTERNAL_ERROR")
            return default_tool_error_function(ctx, exc)  # what the SDK shows by default

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pydantic: the ABSENT default is not JSON serializable
            tools = [function_tool(self._body(run, name, schema), name_override=name, strict_mode=False,
                                   failure_error_function=None if abort else failure_fn)
                     for name, schema in run.tools.items()]
        agent = Agent(name="loopspec", instructions=None, model=Scripted(), tools=tools,
                      tool_use_behavior=self.setting("tool_use_behavior"))  # type: ignore[arg-type]
        max_turns = limits.get("maxRounds")
        concurrency = None if self.setting("concurrency") == "unbounded" else 1
        config = RunConfig(tool_execution=ToolExecutionConfig(max_function_tool_concurrency=concurrency),
                           tool_not_found_behavior=self.setting("tool_not_found_behavior"))  # type: ignore[arg-type]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pydantic: the ABSENT default is not JSON serializable
                result = run.run_async(Runner.run(agent, "go", context=run.principal, hooks=Started(), run_config=config,
                                                max_turns=max_turns if max_turns is not None else 10**6))
            read_turn(result)  # tool_use_behavior = stop_on_first_tool: the last turn's outputs end the run
            final = result.final_output
            run.final = final if isinstance(final, str) else json.dumps(final)
            return run.outcome("COMPLETED", "FINAL_ANSWER")
        except MaxTurnsExceeded as exc:
            read_run_data(exc)  # the last turn's outputs were given before the limit stopped the run
            return run.outcome("TRUNCATED", "MAX_ROUNDS")
        except (ModelFailure, _Invalid):
            return run.outcome("FAILED", "MODEL_ERROR")
        except ModelBehaviorError as exc:
            read_run_data(exc)
            # the lowest failing request (in time order only when the calls run one at a time)
            failed = sorted(i for i in run.failed_at if i >= run.offsets[run.current]) if run.current >= 0 else []
            text = str(exc)
            code = next((c for k, c in _REFUSALS if k in text), None)
            if failed:
                return run.outcome("FAILED", "TERMINAL_ERROR", (stopped_at(failed[0]), run.failed_at[failed[0]]))
            open_started = [i for i in started if i not in run.answers]
            if open_started:  # abort mode: arguments that do not validate end the run
                return run.outcome("REJECTED", "INVALID_ARGUMENT", (stopped_at(open_started[-1]), "INVALID_ARGUMENT"))
            if batch and code is not None and run.current >= 0:  # the whole response was refused
                return run.outcome("REJECTED", code, (run.offsets[run.current], code))
            return run.outcome("FAILED", "MODEL_ERROR")
        except Exception as exc:
            read_run_data(exc)
            failed = sorted(i for i in run.failed_at if run.current >= 0 and i >= run.offsets[run.current])
            if failed:  # abort mode: the tool failure ended the run
                return run.outcome("FAILED", "TERMINAL_ERROR", (stopped_at(failed[0]), run.failed_at[failed[0]]))
            raise

    @staticmethod
    def _body(run: Run, name: str, schema: Json) -> Any:
        import inspect

        from agents.tool_context import ToolContext

        async def body(ctx: Any, **kwargs: Any) -> str:
            i = _open_index(run, ctx.tool_call_id, executing=True)
            try:
                out = await run.aenter(i, ctx.tool_call_id, name, given(kwargs), ctx.context)
            except ToolFailed:
                raise
            return json.dumps(out)

        first = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ToolContext[str])]
        sig, ann = python_signature(schema, first, var_kwargs=False)  # the SDK ignores extra properties
        body.__signature__ = sig  # type: ignore[attr-defined]
        body.__annotations__ = {**ann, "return": str}
        body.__name__ = name if name.isidentifier() else "tool"
        body.__doc__ = f"The harness's tool {name}."
        return body


def _open_index(run: Run, call_id: Json, *, executing: bool = False) -> int | None:
    """The request of the current round with this call id (the SDK refuses reused ids in one response)."""
    if run.current < 0:
        return None
    off = run.offsets[run.current]
    for j, c in enumerate(run.proposals[run.current]):
        if isinstance(c, dict) and c.get("id") == call_id:
            return off + j
    return None
