"""loopspec: a formal spec, a reference engine and conformance tools for LLM tool-calling loops.

The public vocabulary is small::

    from loopspec import Tool, run_batch, run_loop, arun_loop, load_spec

Everything else lives in private modules (``loopspec._core`` is the pure decision core).
"""

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

__version__ = "0.1.0"

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
