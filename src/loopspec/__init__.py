"""loopspec: a formal spec, a reference engine and conformance tools for LLM tool-calling loops.

The public vocabulary is small::

    from loopspec import Tool, run_batch, run_loop, arun_loop, load_spec

Everything else lives in private modules (``loopspec._core`` is the pure decision core).

The facade is lazy (PEP 562): ``import loopspec`` imports none of them; a name is imported from its
module the first time it is used, so the command line (``loopspec --version``, ``--help``) and a
program that needs one part of loopspec do not pay for the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the private module that defines it
_EXPORTS: dict[str, str] = {
    "Answer": "_core",
    "Limits": "_core",
    "Outcome": "_core",
    "ToolDefinitionError": "_core",
    "BatchOutcome": "_engine",
    "CancelToken": "_engine",
    "EngineError": "_engine",
    "RunOutcome": "_engine",
    "Tool": "_engine",
    "ToolContext": "_engine",
    "ToolFailure": "_engine",
    "Turn": "_engine",
    "arun_batch": "_engine",
    "arun_loop": "_engine",
    "run_batch": "_engine",
    "run_loop": "_engine",
    "tool": "_engine",
    "Ledger": "_ledger",
    "MemoryOperationLedger": "_oplog",
    "OperationLedger": "_oplog",
    "Rejected": "_oplog",
    "SQLiteOperationLedger": "_oplog",
    "WriteExecutor": "_oplog",
    "WriteHandler": "_oplog",
    "open_operation_ledger": "_oplog",
    "Spec": "_spec",
    "SpecError": "_spec",
    "load_rules": "_spec",
    "load_spec": "_spec",
    "resume": "_writeloop",
    "WriteTool": "_writes",
    "idempotency_key": "_writes",
}

__all__ = [
    "Answer",
    "BatchOutcome",
    "CancelToken",
    "EngineError",
    "Ledger",
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
    from ._core import Answer, Limits, Outcome, ToolDefinitionError
    from ._engine import (
        BatchOutcome,
        CancelToken,
        EngineError,
        RunOutcome,
        Tool,
        ToolContext,
        ToolFailure,
        Turn,
        arun_batch,
        arun_loop,
        run_batch,
        run_loop,
        tool,
    )
    from ._ledger import Ledger
    from ._oplog import (
        MemoryOperationLedger,
        OperationLedger,
        Rejected,
        SQLiteOperationLedger,
        WriteExecutor,
        WriteHandler,
        open_operation_ledger,
    )
    from ._spec import Spec, SpecError, load_rules, load_spec
    from ._writeloop import resume
    from ._writes import WriteTool, idempotency_key
