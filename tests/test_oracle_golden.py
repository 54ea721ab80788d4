"""The oracle's golden corpus: exact text and JSON reports for must-pass and must-fail inputs.

Regenerate with ``pytest tests/test_oracle_golden.py --overwrite`` (rewrites the inputs from the
reference engine and the mutations, and every expected report). The manifest's exit codes and rules
are checked either way: regenerating can change wording, never a verdict.

The real frameworks' recordings (``rec-*``: OpenTelemetry exports and message histories of pydantic-ai, the
Agents SDK and LangGraph runs) are listed in ``RECORDINGS.json`` and rewritten by
``python -m tests.telemetry_recordings`` (then ``--overwrite`` here for their reports).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from loopspec.cli import main
from tests.oracle_golden import GOLDEN, write_inputs

EXPECTED = GOLDEN / "expected"


def run_check(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(GOLDEN)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["check", *args])
    finally:
        os.chdir(cwd)
    return code, out.getvalue(), err.getvalue()


_WRITTEN: list[list[dict[str, Any]]] = []


def _manifest(overwrite: bool) -> list[dict[str, Any]]:
    recordings = json.loads((GOLDEN / "RECORDINGS.json").read_text(encoding="utf-8"))
    if overwrite:
        if not _WRITTEN:
            _WRITTEN.append(write_inputs())
        return _WRITTEN[0] + recordings
    return json.loads((GOLDEN / "MANIFEST.json").read_text(encoding="utf-8")) + recordings


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "name" in metafunc.fixturenames:
        cases = _manifest(bool(metafunc.config.getoption("--overwrite")))
        metafunc.parametrize("name", [c["file"] for c in cases])


@pytest.fixture(scope="module")
def manifest(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return _manifest(bool(request.config.getoption("--overwrite")))


def test_golden_report(name: str, manifest: list[dict[str, Any]], request: pytest.FixtureRequest) -> None:
    case = next(c for c in manifest if c["file"] == name)
    fmt = ["--input-format", case["inputFormat"]] if case["inputFormat"] != "auto" else []
    code, text, err = run_check([name, *fmt])
    jcode, jtext, _ = run_check([name, *fmt, "--format", "json"])
    report = json.loads(jtext)
    assert code == jcode == case["exit"], (code, err)
    assert report["summary"]["exitCode"] == case["exit"]
    rules = [r["violation"]["rule"] for r in report["runs"] if r.get("violation")]
    assert sorted(set(rules)) == sorted(case["rules"]), rules
    if case["exit"] == 2:
        assert err.strip() and all(line.startswith("loopspec check: error: ") for line in err.splitlines())
        assert "Traceback" not in err
    shown = text + (f"--- stderr ---\n{err}" if err else "") + f"--- exit {code} ---\n"
    txt, js = EXPECTED / f"{name}.txt", EXPECTED / f"{name}.json"
    if request.config.getoption("--overwrite"):
        EXPECTED.mkdir(parents=True, exist_ok=True)
        txt.write_text(shown, encoding="utf-8")
        js.write_text(jtext, encoding="utf-8")
        return
    assert shown == txt.read_text(encoding="utf-8")
    assert jtext == js.read_text(encoding="utf-8")


def test_every_falsifiable_rule_has_a_must_fail_ledger(manifest: list[dict[str, Any]]) -> None:
    """Every rule a ledger lets the oracle verify is broken by at least one must-fail ledger case.

    Not falsifiable from a ledger: R0 (the machine's own shape), R1 (a check-order break is reported
    under the rule of the check that should have decided), R24 (the hook's answers are inputs), and
    the rules the ledger does not witness (R15, R25, R47)."""
    from loopspec.judge.verdict import default_spec
    from loopspec.oracle._records import LEDGER_NOT_WITNESSED
    from loopspec.oracle._tables import tables_for

    rules = set(tables_for(default_spec()).rule_ids) - {"R0", "R1", "R24"} - set(LEDGER_NOT_WITNESSED)
    covered = {r for c in manifest if c["file"].startswith(("ledger-fail-", "ledger-concurrent-fail-")) for r in c["rules"]}
    assert rules <= covered, sorted(rules - covered)


def test_transcript_rules_are_all_represented(manifest: list[dict[str, Any]]) -> None:
    from loopspec.oracle._judge.conversation import WITNESSED

    witnessed = {r for w in WITNESSED.values() for r in w}
    covered = {r for c in manifest if not c["file"].startswith(("ledger", "traces")) for r in c["rules"]}
    assert witnessed <= covered, sorted(witnessed - covered)


def test_every_recording_format_has_real_must_pass_and_must_fail(manifest: list[dict[str, Any]]) -> None:
    """Each telemetry and history format has a must-pass and a must-fail recording of a real framework."""
    from loopspec.oracle import check_file

    kinds: dict[str, set[int]] = {}
    for c in manifest:
        if c["file"].startswith("rec-"):
            fmt = check_file(str(GOLDEN / c["file"])).records[0].input
            kinds.setdefault(fmt, set()).add(c["exit"])
    assert kinds == {f: {0, 1} for f in ("otlp-json", "otel-console", "pydantic-ai", "langchain",
                                         "openai-responses", "openai-agents-trace")}, kinds


def test_golden_inputs_are_current(manifest: list[dict[str, Any]], tmp_path: Path) -> None:
    """The committed ledgers are what the engine and the mutations produce today."""
    from tests.oracle_mutations import MUTATIONS, mutated, scenarios

    scen = scenarios()
    for m in MUTATIONS[:3]:
        want = "".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in mutated(m, scen))
        assert (GOLDEN / f"ledger-fail-{m.name}.ndjson").read_text(encoding="utf-8") == want
