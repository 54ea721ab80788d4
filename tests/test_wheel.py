"""An installed loopspec works: the wheel, built from the sdist, installed into a fresh virtual environment
outside the source tree, runs every command from an unrelated directory, the README's Python snippet
(printing what the README shows) and a pytest run of the ``loopspec_fuzz`` fixture (the example of
docs/python.md).

What it costs: building both distributions takes about 1 s (hatchling, no build isolation: the test
extra installs it), the venv is made without pip (the outer pip installs into it with ``--python``) and
its dependencies come from pip's cache after the first run; the whole module takes about 30 s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

# one worker builds and installs the wheel once for the whole module (pytest-xdist, --dist loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "oracle"


@dataclass
class Installed:
    base: Path      # outside the source tree
    venv: Path
    work: Path      # the directory commands run from: no spec/, no src/, no pyproject.toml
    env: dict[str, str]
    wheel: Path
    seconds: dict[str, float]

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def run(self, *argv: str, stdin: str | None = None, timeout: float = 300,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), cwd=cwd or self.work, env=self.env, input=stdin, capture_output=True,
                              text=True, timeout=timeout)

    def loopspec(self, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.venv / "bin" / "loopspec"), *args, **kw)  # type: ignore[arg-type]


def _pip(venv: Path, *args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                        "--quiet", "--disable-pip-version-check", *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    seconds: dict[str, float] = {}
    base = tmp_path_factory.mktemp("installed")
    assert ROOT not in base.resolve().parents, "the install must live outside the source tree"
    t = time.perf_counter()
    dist = base / "dist"
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (wheel,) = dist.glob("loopspec-*.whl")  # built from the sdist by `build`, so the sdist is complete too
    seconds["build"] = time.perf_counter() - t
    t = time.perf_counter()
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    _pip(venv, str(wheel))
    seconds["install"] = time.perf_counter() - t
    work = base / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "PYTEST", "VIRTUAL_ENV", "LOOPSPEC", "COV_"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", PYTHONNOUSERSITE="1", NO_COLOR="1")
    return Installed(base, venv, work, env, wheel, seconds)


def test_the_installed_package_is_the_wheel_with_its_spec_and_no_test_tools(installed: Installed) -> None:
    r = installed.run(installed.python, "-c", (
        "import importlib.util as u, json, loopspec, loopspec.spec.base as s\n"
        "from loopspec.cli.demo import example_executor\n"
        "print(json.dumps({'module': loopspec.__file__, 'spec': str(s.shipped_spec_path()),\n"
        "  'executor': str(example_executor()),\n"
        "  'absent': [m for m in ('pytest', 'crosshair', 'z3') if u.find_spec(m) is None]}))"))
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    site = installed.venv.resolve()
    assert Path(info["module"]).resolve().is_relative_to(site)
    spec = Path(info["spec"])
    assert spec.is_relative_to(site) and spec.parts[-3:] == ("loopspec", "spec", "loop.toml")
    assert info["absent"] == ["pytest", "crosshair", "z3"]  # none is needed to run loopspec
    # the example executor travels in the wheel, so an installed `loopspec demo` fuzzes it (section 5)
    assert Path(info["executor"]).parts[-3:] == ("loopspec", "examples", "executor.py")
    assert Path(info["executor"]).read_bytes() == (ROOT / "examples" / "python" / "executor.py").read_bytes()


def test_spec(installed: Installed) -> None:
    r = installed.loopspec("spec")
    assert r.returncode == 0, r.stderr
    m = re.match(r"loopspec \S+: \d+ states, (\d+) transitions, .* (\d+) rules$", r.stdout.splitlines()[0])
    assert m and int(m.group(1)) > 0 and int(m.group(2)) > 0, r.stdout.splitlines()[0]
    j = json.loads(installed.loopspec("spec", "--format", "json").stdout)
    assert j["rules"] and j["problems"] == []


def test_vectors(installed: Installed) -> None:
    r = installed.loopspec("vectors")
    assert r.returncode == 0, r.stderr
    m = re.search(r"^(\d+)/(\d+) vectors pass$", r.stdout, re.M)
    assert m and m.group(1) == m.group(2) and int(m.group(1)) > 100


@pytest.fixture(scope="module")
def verified(installed: Installed) -> dict[str, object]:
    """The JSON report of ``loopspec verify`` at a small bound; its coverage is in ``verify/``."""
    r = installed.loopspec("verify", "--bound", "batch.calls=2", "--bound", "loop.calls=2", "--format", "json",
                           "--out", "verify")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_verify_at_a_small_bound(installed: Installed, verified: dict[str, object]) -> None:
    assert verified["passed"] and str(verified["bounds"]).endswith("loopspec/spec/bounds.toml")
    assert (installed.work / "verify" / "coverage.json").is_file()
    r = installed.loopspec("verify", "--scope", "batch", "--bound", "batch.calls=2")
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr


def test_diagram_mermaid_and_svg(installed: Installed, verified: dict[str, object]) -> None:
    formats = ["mermaid", "svg"] if shutil.which("dot") else ["mermaid"]
    r = installed.loopspec("diagram", *(a for f in formats for a in ("--format", f)), "--out", "diagrams")
    assert r.returncode == 0, r.stderr
    d = installed.work / "diagrams"
    assert (d / "machine.mmd").read_text().startswith(("stateDiagram", "---", "%%"))
    if "svg" in formats:
        assert b"<svg" in (d / "machine.svg").read_bytes()
        assert (d / "check-order.svg").is_file()
    r = installed.loopspec("diagram", "--format", "mermaid", "--coverage", "verify/coverage.json", "--out", "cov")
    assert r.returncode == 0 and (installed.work / "cov" / "machine-coverage.mmd").is_file(), r.stderr


def test_check_on_golden_ledgers(installed: Installed) -> None:
    for name in ("ledger-pass.ndjson", "ledger-fail-reexecute-replay.ndjson"):
        shutil.copy(GOLDEN / name, installed.work / name)
    r = installed.loopspec("check", "ledger-pass.ndjson", "--validate")  # --validate reads the packaged schema
    assert r.returncode == 0, r.stdout + r.stderr
    r = installed.loopspec("check", "ledger-fail-reexecute-replay.ndjson", "--format", "json")
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["summary"]["violate"] == 1


def test_fuzz_and_replay_the_example_executor(installed: Installed) -> None:
    ex = installed.base / "executor"
    ex.mkdir()
    shutil.copy(ROOT / "examples" / "python" / "executor.py", ex / "executor.py")
    impl = f"{installed.python} {ex / 'executor.py'}"
    r = installed.loopspec("fuzz", "--impl", impl, "--max-examples", "20", "--seed", "1", "--out", "fuzz-ok")
    assert r.returncode == 0 and "no divergence" in r.stdout, r.stdout + r.stderr
    r = installed.loopspec("fuzz", "--impl", impl, "--max-examples", "10", "--seed", "1", "--out", "fuzz-json",
                           "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads(r.stdout)  # stdout is one JSON document
    assert summary["format"] == "loopspec-fuzz-summary/1" and summary["ok"] and summary["findings"] == []
    assert summary["seed"] == 1 and summary["coverage"] and summary["parameters"]
    # the campaign's spec coverage, drawn on the machine
    r = installed.loopspec("diagram", "--format", "mermaid", "--coverage", "fuzz-json/coverage.json", "--out", "fcov")
    assert r.returncode == 0 and (installed.work / "fcov" / "machine-coverage.mmd").is_file(), r.stderr
    bug = f"{impl} --bug replay-reexecutes"
    r = installed.loopspec("fuzz", "--impl", bug, "--max-examples", "50", "--seed", "1", "--shrink-time", "5",
                           "--quiet", "--out", "fuzz-bug")
    assert r.returncode == 1, r.stdout + r.stderr
    # case files are named by cause (issue 27): R6-replay-reexecuted.json beside its .path.json and .txt
    (case,) = (installed.work / "fuzz-bug").glob("R6-replay-reexecuted.json")
    assert installed.loopspec("replay", str(case), "--impl", bug).returncode == 1
    assert installed.loopspec("replay", str(case), "--impl", impl).returncode == 0


def test_serve_answers_a_batch(installed: Installed) -> None:
    p = subprocess.Popen([str(installed.venv / "bin" / "loopspec"), "serve"], cwd=installed.work, env=installed.env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdin is not None and p.stdout is not None

    def send(msg: dict[str, object]) -> None:
        p.stdin.write(json.dumps(msg) + "\n")  # type: ignore[union-attr]
        p.stdin.flush()  # type: ignore[union-attr]

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
        init = json.loads(p.stdout.readline())
        assert init["id"] == 1 and init["result"]["capabilities"]["batch"] is True
        tools = [{"name": "length", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]
        calls = [{"id": "c1", "name": "length", "arguments": {"text": "Java"}},
                 {"id": "c1", "name": "length", "arguments": {"text": "Java"}},
                 {"id": "c2", "name": "shell", "arguments": {}}]
        send({"jsonrpc": "2.0", "id": 2, "method": "batch.run",
              "params": {"tools": tools, "budget": 1, "mode": "continue", "principal": "alice", "calls": calls}})
        ask = json.loads(p.stdout.readline())  # the engine asks the harness to run the tool, once
        assert ask["method"] == "tool.execute" and ask["params"]["arguments"] == {"text": "Java"}
        assert ask["params"]["context"] == {"principal": "alice"}
        send({"jsonrpc": "2.0", "id": ask["id"], "result": {"output": 4}})
        res = json.loads(p.stdout.readline())
        assert res["id"] == 2 and res["result"]["executed"] == 1 and res["result"]["aborted"] is None
        got = [(a["id"], a["status"], a.get("output", a.get("code"))) for a in res["result"]["results"]]
        assert got == [("c1", "ok", 4), ("c1", "ok", 4), ("c2", "error", "UNKNOWN_TOOL")]
    finally:
        p.stdin.close()
        assert p.wait(timeout=30) == 0, p.stderr.read() if p.stderr else ""
        p.stdout.close()
        if p.stderr:
            p.stderr.close()


def test_demo_engine_sections(installed: Installed) -> None:
    r = installed.loopspec("demo", "--engine-only")
    assert r.returncode == 0 and "demo: everything matches the spec" in r.stdout, r.stdout[-2000:] + r.stderr


def readme_snippet() -> tuple[str, str]:
    """The README's Python snippet and the output the README shows for it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Use it from Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    shown = re.search(r"```text\n(.*?)```", section, re.S)
    assert code and shown and code.end() < shown.start()
    return code.group(1), shown.group(1)


