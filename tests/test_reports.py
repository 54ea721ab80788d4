"""``--html FILE`` and ``--junit FILE`` on fuzz, check and verify (loopspec.render.report, .junit, .html and
loopspec.cli._reports).

Every JUnit file is validated against the schema Jenkins' xUnit plugin publishes (tests/golden/junit/, with its
source); a failure's text carries the explanation and the replay command, and that command, run, reproduces
the failure. The pages are checked as documents here (self-contained, escaped, bounded) and in a real browser
in tests/test_reports_browser.py.
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import re
import shlex
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from loopspec.cli import main
from loopspec.render.html import PAGE_SIZE, report_html
from loopspec.render.junit import JunitWriter, junit_xml, xml_text
from loopspec.render.report import Case, Item, Items, PathTrace, Report, StepTable

ROOT = Path(__file__).resolve().parent.parent
XSD = ROOT / "tests" / "golden" / "junit" / "junit-10.xsd"
GOLDEN = ROOT / "tests" / "golden" / "oracle"
EXECUTOR = ROOT / "examples" / "python" / "executor.py"

xmlschema = pytest.importorskip("xmlschema", reason="xmlschema validates the JUnit files (the test extra has it)")


@pytest.fixture(scope="module")
def schema() -> object:
    return xmlschema.XMLSchema(str(XSD))


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def cases(path: Path) -> list[ET.Element]:
    return list(ET.parse(path).getroot().iter("testcase"))


def status(case: ET.Element) -> str:
    for tag, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        if case.find(tag) is not None:
            return name
    return "passed"


# -- the writers, on their own -------------------------------------------------------------------------


def test_xml_text_escapes_what_xml_cannot_carry() -> None:
    assert xml_text('a<b>&"c"') == 'a&lt;b&gt;&amp;"c"'
    assert xml_text('"x"\n', attribute=True) == "&quot;x&quot;&#10;"
    assert xml_text("id \x1c and \x00 and \ud800") == "id \\x1c and \\x00 and \\ud800"


def _report(n_items: int = 2) -> Report:
    r = Report(command="fuzz", title="loopspec fuzz: t", command_line="loopspec fuzz --impl x", outcome="failed",
               exit_code=1, summary=[("seed", "1")], seconds=1.23456, timestamp="2026-12-05T10:00:00")
    r.cases = [Case("R6 replay", "loopspec.fuzz.batch", "failed", "R6 replay-re-executed: it ran twice",
                    "Let …\nThen \x1c ran twice\n\nreplay: loopspec replay R6.json --impl x", kind="R6 replay"),
               Case("R7 conflict", "loopspec.fuzz.batch", "passed", text="conforms (seen: 3)"),
               Case("R9 budget", "loopspec.fuzz.batch", "skipped", "not exercised"),
               Case("input", "loopspec.check.f", "error", "unreadable", "line 3: not JSON", kind="unreadable")]
    for i in range(n_items):
        r.items.add(Item(key=f"k{i}", verdict="fails" if i % 2 == 0 else "passes", title=f"t{i}", rule="R6"))
    return r


def test_junit_of_a_report_is_valid_and_counts_every_outcome(schema: object, tmp_path: Path) -> None:
    text = junit_xml(_report())
    path = tmp_path / "j.xml"
    path.write_text(text, encoding="utf-8")
    schema.validate(str(path))  # type: ignore[attr-defined]
    root = ET.parse(path).getroot()
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("4", "1", "1", "1")
    assert suite.get("time") == "1.235"
    failure = root.find(".//failure")
    assert failure is not None and failure.get("type") == "R6 replay" and "\\x1c" in (failure.text or "")
    assert "replay: loopspec replay R6.json" in (failure.text or "")


def test_junit_writer_streams_and_a_later_case_replaces_an_earlier_one(schema: object, tmp_path: Path) -> None:
    w = JunitWriter(tmp_path / "sub" / "j.xml", suite="loopspec check")
    w.add(Case("run-1", "c", "passed"), key="f#run-1")
    w.add(Case("run-2", "c", "passed"), key="f#run-2")
    w.add(Case("run-1", "c", "failed", "R6 now violates", "explained"), key="f#run-1")  # an amended verdict
    path = w.finish(seconds=0.5)
    schema.validate(str(path))  # type: ignore[attr-defined]
    got = [(c.get("name"), status(c)) for c in cases(path)]
    assert got == [("run-2", "passed"), ("run-1", "failed")]
    assert ET.parse(path).getroot().get("failures") == "1"
    assert oct(path.stat().st_mode & 0o777) != oct(0o600)  # readable like any file, not mkstemp's 0600


def test_items_keep_failing_rows_and_count_the_rest() -> None:
    items = Items(max_failing=2, max_passing=1)
    for i in range(5):
        items.add(Item(key=f"f{i}", verdict="fails", title="", rule="R7"))
        items.add(Item(key=f"p{i}", verdict="passes", title=""))
    assert [it.key for it in items] == ["f0", "p0", "f1"]
    assert items.not_listed == {"fails": 3, "passes": 4}
    assert items.by_rule["R7"] == 5 and items.by_verdict["passes"] == 5
    items.add(Item(key="p0", verdict="fails", title="now", rule="R6"), replaces=True)
    assert items.rows[1].rule == "R6" and items.by_verdict["fails"] == 6


def _machine() -> object:
    from loopspec.render import extract_machine
    from loopspec.spec.loader import load_rules, load_spec

    spec = load_spec()
    return extract_machine(spec, load_rules(None, spec))


def test_the_page_is_self_contained_and_no_input_becomes_markup() -> None:
    hostile = '</script><img src="https://example.invalid/x.png" onerror="alert(1)"><!--'
    r = _report(0)
    r.items.add(Item(key=hostile, verdict="fails", title=hostile, rule="R6", explanation=hostile,
                     tables=(StepTable("t", ("a",), ((hostile,),), 0),), path=PathTrace(("T04",), 0)))
    page = report_html(r, _machine(), '<?xml version="1.0"?>\n<!DOCTYPE svg>\n<svg width="1pt" height="1pt" '
                       'viewBox="0 0 1 1"><g id="T04"></g></svg>')
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert hostile not in page and "<img" not in page and "</script><" not in page.replace("</script>\n<script>", "")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "a reference outside the file"
    assert page.count("<svg") == 1 and "<!DOCTYPE svg" not in page and 'id="ls-svg"' in page
    data = json.loads(re.search(r'<script id="loopspec-data" type="application/json">(.*?)</script>', page, re.S)
                      .group(1))  # type: ignore[union-attr]
    assert data["items"][0]["key"] == hostile and data["pageSize"] == PAGE_SIZE
    assert data["machine"]["svgIds"]["T04"]  # where each transition is drawn, for the highlight


def test_without_graphviz_the_page_says_so_and_keeps_the_path_tables() -> None:
    page = report_html(_report(), _machine(), None, diagram_note="No diagram: install Graphviz")
    assert "No diagram: install Graphviz" in page and "<svg" not in page


def test_every_transition_has_an_element_in_the_drawn_machine() -> None:
    import shutil

    import graphviz

    from loopspec.render import machine_dot
    from loopspec.render.dot import machine_svg_ids

    if not shutil.which("dot"):
        pytest.skip("Graphviz's dot is not installed")
    machine = _machine()
    svg = graphviz.pipe("dot", "svg", machine_dot(machine).encode()).decode()  # type: ignore[arg-type]
    drawn = {html.unescape(i) for i in re.findall(r'<g id="([^"]+)"', svg)}  # Graphviz writes '-' as &#45;
    ids = machine_svg_ids(machine)  # type: ignore[arg-type]
    assert set(ids) == {e.id for e in machine.edges}  # type: ignore[attr-defined]
    assert {gid for by_src in ids.values() for gid in by_src.values()} <= drawn
    assert {f"state-{s.id}" for s in machine.states} <= drawn  # type: ignore[attr-defined]


# -- the commands -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--html", "--junit"])
def test_a_report_path_that_is_a_directory_is_refused_before_any_work(tmp_path: Path, flag: str) -> None:
    code, out, err = run("verify", "--scope", "batch", "--bound", "batch.calls=1", flag, str(tmp_path))
    assert code == 2 and f"{flag} {tmp_path}: is a directory" in err and not out


def test_verify_writes_a_valid_junit_with_a_case_per_rule_and_a_page(schema: object, tmp_path: Path) -> None:
    j, h = tmp_path / "verify.xml", tmp_path / "verify.html"
    code, _, err = run("verify", "--scope", "batch", "--bound", "batch.calls=2", "--junit", str(j), "--html", str(h))
    assert code == 0, err
    schema.validate(str(j))  # type: ignore[attr-defined]
    got = {c.get("name", "").split()[0]: status(c) for c in cases(j)}
    assert got["R6"] == "passed" and got["R7"] == "passed" and not [r for r, s in got.items() if s == "failed"]
    assert "R29" in got  # concurrency rules are listed, skipped when the chosen scopes do not check them
    assert h.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    # a broken core: the rules citing the invariant it breaks fail, with the explanation and the replay
    j2 = tmp_path / "broken.xml"
    code, _, err = run("verify", "--scope", "batch", "--bound", "batch.calls=3", "--variant", "replay-re-executes",
                       "--junit", str(j2))
    assert code == 1, err
    schema.validate(str(j2))  # type: ignore[attr-defined]
    failed = {c.get("name", "").split()[0]: c for c in cases(j2) if status(c) == "failed"}
    assert "R6" in failed
    text = failed["R6"].findtext("failure") or ""
    assert "INV-REPLAY-NO-EXEC" in text and "replay: loopspec verify --scope batch" in text


def test_check_writes_a_case_per_run_and_an_error_for_unreadable_input(schema: object, tmp_path: Path) -> None:
    j, h = tmp_path / "check.xml", tmp_path / "check.html"
    files = [str(GOLDEN / "ledger-pass.ndjson"), str(GOLDEN / "ledger-fail-reexecute-replay.ndjson"),
             str(GOLDEN / "ledger-bad-input.ndjson")]
    code, out, err = run("check", *files, "--junit", str(j), "--html", str(h), "--format", "json")
    assert code == 2, err  # some input could not be read
    summary = json.loads(out)["summary"]
    schema.validate(str(j))  # type: ignore[attr-defined]
    runs = [c for c in cases(j) if c.get("name") != "input errors"]
    assert len(runs) == summary["runs"]
    by = [status(c) for c in runs]
    assert by.count("failed") == summary["violate"] and by.count("passed") == summary["conform"]
    assert by.count("error") == summary["unreadable"]
    fail = next(c for c in runs if status(c) == "failed")
    assert (fail.get("classname") or "").startswith("loopspec.check.ledger-fail-reexecute-replay")
    text = fail.findtext("failure") or ""
    assert "R6" in (fail.find("failure").get("type") or "") and "Then" in text  # type: ignore[union-attr]
    assert "next: loopspec diagram --trace" in text  # the path of the run, drawn
    assert any(c.get("name") == "input errors" and status(c) == "error" for c in cases(j)) or summary["inputErrors"] == 0
    assert "<svg" in h.read_text(encoding="utf-8") or "No diagram" in h.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A campaign against the example executor with a replay bug, with both reports."""
    d = tmp_path_factory.mktemp("fuzz")
    impl = f"{shlex.quote(sys.executable)} {shlex.quote(str(EXECUTOR))} --bug replay-reexecutes"
    code, out, err = run("fuzz", "--impl", impl, "--max-examples", "60", "--seed", "1", "--shrink-time", "10",
                         "--out", str(d / "out"), "--junit", str(d / "junit.xml"), "--html", str(d / "report.html"),
                         "--quiet")
    return {"code": code, "out": out, "err": err, "dir": d, "impl": impl}


