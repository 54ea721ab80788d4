"""Fuzz an implementation of the tool-calling loop from Python (the API behind ``loopspec fuzz``).

Point it at a command that speaks the adapter protocol (spec/PROTOCOL.md), in any language::

    from loopspec.fuzz import fuzz
    result = fuzz("java -cp build Executor", max_examples=500, out="fuzz-out")
    assert result.ok, result.findings[0].verdict.violation.explanation

or at your executor in process, through a small adapter class::

    from loopspec.fuzz import Executor, fuzz

    class MyAdapter(Executor):
        def batch_run(self, params, execute):
            # run your executor; wherever it would call a tool, call
            #   execute(call_id, name, arguments, principal)
            # which returns the output or raises loopspec.ToolFailure(category)
            ...
            return {"results": [...], "executed": n, "aborted": None}

    fuzz(MyAdapter)          # a fresh MyAdapter per example

In a pytest suite, the ``loopspec_fuzz`` fixture does the same and fails the test with the
explanation (see :mod:`loopspec.pytest_plugin`).

Layer: a driver, beside ``oracle``, ``checker`` and ``render`` (none of which it imports); it may import
``frameworks`` (to start ``--impl NAME``), ``protocol``, ``judge``, ``engine``, ``core``, ``spec`` and
``support``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..judge.trace import judge
from ..judge.verdict import TraceError, Verdict, Violation
from ..protocol.executor import Executor, ModelFailure, ReferenceExecutor
from ..protocol.rpc import ProtocolFailure
from ._adapter import ImplFactory, StartError, Target
from ._campaign import Campaign
from ._declared import Declaration, DeclarationError, load_declaration
from ._model import CampaignResult, Finding, ReplayResult, load_case
from ._report import render_finding
from ._run import replay_case

__all__ = [
    "Campaign",
    "CampaignResult",
    "Declaration",
    "DeclarationError",
    "Executor",
    "Finding",
    "ModelFailure",
    "ProtocolFailure",
    "ReferenceExecutor",
    "ReplayResult",
    "StartError",
    "TraceError",
    "Verdict",
    "Violation",
    "fuzz",
    "judge",
    "load_declaration",
    "render_finding",
    "replay",
]


def fuzz(
    target: Target,
    *,
    mode: str = "batch",
    max_examples: int = 200,
    seed: int | None = None,
    out: str | Path | None = None,
    steps: int = 8,
    max_calls: int = 6,
    timeout: float = 10.0,
    isolation: str = "campaign",
    cwd: str | None = None,
    shrink_seconds: float = 120.0,
    profile: str | None = None,
    time_budget: float | None = None,
    jobs: int = 1,
    dask: str | None = None,
    tools: str | Path | Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
) -> CampaignResult:
    """Run one campaign against ``target`` (a command string/argv, an :class:`Executor` class or
    factory, or an object with ``handle(method, params, call)``). Raises :class:`StartError` or
    :class:`ProtocolFailure` when the implementation cannot even be started.

    ``mode``: ``batch``, ``loop``, or ``writes`` (write tools with lost answers and restarts, protocol v1.2:
    the target must be a command that announces the ``writes`` capability). ``jobs``: that many worker processes, each with its own implementation (the target must then be
    importable by reference: a command, or a class defined at a module's top level); ``dask``: the
    address of a Dask scheduler whose workers run the shards. ``time_budget``: seconds after which
    no new example starts. ``tools``: the implementation's own registry (:mod:`loopspec.fuzz._declared`): a
    path to MCP's ``tools/list`` JSON, ``"mcp:CMD"`` (a running MCP server), that document, or its list of
    tools; every batch then offers exactly those tools (an implementation may also declare them, and what it
    does not support, in its ``initialize`` result, or an :class:`Executor` in its ``tools`` attribute).
    Raises :class:`DeclarationError` for a declaration that cannot be used."""
    declared = load_declaration(tools) if tools is not None else None
    factory = ImplFactory(target, timeout=timeout, cwd=cwd)
    try:
        factory.release(factory.open(mode))
        campaign = Campaign(factory, mode=mode, max_examples=max_examples, seed=seed, out=out, steps=steps,
                            max_calls=max_calls, isolation=isolation, shrink_seconds=shrink_seconds,
                            profile=None if profile in (None, "strict") else profile, time_budget=time_budget,
                            jobs=jobs, dask=dask, declared=declared)
        return campaign.run()
    finally:
        factory.close()


def replay(case: str | Path | Mapping[str, Any], target: Target, *, timeout: float = 10.0,
           cwd: str | None = None) -> ReplayResult:
    """Rerun a saved case (a path or the loaded case) against ``target``, in a fresh process."""
    doc = load_case(case) if isinstance(case, str | Path) else case
    factory = ImplFactory(target, timeout=timeout, cwd=cwd)
    try:
        return replay_case(doc, factory)
    finally:
        factory.close()
