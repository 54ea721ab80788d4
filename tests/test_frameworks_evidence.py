"""Profile evidence (SPEC.md P-EVIDENCE): every ``documented`` quote is a sentence of the framework's
documentation as the pinned package ships it (a docstring), every ``source`` quote a line of the named
function in the framework's installed source; the loader refuses a graded choice without its quote.

The quotes are checked against the installed framework only when it is the version the profile was
measured with (CI installs exactly those: .ci/frameworks-constraints.txt); otherwise the test skips.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from loopspec.spec.base import SpecError
from loopspec.spec.loader import load_spec, parse_spec


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _installed_file(shipped: str, framework: str = "") -> Path:
    if framework == "google-adk" and importlib.util.find_spec("google.adk") is None:
        from loopspec.frameworks.google_adk import adk_site_packages

        site = adk_site_packages()  # ADK's own environment (.venv-adk)
        assert site is not None
        return site / shipped
    top = shipped.split("/", 1)[0]
    spec = importlib.util.find_spec(top)
    assert spec is not None and spec.submodule_search_locations, f"{top} is not an installed package"
    return Path(next(iter(spec.submodule_search_locations))).parent / shipped


def _docstrings(tree: ast.AST) -> list[str]:
    """Every docstring of a module: of the module, classes and functions, and attribute docstrings (a string
    statement after an assignment), which is what the API reference pages render."""
    out = []
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                out.append(_norm(stmt.value.value))
    return out


def _function_source(src: str, tree: ast.AST, qualname: str) -> str | None:
    parts = qualname.split(".")
    nodes: list[ast.AST] = [tree]
    for part in parts:
        found = None
        for scope in nodes:
            for node in ast.walk(scope):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == part:
                    found = node
                    break
            if found is not None:
                break
        if found is None:
            return None
        nodes = [found]
    return ast.get_source_segment(src, nodes[0])


def _graded() -> list[tuple[str, object]]:
    spec = load_spec()
    return [(f"{p.id}:{c.parameter}", (p, c)) for p in spec.profiles for c in p.choices if c.evidence != "observed"]


@pytest.mark.frameworks
@pytest.mark.parametrize("case", [c for _, c in _graded()], ids=[i for i, _ in _graded()])
def test_each_quote_is_in_the_pinned_framework(case) -> None:
    """P-EVIDENCE: the quote is really there, in the version the profile names (`tested`)."""
    prof, choice = case
    from loopspec.frameworks import NODE, framework_version

    if prof.id in NODE:
        _check_node_quote(prof, choice)
        return

    try:
        installed = version(prof.framework)
    except PackageNotFoundError:
        installed = framework_version(prof.id) if prof.id == "google-adk" else None  # in its own environment
        if installed is None:
            pytest.skip(f"{prof.framework} is not installed (pip install 'loopspec[frameworks]'; google-adk: "
                        "python3 .ci/dev.py test builds .venv-adk)")
    if installed != prof.tested:
        pytest.skip(f"{prof.framework} {installed} is installed; the profile's evidence is for {prof.tested}")
    path = _installed_file(choice.shipped, prof.id)
    src = path.read_text(encoding="utf-8")
    tree = ast.parse(src)
    quote = _norm(choice.quote)
    if choice.evidence == "documented":
        assert any(quote in d for d in _docstrings(tree)), (
            f"{prof.id} {choice.parameter}: the documented sentence is not in any docstring of {choice.shipped} "
            f"({prof.framework} {prof.tested}): {choice.quote!r}")
    else:
        body = _function_source(src, tree, choice.function)
        assert body is not None, f"{prof.id} {choice.parameter}: no {choice.function} in {choice.shipped}"
        assert quote in _norm(body), (f"{prof.id} {choice.parameter}: {choice.function} in {choice.shipped} "
                                      f"({prof.framework} {prof.tested}) has no line {choice.quote!r}")


def _check_node_quote(prof, choice) -> None:
    """A TypeScript framework's quote, in its npm package as package-lock.json pins it (installed with npm ci
    in loopspec's cache directory): a documented sentence in the page the package ships (``docs/*.mdx``) or in
    a doc comment of its type declarations; a source line in the named function of the shipped file."""
    from loopspec.frameworks import framework_version, installed

    if not installed(prof.id):
        pytest.skip("Node.js >= 20 is not on PATH (the TypeScript frameworks need it)")
    from loopspec.frameworks._node import ensure_installed

    assert framework_version(prof.id) == prof.tested, f"package-lock.json pins another {prof.framework}"
    path = ensure_installed(quiet=True).parent / "node_modules" / choice.shipped
    src = path.read_text(encoding="utf-8")
    quote = _norm(choice.quote)
    if choice.evidence == "documented":
        text = _norm(re.sub(r"^\s*\*\s?", "", src, flags=re.M))  # doc comments without their leading stars
        assert quote in text, f"{prof.id} {choice.parameter}: the sentence is not in {choice.shipped}: {choice.quote!r}"
        return
    name = choice.function.rsplit(".", 1)[-1]
    starts = [m.start() for m in re.finditer(rf"(?:\bfunction\s+|(?<=\s)){re.escape(name)}\s*\(", src)]
    assert starts, f"{prof.id} {choice.parameter}: no {choice.function} in {choice.shipped}"
    # the function's text: from its head to the next top-level function (compiled JS keeps one per line start)
    bodies = [src[s:(re.search(r"\n(?:async )?function |\n(?:export )?(?:class|const) ", src[s + 1:]) or re.search("$", src[s + 1:])).end() + s]
              for s in starts]
    assert any(quote in _norm(b) for b in bodies), (
        f"{prof.id} {choice.parameter}: {choice.function} in {choice.shipped} ({prof.framework} {prof.tested}) "
        f"has no line {choice.quote!r}")


def test_every_profile_grades_every_choice() -> None:
    spec = load_spec()
    for p in spec.profiles:
        for c in p.choices:
            assert c.evidence in ("documented", "source", "observed")
            assert (c.quote is not None) == c.promised, (p.id, c.parameter)


# --------------------------------------------------------------------------------------------
# The loader
# --------------------------------------------------------------------------------------------

def _text() -> str:
    return Path(load_spec().path).read_text(encoding="utf-8")


BUDGET_COUNTS = 'quote = "The maximum number of successful tool calls allowed to be executed."\n'


def test_loader_refuses_documented_without_a_quote() -> None:
    text = _text()
    assert BUDGET_COUNTS in text
    with pytest.raises(SpecError, match="quote") as err:
        parse_spec(text.replace(BUDGET_COUNTS, "", 1))
    assert "pydantic-ai" in str(err.value) and "documented" in str(err.value)


def test_loader_refuses_a_quote_on_an_observed_choice() -> None:
    text = _text().replace('value = "none"\nevidence = "observed"\n',
                           'value = "none"\nevidence = "observed"\nquote = "x"\n', 1)
    with pytest.raises(SpecError, match="observed has no quote"):
        parse_spec(text)


def test_loader_refuses_source_evidence_without_its_function() -> None:
    line = 'function = "_ToolCallProcessor.run"\n'
    text = _text()
    assert line in text
    with pytest.raises(SpecError, match="function"):
        parse_spec(text.replace(line, "", 1))


def test_loader_refuses_an_ungraded_choice() -> None:
    text = _text().replace('value = "none"\nevidence = "observed"\n', 'value = "none"\n', 1)
    with pytest.raises(SpecError, match="evidence"):
        parse_spec(text)
