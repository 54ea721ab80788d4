"""The package facade and the command line import what they use, no more (PEP 562 facade, lazy commands):
``import loopspec`` imports no private module, ``loopspec --version`` no command, and registering the
commands for ``--help`` imports neither the engine, the fuzzer, the renderers nor graphviz (``check``'s
options still come from the oracle). Each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import loopspec


def _modules(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_import_loopspec_imports_no_private_module_and_every_public_name_resolves() -> None:
    assert {m for m in _modules("import loopspec") if m.startswith("loopspec")} == {"loopspec"}
    assert set(loopspec.__all__) == set(loopspec._EXPORTS) | {"__version__"}
    for name in loopspec.__all__:
        assert getattr(loopspec, name) is not None
    assert loopspec.Tool.__module__ == "loopspec.engine.reference"
    assert set(loopspec.__all__) <= set(dir(loopspec))


def test_version_imports_no_command() -> None:
    mods = _modules("from loopspec.cli import main\nassert main(['--version']) == 0")
    assert not {m for m in mods if m.startswith(("loopspec.cli.", "loopspec.engine.reference", "loopspec.spec.loader", "argparse"))}


def test_registering_the_commands_imports_no_engine_fuzzer_or_renderer() -> None:
    mods = _modules("from loopspec.cli import build_parser\nbuild_parser()")
    assert {"loopspec.cli.fuzz", "loopspec.cli.diagram", "loopspec.cli.verify"} <= mods  # the commands registered
    heavy = ("loopspec.fuzz", "loopspec.render", "loopspec.engine.vectors", "loopspec.checker", "graphviz")
    assert not {m for m in mods if m.startswith(heavy)}
