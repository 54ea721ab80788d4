#!/usr/bin/env python3
"""examples/python/executor.py with its writes.run changed in one way (the first argument), for the writes
judge's tests (issue 32): two implementations the spec allows and the judge once refused, and three it must
refuse and once passed.

    python3 variant_executor.py MODE

* ``eager-lookup`` (correct): before each new attempt it asks the external system about the key twice
  (redundant lookups: a lookup of a key whose outcome is known changes nothing, PROTOCOL.md W3);
* ``retry-lookup`` (correct): a lookup that is unavailable is asked once more at once (a lookup is an attempt,
  R23, R45), and the request is answered from what the second one says;
* ``shared-key`` (R37): the key is derived from the tool and the principal only, so two different business
  writes share it and the external system answers the second with the first's result;
* ``made-up-unreconciled`` / ``null-unreconciled`` (R46): the outcome lists as many unreconciled keys as it
  should, but made up, or null.

Standalone apart from the example it loads (no loopspec import).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

MODE = sys.argv[1] if len(sys.argv) > 1 else "eager-lookup"
_spec = importlib.util.spec_from_file_location(
    "example_executor", Path(__file__).resolve().parents[2] / "examples" / "python" / "executor.py")
assert _spec is not None and _spec.loader is not None
ex: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ex)


class Variant(ex.WritesRun):  # type: ignore[misc,name-defined]
    def ask(self, method: str, call: dict[str, Any], key: str) -> dict[str, Any]:
        if MODE == "shared-key":  # its ledger keeps each write apart; what it sends does not
            key = hashlib.sha256(f"{call['name']}/{self.principal}".encode()).hexdigest()
        return dict(super().ask(method, call, key))

    def send(self, key: str, call: dict[str, Any]) -> dict[str, Any]:
        if MODE == "eager-lookup" and self.tools[call["name"]].get("reconcile") != "none":
            self.ask("tool.lookup", call, key)  # the answer is not used: the ledger already knows the key
            self.ask("tool.lookup", call, key)
        return dict(super().send(key, call))

    def lookup(self, key: str, call: dict[str, Any]) -> str:
        state = str(super().lookup(key, call))
        if MODE == "retry-lookup" and state == "unknown" and self.tools[call["name"]].get("reconcile") != "none":
            state = str(super().lookup(key, call))  # one retry of an unavailable lookup
        return state

    def run(self) -> dict[str, Any]:
        out = dict(super().run())
        if MODE == "made-up-unreconciled":
            out["unreconciled"] = [hashlib.sha256(str(k).encode()).hexdigest() for k in out["unreconciled"]]
        elif MODE == "null-unreconciled":
            out["unreconciled"] = [None for _ in out["unreconciled"]]
        return out


ex.WritesRun = Variant

if __name__ == "__main__":
    ex.Rpc(False).serve(None)
