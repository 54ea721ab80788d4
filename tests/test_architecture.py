"""The architecture, enforced: the import-linter contracts of pyproject.toml hold (layers from ``cli`` down to
``support``, the drivers independent of each other, the oracle's stages in pipeline order, no import cycle at
any depth), they fail with the contract's message on an upward import, a backward call between the oracle's
stages or a cycle, at most six modules sit loose at the top of the package,
and what users rely on — the public names and every command and option — is exactly what it was before the
packages were reorganised (tests/golden/public_surface.json)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .architecture import public_surface

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
LINT = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")


def _lint(src: Path, config: Path) -> subprocess.CompletedProcess[str]:
    assert LINT, "import-linter is a test dependency (pip install -e '.[test]')"
    return subprocess.run([LINT, str(config), "--no-cache"], capture_output=True, text=True, timeout=300,
                          cwd=src, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin", "NO_COLOR": "1"})


def test_the_import_contracts_hold() -> None:
    res = _lint(SRC, ROOT / "pyproject.toml")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Contracts: 4 kept, 0 broken." in res.stdout


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package and of the contracts, to break on purpose."""
    tmp = tmp_path_factory.mktemp("arch")
    shutil.copytree(SRC / "loopspec", tmp / "src" / "loopspec", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    return tmp


def _with_line(path: Path, line: str) -> str:
    before = path.read_text()
    path.write_text(before + "\n\n" + line + "\n")
    return before


def test_an_upward_import_fails_with_the_contract_message(copy: Path) -> None:
    # a function-level import counts as much as a module-level one
    target = copy / "src" / "loopspec" / "core" / "rules.py"
    before = _with_line(target, "def _sneak() -> object:\n    from ..cli import main\n\n    return main")
    try:
        res = _lint(copy / "src", copy / "pyproject.toml")
    finally:
        target.write_text(before)
    assert res.returncode == 1, res.stdout
    assert "layers: a package imports only the layers below it" in res.stdout
    assert "loopspec.core is not allowed to import loopspec.cli" in res.stdout
    assert "loopspec.core.rules -> loopspec.cli" in res.stdout


def test_a_driver_importing_another_driver_fails(copy: Path) -> None:
    target = copy / "src" / "loopspec" / "oracle" / "corpus.py"
    before = _with_line(target, "from ..fuzz import _model  # noqa")
    try:
        res = _lint(copy / "src", copy / "pyproject.toml")
    finally:
        target.write_text(before)
    assert res.returncode == 1
    assert "loopspec.oracle is not allowed to import loopspec.fuzz" in res.stdout
    assert "loopspec.oracle.corpus -> loopspec.fuzz._model" in res.stdout


def test_a_cycle_inside_a_package_fails(copy: Path) -> None:
    # the oracle's explanations sit below its checker: the reverse import makes a cycle
    target = copy / "src" / "loopspec" / "oracle" / "_divergence.py"
    before = _with_line(target, "def _sneak() -> object:\n    from ._judge import ledger\n\n    return ledger")
    try:
        res = _lint(copy / "src", copy / "pyproject.toml")
    finally:
        target.write_text(before)
    assert res.returncode == 1
    assert "No cycles are allowed in loopspec.oracle." in res.stdout


def test_an_oracle_stage_calling_back_into_an_earlier_one_fails(copy: Path) -> None:
    # the judge reaching back into the read stage (to re-read a line, say) breaks the oracle's pipeline
    target = copy / "src" / "loopspec" / "oracle" / "_judge" / "ledger.py"
    before = _with_line(target, "def _sneak() -> object:\n    from .._read.lines import read_lines\n\n    return read_lines")
    try:
        res = _lint(copy / "src", copy / "pyproject.toml")
    finally:
        target.write_text(before)
    assert res.returncode == 1, res.stdout
    assert "oracle stages: detect -> read -> group -> judge -> record" in res.stdout
    assert "loopspec.oracle._judge is not allowed to import loopspec.oracle._read" in res.stdout
    assert "loopspec.oracle._judge.ledger -> loopspec.oracle._read.lines" in res.stdout


def test_a_fuzz_stage_importing_an_earlier_stage_fails(copy: Path) -> None:
    # reduction reruns candidates through the runs it is handed: importing the run stage itself calls back
    target = copy / "src" / "loopspec" / "fuzz" / "_reduce.py"
    before = _with_line(target, "def _sneak() -> object:\n    from ._run import run_steps\n\n    return run_steps")
    try:
        res = _lint(copy / "src", copy / "pyproject.toml")
    finally:
        target.write_text(before)
    assert res.returncode == 1
    assert "fuzz: a campaign is a straight pipeline" in res.stdout
    assert "loopspec.fuzz._reduce is not allowed to import loopspec.fuzz._run" in res.stdout


def test_the_fuzzer_imports_no_private_name_of_another_package() -> None:
    """What two packages share is public in the lower one: ``from ..judge.loop import _x`` in the fuzzer is an
    error (``judge.loop.reply_value`` and ``protocol.executor.parse_limits`` were made public for it)."""
    import ast

    bad = []
    for path in sorted((SRC / "loopspec" / "fuzz").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module:
                bad += [f"{path.relative_to(SRC)}:{node.lineno}: {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert bad == [], bad


def test_at_most_six_modules_sit_loose_at_the_top() -> None:
    loose = sorted(p.name for p in (SRC / "loopspec").glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= 6, loose
    assert loose == ["__main__.py", "pytest_plugin.py"]


def test_every_package_says_what_it_owns_and_what_it_may_import() -> None:
    for init in sorted((SRC / "loopspec").glob("*/__init__.py")):
        doc = init.read_text().split('"""')[1]
        assert "Layer:" in doc, f"{init.relative_to(ROOT)}: the docstring names no layer"


def test_the_public_surface_is_unchanged() -> None:
    want = json.loads((Path(__file__).parent / "golden" / "public_surface.json").read_text())
    assert public_surface() == want
