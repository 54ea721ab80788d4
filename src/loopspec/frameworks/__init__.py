"""In-process adapters for real Python agent frameworks (optional extras).

``loopspec fuzz --impl pydantic-ai`` (or ``openai-agents``, ``langgraph``, ``smolagents``, ``llamaindex``,
``autogen``, ``google-adk``) drives the framework's own tool-calling path with a scripted model and no network;
``--impl 'NAME[setting=value,...]'`` runs it with other values of the settings its adapter declares
(``SETTINGS``: the settings matrix of docs/frameworks.md); ``--impl module:attr`` loads any
:class:`loopspec.fuzz.Executor` subclass (or factory) the same way. Each adapter module imports its
framework only when it is used: ``pip install 'loopspec[pydantic-ai]'`` etc.

``google-adk`` cannot share an environment with the project's pinned OpenTelemetry (see
:mod:`loopspec.frameworks.google_adk`): where it is not importable, ``--impl google-adk`` runs the same
adapter as a process in the environment ``.ci/dev.py`` builds for it (``.venv-adk``), over the JSON-RPC
protocol.

Layer: implementations under test, above ``protocol`` (whose :class:`~loopspec.protocol.executor.Executor`
they subclass); they may import ``protocol``, ``judge``, ``engine``, ``core``, ``spec`` and ``support``, never
a driver. The fuzzer imports them.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from typing import Any, Final

__all__ = [
    "FRAMEWORKS",
    "ISOLATED",
    "MODULES",
    "NODE",
    "PACKAGES",
    "framework_version",
    "installed",
    "isolated_command",
    "parse_settings",
    "resolve",
]

#: --impl name -> the adapter's entry point (module:attr)
FRAMEWORKS: Final = {
    "pydantic-ai": "loopspec.frameworks.pydantic_ai:PydanticAIExecutor",
    "openai-agents": "loopspec.frameworks.openai_agents:OpenAIAgentsExecutor",
    "langgraph": "loopspec.frameworks.langgraph:LangGraphExecutor",
    "smolagents": "loopspec.frameworks.smolagents:SmolagentsExecutor",
    "llamaindex": "loopspec.frameworks.llamaindex:LlamaIndexExecutor",
    "autogen": "loopspec.frameworks.autogen:AutoGenExecutor",
    "google-adk": "loopspec.frameworks.google_adk:GoogleADKExecutor",
}

#: --impl name -> the distribution that provides the framework (and the loopspec extra that installs it)
PACKAGES: Final = {"pydantic-ai": "pydantic-ai-slim", "openai-agents": "openai-agents", "langgraph": "langgraph",
                   "smolagents": "smolagents", "llamaindex": "llama-index-core", "autogen": "autogen-agentchat",
                   "google-adk": "google-adk"}

#: --impl name -> the top-level module the framework's distribution installs
MODULES: Final = {"pydantic-ai": "pydantic_ai", "openai-agents": "agents", "langgraph": "langgraph",
                  "smolagents": "smolagents", "llamaindex": "llama_index.core", "autogen": "autogen_agentchat",
                  "google-adk": "google.adk"}

#: --impl name -> the npm package of a TypeScript framework, whose adapter runs as a Node.js process
#: (:mod:`loopspec.frameworks.typescript`; the pinned packages are installed on first use)
NODE: Final = {"ai-sdk": "ai", "openai-agents-js": "@openai/agents", "langgraph-js": "@langchain/langgraph",
              "mastra": "@mastra/core"}

#: frameworks that may live in an environment of their own (their adapter then runs as a process there)
ISOLATED: Final = {"google-adk": "loopspec.frameworks.google_adk"}


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def isolated_command(name: str, settings: str = "") -> str | None:
    """The command that runs an isolated framework's adapter in its own environment (None: no such
    environment, or the framework is importable here and runs in process)."""
    if name not in ISOLATED or _importable(MODULES[name]):
        return None
    mod = importlib.import_module(ISOLATED[name])
    cmd = mod.command(settings)
    if cmd is None:
        return None
    attr = FRAMEWORKS[name].partition(":")[2]
    cls = getattr(mod, attr)
    return IsolatedCommand(cmd, cls.with_settings(parse_settings(settings)) if settings else cls)


class IsolatedCommand(str):
    """The command that runs a framework's adapter in its own environment: a plain command for the harness,
    which also knows the steps the framework can express (the adapter class's :meth:`normalize_step`,
    computed here without importing the framework)."""

    adapter: Any

    def __new__(cls, command: str, adapter: Any) -> IsolatedCommand:
        obj = super().__new__(cls, command)
        obj.adapter = adapter
        return obj

    def normalize_step(self, step: dict[str, Any]) -> dict[str, Any]:
        return object.__new__(self.adapter).normalize_step(step)


def framework_version(name: str) -> str | None:
    """The installed version of the framework behind ``--impl name`` (here or in its own environment; for a
    TypeScript framework, the version its package-lock.json pins)."""
    from importlib.metadata import PackageNotFoundError, version

    if name in NODE:
        from ._node import package_version

        return package_version(NODE[name])

    try:
        return version(PACKAGES[name])
    except PackageNotFoundError:
        pass
    if name in ISOLATED:
        site = importlib.import_module(ISOLATED[name]).adk_site_packages()
        if site is not None:
            import re as _re

            for dist in site.glob(PACKAGES[name].replace("-", "_") + "-*.dist-info"):
                m = _re.match(r".*-([^-]+)\.dist-info$", dist.name)
                if m:
                    return m.group(1)
    return None


def installed(name: str) -> bool:
    """Is the framework behind ``--impl name`` importable here (its extra installed), or in its own
    environment for an isolated one? A TypeScript one: is Node.js (>= 20) on PATH (its packages are installed
    on first use)?"""
    if name in NODE:
        from ._node import NodeMissing, node_version

        try:
            node_version()
        except NodeMissing:
            return False
        return True
    return _importable(MODULES[name]) or isolated_command(name) is not None


_ENTRY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class ResolveError(Exception):
    """``--impl`` names a framework or an entry point that cannot be loaded (the message says why)."""


_SETTINGS = re.compile(r"^([a-z][\w-]*)\[([^\]]*)\]$")


def parse_settings(text: str) -> dict[str, str]:
    """``a=x,b=y`` -> {"a": "x", "b": "y"}."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, eq, v = part.partition("=")
        if not eq or not k.strip() or not v.strip():
            raise ResolveError(f"a setting is NAME=VALUE, got {part!r}")
        out[k.strip()] = v.strip()
    return out


