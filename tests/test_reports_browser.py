"""The HTML reports in a real browser: headless Chromium through Playwright (a module-scoped browser), with the system's Chromium
(Debian's ``chromium`` package: ``.ci/dev.py`` installs it for the test job; Playwright never downloads a
browser of its own here). Each page loads from a ``file://`` URL with no console error and no request but
its own file, a finding opens to its explanation and step table, its path is highlighted on the drawn machine,
the filters and the pager work, and a report of thousands of rows keeps one page of them in the document.

Skipped, saying why, when Playwright or Chromium is not installed.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install 'loopspec[test]')")

from loopspec.cli import main
from loopspec.render.html import PAGE_SIZE, report_html
from loopspec.render.report import Item, PathTrace, Report

pytestmark = [
    pytest.mark.xdist_group("browser"),  # one worker starts Chromium once
    # pytest-base-url (pytest-playwright's dependency) defines a session fixture as a method: pytest 9 warns
    pytest.mark.filterwarnings("ignore:Session-scoped fixtures defined as instance methods"),
]

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "oracle"
EXECUTOR = ROOT / "examples" / "python" / "executor.py"

#: The flags the system's Chromium runs with here: headless, no sandbox (root in a container), and none of the
#: background traffic (component updates, sync, field trials) a test must not depend on.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


def chromium() -> str | None:
    path = os.environ.get("LOOPSPEC_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    return path if path and os.access(path, os.X_OK) else None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """The system's Chromium, driven by Playwright for this module only. Not pytest-playwright's session-scoped
    ``browser``: Playwright's sync API keeps an asyncio event loop running on the main thread while it is
    started, and a session fixture would leave it running for every later test of the worker, where
    ``asyncio.run`` then fails ("cannot be called from a running event loop")."""
    from playwright.sync_api import sync_playwright

    path = chromium()
    if path is None:
        pytest.skip("no Chromium to drive: apt-get install -y chromium (.ci/dev.py test installs it when root)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()


def run(*argv: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(list(argv))


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A fuzz campaign's page (the example executor with a replay bug), a check's (golden ledgers) and a large
    synthetic one (3,000 rows)."""
    d = tmp_path_factory.mktemp("pages")
    impl = f"{shlex.quote(sys.executable)} {shlex.quote(str(EXECUTOR))} --bug replay-reexecutes"
    assert run("fuzz", "--impl", impl, "--max-examples", "60", "--seed", "1", "--shrink-time", "10", "--quiet",
               "--out", str(d / "fuzz"), "--html", str(d / "fuzz.html")) == 1
    files = sorted(str(p) for p in GOLDEN.glob("ledger-*.ndjson") if "bad-input" not in p.name)
    assert run("check", *files, "--quiet", "--html", str(d / "check.html")) == 1
    from loopspec.render import extract_machine
    from loopspec.spec.loader import load_rules, load_spec

    spec = load_spec()
    big = Report(command="check", title="loopspec check: many runs", command_line="loopspec check many.ndjson",
                 outcome="failed", exit_code=1, item_noun="run")
    for i in range(3000):
        fails = i % 10 == 0
        big.items.add(Item(key=f"run-{i:05d}", verdict="fails" if fails else "passes", rule="R6" if fails else None,
                           title="R6 replay-re-executed" if fails else "COMPLETED/FINAL_ANSWER",
                           where=f"many.ndjson:{i + 1}", explanation="Let … Then …" if fails else "",
                           path=PathTrace(("T04",), 0) if fails else None))
    (d / "big.html").write_text(report_html(big, extract_machine(spec, load_rules(None, spec)), None), encoding="utf-8")
    return {"fuzz": d / "fuzz.html", "check": d / "check.html", "big": d / "big.html"}


@pytest.fixture
def opened(page: Any) -> Iterator[tuple[Any, list[str], list[str]]]:
    """The page, with every console error, page error and request it makes recorded."""
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    page.on("request", lambda r: requests.append(r.url))
    yield page, errors, requests


def load(page: Any, path: Path) -> None:
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']")


