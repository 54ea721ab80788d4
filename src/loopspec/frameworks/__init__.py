"""In-process adapters for real Python agent frameworks (optional extras).

``loopspec fuzz --impl pydantic-ai`` (or ``openai-agents``, ``langgraph``, ``smolagents``, ``llamaindex``,
``autogen``) drives the framework's own tool-calling path with a scripted model and no network;
``--impl 'NAME[setting=value,...]'`` runs it with other values of the settings its adapter declares
(``SETTINGS``: the settings matrix of docs/frameworks.md); ``--impl module:attr`` loads any
:class:`loopspec.fuzz.Executor` subclass (or factory) the same way. Each adapter module imports its
framework only when it is used: ``pip install 'loopspec[pydantic-ai]'`` etc.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from typing import Any, Final

__all__ = ["FRAMEWORKS", "MODULES", "PACKAGES", "installed", "parse_settings", "resolve"]

#: --impl name -> the adapter's entry point (module:attr)
FRAMEWORKS: Final = {
    "pydantic-ai": "loopspec.frameworks.pydantic_ai:PydanticAIExecutor",
    "openai-agents": "loopspec.frameworks.openai_agents:OpenAIAgentsExecutor",
    "langgraph": "loopspec.frameworks.langgraph:LangGraphExecutor",
    "smolagents": "loopspec.frameworks.smolagents:SmolagentsExecutor",
    "llamaindex": "loopspec.frameworks.llamaindex:LlamaIndexExecutor",
    "autogen": "loopspec.frameworks.autogen:AutoGenExecutor",
}

#: --impl name -> the distribution that provides the framework (and the loopspec extra that installs it)
PACKAGES: Final = {"pydantic-ai": "pydantic-ai-slim", "openai-agents": "openai-agents", "langgraph": "langgraph",
                   "smolagents": "smolagents", "llamaindex": "llama-index-core", "autogen": "autogen-agentchat"}

#: --impl name -> the top-level module the framework's distribution installs
MODULES: Final = {"pydantic-ai": "pydantic_ai", "openai-agents": "agents", "langgraph": "langgraph",
                  "smolagents": "smolagents", "llamaindex": "llama_index.core", "autogen": "autogen_agentchat"}


def installed(name: str) -> bool:
    """Is the framework behind ``--impl name`` importable here (its extra installed)?"""
    return importlib.util.find_spec(MODULES[name]) is not None


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


def resolve(impl: str) -> Any | None:
    """The in-process target for ``--impl``: a framework name (optionally with settings,
    ``'langgraph[handle_tool_errors=text]'``) or ``module:attr``; None for a command."""
    m = _SETTINGS.match(impl)
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
