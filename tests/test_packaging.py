"""The package: its runtime dependencies are what src/ imports, the pytest plugin needs no pytest to be
imported, and the wheel and sdist carry the spec (spec/ stays the one copy in git)."""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("dists")  # one worker builds the sdist and the wheel once (pytest-xdist)

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "loopspec"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

#: import name -> distribution, for every third-party module src/ may import
DISTRIBUTIONS = {
    "transitions": "transitions", "hypothesis": "hypothesis", "graphviz": "graphviz",
    "pytest": "pytest", "orjson": "orjson", "dask": "dask", "distributed": "dask", "psycopg": "psycopg",
    "pydantic_ai": "pydantic-ai-slim", "agents": "openai-agents", "openai": "openai-agents",
    "langgraph": "langgraph", "langchain_core": "langgraph",
    "smolagents": "smolagents", "llama_index": "llama-index-core",
    "autogen_agentchat": "autogen-agentchat", "autogen_core": "autogen-agentchat",  # core comes with agentchat
    "hypothesis_jsonschema": "hypothesis-jsonschema",  # arguments from declared tools' input schemas
    "mcp": "mcp", "anyio": "mcp",  # --tools 'mcp:CMD' (anyio comes with the mcp SDK)
    "google": "google-adk",  # google.adk, google.genai (google-genai comes with google-adk); google.protobuf (monitor)
    "prometheus_client": "prometheus-client", "opentelemetry": "opentelemetry-proto",  # the monitor extra
}


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def _imports() -> dict[str, set[tuple[str, bool]]]:
    """Third-party top-level module -> {(file, imported at module level outside any try)}."""
    found: dict[str, set[tuple[str, bool]]] = {}

    def visit(node: ast.AST, file: str, eager: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                names = [a.name for a in child.names] if isinstance(child, ast.Import) else (
                    [child.module] if child.module and not child.level else [])
                for n in names:
                    top = n.split(".")[0]
                    if top not in sys.stdlib_module_names and top != "loopspec":
                        found.setdefault(top, set()).add((file, eager))
            lazy = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Try | ast.If)
            visit(child, file, eager and not lazy)

    for path in SRC.rglob("*.py"):
        visit(ast.parse(path.read_text(encoding="utf-8")), str(path.relative_to(ROOT)), True)
    return found


def test_runtime_dependencies_are_what_the_installed_package_imports_eagerly() -> None:
    runtime = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert runtime == {"transitions", "hypothesis", "graphviz", "hypothesis-jsonschema"}
    imports = _imports()
    unknown = set(imports) - set(DISTRIBUTIONS)
    assert not unknown, f"src/ imports modules this test does not know: {unknown}"
    eager = {DISTRIBUTIONS[m] for m, uses in imports.items() if any(e for _, e in uses)}
    # everything imported at module level is a runtime dependency ...
    assert eager <= runtime, f"imported at module level but not a runtime dependency: {eager - runtime}"
    # ... and every runtime dependency is imported by something
    assert runtime <= {DISTRIBUTIONS[m] for m in imports}, "a runtime dependency nothing imports"
    # the optional ones are each in an extra
    extras = {_name(r) for reqs in PYPROJECT["project"]["optional-dependencies"].values() for r in reqs}
    assert {DISTRIBUTIONS[m] for m in imports} - runtime <= extras


def test_test_tools_are_not_runtime_dependencies() -> None:
    runtime = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    test = {_name(r) for r in PYPROJECT["project"]["optional-dependencies"]["test"]}
    assert {"pytest", "crosshair-tool", "hatchling", "build"} <= test
    assert not {"pytest", "crosshair-tool"} & runtime
    assert "crosshair" not in _imports(), "nothing installed imports CrossHair: it is a test tool"


def test_each_runtime_dependency_says_why_it_is_there() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = text[text.index("dependencies = ["):text.index("]", text.index("dependencies = ["))]
    lines = [ln for ln in block.splitlines()[1:] if ln.strip()]
    assert lines and all(re.match(r'^\s*"[^"]+",\s+#\s+\S.{20,}', ln) for ln in lines), lines


def test_license_is_an_spdx_string() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"


def test_the_pytest_plugin_imports_without_pytest() -> None:
    code = ("import sys; sys.modules['pytest'] = None\n"  # any `import pytest` now raises ImportError
            "import loopspec.pytest_plugin as p\n"
            "assert not hasattr(p, 'loopspec_fuzz') and 'loopspec.fuzz' not in sys.modules\n"
            "print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_the_package_imports_no_test_tool() -> None:
    code = ("import sys, loopspec, loopspec.cli, loopspec.fuzz, loopspec.oracle, loopspec.checker, loopspec.render\n"
            "from loopspec.cli import build_parser; build_parser()\n"
            "bad = sorted(m for m in ('pytest', 'crosshair', 'z3', 'jsonschema') if m in sys.modules)\n"
            "print(bad)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"})
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


