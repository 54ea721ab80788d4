"""Continue a crashed run from its operation ledger (SPEC.md section 6): :func:`resume` reconciles every
unknown outcome of the run through the external system before the model is asked anything, then runs the
rest of the loop with :func:`~loopspec.engine.reference.run_loop`. It sits above both the engine and the
writes loop, which do not import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["resume"]

def resume(run_id: str, model: Callable[[Any], Any], *, tools: Any, operation_ledger: Any = None, ledger: Any = None,
           **kwargs: Any) -> Any:
    """Continue run ``run_id`` after a crash (SPEC.md R46), from its operation ledger ``operation_ledger`` (a path
    to the SQLite file, a ``postgresql://`` URL, or an OperationLedger object): first every write of the run
    whose outcome is unknown — a dispatch mark without a result, or an unknown answer — is reconciled through
    its tool's lookup (R43); then the loop runs again under ``run_id`` with ``model`` and ``tools`` (the same
    ones, and the same principal, as the crashed run): a request whose answer the ledger recorded gets it
    again, a confirmed key is answered from the ledger (R44), and nothing is sent twice. ``ledger`` is the run
    ledger (a :class:`~loopspec.Ledger`) the resumed run's events go to. Other keyword arguments are
    :func:`run_loop`'s. Returns the run's outcome; ``outcome.unreconciled`` lists the keys still unknown.
    (Deprecated, for one release: the operation ledger given as ``ledger=``, with a DeprecationWarning.)"""
    from .base import EngineError
    from .reference import _ledgers, run_loop

    events, ops = _ledgers(ledger, operation_ledger, kwargs.pop("operations", None), "resume")
    if ops is None:
        raise EngineError("resume needs the run's operation ledger (operation_ledger=): a path to its SQLite file, "
                          "a postgresql:// URL or an OperationLedger")
    return run_loop(model, tools=tools, ledger=events, operation_ledger=ops, run_id=run_id, _resuming=True, **kwargs)
