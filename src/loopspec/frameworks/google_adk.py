"""Google's Agent Development Kit (ADK, ``google-adk``): an ``LlmAgent`` run by a ``Runner`` behind the
adapter protocol.

* The model is a ``google.adk.models.BaseLlm`` subclass scripted by the harness: each
  ``generate_content_async`` asks ``model.next`` and yields one ``LlmResponse`` whose content holds a
  ``types.Part(function_call=types.FunctionCall(id, name, args))`` per proposed call, or the final text.
* Tools are ``FunctionTool``s built from Python functions whose signature comes from the harness's schema
  and that take ADK's ``tool_context``: the body reads the call id ADK runs it for
  (``tool_context.function_call_id``) and the trusted principal from the session's ``user_id`` (the
  runner's session is created for the run's principal), counts the execution and calls the harness's tool.
* Budgets: ``maxRounds`` → ``RunConfig(max_llm_calls=...)``; ADK raises ``LlmCallsLimitExceededError``
  when the model would be asked once more (the run ends TRUNCATED, MAX_ROUNDS).
* Mode: ``abort`` keeps ADK's default, where a tool's exception ends the invocation (``run_async``
  raises it; the run ends FAILED, TERMINAL_ERROR). ``continue`` registers an ``on_tool_error_callback``
  (ADK's hook for it) that returns ``{"error": "The tool failed."}`` as the call's response: the text is
  the adapter's, never the exception's. Unknown tools and missing arguments are answered by ADK itself with
  an ``{"error": ...}`` response in every mode.
* Answers are the ``function_response`` parts ADK sends to the model in the next ``LlmRequest`` (after the
  model's last function calls), matched to the calls by position (ids may repeat or be replaced):
  ``{"result": text}`` → ok (the tool returns JSON text), ``{"error": text}`` → ``UNKNOWN_TOOL`` for a tool
  that is not registered, the failure category when the body failed, else ``INVALID_ARGUMENT``; after the
  last allowed round (no further request), the function-response event the runner yielded.
* Concurrency (protocol v1.1): ADK starts the calls of one response as tasks gathered together and, when
  one raises, cancels the ones not finished. Source (google-adk 2.13.0,
  ``google/adk/flows/llm_flows/tools/_batch_executor.py``, ``_gather_or_cancel``):
  ``gatherer = asyncio.gather(*tasks)``. Before the error is re-raised, the responses of the calls that had
  finished are kept (``_execute_prepared_function_calls``:
  ``kept_event := _keep_completed_responses(invocation_context, tasks)``) and yielded as an event of the
  session: the adapter reads them as those calls' answers (the profile's ``tool_execution =
  concurrent-keep-finished`` quotes that line).
  So the adapter announces ``concurrency`` and its tool bodies are coroutines awaiting ``Run.aenter``: in a
  concurrent step every call of the response is started (a ``tool.execute`` outstanding) before any answer
  lands, the harness releases the answers in the order its schedule picks, and the bodies ADK cancels
  send ``$/cancelRequest`` (the stdio server bridges the held answers: ``serve_stdio``). In a sequential
  step a body answers before it yields, so the calls run in request order.
* Settings (the settings matrix): ``arg_validation``: ``default`` (ADK 2.13's default: the
  ``FUNCTION_TOOL_ARG_VALIDATION`` feature is off and arguments reach the function unchecked) or ``on``
  (the feature enabled with ``override_feature_enabled``: primitive types are checked and coerced, errors
  are answered to the model).

Why it runs in its own environment: google-adk 2.13.0 requires ``opentelemetry-api>=1.39,<=1.44`` and the
project pins 1.45.2 for the oracle's telemetry recordings, so no environment can hold both. ``.ci/dev.py``
builds ``.venv-adk`` (loopspec without extras plus the versions in ``.ci/adk-constraints.txt``) and
``--impl google-adk`` runs ``python -m loopspec.frameworks.google_adk`` from it: this adapter, in process with
ADK, served over the JSON-RPC protocol on stdin/stdout (``LOOPSPEC_ADK_PYTHON`` names another interpreter).

Observed (docs/frameworks.md, P2): a response that calls a tool with an empty name beside another call never
ends (the empty name alone is answered and the run ends; the ids may differ or repeat). The P2's evidence says the
process was busy all the while, after the model turn and the other call's execution; a stack sample of it (2.13.0)
is in ``BaseLlmFlow._run_one_step_async``, which takes its ``REPLAY_CALLS`` branch (``decide_step_resume`` finds a
call it counts as never executed) and returns before it calls the model, step after step, so ``max_llm_calls``
never binds and only the harness's per-request timeout stops the run.

What ADK cannot express, and the fuzzer therefore does not propose or vary:

* a call whose arguments are not a JSON object (``FunctionCall.args`` is a dict), a non-string id or name;
* an execution budget, per-tool limits, a limit on requests, retries of a failed tool, deadlines, and the
  ``error-result`` limit policy (``max_llm_calls`` is the only limit; it must be positive to bound anything,
  so ``maxRounds = 0`` is not expressible);
* a bound on the overlap or a read-only policy (R29, R30): ADK runs every call of a response at once and
  reads no MCP hints, so a concurrent step's ``maxConcurrency`` is the number of its calls (``overlap: all``).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any, ClassVar

from ..protocol.executor import ModelFailure, ModelFn
from ._common import FrameworkExecutor, Run, ToolFailed, ok, python_signature, shown

Json = Any

__all__ = ["ADK_ERROR_TEXT", "GoogleADKExecutor", "adk_python", "adk_site_packages", "command"]

#: what the adapter's on_tool_error_callback answers in continue mode (the application's text, not ADK's)
ADK_ERROR_TEXT = "The tool failed."


def adk_python() -> str | None:
    """The interpreter of the environment that holds google-adk: ``LOOPSPEC_ADK_PYTHON``, else the
    ``.venv-adk`` that ``.ci/dev.py`` builds beside the source tree; None when neither exists."""
    env = os.environ.get("LOOPSPEC_ADK_PYTHON")
    if env:
        return env if Path(env).exists() else None
    root = Path(__file__).resolve().parents[3]
    for py in (root / ".venv-adk" / "bin" / "python", root / ".venv-adk" / "Scripts" / "python.exe"):
        if py.exists():
            return str(py)
    return None


def adk_site_packages() -> Path | None:
    """The site-packages directory of the ADK environment (the evidence test reads ADK's source there)."""
    py = adk_python()
    if py is None:
        return None
    lib = Path(py).absolute().parent.parent / "lib"  # (not resolved: a venv's python links elsewhere)
    found = sorted(lib.glob("python3*/site-packages")) if lib.is_dir() else []
    return found[0] if found else None


def command(settings: str = "") -> str | None:
    """The ``--impl`` command that runs this adapter in the ADK environment (None when it is missing)."""
    import shlex

    py = adk_python()
    if py is None:
        return None
    return " ".join(shlex.quote(p) for p in (py, "-m", "loopspec.frameworks.google_adk", *([settings] if settings else [])))


class _Invalid(Exception):
    pass


class GoogleADKExecutor(FrameworkExecutor):
    framework = "google-adk"
    name = "google-adk"
    SETTINGS: ClassVar[dict[str, tuple[str, ...]]] = {"arg_validation": ("default", "on")}
    limit_support: ClassVar[dict[str, str]] = {
        "maxRounds": "RunConfig(max_llm_calls=...)",
        "maxExecutions": "none: ADK has no execution budget",
        "maxToolExecutions": "none: no per-tool execution limit",
        "maxRequests": "none: no limit on tool requests",
        "maxRetries": "none: ADK does not retry a failed tool by itself",
        "deadline": "none: not fuzzed",
    }

    def __init__(self) -> None:
        from importlib.metadata import version

        import google.adk  # noqa: F401  (a missing framework is an ImportError now, not later)

        self.version = f"google-adk {version('google-adk')}, google-genai {version('google-genai')}"

    def normalize_step(self, step: dict[str, Json]) -> dict[str, Json]:
        """As for every adapter, plus: max_llm_calls must be positive to bound anything (maxRounds = 0 is left off)."""
        step = super().normalize_step(step)
        lim = (step.get("config") or {}).get("limits")
        if isinstance(lim, dict) and lim.get("maxRounds") == 0:
            step["config"] = {**step["config"], "limits": {**lim, "maxRounds": None}}
        return step

    def unrepresentable(self, call: Json) -> str | None:
        why = super().unrepresentable(call)
        if why is None and "arguments" in call and not isinstance(call["arguments"], dict):
            return "arguments that are not a JSON object (FunctionCall.args is a dict)"
        return why

    def concurrent(self) -> bool:
        """ADK's only mode runs the calls of one response concurrently (module docstring)."""
        return True

    # -- mapping -----------------------------------------------------------------------------
    def _tools(self, run: Run, positions: dict[str, int] | None = None) -> list[Any]:
        """ADK tools for the run's tools; ``positions`` learns the request position of each ADK call id whose
        body is entered (ADK replaces an empty id with its own)."""
        from google.adk.tools import FunctionTool, ToolContext

        tools = []
        for name, schema in run.tools.items():
            if not name.isidentifier():
                continue  # a Python function's name
            sig, ann = python_signature(schema, var_kwargs=False)
            params = [p.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                default=None if p.default is not inspect.Parameter.empty else p.default)
                      for p in sig.parameters.values()]
            params.sort(key=lambda p: p.default is not inspect.Parameter.empty)
            params.append(inspect.Parameter("tool_context", inspect.Parameter.KEYWORD_ONLY, annotation=ToolContext))

            def make(name: str = name) -> Any:
                async def fn(**kwargs: Any) -> str:
                    ctx = kwargs.pop("tool_context")
                    given = {k: v for k, v in kwargs.items() if v is not None}
                    i = _entering(run, ctx.function_call_id, name, given)
                    if i is not None and positions is not None and ctx.function_call_id:
                        positions[ctx.function_call_id] = i
                    cid = run.call(i).get("id") if i is not None else ctx.function_call_id
                    return json.dumps(await run.aenter(i, cid, name, given, ctx.user_id))
                return fn

            body = make()
            body.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
            body.__annotations__ = {**{p.name: ann[p.name] for p in params if p.name in ann},
                                    "tool_context": ToolContext, "return": str}
            body.__name__ = name
            body.__doc__ = f"The tool {name}."
            tools.append(FunctionTool(body))
        return tools

    def _read(self, run: Run, responses: list[Any], positions: dict[str, int] | None = None) -> None:
        """The function responses of the current round: by position (every call's, in call order), or, given
        ``positions``, some calls' only (:func:`_pair`)."""
        if run.current < 0:
            return
        pairs = (zip(run.round_positions(), responses, strict=False) if positions is None
                 else _pair(run, responses, positions))
        for i, r in pairs:
            cid = run.call(i).get("id")
            body = r.response if isinstance(r.response, dict) else {"result": r.response}
            if "error" in body and "result" not in body:
                code = (run.failed_at.get(i) or ("UNKNOWN_TOOL" if run.call(i).get("name") not in run.tools
                                                 else "INVALID_ARGUMENT"))
                run.answer(i, shown(cid, code, body["error"]))
            else:
                out = body.get("result")
                try:
                    run.answer(i, ok(cid, json.loads(out) if isinstance(out, str) else out))
                except ValueError:
                    run.answer(i, ok(cid, out))

    def _read_last_responses(self, run: Run, events: list[Any], positions: dict[str, int] | None = None) -> None:
        """The function responses the runner yielded after the model's last calls, if any (the round that
        ended the run: its answers never reached the model)."""
        for ev in reversed(events):
            got = [p.function_response for p in ((ev.content.parts or []) if ev.content else []) if p.function_response]
            if got:
                self._read(run, got, positions)
                return
            if ev.content and any(p.function_call for p in (ev.content.parts or [])):
                return  # the model's calls: no response after them

    def run_loop(self, run: Run, params: dict[str, Json], model_next: ModelFn, *, batch: bool) -> dict[str, Json]:
        import logging

        from google.adk.agents import LlmAgent
        from google.adk.agents.run_config import RunConfig
        from google.adk.models.base_llm import BaseLlm
        from google.adk.models.llm_response import LlmResponse
        from google.adk.runners import Runner
        from google.adk.sessions import InMemorySessionService
        from google.genai import types

        logging.getLogger("google_adk").setLevel(logging.CRITICAL)
        abort = params.get("mode", "continue") == "abort"

        def responses_in(contents: list[Any]) -> list[Any] | None:
            """The function responses after the model's last function calls (None: no such calls yet)."""
            last = max((k for k, c in enumerate(contents)
                        if any(p.function_call for p in (c.parts or []))), default=-1)
            if last < 0:
                return None
            return [p.function_response for c in contents[last + 1:] for p in (c.parts or []) if p.function_response]

        class Scripted(BaseLlm):  # type: ignore[misc]
            model: str = "loopspec-scripted"

            async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
                if run.rounds > 0:
                    got = responses_in(list(llm_request.contents or []))
                    if got is not None:
                        adapter._read(run, got)
                reply, kind = run.next_reply(model_next)
                if kind == "final":
                    run.final = reply["final"]
                    yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=reply["final"])]))
                    return
                if kind != "calls":
                    raise _Invalid("the model answered with neither calls nor a final answer")
                run.propose(reply["calls"])
                parts = [types.Part(function_call=types.FunctionCall(id=c.get("id"), name=c["name"],
                                                                     args=c.get("arguments", {})))
                         for c in reply["calls"]]
                if not parts:
                    run.final = ""
                yield LlmResponse(content=types.Content(role="model", parts=parts))

        adapter = self
        limits = params.get("limits") or {}
        rounds = limits.get("maxRounds")

        async def on_error(tool: Any, args: Any, tool_context: Any, error: BaseException) -> Any:
            # only a tool body's failure: what ADK answers by itself (an unknown tool, ...) stays ADK's
            return {"error": ADK_ERROR_TEXT} if isinstance(error, ToolFailed) else None

        events: list[Any] = []  # what the runner yielded, as it streams
        positions: dict[str, int] = {}  # ADK call id -> request position, as bodies are entered

        async def go() -> None:
            agent = LlmAgent(name="loopspec", model=Scripted(), tools=self._tools(run, positions), instruction="",
                             on_tool_error_callback=None if abort else on_error)
            sessions = InMemorySessionService()
            runner = Runner(app_name="loopspec", agent=agent, session_service=sessions)
            session = await sessions.create_session(app_name="loopspec", user_id=run.principal)
            async for ev in runner.run_async(user_id=run.principal, session_id=session.id,
                                             new_message=types.Content(role="user", parts=[types.Part(text="go")]),
                                             run_config=RunConfig(max_llm_calls=rounds if rounds else 0)):
                events.append(ev)

        from google.adk.agents.invocation_context import LlmCallsLimitExceededError

        if self.setting("arg_validation") == "on":
            from google.adk.features import FeatureName, override_feature_enabled

            override_feature_enabled(FeatureName.FUNCTION_TOOL_ARG_VALIDATION, True)
        try:
            run.run_async(go())  # in a concurrent step with the held answers' watcher beside it
        except LlmCallsLimitExceededError:
            # the last round's answers were never sent to the model: they are in the runner's last
            # function-response event
            self._read_last_responses(run, events)
            return run.outcome("TRUNCATED", "MAX_ROUNDS")
        except (ModelFailure, _Invalid):
            return run.outcome("FAILED", "MODEL_ERROR")
        except ToolFailed:
            # before re-raising, ADK yields the responses of the calls that finished before the failure
            # (``_keep_completed_responses``: "Keeps the responses of calls that finished before their
            # batch ended early", 2.13.0): those answers are recorded in the session, not lost
            self._read_last_responses(run, events, positions)
            failed = sorted(i for i in run.failed_at if run.current >= 0 and i >= run.offsets[run.current])
            at = failed[0] if failed else None
            return run.outcome("FAILED", "TERMINAL_ERROR", (at, run.failed_at[at]) if at is not None else None)
        except Exception as exc:
            if isinstance(exc.__cause__, ModelFailure | _Invalid) or isinstance(exc.__context__, ModelFailure | _Invalid):
                return run.outcome("FAILED", "MODEL_ERROR")
            raise
        return run.outcome("COMPLETED", "FINAL_ANSWER")


