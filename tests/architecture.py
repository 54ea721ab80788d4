"""What users may rely on, as plain data: the public names of ``loopspec`` and of its documented modules,
and every command of the command line with every option it takes (tests/test_architecture.py compares it
with tests/golden/public_surface.json, recorded before the packages were reorganised).

Run as a script it prints that data as JSON (``python tests/architecture.py``).
"""

from __future__ import annotations

import argparse
import importlib
import json
from typing import Any

#: Modules the docs and README tell users to import from, beside ``loopspec`` itself.
DOCUMENTED_MODULES = ("loopspec.fuzz", "loopspec.oracle", "loopspec.oracle.corpus", "loopspec.oracle.dask",
                      "loopspec.frameworks", "loopspec.pytest_plugin")


def _actions(parser: argparse.ArgumentParser) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            out["commands"] = {name: _actions(p) for name, p in sorted(a.choices.items())}
            continue
        key = " ".join(a.option_strings) or a.dest
        out[key] = {"nargs": a.nargs if not isinstance(a.nargs, int) else int(a.nargs),
                    "choices": sorted(map(str, a.choices)) if a.choices is not None else None,
                    "required": bool(a.required)}
    return out


def public_surface() -> dict[str, Any]:
    import loopspec
    from loopspec.cli import build_parser

    modules: dict[str, list[str]] = {}
    for name in DOCUMENTED_MODULES:
        mod = importlib.import_module(name)
        names = getattr(mod, "__all__", None)
        modules[name] = sorted(names) if names is not None else sorted(n for n in vars(mod) if not n.startswith("_"))
    return {"loopspec.__all__": sorted(loopspec.__all__), "modules": modules, "cli": _actions(build_parser())}


if __name__ == "__main__":
    print(json.dumps(public_surface(), indent=1, sort_keys=True))
