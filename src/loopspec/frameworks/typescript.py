"""The TypeScript agent frameworks: the Vercel AI SDK, OpenAI Agents JS, LangGraph JS and Mastra.

Each runs as a Node.js process speaking the adapter protocol over stdio (``frameworks/js/src/<module>.ts``,
compiled on first use: :mod:`loopspec.frameworks._node`), with the framework's own loop, a scripted model driven
by ``model.next`` and tools whose executions go to ``tool.execute``. The classes here are the Python side of
each adapter: they say which steps the framework can express (:meth:`normalize_step`, as every adapter's) and
which settings its adapter takes, without running Node. ``--impl ai-sdk`` (``openai-agents-js``,
``langgraph-js``, ``mastra``) resolves to the command that runs the adapter (:func:`command`).

The frameworks start a response's tool calls together (their default), and the adapters announce the
``concurrency`` capability (protocol v1.1, batch steps): in a concurrent step each tool body sends its
``tool.execute`` when the framework starts it and awaits the answer the harness releases, so loopspec picks the
completion order (``frameworks/js/src/protocol.ts``, ``Rpc.hold``), as the Python adapters' held answers do.
The AI SDK with ``toolCallConcurrency=1`` runs one call at a time: no capability.
"""

from __future__ import annotations

import shlex
from typing import Any, ClassVar, Final

from ._common import FrameworkExecutor

Json = Any

__all__ = ["NODE_FRAMEWORKS", "AISDKExecutor", "LangGraphJSExecutor", "MastraExecutor", "OpenAIAgentsJSExecutor",
           "command"]

_NO_BUDGETS: Final = {
    "maxExecutions": "none: no execution budget",
    "maxToolExecutions": "none: no per-tool execution limit",
    "maxRequests": "none: no limit on tool requests",
    "maxRetries": "none: a failed tool is not retried by the framework",
    "deadline": "none: not fuzzed",
}


class NodeFrameworkExecutor(FrameworkExecutor):
    """The Python side of a TypeScript adapter (never run in process: :meth:`run_loop` is the Node process's)."""

    #: the compiled adapter's module (frameworks/js/src/<module>.ts) and the npm package whose version is shown
    module = "?"
    package = "?"

    def concurrent(self) -> bool:
        return True  # the framework starts a response's calls together; the adapter holds answers (docstring)

    def unrepresentable(self, call: Json) -> str | None:
        why = super().unrepresentable(call)
        if why is None and "id" not in call:
            return "a call without an id (the framework's tool-call id is a required string)"
        if why is None and _unsafe_number(call.get("arguments")):
            return "an integer JavaScript numbers cannot hold exactly (beyond 2**53)"
        return why

    def normalize_step(self, step: dict[str, Json]) -> dict[str, Json]:
        """As for every adapter, plus: maxRounds = 0 is left off (a step count is at least 1), and a tool's
        scripted output holds no integer a JavaScript number cannot hold (a JS tool cannot return one: such an
        integer becomes the nearest double's, which JSON carries exactly)."""
        step = super().normalize_step(step)
        lim = (step.get("config") or {}).get("limits")
        if isinstance(lim, dict) and lim.get("maxRounds") == 0:
            step["config"] = {**step["config"], "limits": {**lim, "maxRounds": None}}
        if isinstance(step.get("script"), list):
            step["script"] = [_js_safe(e) for e in step["script"]]
        return step


def _js_safe(value: Json) -> Json:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) > 2**53:
        return int(float(value))
    if isinstance(value, dict):
        return {k: _js_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_js_safe(v) for v in value]
    return value


def _unsafe_number(value: Json) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) > 2**53
    if isinstance(value, dict):
        return any(_unsafe_number(v) for v in value.values())
    if isinstance(value, list):
        return any(_unsafe_number(v) for v in value)
    return False


class AISDKExecutor(NodeFrameworkExecutor):
    """The AI SDK's ToolLoopAgent with MockLanguageModelV4 (``frameworks/js/src/ai_sdk.ts``).

    What it cannot express: abort mode (a tool's exception becomes a ``tool-error`` part the model sees and the
    loop goes on: every step runs in continue mode), a call without an id, budgets other than the step count."""

    framework = "ai-sdk"
    name = "ai-sdk"
    module = "ai_sdk"
    package = "ai"
    #: toolCallConcurrency: ToolLoopAgent's setting (default: every call of a step at once; 1: one at a time)
    SETTINGS: ClassVar[dict[str, tuple[str, ...]]] = {"toolCallConcurrency": ("default", "1")}
    limit_support: ClassVar[dict[str, str]] = {"maxRounds": "stopWhen: isStepCount(maxRounds)", **_NO_BUDGETS}

    def concurrent(self) -> bool:
        return self.setting("toolCallConcurrency") == "default"

    def normalize_step(self, step: dict[str, Json]) -> dict[str, Json]:
        step = super().normalize_step(step)
        step["config"] = {**step["config"], "mode": "continue"}
        return step