def _node_command(name: str, settings: str) -> IsolatedCommand:
    """The command that runs a TypeScript framework's adapter (installing its packages on first use)."""
    from ._node import NodeMissing
    from .typescript import NODE_FRAMEWORKS, command

    cls: Any = NODE_FRAMEWORKS[name]
    try:
        chosen = parse_settings(settings)
        if chosen:
            cls = cls.with_settings(chosen)
    except ValueError as exc:
        raise ResolveError(str(exc)) from None
    try:
        return IsolatedCommand(command(name, settings), cls)
    except NodeMissing as exc:
        raise ResolveError(str(exc)) from None


def resolve(impl: str) -> Any | None:
    """The in-process target for ``--impl``: a framework name (optionally with settings,
    ``'langgraph[handle_tool_errors=text]'``) or ``module:attr``; None for a command. An isolated framework
    (:data:`ISOLATED`) that is not importable here resolves to the command that runs it in its own
    environment (a str)."""
    m = _SETTINGS.match(impl)
    node = m.group(1) if m is not None and m.group(1) in NODE else impl if impl in NODE else None
    if node is not None:
        return _node_command(node, m.group(2) if m is not None else "")
    if m is not None and m.group(1) in ISOLATED and isolated_command(m.group(1)) is not None:
        try:
            return isolated_command(m.group(1), m.group(2))
        except ValueError as exc:  # a bad setting is a usage error (ResolveError is one)
            raise ResolveError(str(exc)) from None
    if impl in ISOLATED and isolated_command(impl) is not None:
        return isolated_command(impl)
    if m is not None and m.group(1) in FRAMEWORKS:
        base = resolve(m.group(1))
        try:
            return base.with_settings(parse_settings(m.group(2)))
        except ValueError as exc:
            raise ResolveError(str(exc)) from None
    entry = FRAMEWORKS.get(impl)
    if entry is None and not _ENTRY.match(impl):
        return None
    module, _, attr = (entry or impl).partition(":")
    if entry is None:  # a user's module: importable from the current directory, as `python -m pytest` does
        import os
        import sys

        here = os.getcwd()
        if here not in sys.path and "" not in sys.path:
            sys.path.insert(0, here)
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        if entry is not None:
            obj()  # imports the framework now: a missing extra is a usage error, not a crash later
    except ImportError as exc:
        hint = f" (install it: pip install 'loopspec[{impl}]')" if impl in PACKAGES else ""
        raise ResolveError(f"cannot import {module}: {exc}{hint}") from None
    except AttributeError:
        raise ResolveError(f"{module} has no attribute {attr!r}") from None
    return obj
