"""The command line: documented exit codes, one-line errors, no tracebacks on bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loopspec._spec import default_spec_path
from loopspec.cli import main
from loopspec.frameworks import installed


def loopspec(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loopspec", *args], capture_output=True, text=True, timeout=300)


def test_demo_shows_the_whole_product(tmp_path: Path) -> None:
    r = loopspec("demo", "--no-ledger", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    for seed in ("seed-replay-budget-1", "seed-conflict-different-arguments", "seed-budget-0-one-call",
                 "seed-unknown-tool-shell", "seed-invalid-arguments"):
        assert seed in r.stdout
    assert "matches spec" in r.stdout and "DIFFERS" not in r.stdout
    assert "FINAL_ANSWER" in r.stdout and "MAX_REQUESTS" in r.stdout
    assert "PASS: all invariants hold" in r.stdout  # the model checker
    assert "divergence R6" in r.stdout  # the fuzzer on a buggy executor
    assert "R6 replay-reexecuted" in r.stdout  # the oracle on a tampered ledger
    assert (tmp_path / "diagrams" / "machine-trace.dot").is_file()
    assert "== 8. Real agent frameworks" in r.stdout
    if installed("openai-agents"):  # CI installs the frameworks extra
        assert "loopspec fuzz --impl openai-agents --profile openai-agents" in r.stdout
        assert "DIVERGES: R3" in r.stdout or "is not replayed" in r.stdout
    assert "everything matches the spec" in r.stdout


def test_spec_command_validates_the_shipped_spec(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec"]) == 0
    assert "T28" in capsys.readouterr().out


def test_a_malformed_spec_is_exit_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "loop.toml"
    bad.write_text(default_spec_path().read_text().replace('dest = "validated"\nwhen = ["id_fresh"]',
                                                           'dest = "limbo"\nwhen = ["id_fresh"]'))
    r = loopspec("spec", "--file", str(bad))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "transition T14: dest: unknown state 'limbo'" in r.stderr and "loop.toml:" in r.stderr


def test_missing_spec_file_is_exit_2(tmp_path: Path) -> None:
    r = loopspec("spec", "--file", str(tmp_path / "nope.toml"))
    assert r.returncode == 2 and "cannot read the spec" in r.stderr and "Traceback" not in r.stderr


def test_vectors_pass_and_a_broken_vector_file_is_exit_1_or_2(tmp_path: Path) -> None:
    assert loopspec("vectors").returncode == 0
    wrong = tmp_path / "v.json"
    wrong.write_text('{"format": "loopspec-batch-vectors/1", "toolsets": {}, "cases": [{"id": "x", "rules": ["R9"],'
                     ' "tools": [], "budget": 0, "mode": "abort", "calls": [],'
                     ' "expect": {"results": [], "executed": 1, "executions": [], "aborted": null}}]}')
    r = loopspec("vectors", "--file", str(wrong))
    assert r.returncode == 1 and "executed: expected 1, got 0" in r.stdout
    garbage = tmp_path / "g.json"
    garbage.write_text("{not json")
    r = loopspec("vectors", "--file", str(garbage))
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_no_command_is_usage() -> None:
    assert main([]) == 2