def _pair(run: Run, responses: list[Any], positions: dict[str, int]) -> list[tuple[int, Any]]:
    """Some of the round's function responses (those ADK kept when a call failed), each with its request
    position: the first position not paired yet whose call has the response's id and name (ADK answers an
    unknown tool or missing arguments itself, no body runs); else, for an id ADK made up for an empty one,
    the position whose body ran under that id (``positions``)."""
    free = list(run.round_positions())
    out: list[tuple[int, Any]] = []
    for r in responses:
        i = next((k for k in free if run.call(k).get("id") == r.id and run.call(k).get("name") == r.name), None)
        if i is None and positions.get(r.id) in free:
            i = positions[r.id]
        if i is not None:
            free.remove(i)
            out.append((i, r))
    return out


def _entering(run: Run, call_id: Json, name: str, received: dict[str, Json]) -> int | None:
    """The request of the current round whose body is entered: the first not entered yet with this id (ADK
    replaces an empty id with its own) and name, preferring one whose arguments are these."""
    def holds(args: Json) -> bool:
        return isinstance(args, dict) and all(k in args and args[k] == v for k, v in received.items())

    for same_id in (True, False):
        for match in (lambda a: a == received, holds, lambda a: True):
            for i in run.round_positions():
                c = run.call(i)
                if (i not in run.entered and c.get("name") == name and match(c.get("arguments"))
                        and (not same_id or c.get("id") == call_id)):
                    run.entered.add(i)
                    return i
    return None


def main(argv: list[str]) -> int:
    """``python -m loopspec.frameworks.google_adk [SETTINGS]``: serve the adapter on stdin/stdout."""
    from ..protocol.executor import serve_stdio
    from . import parse_settings

    cls: Any = GoogleADKExecutor
    if argv:
        cls = cls.with_settings(parse_settings(argv[0]))
    serve_stdio(cls())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
