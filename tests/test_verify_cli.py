"""The `loopspec verify` command: exit codes, JSON, --out files (coverage overlay format,
counterexample, trace), the corpus, bad usage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopspec.checker.bounds import default_bounds_path, load_bounds
from loopspec.checker.counterexample import replay
from loopspec.checker.mutants import SURVIVORS, by_name
from loopspec.cli import main

SMALL = ["--bound", "batch.calls=2", "--bound", "batch.ids=2"]  # the loop at its default bound (T08 needs 3 calls)


def test_verify_passes_at_a_small_bound_and_writes_coverage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["verify", *SMALL, "--format", "json", "--out", str(tmp_path)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["passed"] and out["violation"] is None
    cov = json.loads((tmp_path / "coverage.json").read_text())
    assert set(cov) == {"transitions", "runs"} and all(k.startswith("T") for k in cov["transitions"])
    assert not (tmp_path / "counterexample.json").exists()
    assert {p.name for p in tmp_path.iterdir()} >= {"verify.json", "coverage.json", "coverage-batch.json",
                                                    "coverage-loop.json"}


def test_one_scope_is_judged_against_what_that_scope_can_reach(capsys: pytest.CaptureFixture[str]) -> None:
    """`verify --scope batch` (docs/verify.md): the loop-only transitions (the deadline, the model, rounds,
    cancellation) are not missing from a batch exploration, so every invariant holding is a pass."""
    rc = main(["verify", "--scope", "batch", "--bound", "batch.calls=4", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    batch = load_bounds().scope("batch").reaches
    assert batch is not None and "T01" not in batch and "T28" not in batch
    assert rc == 0 and out["passed"] and out["coverage"]["reachable"] == list(batch)
    assert out["coverage"]["shortfall"] == [] and out["coverage"]["complete"]
    assert "T01" in out["unreached"]  # still listed: not reached, but not reachable by this scope either


def test_a_coverage_shortfall_is_reported_but_never_exits_like_a_found_bug(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["verify", "--scope", "loop", "--bound", "loop.calls=2"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "coverage shortfall: T08 not reached within these bounds" in text and "not a violation" in text
    assert "PASS: all invariants hold" in text and "FAIL" not in text
    rc = main(["verify", "--scope", "loop", "--bound", "loop.calls=2", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["passed"] and out["coverage"]["shortfall"] == ["T08"] and not out["coverage"]["complete"]


def test_coverage_is_not_judged_when_the_bounds_file_does_not_record_what_a_scope_reaches(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = default_bounds_path().read_text()
    bounds = tmp_path / "bounds.toml"
    bounds.write_text("\n".join(ln for ln in text.splitlines() if not ln.startswith("reached")) + "\n")
    rc = main(["verify", "--bounds", str(bounds), "--scope", "batch", "--bound", "batch.calls=2", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["coverage"]["reachable"] is None and out["coverage"]["shortfall"] == []
    main(["verify", "--bounds", str(bounds), "--scope", "batch", "--bound", "batch.calls=2"])
    assert "coverage not judged" in capsys.readouterr().out


def test_a_variant_gives_a_counterexample_in_every_form(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["verify", "--variant", "budget-off-by-one", "--scope", "batch", "--out", str(tmp_path)])
    text = capsys.readouterr().out
    assert rc == 1 and "INV-EXEC-BUDGET" in text and "FAIL" in text
    cx = json.loads((tmp_path / "counterexample.json").read_text())
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert trace == cx["trace"] and trace["failed"] == len(trace["path"]) - 1
    assert (tmp_path / "counterexample.txt").read_text().startswith("Counterexample")
    r = replay(cx, by_name("budget-off-by-one").semantics)
    assert list(r.transitions[: len(trace["path"])]) == trace["path"] and r.first_violation == trace["failed"]


def test_mutant_corpus_command(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["verify", "--mutants", "--format", "json", *SMALL])
    out = json.loads(capsys.readouterr().out)
    caught = {m["mutant"]: m["caught"] for m in out["mutants"]}
    assert {"deadline-ignored", "abort-mode-continues", "failed-call-refused", "cached-failure-as-error",
            "retry-skipped"} <= set(caught)
    survivors = {m.semantics.name for m in SURVIVORS}
    assert all(caught[m] != (m in survivors) for m in caught)
    assert rc == 0 and out["unexpected"] == []


@pytest.mark.parametrize("argv", [
    ["verify", "--bound", "batch.calls=lots"],
    ["verify", "--bound", "calls"],
    ["verify", "--bounds", "/nonexistent/bounds.toml"],
    ["verify", "--variant", "no-such-variant"],
    ["verify", "--scope", "nowhere"],
    ["verify", "--update-expected", "--bound", "batch.calls=2"],
])
def test_bad_usage_exits_2_without_a_traceback(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_progress_goes_to_stderr_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    main(["verify", *SMALL, "--scope", "batch", "--progress"])
    cap = capsys.readouterr()
    assert "[batch]" in cap.err and "states" in cap.err
    assert "[batch]" not in cap.out


def test_crosscheck_command_at_a_small_bound(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["verify", "--crosscheck", "--bound", "batch.calls=2", "--bound", "batch.ids=2",
               "--bound", "loop.calls=1", "--bound", "loop.ids=2", "--bound", "concurrent.calls=2"])
    out = capsys.readouterr().out
    assert rc == 0 and out.count("agree") == 8  # batch, loop, writes (section 6), concurrent: two checks each


def test_outputs_validate_against_the_published_schemas(tmp_path: Path) -> None:
    """coverage.json / trace.json are what `loopspec diagram` reads; counterexample.json has its own
    schema (spec/schema/counterexample.schema.json)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema_dir = Path(__file__).resolve().parents[1] / "spec" / "schema"
    assert main(["verify", "--variant", "retry-starts-execution", "--scope", "loop", "--out", str(tmp_path)]) == 1
    for name, schema in (("coverage.json", "transition-coverage"), ("trace.json", "transition-path"),
                         ("counterexample.json", "counterexample")):
        doc = json.loads((tmp_path / name).read_text())
        jsonschema.validate(doc, json.loads((schema_dir / f"{schema}.schema.json").read_text()))
