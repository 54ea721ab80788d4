"""The command line: documented exit codes, one-line errors, no tracebacks on bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loopspec.cli import main
from loopspec.frameworks import installed
from loopspec.spec.base import default_spec_path

GOLDEN = Path(__file__).resolve().parent / "golden" / "oracle"


def loopspec(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loopspec", *args], capture_output=True, text=True, timeout=300)


def _printed_ledger(stdout: str) -> list[str]:
    """The ledger lines section 2 prints (indented, cut at 160 characters)."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if "The run ledger of run" in ln) + 1
    out = []
    for ln in lines[start:]:
        if not ln.startswith("  {"):
            break
        out.append(ln[2:])
    return out


def test_demo_shows_the_whole_product(tmp_path: Path) -> None:
    r = loopspec("demo", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    # the oracle (section 6) checks the very run whose ledger section 2 printed
    printed = _printed_ledger(r.stdout)
    checked = (tmp_path / "runs.ndjson").read_text().splitlines()
    assert len(printed) == len(checked) > 20
    assert all(c == p or (p.endswith("…") and c.startswith(p[:-1])) for p, c in zip(printed, checked, strict=True))
    assert f"ok   demo-merchants (ledger, {tmp_path / 'runs.ndjson'}:1-{len(checked)}" in r.stdout
    assert "FAIL demo-merchants (ledger, " in r.stdout  # its tampered copy
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
    # issue 30: the demo explains itself: what each section shows, the frameworks it really runs (counted from the
    # registry), the profile choices it expects with their evidence grade, and where to go next
    from loopspec.frameworks import FRAMEWORKS

    assert r.stdout.count("\nShows: ") == 8
    present = [n for n in FRAMEWORKS if installed(n)]
    assert f"{len(present)} of the {len(FRAMEWORKS)} frameworks loopspec can fuzz are installed here" in r.stdout
    assert len(re.findall(r"^loopspec fuzz --impl \S+ --profile ", r.stdout, re.M)) == len(present)
    if present:
        assert re.search(r"\(strict: [\w-]+; evidence: (documented|source|observed)\)", r.stdout)
        assert sum(r.stdout.count(f"  → {n}: ") for n in present) == len(present)
    assert r.stdout.rstrip().splitlines()[-4] == "Where to go next:"


def test_demo_reports_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--engine-only", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # the walkthrough text is not printed: stdout is one document
    assert doc["format"] == "loopspec-demo/1" and doc["ok"] is True
    sections = doc["sections"]
    assert set(sections) == {"batch", "loop", "budget"} and all(s["ok"] for s in sections.values())
    assert sections["batch"]["differ"] == [] and sections["batch"]["vectors"] == sections["batch"]["match"] > 100
    assert sections["loop"]["run"] == "demo-merchants" and sections["loop"]["stopReason"] == "FINAL_ANSWER"
    assert sections["budget"]["stopReason"] == "MAX_REQUESTS" and sections["budget"]["executed"] == 1


def test_demo_tampers_the_replay_of_its_own_run() -> None:
    from loopspec.cli.demo import tamper_replay
    from loopspec.oracle import read_text_input

    ledger = (GOLDEN / "ledger-pass.ndjson").read_text()
    one = [ln for ln in ledger.splitlines() if '"run":"replay-conflict"' in ln]
    assert any('"call_replayed"' in ln for ln in one)
    good = read_text_input("\n".join(one).encode() + b"\n")
    bad = read_text_input(tamper_replay("\n".join(one) + "\n").encode())
    assert [r.verdict for r in good.records] == ["conforms"]
    (rec,) = bad.records
    assert rec.violation is not None and rec.violation.rule == "R6"


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


def test_vectors_run_the_loop_vectors_too_with_section_6s_writes(tmp_path: Path) -> None:
    """`loopspec vectors --loop` (or a loop vector file, told by its format) runs the loop vectors, whose write-tool
    cases cover OUTCOME_UNKNOWN (R42, T34) and UNRECONCILED (R46, T35)."""
    from loopspec.engine.vectors import conformance_dir

    r = loopspec("vectors", "--loop", "--case", "loop-write-outcome-unknown-is-an-answer",
                 "--case", "loop-write-outcome-unknown-aborts-in-abort-mode")
    assert r.returncode == 0 and "2/2 vectors pass" in r.stdout, r.stdout + r.stderr
    doc = json.loads((conformance_dir() / "loop.json").read_text(encoding="utf-8"))
    case = next(c for c in doc["cases"] if c["id"] == "loop-write-outcome-unknown-is-an-answer")
    case["expect"]["stopReason"], case["expect"]["status"] = "FINAL_ANSWER", "COMPLETED"  # the old ending
    doc["cases"] = [case]
    f = tmp_path / "loop.json"
    f.write_text(json.dumps(doc))
    r = loopspec("vectors", "--file", str(f))
    assert r.returncode == 1 and 'stopReason: expected "FINAL_ANSWER", got "UNRECONCILED"' in r.stdout, r.stdout


def test_no_command_is_usage() -> None:
    assert main([]) == 2
