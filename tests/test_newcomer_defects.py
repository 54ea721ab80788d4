"""The smaller defects of issue 30: a hanging implementation never leaves fuzz silent, and verify
--update-expected never writes into an installed loopspec."""

from __future__ import annotations

import contextlib
import io
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from loopspec.cli import main
from loopspec.spec.base import shipped_spec_path


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_a_hanging_implementation_is_explained_even_with_quiet(tmp_path: Path) -> None:
    """`fuzz --bug hang` sat silent for 97 s (10 s per run of the reduction): the campaign now says, as soon as it
    meets the hang, that each run waits --timeout, and how to make it shorter."""
    impl = f"{shlex.quote(sys.executable)} -m loopspec.examples.executor --bug hang"
    code, out, err = _run("fuzz", "--impl", impl, "--timeout", "1", "-x", "--seed", "1", "--quiet",
                          "--shrink-time", "5", "--out", str(tmp_path / "f"))
    assert code == 1 and "P2" in out, err
    assert "a hang is known only after --timeout 1 s" in err and "--timeout 2 reduces faster" in err


def test_the_progress_line_says_that_a_hang_is_waited_for() -> None:
    from types import SimpleNamespace

    from loopspec.cli.fuzz import campaign_status

    stats = SimpleNamespace(examples=1, steps=2)
    c = SimpleNamespace(stats=stats, explorer=SimpleNamespace(phase="reducing P2-timeout"), started=None,
                        max_examples=10, findings=[])
    assert campaign_status(c, "fuzz", 10.0).phase == "reducing P2-timeout: each run waits up to --timeout 10 s"


def test_update_expected_refuses_to_write_into_an_installed_package(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed, the default bounds file lies in site-packages/loopspec/spec/: --update-expected refuses (exit 2)
    and says how to work on a copy, before exploring anything; the file is untouched."""
    import loopspec.cli.verify as verify

    package = tmp_path / "site-packages" / "loopspec"
    shutil.copytree(shipped_spec_path().parent, package / "spec")
    bounds = package / "spec" / "bounds.toml"
    before = bounds.read_bytes()
    monkeypatch.setattr(verify, "_package_dir", lambda: package.resolve())
    code, out, err = _run("verify", "--bounds", str(bounds), "--update-expected")
    assert code == 2 and out == ""
    assert "would write into the installed loopspec package" in err and "--update-expected" in err
    assert "--spec my-spec/loop.toml" in err
    assert bounds.read_bytes() == before


def test_update_expected_writes_a_bounds_file_outside_the_package(tmp_path: Path) -> None:
    """The same command on a copy the user maintains still works (the guard is about the package only)."""
    spec = tmp_path / "my-spec"
    shutil.copytree(shipped_spec_path().parent, spec)
    code, _, err = _run("verify", "--spec", str(spec / "loop.toml"), "--bounds", str(spec / "bounds.toml"),
                        "--scope", "batch", "--update-expected")
    assert code == 0, err
    assert "updated the expected figures" in err
