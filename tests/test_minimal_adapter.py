"""The minimal stdio adapter (issue 30): examples/python/minimal_adapter.py, the first adapter the docs show, is a
correct executor of its own in standard-library Python — no loopspec inside — small enough to read in one sitting.

A campaign passes on it, with the harness's own tools and with declared ones, and the same campaign catches it when
one of its rules is broken: each mutant below changes a line or two and must be found by the rule it breaks (that
is what shows the passing campaigns can fail)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from loopspec.fuzz import fuzz
from tests.fuzz_helpers import ROOT

ADAPTER = ROOT / "examples" / "python" / "minimal_adapter.py"
TEXT_TOOLS = ROOT / "examples" / "java" / "wrapped" / "text-tools.json"
#: its code lines (not blank, not a comment, not the module docstring), as README.md and docs/adapters.md say
MAX_CODE_LINES = 65


def code_lines(source: str) -> int:
    tree = ast.parse(source)
    doc = tree.body[0]
    skip = set(range(doc.lineno, doc.end_lineno + 1)) if isinstance(doc, ast.Expr) else set()  # type: ignore[operator]
    return sum(1 for i, line in enumerate(source.splitlines(), 1)
               if i not in skip and line.strip() and not line.strip().startswith("#"))


def test_it_imports_the_standard_library_only() -> None:
    tree = ast.parse(ADAPTER.read_text())
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert modules and modules <= set(sys.stdlib_module_names), modules


def test_it_stays_small() -> None:
    n = code_lines(ADAPTER.read_text())
    assert 0 < n <= MAX_CODE_LINES, f"{n} code lines; the docs say {MAX_CODE_LINES}"
    for doc in (ROOT / "README.md", ROOT / "docs" / "adapters.md"):
        assert f"{MAX_CODE_LINES} lines" in doc.read_text(), doc


@pytest.mark.parametrize("tools", [None, TEXT_TOOLS, {"tools": [
    {"name": "find", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"},
                                                                      "all": {"type": "boolean"}}, "required": ["q"]}},
    {"name": "put", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
                                    "additionalProperties": False}}]}], ids=["harness-tools", "text-tools", "declared"])
def test_a_campaign_finds_nothing(tmp_path: Path, tools: object) -> None:
    r = fuzz(f"{sys.executable} {ADAPTER}", max_examples=200, seed=1, out=tmp_path, tools=tools)  # type: ignore[arg-type]
    assert r.ok, [f.cause for f in r.findings]
    assert r.stats["examples"] == 200


#: name -> ((the adapter's text, what the mutant has instead), ...), the rule a campaign must report
MUTANTS = {
    "replay-reexecutes": ((("elif cid in stored:", "elif False:"),), "R6"),
    "conflict-reuses": ((("if bound.setdefault(cid, content) != content:", "if False:"),), "R7"),
    "budget-unchecked": ((('elif executed >= p["budget"]:', "elif False:"),), "R9"),
    "failure-cached": ((("if code is None:\n                    stored[cid]", "if True:\n                    stored[cid]"),), "R10"),
    "results-reversed": ((('return {"results": results, "executed": executed, "aborted": None}',
                           'return {"results": results[::-1], "executed": executed, "aborted": None}'),), "R11"),
    "abort-loses-answers": ((('return {"results": results, "executed": executed, "aborted": {',
                              'return {"results": [], "executed": executed, "aborted": {'),), "R13"),
    "principal-from-arguments": ((('execute(executed, call, p["principal"])',
                                   'execute(executed, call, call["arguments"].get("principal", p["principal"]))'),), "R16"),
    "isspace-blank": ((('set(call["id"]) - BLANK', 'call["id"].strip()'),), "R2"),
    "any-tool": ((('if call["name"] not in schemas:', 'if not call["name"]:'),
                  ('schemas[call["name"]], call["arguments"]', 'schemas.get(call["name"], {}), call["arguments"]')), "R3"),
    "python-equality": ((('json.dumps([call["name"], canonical(call["arguments"])], sort_keys=True)',
                          '[call["name"], canonical(call["arguments"])]'),), "R7"),  # {"x": 1} == {"x": True}
    "bool-is-an-integer": ((("and not isinstance(v, bool) and v % 1 == 0", "and v % 1 == 0"),), "R4"),
    "extra-properties-allowed": ((("if k in props else extra_ok", "if k in props else True"),), "R4"),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_a_campaign_catches_each_broken_rule(tmp_path: Path, name: str) -> None:
    edits, rule = MUTANTS[name]
    source = ADAPTER.read_text()
    for old, new in edits:
        assert source.count(old) == 1, f"{name}: {old!r} is not once in the adapter any more: update the mutant"
        source = source.replace(old, new)
    mutant = tmp_path / "mutant.py"
    mutant.write_text(source)
    r = fuzz(f"{sys.executable} {mutant}", max_examples=200, seed=0, out=tmp_path / "out", shrink_seconds=5)
    assert rule in {f.rule for f in r.findings}, (name, [f.cause for f in r.findings])


def test_the_fuzzer_proposes_true_for_1_as_a_conflict() -> None:
    """The mutant "python-equality" is caught because a conflict is sometimes the same call with `true` for `1` in
    a property the schema does not type (a typed one would fail R4 first)."""
    from loopspec.fuzz._vocab import boolean_twin

    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "flag": {"type": "boolean"}}}
    assert boolean_twin({"n": 1, "flag": True, "extra": 1}, schema) == {"n": 1, "flag": True, "extra": True}
    assert boolean_twin({"extra": False}, schema) == {"extra": 0}
    assert boolean_twin({"n": 1, "flag": False, "extra": 7}, schema) is None
    assert boolean_twin({"extra": 1.0}, None) is None  # 1.0 is the same content as 1, not a twin
