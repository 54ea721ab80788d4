"""pytest plugin: fuzz your own executor from your own test suite.

Installed with loopspec (entry point ``pytest11``), it provides one fixture::

    def test_my_executor_follows_the_spec(loopspec_fuzz):
        loopspec_fuzz(MyAdapter, max_examples=300)            # in process (a loopspec.fuzz.Executor)
        loopspec_fuzz("node adapter.js", max_examples=300)    # or any command speaking the protocol
        loopspec_fuzz(MyAdapter, tools="tools.json")           # an executor with its own registry (MCP tools/list)

It runs a campaign and, when the implementation diverges from the spec, fails the test with the
explanation of every shrunk counterexample — one per distinct cause, each with the command that replays it
(``--impl module:Class``) —; the cases are kept under the test's ``tmp_path`` (``loopspec-fuzz/``) for
``loopspec replay``. Every option of :func:`loopspec.fuzz.fuzz` passes through, ``tools=`` included. The test passes, and the fixture returns the
campaign result, when no divergence was found.

pytest is not a dependency of loopspec: only pytest loads this module, and importing it without
pytest installed defines nothing (and imports nothing of the fuzzer).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import pytest
except ImportError:  # not running under pytest: there is no fixture to provide
    pytest = None  # type: ignore[assignment]

__all__ = ["loopspec_fuzz"] if pytest is not None else []


if pytest is not None:

    @pytest.fixture
    def loopspec_fuzz(tmp_path: Path) -> Callable[..., Any]:
        def run(target: Any, **options: Any) -> Any:
            from .fuzz import fuzz, render_finding

            out = Path(options.pop("out", tmp_path / "loopspec-fuzz"))
            result = fuzz(target, out=out, **options)
            if not result.ok:  # the replay line names the target as `loopspec replay --impl` takes it (module:attr)
                impl = result.impl or str(target)
                texts = [render_finding(f, impl, str(out / f"{f.cause}.json")) for f in result.findings]
                pytest.fail(f"loopspec: {len(result.findings)} divergence(s) from the spec (seed {result.seed})\n\n"
                            + "\n".join(texts), pytrace=False)
            return result

        return run