# -- the built distributions -------------------------------------------------------------------------

SPEC_FILES = sorted(p.relative_to(ROOT / "spec").as_posix() for p in (ROOT / "spec").rglob("*") if p.is_file())


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist, and the wheel built from it (python -m build: hatchling, no build isolation)."""
    if shutil.which("git") and (ROOT / ".git").exists():
        # spec/ must be tracked by git: the copy in the wheel is made at build time, never committed
        tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "src/loopspec"], capture_output=True,
                                 text=True, check=True).stdout.splitlines()
        # (src/loopspec/spec/ is the Python package that loads it: only its modules are tracked there)
        assert not [f for f in tracked if f.startswith("src/loopspec/spec/") and not f.endswith(".py")], \
            "a second copy of spec/ in git"
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (wheel,) = out.glob("loopspec-*.whl")
    (sdist,) = out.glob("loopspec-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_the_wheel_carries_the_spec_byte_for_byte(dists: dict[str, Path]) -> None:
    with zipfile.ZipFile(dists["wheel"]) as z:
        names = set(z.namelist())
        # loopspec/spec/ is also the package that loads the spec: its modules sit beside the data
        inside = [n.removeprefix("loopspec/spec/") for n in names if n.startswith("loopspec/spec/")]
        carried = sorted(n for n in inside if not (n.endswith(".py") and "/" not in n))
        assert carried == SPEC_FILES
        assert {"__init__.py", "base.py", "loader.py", "writes.py"} <= set(inside)
        for f in SPEC_FILES:
            assert _digest(z.read(f"loopspec/spec/{f}")) == _digest((ROOT / "spec" / f).read_bytes()), f
        assert {"loopspec/py.typed", "loopspec/cli/__init__.py", "loopspec/spec/loop.toml",
                "loopspec/spec/SPEC.md", "loopspec/spec/bounds.toml"} <= names
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "License-Expression: Apache-2.0" in meta
    requires = [ln.split(": ", 1)[1] for ln in meta.splitlines() if ln.startswith("Requires-Dist:") and "extra ==" not in ln]
    assert sorted(_name(r) for r in requires) == ["graphviz", "hypothesis", "hypothesis-jsonschema", "transitions"]
    assert "loopspec = loopspec.cli:main" in entry and "loopspec = loopspec.pytest_plugin" in entry


def test_the_sdist_carries_the_spec_at_the_top_level(dists: dict[str, Path]) -> None:
    with tarfile.open(dists["sdist"]) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    assert {f"spec/{f}" for f in SPEC_FILES} <= names
    assert {"pyproject.toml", "README.md", "src/loopspec/spec/loader.py", "examples/python/executor.py"} <= names
    assert not any(n.startswith(("tests/", ".venv/")) or "__pycache__" in n for n in names)
    assert all(n.endswith(".py") for n in names if n.startswith("src/loopspec/spec/")), "spec data copied into src/"


def test_the_performance_page_says_how_long_the_tests_take() -> None:
    """The figures moved from the README to docs/performance.md (issue 30), with the command that re-measures them."""
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert "`python3 .ci/dev.py test -m \"not slow\"`" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| `python3 .ci/dev.py test` "))
    assert re.search(r"\| \d+(\.\d+)? min", row), row


def test_the_wheel_carries_the_typescript_adapters_and_their_lock_file(dists: dict[str, Path]) -> None:
    """The TypeScript frameworks' adapters ship as sources with package.json and the committed package-lock.json
    (installed with npm ci on first use, loopspec.frameworks._node); no node_modules, no compiled output."""
    js = ROOT / "src" / "loopspec" / "frameworks" / "js"
    want = {f"loopspec/frameworks/js/{p.relative_to(js).as_posix()}"
            for p in [js / "package.json", js / "package-lock.json", js / "tsconfig.json", *(js / "src").glob("*.ts")]}
    with zipfile.ZipFile(dists["wheel"]) as z:
        names = set(z.namelist())
        assert want <= names
        for n in want:
            assert _digest(z.read(n)) == _digest((ROOT / "src" / n).read_bytes()), n
    assert not [n for n in names if "/node_modules/" in n or n.startswith("loopspec/frameworks/js/dist/")]