def test_the_readme_snippet_prints_what_the_readme_shows(installed: Installed) -> None:
    code, shown = readme_snippet()
    (installed.work / "snippet.py").write_text(code, encoding="utf-8")
    r = installed.run(installed.python, "snippet.py")
    assert r.returncode == 0, r.stderr
    assert r.stdout == shown


def test_the_pytest_fixture_with_the_adapter_of_docs_python_md(installed: Installed) -> None:
    """The fixture run of docs/python.md (its my_adapter.py and test_my_adapter.py), from the installed wheel."""
    from tests.test_python_docs import extract

    _pip(installed.venv, "pytest")  # the user's own test runner: not a dependency of loopspec
    files, _ = extract()
    for name in ("my_adapter.py", "test_my_adapter.py"):
        (installed.work / name).write_text(files[name], encoding="utf-8")
    r = installed.run(installed.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_adapter.py")
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]


def test_the_typescript_adapters_compile_and_run_from_the_installed_wheel(installed: Installed) -> None:
    """The wheel's adapters (frameworks/js: sources, package.json, package-lock.json) are what `loopspec frameworks
    install js` compiles and `--impl ai-sdk` runs, outside the source tree. The npm packages come from this
    checkout's cache (installed with npm ci by .ci/dev.py), so only the compile step runs here."""
    if shutil.which("node") is None:
        pytest.skip("Node.js is not on PATH")
    from loopspec.frameworks._node import ensure_installed

    deps = ensure_installed(quiet=True).parent  # this checkout's installed packages (same pins as the wheel's)
    cache = installed.base / "js-cache"
    mine = cache / deps.name
    mine.mkdir(parents=True)
    for f in ("package.json", "package-lock.json", ".complete"):
        shutil.copyfile(deps / f, mine / f)
    (mine / "node_modules").symlink_to(deps / "node_modules")
    env = {**installed.env, "LOOPSPEC_JS_CACHE": str(cache)}
    r = subprocess.run([str(installed.venv / "bin" / "loopspec"), "frameworks", "install", "js"], cwd=installed.work,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "compiling the TypeScript adapters" in r.stderr and Path(r.stdout.strip()).parent == mine
    assert (Path(r.stdout.strip()) / "dist" / "ai_sdk.js").is_file()
    r = subprocess.run([str(installed.venv / "bin" / "loopspec"), "fuzz", "--impl", "ai-sdk", "--mode", "loop",
                        "--max-examples", "20", "--seed", "1", "--shrink-time", "2", "--quiet", "--out", "ts-fuzz"],
                       cwd=installed.work, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "distinct cause(s) of divergence" in r.stdout, r.stdout + r.stderr  # found


def test_the_readme_quickstart_runs_from_the_installed_wheel(installed: Installed) -> None:
    """The README's quickstart, every command in order, in an empty directory, with only the wheel installed (and
    pytest, which its last step says to install): issue 30's "from pip install to a fuzzed implementation"."""
    from tests.test_readme_quickstart import run_quickstart

    _pip(installed.venv, "pytest")
    work = installed.base / "quickstart"
    work.mkdir()
    run_quickstart(work, installed.env)
