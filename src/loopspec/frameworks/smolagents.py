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
  adapters run them), or smolagents' default thread pool. ``completion=harness``: smolagents' default thread
  pool, and the tool bodies (in the pool's threads) wait for the answers the harness holds; it picks the
  completion order (protocol v1.1, batch steps). The asyncio watcher of the other adapters cannot see threads,
  so a watcher thread says ``tool.waiting`` when every call smolagents started is waiting for its answer and no
  pool thread is about to start another (:class:`ThreadHeld`).

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
import os
import threading
from typing import Any, ClassVar

from ..protocol.executor import HeldAnswers, ModelFailure, ModelFn
from ._common import FrameworkExecutor, Run, ToolFailed, ok, shown

Json = Any

__all__ = ["SmolagentsExecutor"]

_TYPES = {"string": "string", "integer": "integer", "boolean": "boolean"}


class _Invalid(Exception):
    pass


class _Args(dict):  # type: ignore[type-arg]
    """A call's arguments, the very object smolagents hands on to ``execute_tool_call`` (which tells the adapter
    which call runs): true even when empty, so that smolagents' ``tool_call.arguments or {}`` keeps it."""

    def __bool__(self) -> bool:
        return True


#: the request whose call smolagents is executing in this thread's context (see Observed.execute_tool_call)
_RUNNING: contextvars.ContextVar[int | None] = contextvars.ContextVar("loopspec_smolagents_call", default=None)


class SmolagentsExecutor(FrameworkExecutor):
    framework = "smolagents"
    name = "smolagents"
    SETTINGS: ClassVar[dict[str, tuple[str, ...]]] = {"max_tool_threads": ("1", "default"),
                                                      "completion": ("at-once", "harness")}

    def concurrent(self) -> bool:
        return self.setting("completion") == "harness"
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
    def _tools(self, run: Run, threads: dict[str, Any]) -> list[Any]:
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
                cid = run.call(i).get("id") if i is not None else None
                held = threads.get("held")
                if held is None:
                    return json.dumps(run.enter(i, cid, _name, received, run.principal))
                with held.lock:  # (the run's bookkeeping, from the pool's threads)
                    cid, args, who, k = run._start(i, cid, received, run.principal)
                try:
                    return json.dumps(held.execute(cid, _name, args, who))
                except Exception as exc:
                    with held.lock:
                        raise run._failed(i, exc, k) from None

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
                reply, kind = run.next_reply(model_next)
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
                    args = _Args(c["arguments"])
                    sent[id(args)] = run.offsets[-1] + j
                    keep.append(args)  # alive for the run, so that no other object reuses its id()
                    calls.append(ChatMessageToolCall(function=ChatMessageToolCallFunction(name=c["name"], arguments=args),
                                                     id=c["id"], type="function"))
                return ChatMessage(role="assistant", content="", tool_calls=calls)

        shared: dict[str, Any] = {}
        held = run.held
        if held is not None:  # a concurrent step: the bodies, in smolagents' threads, wait for held answers
            shared["held"] = ThreadHeld(held, _POOL)

        class Observed(ToolCallingAgent):  # type: ignore[misc]
            def process_tool_calls(self, chat_message: Any, memory_step: Any) -> Any:
                th = shared.get("held")
                if th is not None:  # observed only: how many calls the step starts (one per id, as smolagents keeps)
                    th.step(len({c.id for c in chat_message.tool_calls or []}))
                return super().process_tool_calls(chat_message, memory_step)

            def execute_tool_call(self, tool_name: str, arguments: Any) -> Any:
                # observed only: which request this is (smolagents hands on the very arguments object the model's
                # call carried; the tool body does not see the call id), then the original, unchanged
                token = _RUNNING.set(sent.get(id(arguments)))
                th = shared.get("held")
                if th is not None:
                    th.enter()
                try:
                    return super().execute_tool_call(tool_name, arguments)
                except Exception as exc:  # recorded only: smolagents handles it as it would
                    if th is not None:
                        with th.lock:
                            errors.append((tool_name, arguments, exc))
                    else:
                        errors.append((tool_name, arguments, exc))
                    raise
                finally:
                    if th is not None:
                        th.leave()
                    _RUNNING.reset(token)

        limits = params.get("limits") or {}
        threads = 1 if self.setting("max_tool_threads") == "1" and not self.concurrent() else None  # None: smolagents' pool
        rounds = limits.get("maxRounds")
        agent = Observed(tools=self._tools(run, shared), model=Scripted(model_id="loopspec-scripted"),
                         max_steps=rounds if rounds is not None else 10**6, verbosity_level=LogLevel.OFF,
                         max_tool_threads=threads)
        try:
            if "held" in shared:
                with shared["held"].watching():
                    result = agent.run("go", return_full_result=True)
            else:
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


#: the size of smolagents' default thread pool (``ThreadPoolExecutor(None)``)
_POOL = min(32, (os.cpu_count() or 1) + 4)


class ThreadHeld:
    """Held answers (protocol v1.1) for tool bodies that run in threads (smolagents' ``ThreadPoolExecutor``).

    A body sends ``tool.execute`` at once (the start of its execution) and blocks until the harness releases its
    answer. A watcher thread says ``tool.waiting`` when the step is quiet: some answer is held, no call smolagents
    entered is running (each waits for its answer), and no pool thread is about to enter another (all the step's
    calls entered, or every pool thread holds a waiting call). Every exchange with the harness is made under one
    lock (the harness is not thread-safe); a released body counts as running again at once."""

    #: consecutive quiet checks before ``tool.waiting`` (a thread handed work by the pool needs a moment to
    #: enter execute_tool_call) and the pause between checks (seconds)
    QUIET = 3
    PAUSE = 0.002

    def __init__(self, held: HeldAnswers, pool: int) -> None:
        self._request = held._request
        self._notify = held._notify
        self.pool = pool
        self.lock = threading.RLock()
        self.expected = 0  # the calls of the current step
        self.entered = 0
        self.running = 0  # inside execute_tool_call and not waiting for an answer
        self.waiting: list[Any] = []  # the reply function of each held answer
        self._next = 0
        self._done = threading.Event()
        self.failure: BaseException | None = None

    def step(self, calls: int) -> None:
        with self.lock:
            self.expected, self.entered = calls, 0

    def enter(self) -> None:
        with self.lock:
            self.entered += 1
            self.running += 1

    def leave(self) -> None:
        with self.lock:
            self.running -= 1

    def execute(self, call_id: str, name: str, arguments: dict[str, Json], principal: str) -> Json:
        from ..core.rules import FAILURE_CATEGORIES
        from ..engine.base import ToolFailure
        from ..protocol.rpc import HOLD, RpcError

        box: list[tuple[Json, Any]] = []
        ready = threading.Event()

        def reply(result: Json = None, error: Any = None) -> None:  # under the lock (the watcher's notify)
            if ready.is_set():
                return
            box.append((result, error))
            if reply in self.waiting:
                self.waiting.remove(reply)
                self.running += 1
            ready.set()

        with self.lock:
            if self.failure is not None:
                raise ToolFailure("INTERNAL_ERROR")
            self._next += 1
            params = {"callId": call_id, "name": name, "arguments": arguments, "context": {"principal": principal}}
            try:
                got = self._request(self._next, "tool.execute", json.loads(json.dumps(params)), reply)
            except RpcError as err:
                got = None
                reply(None, err)
            if not ready.is_set():
                if got is not HOLD:
                    reply(got, None)
                else:
                    self.waiting.append(reply)
                    self.running -= 1
        ready.wait()
        result, error = box[0]
        if error is not None:
            cat = error.data.get("category") if isinstance(error.data, dict) else None
            raise ToolFailure(cat if cat in FAILURE_CATEGORIES else "INTERNAL_ERROR")
        if not isinstance(result, dict) or "output" not in result:
            raise ToolFailure("INTERNAL_ERROR")
        return result["output"]

    def _quiet(self) -> bool:
        return (bool(self.waiting) and self.running == 0
                and (self.entered >= self.expected or len(self.waiting) >= self.pool))

    def _watch(self) -> None:
        from ..protocol.rpc import INTERNAL, RpcError

        quiet = 0
        while not self._done.wait(self.PAUSE):
            with self.lock:
                quiet = quiet + 1 if self._quiet() else 0
                if quiet < self.QUIET:
                    continue
                quiet = 0
                try:
                    self._notify("tool.waiting", {})
                except BaseException as exc:  # P4 past the notification limit: stop the run's tools
                    self.failure = exc
                    for reply in list(self.waiting):
                        reply(None, RpcError(INTERNAL, "the harness stopped this run"))
                    return

    def watching(self) -> Any:
        """A context in which the watcher thread runs."""
        import contextlib

        @contextlib.contextmanager
        def cm() -> Any:
            t = threading.Thread(target=self._watch, name="loopspec-smolagents-watcher", daemon=True)
            t.start()
            try:
                yield
            finally:
                self._done.set()
                t.join(timeout=5)
        return cm()
