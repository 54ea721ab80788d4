"""``loopspec check`` on the command line: exit codes, one-line errors, parallel files, diagrams,
transcripts' detection and importers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from loopspec.oracle import read_text_input
from tests.oracle_golden import GOLDEN, anthropic_cases, chat_cases, responses_cases
from tests.oracle_mutations import MUTATIONS, mutated, scenarios

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "spec" / "schema"


def check(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loopspec", "check", *args], capture_output=True, text=True,
                          input=stdin.decode() if stdin is not None else None, timeout=120)


def nd(evs: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(e) + "\n" for e in evs)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("ledgers")
    scen = scenarios()
    out = {}
    for name in ("merchants", "budget", "batch"):
        out[name] = d / f"{name}.ndjson"
        out[name].write_text(nd(scen[name]))
    out["bad"] = d / "bad.ndjson"
    out["bad"].write_text(nd(mutated(MUTATIONS[0], scen)))
    return out


def test_exit_codes_0_1_2(files: dict[str, Path], tmp_path: Path) -> None:
    ok = check(str(files["merchants"]))
    assert ok.returncode == 0 and ok.stdout.splitlines()[-1].startswith("checked 1 run, ")
    bad = check(str(files["bad"]), str(files["merchants"]))
    assert bad.returncode == 1 and "R11 answer-missing" in bad.stdout and "1 conform, 1 violate (R11 ×1)" in bad.stdout
    missing = check(str(files["merchants"]), str(tmp_path / "nope.ndjson"))
    assert missing.returncode == 2 and missing.stderr.strip().endswith("nope.ndjson: no such file")
    assert "1 conform" in missing.stdout and "Traceback" not in missing.stderr


def test_unreadable_input_wins_over_violations(files: dict[str, Path], tmp_path: Path) -> None:
    """Exit 2 when any input could not be read, even when other runs violate: the check is incomplete."""
    p = tmp_path / "mixed.ndjson"
    p.write_text(files["bad"].read_text() + "{oops\n")
    r = check(str(p))
    assert r.returncode == 2
    assert "R11" in r.stdout and f"{p}:" in r.stderr and ": not JSON:" in r.stderr


def test_a_50_mb_line_is_skipped_with_one_line(files: dict[str, Path], tmp_path: Path) -> None:
    p = tmp_path / "huge.ndjson"
    with p.open("w") as fh:
        fh.write(files["merchants"].read_text())
        fh.write('{"v":1,"run":"big","seq":1,"t":0,"type":"run_started","pad":"' + "x" * (50 * 1024 * 1024) + '"}\n')
    r = check(str(p))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1
    assert ":38: run 'big': line longer than 16777216 bytes (the limit; --max-line-bytes raises it)" in r.stderr
    assert "1 conform" in r.stdout and "1 unreadable" in r.stdout


def test_deep_nesting_and_wrong_types_name_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "deep.ndjson"
    p.write_text("[" * 100000 + "]" * 100000 + "\n" + json.dumps({"v": 1, "run": 3}) + "\n")
    r = check(str(p), "--input-format", "ledger")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0].endswith(":1: nested more than 128 levels deep (the limit) (column 129)") and ':2: a ledger event needs "run"' in lines[1]


def test_stdin(files: dict[str, Path]) -> None:
    r = check("-", stdin=files["merchants"].read_bytes())
    assert r.returncode == 0 and "merchants (ledger, -:1-" in r.stdout


def test_jobs_gives_the_same_report(files: dict[str, Path]) -> None:
    args = [str(files[k]) for k in ("merchants", "bad", "budget", "batch")]
    one = check(*args, "--format", "json")
    two = check(*args, "--format", "json", "--jobs", "2")
    assert one.returncode == two.returncode == 1
    assert json.loads(one.stdout) == json.loads(two.stdout)


def test_json_report_shape(files: dict[str, Path]) -> None:
    r = check(str(files["bad"]), str(files["merchants"]), "--format", "json")
    doc = json.loads(r.stdout)
    assert set(doc) == {"runs", "inputErrors", "summary", "assumptions", "next"}
    assert doc["next"] == f"loopspec check {files['bad']} {files['merchants']} --quiet --out loopspec-out/check"  # as the text's next: line (issue 30)
    bad = next(x for x in doc["runs"] if x["verdict"] == "violates")
    v = bad["violation"]
    assert {"rule", "kind", "invariant", "invariants", "checkedBy", "index", "transition", "expected", "observed",
            "explanation", "at"} <= set(v)
    assert v["at"]["line"] >= bad["lines"][0] and v["at"]["event"] == bad["prefix"]["events"]
    assert v["explanation"].startswith("Let a run") and "\nThen " in v["explanation"]
    assert set(bad["checks"]) == {"verified", "assumed", "notWitnessed"} and "R4" in bad["checks"]["assumed"]
    assert doc["assumptions"]["ledger"]["assumed"]["R4"] and doc["summary"]["violationsByRule"] == {"R11": 1}


def test_diagram_draws_the_failing_step(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "diag"
    r = check(str(files["bad"]), "--diagram", str(out))
    assert r.returncode == 1
    [d] = list(out.iterdir())
    path = json.loads((d / "path.json").read_text())
    jsonschema.validate(path, json.loads((SCHEMA_DIR / "transition-path.schema.json").read_text()))
    assert path["path"][path["failed"]] == "T21"  # the answer the run did not give
    assert {"path.json", "machine-trace.dot", "machine-trace.mmd", "machine-trace.md"} <= {p.name for p in d.iterdir()}
    shown = subprocess.run([sys.executable, "-m", "loopspec", "diagram", "--trace", str(d / "path.json"), "--format",
                            "dot", "--out", str(tmp_path / "again")], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr


def test_event_after_terminal_amends_a_conforming_run(files: dict[str, Path], tmp_path: Path) -> None:
    evs = scenarios()["batch"]
    extra = {**evs[-1], "seq": evs[-1]["seq"] + 1}
    p = tmp_path / "after.ndjson"
    p.write_text(nd([*evs, extra]))
    r = check(str(p), "--format", "json")
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and [x["verdict"] for x in doc["runs"]] == ["conforms", "violates"]
    assert doc["runs"][1]["amends"] is True and doc["runs"][1]["violation"]["rule"] == "R21"
    assert doc["summary"]["conform"] == 0 and doc["summary"]["violate"] == 1 and doc["summary"]["runs"] == 1


def test_allow_incomplete_and_validate(files: dict[str, Path], tmp_path: Path) -> None:
    evs = scenarios()["merchants"][:-1]
    p = tmp_path / "cut.ndjson"
    p.write_text(nd(evs))
    assert check(str(p)).returncode == 1
    assert check(str(p), "--allow-incomplete").returncode == 0
    full = scenarios()["merchants"]
    full[3]["extra"] = 1
    q = tmp_path / "extra.ndjson"
    q.write_text(nd(full))
    assert check(str(q)).returncode == 0  # the hot path reads only what it checks
    v = check(str(q), "--validate")
    assert v.returncode == 2 and ".extra: not a field of" in v.stderr


# --------------------------------------------------------------------------------------------
# Transcripts
# --------------------------------------------------------------------------------------------


def verdict_of(doc: Any, fmt: str = "auto") -> tuple[str, str | None, str]:
    res = read_text_input(json.dumps(doc, indent=1).encode(), input_format=fmt)
    [r] = res.records
    return r.verdict, (r.violation.rule if r.violation else None), r.input


def test_detection_per_format() -> None:
    assert verdict_of(chat_cases()["chat-pass.json"]) == ("conforms", None, "openai-chat")
    assert verdict_of(responses_cases()["responses-pass.json"]) == ("conforms", None, "openai-responses")
    assert verdict_of(anthropic_cases()["anthropic-pass.json"]) == ("conforms", None, "anthropic")


def test_chat_arguments_are_a_json_string() -> None:
    """function.arguments is a JSON string: the same content written differently is the same call (R6)."""
    doc = chat_cases()["chat-pass.json"]
    doc["messages"][7]["tool_calls"][0]["function"]["arguments"] = '{ "merchantId" : "1001" }'
    assert verdict_of(doc)[:2] == ("conforms", None)
    doc["messages"][7]["tool_calls"][0]["function"]["arguments"] = '{"merchantId": "9"}'
    assert verdict_of(doc)[:2] == ("violates", "R7")


def test_responses_message_beside_calls_is_not_a_final_answer() -> None:
    items = [{"role": "user", "content": "x"},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "1"}]
    assert verdict_of({"input": items}) == ("conforms", None, "openai-responses")


def test_anthropic_is_error_decides_between_refusal_and_reuse() -> None:
    doc = anthropic_cases()["anthropic-fail-conflict.json"]
    assert verdict_of(doc)[:2] == ("violates", "R7")
    doc["messages"][4]["content"][0]["is_error"] = True
    assert verdict_of(doc)[:2] == ("conforms", None)


def test_unreadable_conversation_names_the_path() -> None:
    doc = {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": "nope"}]}
    res = read_text_input(json.dumps(doc, indent=1).encode(), input_format="openai-chat")
    [r] = res.records
    assert r.verdict == "unreadable" and r.error == "messages[1].tool_calls: expected a list" and r.error_line == 7  # the line of its "{"
    assert res.summary.exit_code == 2


def test_golden_corpus_is_present() -> None:
    assert (GOLDEN / "MANIFEST.json").is_file()


# --------------------------------------------------------------------------------------------
# The exit code does not depend on what reads the report (issue 28; issue 32 item 8)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def many_violations(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger whose report is far larger than a pipe's buffer: 2,000 copies of ledger-mixed.ndjson's runs (one
    conforming, one violating R11 each), run ids made unique."""
    lines = (GOLDEN / "ledger-mixed.ndjson").read_text(encoding="utf-8").splitlines()
    out = []
    for k in range(2000):
        for line in lines:
            ev = json.loads(line)
            ev["run"] = f"{ev['run']}-{k}"
            out.append(json.dumps(ev))
    p = tmp_path_factory.mktemp("big") / "many.ndjson"
    p.write_text("\n".join(out) + "\n", encoding="utf-8")
    return p


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_violation_exits_1_when_the_reader_closes_the_pipe(many_violations: Path, fmt: str) -> None:
    """`loopspec check FILE | head -1`: the reader takes one line and closes the pipe; the check still runs to
    the end and exits 1 (a broken pipe used to be mapped to success)."""
    proc = subprocess.Popen([sys.executable, "-m", "loopspec", "check", str(many_violations), "--format", fmt],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what head does after its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1, err
    assert first.strip() and "Traceback" not in err and err == ""  # a reader going away is no error to report


def test_a_conforming_check_exits_0_when_the_reader_closes_the_pipe() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "loopspec", "check", str(GOLDEN / "ledger-pass.ndjson")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0, proc.stderr.read()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize(("name", "code"), [("ledger-mixed.ndjson", 1), ("ledger-pass.ndjson", 2)])
def test_a_report_that_cannot_be_written_is_said_and_never_an_internal_error(name: str, code: int) -> None:
    """`check > /dev/full` and `check >&-`: the check runs to the end, says on stderr that its report was lost, and
    exits 1 when it found a violation, else 2 — never 70 (internal error)."""
    for redirect in ("> /dev/full", ">&-"):
        r = subprocess.run(["sh", "-c", f'exec "$0" -m loopspec check "$1" {redirect}', sys.executable,
                            str(GOLDEN / name)], capture_output=True, text=True, timeout=120)
        assert r.returncode == code, (redirect, r.stderr)
        assert "internal error" not in r.stderr and "Traceback" not in r.stderr
        why = "No space left on device" if "full" in redirect else "stdout is closed"
        assert r.stderr.startswith(f"loopspec check: error: the report could not be written to stdout ({why}); "
                                   "the check ran to the end: checked "), r.stderr
