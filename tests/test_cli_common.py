"""The options every command shares (loopspec.cli._common) and the spec chosen with --spec."""

from __future__ import annotations

import argparse
import io
import shutil
from pathlib import Path

import pytest

from loopspec.cli._common import (
    add_format_option,
    add_progress_option,
    add_spec_option,
    progress_line,
)
from loopspec.spec.base import SpecError, default_spec_path, shipped_spec_path
from loopspec.spec.loader import default_spec, load_rules, using_spec

ROOT = Path(__file__).resolve().parent.parent


def test_spec_option_defaults_to_none_and_keeps_an_old_spelling_hidden() -> None:
    p = argparse.ArgumentParser()
    add_spec_option(p, "--file")
    assert p.parse_args([]).spec is None
    assert p.parse_args(["--spec", "x.toml"]).spec == "x.toml"
    assert p.parse_args(["--file", "y.toml"]).spec == "y.toml"
    help_text = p.format_help()
    assert "--spec FILE" in help_text and "--file" not in help_text
    assert "default: the spec shipped with loopspec" in " ".join(help_text.split())


def test_format_option_names_every_choice_and_the_default() -> None:
    p = argparse.ArgumentParser()
    add_format_option(p, what="the summary")
    assert p.parse_args([]).format == "text"
    with pytest.raises(SystemExit):
        p.parse_args(["--format", "yaml"])
    text = " ".join(p.format_help().split())
    assert "how to print the summary: text (a report for people), json (one JSON document on stdout, for " \
           "programs); default: text" in text


def test_format_option_takes_other_choices_and_meanings() -> None:
    p = argparse.ArgumentParser()
    add_format_option(p, ("json", "ndjson"), meanings={"ndjson": "one line per run"})
    assert p.parse_args([]).format == "json"
    assert "ndjson (one line per run)" in " ".join(p.format_help().split())


def test_progress_line_follows_the_option() -> None:
    p = argparse.ArgumentParser()
    add_progress_option(p)
    assert not progress_line(p.parse_args([]), io.StringIO()).enabled
    assert progress_line(p.parse_args(["--progress"]), io.StringIO()).enabled


def test_the_shipped_spec_is_the_source_tree_copy_when_running_from_it() -> None:
    assert shipped_spec_path() == ROOT / "spec" / "loop.toml"
    assert default_spec_path() == shipped_spec_path()


def test_using_spec_makes_another_spec_the_default_and_restores_it(tmp_path: Path) -> None:
    other = tmp_path / "mine" / "loop.toml"
    other.parent.mkdir()
    shutil.copy(ROOT / "spec" / "loop.toml", other)
    before = default_spec()
    with using_spec(other) as spec:
        assert default_spec_path() == other
        assert default_spec() is spec and spec.path == str(other)
        assert spec is not before
        # the rules text is looked for next to the chosen spec, and its absence is said, not hidden
        with pytest.raises(SpecError, match=r"mine/SPEC\.md: no such file .*next to the spec"):
            load_rules()
    assert default_spec_path() == shipped_spec_path()
    assert default_spec() is before


def test_using_spec_rejects_an_unusable_spec_before_changing_anything(tmp_path: Path) -> None:
    bad = tmp_path / "loop.toml"
    bad.write_text("this is not = = toml\n")
    with pytest.raises(SpecError, match="not valid TOML"), using_spec(bad):
        pass
    assert default_spec_path() == shipped_spec_path()
