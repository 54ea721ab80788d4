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

import shlex
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
                base = _import_root(target, impl)
                if base is not None:  # the test module imports from where pytest put it on sys.path, not from here
                    texts = [t.replace("replay:         loopspec replay",
                                       f"replay:         cd {shlex.quote(base)} && loopspec replay") for t in texts]
                pytest.fail(f"loopspec: {len(result.findings)} divergence(s) from the spec (seed {result.seed})\n\n"
                            + "\n".join(texts), pytrace=False)
            return result

        return run

    def _import_root(target: Any, impl: str) -> str | None:
        """The directory ``--impl module:attr`` must be resolved from when it is not the current one: pytest
        imports a test module from its own directory (rootdir-based ``sys.path`` insertion), which ``loopspec
        replay`` run from here would not find. None when the current directory does."""
        import os
        import sys

        module, sep, _ = impl.partition(":")
        mod = sys.modules.get(module) if sep and " " not in impl else None
        file = getattr(mod, "__file__", None)
        if not file or isinstance(target, str):
            return None
        root = Path(file).resolve().parent
        if Path(file).name == "__init__.py":  # a package: imported from the directory holding it
            root = root.parent
        for _ in range(module.count(".")):
            root = root.parent
        return None if root == Path(os.getcwd()).resolve() else str(root)
