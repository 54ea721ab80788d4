"""Example tool sets that exercise the whole spec (used by the demo and the tests), and the example adapters.

The standalone example adapters live in the source tree's ``examples/python/`` and import nothing of loopspec:
``minimal_adapter.py``, the first adapter the docs show (a correct executor in 65 lines of standard-library
Python, docs/adapters.md), and ``executor.py``, the full example with its switchable bugs. The wheel carries
copies of both in this package, so that

    python -m loopspec.examples.minimal_adapter
    python -m loopspec.examples.executor [--bug NAME] [--concurrent]

run them wherever loopspec is installed. In a source checkout (``src/`` on the path, or an editable
install) this package's path also covers ``examples/python/``, so the same commands run the files
there: one copy in git, no second one.

Layer: implementations under test, beside ``frameworks``; they may import ``engine`` and below.
"""

from pathlib import Path as _Path

_SOURCE_EXAMPLES = _Path(__file__).resolve().parents[3] / "examples" / "python"
if (_SOURCE_EXAMPLES / "executor.py").is_file() and not (_Path(__file__).with_name("executor.py")).is_file():
    __path__.append(str(_SOURCE_EXAMPLES))  # a source checkout: examples/python/ is part of this package
