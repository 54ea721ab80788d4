"""What an implementation declares about itself: the tools it has, and what it does not support.

An executor that already exists has its own fixed registry. Declared, that registry is what a campaign
offers: every batch and round carries exactly the declared tools (no tool of the harness's own pools, no
schema the implementation never declared), the reducer keeps them all, arguments are drawn from each tool's
``inputSchema`` (valid ones, and deliberately invalid ones), names that are not declared are still proposed
(to test the allow-list, R3), and the tools' MCP annotations (``readOnlyHint``, ``idempotentHint``,
``destructiveHint``) decide which calls may overlap (R30).

The declaration is MCP's ``tools/list`` result, ``{"tools": [{"name", "description", "inputSchema",
"annotations"}]}``, from one of:

* a file (``loopspec fuzz --tools FILE``; ``fuzz(..., tools=...)`` and the pytest fixture take a path, the
  document, or the list of tools);
* the implementation's ``initialize`` result (protocol 1.3: ``"tools"`` beside ``"capabilities"``; an
  in-process :class:`~loopspec.protocol.executor.Executor` sets its ``tools`` attribute);
* a running MCP server (``--tools 'mcp:CMD'``): its ``tools/list`` over stdio, through the ``mcp`` SDK.

loopspec's own addition to the document is ``"unsupported"``: what the implementation does not do, among
:data:`UNSUPPORTED`. It is fuzzed in what it supports, and the report says what was not exercised.

Plain data, no I/O but reading the file (and, for ``mcp:``, talking to the server).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..core import rules as core

__all__ = ["UNSUPPORTED", "Declaration", "DeclarationError", "declaration_from", "from_initialize", "judging_profile",
           "load_declaration", "tools_from_mcp"]

Json = Any

#: What an implementation may declare it does not support, and what the campaign then leaves out.
UNSUPPORTED: Final[Mapping[str, str]] = {
    "continue": "continue mode (R14): every batch and run is in abort mode",
    "error-results": ("error answers per call: a batch that a request would end is rejected as a whole "
                      "({\"rejected\": {\"code\"}, \"executed\": n}, R47), judged with batch_rejection = whole-batch"),
}
#: The rules a campaign cannot exercise when a feature is declared unsupported.
NOT_EXERCISED: Final[Mapping[str, tuple[str, ...]]] = {
    "continue": ("R14",),
    "error-results": ("R14",),
}


class DeclarationError(ValueError):
    """A declaration that cannot be used; the message names the source and the field."""


@dataclass(frozen=True)
class Declaration:
    """The declared registry (``tools``: MCP tool objects, in the declared order; None when the implementation
    declared none and the harness draws its own) and the features it does not support."""

    tools: tuple[dict[str, Json], ...] | None = None
    unsupported: frozenset[str] = frozenset()
    source: str = ""
    #: parsed schemas by tool name (R4's subset), filled in by :func:`declaration_from`
    schemas: Mapping[str, core.ToolSchema] = field(default_factory=dict, compare=False, repr=False)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t["name"] for t in self.tools or ())

    @property
    def modes(self) -> tuple[str, ...]:
        """The batch modes the campaign draws."""
        return ("abort",) if self.unsupported & {"continue", "error-results"} else ("abort", "continue")

    @property
    def rejects_batches(self) -> bool:
        """Does the implementation reject a whole batch instead of answering errors per call?"""
        return "error-results" in self.unsupported

    def not_exercised(self) -> dict[str, list[str]]:
        """Rule id -> the declared unsupported features that keep it from being exercised."""
        out: dict[str, list[str]] = {}
        for feature in sorted(self.unsupported):
            for rule in NOT_EXERCISED.get(feature, ()):
                out.setdefault(rule, []).append(feature)
        return out

    def to_json(self) -> dict[str, Json]:
        doc: dict[str, Json] = {"source": self.source, "unsupported": sorted(self.unsupported)}
        if self.tools is not None:
            doc["tools"] = [dict(t) for t in self.tools]
        return doc

    def merged(self, other: Declaration | None) -> Declaration:
        """This declaration, completed by ``other`` (the implementation's own, from ``initialize``): the tools
        given here win; the unsupported features are both sets."""
        if other is None:
            return self
        tools = self.tools if self.tools is not None else other.tools
        schemas = self.schemas if self.tools is not None else other.schemas
        source = self.source if self.tools is not None or not other.source else other.source
        return Declaration(tools, self.unsupported | other.unsupported, source, schemas)


def declaration_from(doc: Json, source: str) -> Declaration:
    """A declaration from a ``tools/list`` result (``{"tools": [...], "unsupported": [...]}``), a bare list of
    tools, or None (nothing declared). Raises :class:`DeclarationError` naming ``source`` and the field."""
    if doc is None:
        return Declaration(source=source)
    if isinstance(doc, list):
        doc = {"tools": doc}
    if not isinstance(doc, dict):
        raise DeclarationError(f"{source}: must be an object {{\"tools\": [...]}} (MCP's tools/list result) or a "
                               "list of tools")
    raw_tools = doc.get("tools")
    unsupported = doc.get("unsupported", [])
    if not isinstance(unsupported, list) or not all(isinstance(u, str) for u in unsupported):
        raise DeclarationError(f"{source}: unsupported: must be a list of strings among {', '.join(UNSUPPORTED)}")
    unknown = sorted(set(unsupported) - set(UNSUPPORTED))
    if unknown:
        raise DeclarationError(f"{source}: unsupported: {', '.join(map(repr, unknown))} is not one of "
                               f"{', '.join(UNSUPPORTED)}")
    if raw_tools is None:
        return Declaration(None, frozenset(unsupported), source)
    if not isinstance(raw_tools, list) or not raw_tools:
        raise DeclarationError(f"{source}: tools: must be a non-empty list of MCP tool objects "
                               "{name, description, inputSchema, annotations}")
    tools: list[dict[str, Json]] = []
    schemas: dict[str, core.ToolSchema] = {}
    for i, t in enumerate(raw_tools):
        where = f"{source}: tools[{i}]"
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"]:
            raise DeclarationError(f"{where}: must be an object with a non-empty string name")
        name = t["name"]
        if name in schemas:
            raise DeclarationError(f"{where}.name: the tool {name!r} is declared twice")
        try:
            schemas[name] = core.parse_schema(t.get("inputSchema"), tool=name)
        except core.ToolDefinitionError as exc:
            raise DeclarationError(f"{where} ({name}): inputSchema{exc.field}: {exc.message}; loopspec judges "
                                   "arguments against R4's flat subset (object properties of type string, integer "
                                   "or boolean; required; additionalProperties)") from None
        hints = t.get("annotations")
        if hints is not None and not (isinstance(hints, dict) and all(
                isinstance(hints.get(h, False), bool) for h in core.HINT_DEFAULTS)):
            raise DeclarationError(f"{where} ({name}).annotations: must be an object whose MCP hints "
                                   f"({', '.join(core.HINT_DEFAULTS)}) are booleans")
        tool: dict[str, Json] = {"name": name, "inputSchema": t.get("inputSchema") or {"type": "object"}}
        if isinstance(t.get("description"), str):
            tool["description"] = t["description"]
        if hints:
            tool["annotations"] = {h: v for h, v in hints.items() if h in core.HINT_DEFAULTS or h == "title"}
        tools.append(tool)
    return Declaration(tuple(tools), frozenset(unsupported), source, schemas)


def load_declaration(spec: str | Path | Mapping[str, Json] | Sequence[Json] | None, *,
                     timeout: float = 30.0) -> Declaration:
    """A declaration from what a user gives: a path to a ``tools/list`` JSON file, ``mcp:CMD`` (a running MCP
    server), the document itself, or a list of tools."""
    if spec is None:
        return Declaration()
    if isinstance(spec, str) and spec.startswith("mcp:"):
        return tools_from_mcp(spec[4:], timeout=timeout)
    if isinstance(spec, str | Path):
        from ..support.safejson import JsonInputError, load_json

        try:
            doc = load_json(Path(spec), what="tools file")
        except JsonInputError as exc:
            raise DeclarationError(str(exc) if exc.file else f"{spec}: {exc}") from None
        except OSError as exc:
            raise DeclarationError(f"{spec}: {exc.strerror or exc}") from None
        return declaration_from(doc, str(spec))
    return declaration_from(json.loads(json.dumps(spec)), "the declared tools")


def from_initialize(info: Json) -> Declaration | None:
    """The implementation's own declaration in its ``initialize`` result (``tools``, ``unsupported``), or None.
    Raises :class:`DeclarationError` when it is malformed."""
    if not isinstance(info, dict) or ("tools" not in info and "unsupported" not in info):
        return None
    return declaration_from({k: info[k] for k in ("tools", "unsupported") if k in info}, "the initialize result")


def _page(cursor: str) -> dict[str, Json]:
    """The next page's arguments of ``ClientSession.list_tools``: ``params`` in the mcp SDK 2, ``cursor`` in 1."""
    import inspect

    from mcp import ClientSession

    if "params" in inspect.signature(ClientSession.list_tools).parameters:
        from mcp.types import PaginatedRequestParams

        return {"params": PaginatedRequestParams(cursor=cursor)}
    return {"cursor": cursor}


def tools_from_mcp(command: str, *, timeout: float = 30.0) -> Declaration:
    """The ``tools/list`` of the MCP server ``command`` starts (stdio transport, the ``mcp`` SDK), every page."""
    import shlex

    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise DeclarationError(f"mcp:{command}: cannot parse the command: {exc}") from None
    if not argv:
        raise DeclarationError("mcp:: the command is empty (--tools 'mcp:python3 server.py')")
    try:
        import anyio
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client
    except ImportError:
        raise DeclarationError(f"mcp:{command}: reading tools from an MCP server needs the mcp SDK: "
                               "pip install 'loopspec[mcp]'") from None

    async def fetch() -> list[dict[str, Json]]:
        params = StdioServerParameters(command=argv[0], args=argv[1:])
        tools: list[dict[str, Json]] = []
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            cursor = None
            while True:
                page = await session.list_tools(**_page(cursor)) if cursor else await session.list_tools()
                tools += [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools]
                cursor = getattr(page, "next_cursor", None) or getattr(page, "nextCursor", None)
                if not cursor:
                    return tools

    async def bounded() -> list[dict[str, Json]]:
        with anyio.fail_after(timeout):
            return await fetch()

    try:
        tools = anyio.run(bounded)
    except TimeoutError:
        raise DeclarationError(f"mcp:{command}: no tools/list answer within {timeout:g} s") from None
    except Exception as exc:  # the server could not start, or broke the protocol
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:  # anyio's task groups wrap it
            exc = exc.exceptions[0]
        raise DeclarationError(f"mcp:{command}: {type(exc).__name__}: {exc}") from None
    return declaration_from({"tools": tools}, f"mcp:{command}")


def judging_profile(profile: str | None, declared: Declaration | Mapping[str, Json] | None) -> Any:
    """What the campaign judges under: the named profile (None: the strict spec), with what the declaration
    implies: an implementation that declares ``error-results`` unsupported rejects whole batches by design
    (``batch_rejection = whole-batch``, R47). A :class:`~loopspec.core.profiles.Params` when the declaration
    changes something, else ``profile`` itself."""
    unsupported = declared.unsupported if isinstance(declared, Declaration) else (
        frozenset((declared or {}).get("unsupported") or ()) if isinstance(declared, Mapping) else frozenset())
    if "error-results" not in unsupported:
        return profile
    from ..core.profiles import params_for
    from ..spec.loader import load_spec

    spec = load_spec()
    return params_for(spec, profile).with_values(spec, batch_rejection="whole-batch")