def test_fuzz_writes_a_valid_junit_with_a_case_per_rule(schema: object, fuzzed: dict[str, object]) -> None:
    assert fuzzed["code"] == 1, fuzzed["err"]
    j = Path(str(fuzzed["dir"])) / "junit.xml"
    schema.validate(str(j))  # type: ignore[attr-defined]
    got = {c.get("name", "").split()[0]: status(c) for c in cases(j)}
    from loopspec.spec.loader import load_rules

    loop_rules = {r.id for r in load_rules() if r.section != 6}
    assert loop_rules <= set(got) and {f"P{i}" for i in range(1, 8)} <= set(got)
    assert got["R6"] == "failed" and got["P1"] == "passed"
    assert [r for r, s in got.items() if s == "failed"] == ["R6"]
    assert "skipped" in got.values() or "passed" in got.values()
    # every rule a batch campaign cannot reach (loop rounds) is skipped, not claimed as passed
    assert got["R18"] == "skipped"


def test_the_replay_command_of_a_fuzz_failure_reproduces_it(fuzzed: dict[str, object]) -> None:
    j = Path(str(fuzzed["dir"])) / "junit.xml"
    failure = next(c.find("failure") for c in cases(j) if status(c) == "failed")
    assert failure is not None
    line = next(ln for ln in (failure.text or "").splitlines() if ln.startswith("replay: "))
    argv = shlex.split(line.removeprefix("replay: "))
    assert argv[:2] == ["loopspec", "replay"]
    code, out, _ = run(*argv[1:])
    assert code == 1 and "DIVERGES: R6" in out


def test_fuzz_page_lists_the_finding_with_its_case_and_path(fuzzed: dict[str, object]) -> None:
    page = (Path(str(fuzzed["dir"])) / "report.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'<script id="loopspec-data" type="application/json">(.*?)</script>', page, re.S)
                      .group(1))  # type: ignore[union-attr]
    # one item per distinct cause (issue 27): the bug re-executes a replay, and, because the re-execution was
    # charged, a later replay is refused for budget; both are R6, each its own cause
    assert {i["rule"] for i in data["items"]} == {"R6"} and all(i["verdict"] == "fails" for i in data["items"])
    item = next(i for i in data["items"] if "execut" in i["title"])
    assert item["explanation"].startswith("Let ")
    assert item["replay"].startswith("loopspec replay ") and item["path"]["path"]
    table = item["tables"][-1]
    assert table["columns"][2:4] == ["the spec answers", "the implementation answered"]
    assert table["failing"] is not None and table["rows"][table["failing"]]
    assert data["coverage"] and set(data["coverage"]) >= {"T04"}