class OpenAIAgentsJSExecutor(NodeFrameworkExecutor):
    """OpenAI Agents JS: ``run(agent, input, {maxTurns})`` with a scripted Model and ``tool({strict: false})``
    tools (``frameworks/js/src/openai_agents.ts``).

    What it cannot express: a call without an id, budgets other than the turn count."""

    framework = "openai-agents-js"
    name = "openai-agents-js"
    module = "openai_agents"
    package = "@openai/agents"
    #: toolNotFoundBehavior: the run option (raise_error, the default, or return_error_to_model)
    SETTINGS: ClassVar[dict[str, tuple[str, ...]]] = {"toolNotFoundBehavior": ("raise_error", "return_error_to_model")}
    limit_support: ClassVar[dict[str, str]] = {"maxRounds": "run(..., {maxTurns})", **_NO_BUDGETS}


class LangGraphJSExecutor(NodeFrameworkExecutor):
    """LangGraph JS: the prebuilt ReAct agent (``createReactAgent``, v1 by default, or v2) or LangChain's
    ``createAgent`` with a scripted BaseChatModel (``frameworks/js/src/langgraph.ts``).

    What it cannot express: a call without an id, budgets other than the recursion limit, abort mode for
    ``createAgent`` (its parameters have no switch for tool errors)."""

    framework = "langgraph-js"
    name = "langgraph-js"
    module = "langgraph"
    package = "@langchain/langgraph"
    #: agent: createReactAgent version v1 (its default), v2, or langchain's createAgent
    SETTINGS: ClassVar[dict[str, tuple[str, ...]]] = {"agent": ("react-v1", "react-v2", "create-agent")}
    limit_support: ClassVar[dict[str, str]] = {"maxRounds": "recursionLimit = 2 x maxRounds", **_NO_BUDGETS}

    def normalize_step(self, step: dict[str, Json]) -> dict[str, Json]:
        step = super().normalize_step(step)
        if self.setting("agent") == "create-agent":
            step["config"] = {**step["config"], "mode": "continue"}
        return step


class MastraExecutor(NodeFrameworkExecutor):
    """Mastra: an ``Agent`` with ``createTool`` tools and the AI SDK's MockLanguageModelV4
    (``frameworks/js/src/mastra.ts``).

    What it cannot express: abort mode (a tool's exception becomes an error result the model sees: every step
    runs in continue mode), a call without an id, budgets other than the step count."""

    framework = "mastra"
    name = "mastra"
    module = "mastra"
    package = "@mastra/core"
    #: maxSteps: the harness's maxRounds when it sets one (the default), or always Mastra's default of 5 steps
    SETTINGS: ClassVar[dict[str, tuple[str, ...]]] = {"steps": ("max-rounds", "default")}
    limit_support: ClassVar[dict[str, str]] = {"maxRounds": "agent.generate(prompt, {maxSteps})", **_NO_BUDGETS}

    def normalize_step(self, step: dict[str, Json]) -> dict[str, Json]:
        step = super().normalize_step(step)
        step["config"] = {**step["config"], "mode": "continue"}
        return step


#: --impl name -> the Python side of its TypeScript adapter
NODE_FRAMEWORKS: Final[dict[str, type[NodeFrameworkExecutor]]] = {
    "ai-sdk": AISDKExecutor, "openai-agents-js": OpenAIAgentsJSExecutor, "langgraph-js": LangGraphJSExecutor,
    "mastra": MastraExecutor}


def command(name: str, settings: str = "") -> str:
    """The command that runs the framework's compiled adapter (installing the packages on first use:
    :class:`~loopspec.frameworks._node.NodeMissing` when that cannot be done)."""
    import shutil

    from ._node import adapter_script

    script = adapter_script(NODE_FRAMEWORKS[name].module)
    node = shutil.which("node") or "node"
    return " ".join(shlex.quote(p) for p in (node, str(script), *([settings] if settings else [])))
