"""loopspec: a formal spec, a reference engine and conformance tools for LLM tool-calling loops.

The public vocabulary is small::

    from loopspec import Tool, run_batch, run_loop, arun_loop, load_spec

Everything else lives in the layer packages under it (``loopspec.core`` is the pure decision core;
CONTRIBUTING.md has the map). Only the names below, the ``loopspec`` command and the ``loopspec_fuzz``
pytest fixture are public.

The facade is lazy (PEP 562): ``import loopspec`` imports none of them; a name is imported from its
module the first time it is used, so the command line (``loopspec --version``, ``--help``) and a
program that needs one part of loopspec do not pay for the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module (under loopspec) that defines it
_EXPORTS: dict[str, str] = {
    "Ledger": "core.ledger",
    "Answer": "core.rules",
    "Limits": "core.rules",
    "Outcome": "core.rules",
    "ToolDefinitionError": "core.rules",
    "WriteTool": "core.writes",
    "idempotency_key": "core.writes",
    "EngineError": "engine.base",
    "ToolFailure": "engine.base",
    "LedgerFailure": "engine.oplog",
    "LedgerNotFound": "engine.oplog",
    "MemoryOperationLedger": "engine.oplog",
    "OperationLedger": "engine.oplog",
    "Rejected": "engine.oplog",
    "SQLiteOperationLedger": "engine.oplog",
    "WriteExecutor": "engine.oplog",
    "WriteHandler": "engine.oplog",
    "open_operation_ledger": "engine.oplog_open",
    "BatchOutcome": "engine.reference",
    "CancelToken": "engine.reference",
    "RunOutcome": "engine.reference",
    "Tool": "engine.reference",
    "ToolContext": "engine.reference",
    "Turn": "engine.reference",
    "arun_batch": "engine.reference",
    "arun_loop": "engine.reference",
    "run_batch": "engine.reference",
    "run_loop": "engine.reference",
    "tool": "engine.reference",
    "resume": "engine.resume",
    "SpecError": "spec.base",
    "Spec": "spec.loader",
    "load_rules": "spec.loader",
    "load_spec": "spec.loader",
}

__all__ = [
    "Answer",
    "BatchOutcome",
    "CancelToken",
    "EngineError",
    "Ledger",
    "LedgerFailure",
    "LedgerNotFound",
    "Limits",
    "MemoryOperationLedger",
    "OperationLedger",
    "Outcome",
    "Rejected",
    "RunOutcome",
    "SQLiteOperationLedger",
    "Spec",
    "SpecError",
    "Tool",
    "ToolContext",
    "ToolDefinitionError",
    "ToolFailure",
    "Turn",
    "WriteExecutor",
    "WriteHandler",
    "WriteTool",
    "__version__",
    "arun_batch",
    "arun_loop",
    "idempotency_key",
    "load_rules",
    "load_spec",
    "open_operation_ledger",
    "resume",
    "run_batch",
    "run_loop",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loopspec' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next use is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # what type checkers and IDEs see: the same names, imported eagerly
    from .core.ledger import Ledger
    from .core.rules import Answer, Limits, Outcome, ToolDefinitionError
    from .core.writes import WriteTool, idempotency_key
    from .engine.base import EngineError, ToolFailure
    from .engine.oplog import (
        LedgerFailure,
        LedgerNotFound,
        MemoryOperationLedger,
        OperationLedger,
        Rejected,
        SQLiteOperationLedger,
        WriteExecutor,
        WriteHandler,
    )
    from .engine.oplog_open import open_operation_ledger
    from .engine.reference import (
        BatchOutcome,
        CancelToken,
        RunOutcome,
        Tool,
        ToolContext,
        Turn,
        arun_batch,
        arun_loop,
        run_batch,
        run_loop,
        tool,
    )
    from .engine.resume import resume
    from .spec.base import SpecError
    from .spec.loader import Spec, load_rules, load_spec