def test_a_fuzz_finding_opens_and_its_path_is_highlighted(opened: tuple[Any, list[str], list[str]],
                                                           reports: dict[str, Path]) -> None:
    page, errors, requests = opened
    load(page, reports["fuzz"])
    assert page.locator("#ls-outcome").inner_text() == "FAILED"
    row = page.locator("tr.item").first
    assert row.get_attribute("aria-expanded") == "false" and page.locator("tr.details").count() == 0
    assert page.locator("#ls-svg g.ls-path, #ls-svg g.ls-fail").count() == 0
    row.click()
    details = page.locator("tr.details")
    assert details.count() == 1 and page.locator("tr.item").first.get_attribute("aria-expanded") == "true"
    assert details.locator("pre.explanation").inner_text().startswith("Let ")
    assert details.locator("table.steps tr.failing").count() >= 1  # the failing request, and the failing step
    assert details.locator("code.replay-cmd").inner_text().startswith("loopspec replay ")
    if page.locator("#ls-svg").count():  # Graphviz drew the machine: the path is on it
        assert page.locator("#ls-svg g.ls-fail").count() >= 1
        assert page.locator("#ls-svg g.ls-path").count() >= 1
        assert page.locator("#ls-svg text.ls-stepno").count() >= 1
        assert page.locator("#ls-svg g.node.ls-visited").count() >= 2
    assert "the failing one" in page.locator("#ls-caption").inner_text()
    page.locator("#ls-clear").click()
    assert page.locator("#ls-svg g.ls-path, #ls-svg g.ls-fail").count() == 0 and page.locator("tr.details").count() == 0
    assert errors == [] and requests == [reports["fuzz"].as_uri()]


def test_coverage_shades_the_machine(opened: tuple[Any, list[str], list[str]], reports: dict[str, Path]) -> None:
    page, errors, _ = opened
    load(page, reports["fuzz"])
    if not page.locator("#ls-svg").count():
        pytest.skip("Graphviz's dot is not installed: the page has no drawn machine to shade")
    assert page.locator("#ls-coverage tbody tr").count() > 0
    page.locator("#ls-cov-toggle").click()
    assert "ls-cov" in (page.locator("#ls-svg").get_attribute("class") or "")
    assert page.locator("#ls-svg g.edge.cov-1, #ls-svg g.edge.cov-2, #ls-svg g.edge.cov-3").count() > 0
    assert errors == []


def test_check_runs_filter_by_verdict_and_rule(opened: tuple[Any, list[str], list[str]], reports: dict[str, Path]) -> None:
    page, errors, requests = opened
    load(page, reports["check"])
    total = page.locator("tr.item").count()
    assert 0 < total <= PAGE_SIZE
    page.locator("#ls-f-verdict").select_option("fails")
    badges = page.locator("tr.item .badge").all_inner_texts()
    assert badges and set(badges) == {"fails"}
    rules = [o for o in page.locator("#ls-f-rule option").evaluate_all("os => os.map(o => o.value)") if o != "all"]
    assert "R6" in rules
    page.locator("#ls-f-rule").select_option("R6")
    assert set(page.locator("tr.item td:nth-child(2)").all_inner_texts()) == {"R6"}
    page.locator("#ls-f-text").fill("no such run anywhere")
    assert page.locator("tr.item").count() == 0 and page.locator("#ls-empty").is_visible()
    assert errors == [] and requests == [reports["check"].as_uri()]


def test_thousands_of_rows_are_paged(opened: tuple[Any, list[str], list[str]], reports: dict[str, Path]) -> None:
    page, errors, _ = opened
    load(page, reports["big"])
    assert page.locator("tr.item").count() == PAGE_SIZE  # one page in the document, not 3,000 rows
    assert page.locator("#ls-page").inner_text() == f"page 1 of {-(-3000 // PAGE_SIZE)}"
    first = page.locator("tr.item code").first.inner_text()
    page.locator("#ls-next").click()
    assert page.locator("tr.item code").first.inner_text() != first
    assert page.locator("#ls-page").inner_text().startswith("page 2 of")
    page.locator("#ls-f-verdict").select_option("fails")
    assert page.locator("#ls-count").inner_text().endswith("of 300")
    page.locator("tr.item").first.click()
    assert page.locator("tr.details").count() == 1
    assert "Path of run-" in page.locator("#ls-caption").inner_text()  # no SVG here: the caption and the table say it
    assert page.locator("tr.details table.steps").count() == 1
    assert errors == []
