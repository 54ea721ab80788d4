"""Shared Hypothesis strategies for the test suite.

The fuzzer's own strategies live in ``loopspec._fuzz_strategies`` (they are product code, used by
``loopspec fuzz``); they are re-exported here so tests can use them without reaching into the
package.
"""

from __future__ import annotations

from loopspec._fuzz_strategies import (
    batch_configs,
    batch_steps,
    call_lists,
    json_values,
    schemas,
    scripts,
)

__all__ = ["batch_configs", "batch_steps", "call_lists", "json_values", "schemas", "scripts"]
