"""``loopspec fuzz`` on the command line (issue 13): --format json, progress lines, the strict
comparison run named as such, the coverage file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopspec.cli import main
from tests.fuzz_helpers import case_path, example_cmd


def test_format_json_carries_every_finding_the_coverage_and_the_parameters(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["fuzz", "--impl", example_cmd("conflict-reuse"), "--max-examples", "60", "--seed", "3",
                 "--out", str(tmp_path), "--format", "json"])
    assert code == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # stdout is exactly one JSON document
    assert doc["format"] == "loopspec-fuzz-summary/1" and doc["ok"] is False
    rules = {f["rule"]: f for f in doc["findings"]}
    assert "R7" in rules and rules["R7"]["explanation"].startswith("Let a batch")
    assert rules["R7"]["case"] == str(case_path(tmp_path, "R7")) and rules["R7"]["reproduced"] is True
    assert doc["parameters"]["maxExamples"] == 60 and doc["parameters"]["seed"] == 3
    assert doc["parameters"]["mode"] == "batch" and doc["parameters"]["profile"] == "strict"
    assert set(doc["coverage"]["transitions"]) >= {"T04", "T12"} and doc["coverage"]["runs"] > 0
    assert doc["stats"]["examples"] == 60
    assert str(tmp_path / "campaign.json") in doc["files"]
    assert captured.err == ""  # JSON mode and not a terminal: nothing else


def test_progress_is_quiet_when_piped_unless_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fuzz", "--impl", example_cmd(), "--max-examples", "30", "--seed", "1", "--out", str(tmp_path)]
    assert main([*argv, "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert main([*argv, "--quiet", "--progress"]) == 0
    err = capsys.readouterr().err
    assert "loopspec fuzz" in err and "30/30 examples" in err and "steps/s" in err


def test_a_profile_campaign_names_the_lines_of_its_strict_comparison_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["fuzz", "--impl", "loopspec.fuzz:ReferenceExecutor", "--profile", "pydantic-ai", "--report",
                 str(tmp_path / "r.md"), "--max-examples", "20", "--seed", "1", "--out", str(tmp_path / "o"),
                 "--progress"])
    err = capsys.readouterr().err
    assert code in (0, 1)
    strict_lines = [ln for ln in err.splitlines() if "strict comparison" in ln]
    assert strict_lines, err
    assert any("loopspec fuzz: [strict comparison] " in ln for ln in strict_lines)
    assert any("loopspec profile pydantic-ai" in ln for ln in err.splitlines())  # the profile run's progress
    assert (tmp_path / "o" / "strict" / "campaign.json").is_file() and (tmp_path / "r.md").is_file()


def test_the_coverage_file_is_what_diagram_draws(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", "--impl", example_cmd(), "--max-examples", "20", "--seed", "1", "--out",
                 str(tmp_path / "o"), "--quiet"]) == 0
    cov = json.loads((tmp_path / "o" / "coverage.json").read_text())
    assert set(cov) == {"transitions", "runs", "label", "source"} and cov["runs"] == 160
    assert main(["diagram", "--coverage", str(tmp_path / "o" / "coverage.json"), "--format", "mermaid",
                 "--out", str(tmp_path / "d")]) == 0
    assert "T14" in next((tmp_path / "d").glob("*.mmd")).read_text()


def _spec_copy(tmp_path: Path) -> Path:
    import shutil

    from loopspec.spec.base import shipped_spec_path

    dest = tmp_path / "myspec"
    shutil.copytree(shipped_spec_path().parent, dest)
    return dest / "loop.toml"


def test_spec_option_reaches_the_campaign_and_every_shard(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from loopspec.fuzz import _campaign
    from loopspec.spec.base import default_spec_path

    spec = _spec_copy(tmp_path)
    code = main(["fuzz", "--impl", example_cmd("conflict-reuse"), "--max-examples", "40", "--seed", "3",
                 "--out", str(tmp_path / "out"), "--format", "json", "--spec", str(spec), "--jobs", "2"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and "R7" in {f["rule"] for f in doc["findings"]}
    assert doc["parameters"]["spec"] == str(spec.resolve())
    # a shard (what a --jobs or Dask worker runs, in a process of its own) judges by the settings' spec
    seen: list[Path] = []
    monkeypatch.setattr(_campaign, "_run_shard", lambda *a, **k: seen.append(default_spec_path()))
    _campaign.run_shard("unused", _campaign.Settings(spec=str(spec)), 0, 1)
    _campaign.run_shard("unused", _campaign.Settings(), 0, 1)
    assert seen[0] == spec.resolve() and seen[1] != spec.resolve()


def test_replay_takes_spec_and_refuses_a_missing_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["fuzz", "--impl", example_cmd("conflict-reuse"), "--max-examples", "40", "--seed", "3",
                 "--out", str(out), "--quiet"]) == 1
    spec = _spec_copy(tmp_path)
    capsys.readouterr()
    assert main(["replay", str(case_path(out, "R7")), "--impl", example_cmd("conflict-reuse"), "--spec", str(spec),
                 "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False
    assert main(["replay", str(case_path(out, "R7")), "--impl", example_cmd("conflict-reuse"),
                 "--spec", str(tmp_path / "nope.toml")]) == 2
    assert "nope.toml" in capsys.readouterr().err
