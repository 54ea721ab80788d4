"""Renderers: deterministic output, committed diagrams not stale, every state/transition drawn."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import graphviz
import pytest

from loopspec import load_rules, load_spec
from loopspec.cli.diagram import EXTENSION, jobs
from loopspec.render import (
    check_flow_dot,
    check_flow_markdown,
    check_flow_mermaid,
    extract_check_flow,
    extract_machine,
    machine_dot,
    machine_markdown,
    machine_mermaid,
)

ROOT = Path(__file__).resolve().parents[1]
DIAGRAMS = ROOT / "diagrams"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")


@pytest.fixture(scope="module")
def spec():
    return load_spec()


@pytest.fixture(scope="module")
def machine(spec):
    return extract_machine(spec, load_rules(spec=spec))


def _sources() -> dict[str, str]:
    spec = load_spec()
    out = {}
    for job in jobs(spec, load_rules(spec=spec), None, None, None):
        out[f"{job.stem}.{EXTENSION['dot']}"] = job.dot
        out[f"{job.stem}.{EXTENSION['mermaid']}"] = job.mermaid
        out[f"{job.stem}.{EXTENSION['md']}"] = job.markdown
    return out


@pytest.mark.parametrize("name", sorted(_sources()))
def test_committed_diagram_sources_are_not_stale(name: str) -> None:
    """diagrams/ holds what `loopspec diagram` makes from the current spec (regenerate to fix)."""
    committed = DIAGRAMS / name
    assert committed.is_file(), f"diagrams/{name} is missing: run `loopspec diagram --out diagrams`"
    assert committed.read_text(encoding="utf-8") == _sources()[name], (
        f"diagrams/{name} is stale: run `loopspec diagram --out diagrams` and commit the result"
    )


def test_committed_svgs_exist_for_each_diagram() -> None:
    for stem in {n.rsplit(".", 1)[0] for n in _sources()}:
        assert (DIAGRAMS / f"{stem}.svg").is_file(), f"diagrams/{stem}.svg is missing: run `loopspec diagram --out diagrams`"


def test_output_is_deterministic(spec, machine) -> None:
    flow = extract_check_flow(spec)
    again = extract_machine(load_spec(), load_rules(spec=spec))
    assert machine_dot(machine) == machine_dot(again)
    assert machine_mermaid(machine) == machine_mermaid(again)
    assert machine_markdown(machine) == machine_markdown(again)
    assert check_flow_dot(flow) == check_flow_dot(extract_check_flow(spec))
    assert check_flow_mermaid(flow) == check_flow_mermaid(extract_check_flow(spec))


def test_dot_names_every_state_and_transition(spec, machine) -> None:
    src = machine_dot(machine)
    for s in spec.states:
        assert re.search(rf"^\s*{s.id} \[", src, re.M), s.id
    for t in spec.transitions:
        assert f"<b>{t.id}</b>" in src, t.id
    # the terminal states are grouped in one cluster, the legend is there
    cluster = src.split("subgraph cluster_terminal", 1)[1].split("}", 1)[0]
    for s in spec.terminal_states:
        assert re.search(rf"^\s*{s.id} \[", cluster, re.M)
    assert "Legend" in src
    # guards in brackets
    assert "[¬well_formed]" in src


def test_dot_styles_error_paths_apart(spec, machine) -> None:
    from loopspec.render import style

    src = machine_dot(machine)
    edge_lines = {m.group(1): m.group(0) for m in re.finditer(r'^\s*\w+ -> \w+ \[.*? id="?(T\d\d[\w]*)"?.*$', src, re.M)}
    kinds = {e.id: e.kind for e in machine.edges}
    for eid, line in edge_lines.items():
        first = eid.split("_")[0]
        colour = style.EDGE_STYLE[kinds[first]][0]
        assert f"color=\"{colour}\"" in line, (eid, line)
    assert len({style.EDGE_STYLE[k][0] for k in ("normal", "error", "abort", "complete")}) == 4


def test_mermaid_and_markdown_name_every_state_and_transition(spec, machine) -> None:
    mmd = machine_mermaid(machine)
    md = machine_markdown(machine)
    assert mmd.splitlines()[3] == "stateDiagram-v2"
    for s in spec.states:
        assert re.search(rf'as {s.id}$', mmd, re.M), s.id
        assert f"`{s.id}`" in md
    for t in spec.transitions:
        assert re.search(rf"\b{t.id}\b", mmd), t.id
        assert f"| **{t.id}** | `{t.name}` |" in md
    flow = extract_check_flow(spec)
    fmd = check_flow_markdown(flow)
    positions = [fmd.index(f"**{d.transition}**") for d in flow.decisions]
    assert positions == sorted(positions), "the check-order table follows the spec order"
    fmmd = check_flow_mermaid(flow)
    assert fmmd.splitlines()[3] == "flowchart TD"
    for d in flow.decisions:
        assert f"q_{d.transition}" in fmmd or f"{d.transition} →" in fmmd or d.transition in fmmd


def test_mermaid_labels_have_no_breaking_characters(machine) -> None:
    for line in machine_mermaid(machine).splitlines():
        if " --> " in line and " : " in line:
            label = line.split(" : ", 1)[1]
            assert not set(label) & set(';#:"'), line


def _svg_ids(svg: str) -> tuple[set[str], set[str]]:
    titles = {html.unescape(t) for t in re.findall(r"<title>([^<]*)</title>", svg)}
    texts = {html.unescape(t).strip() for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)}
    return titles, texts


@needs_dot
@pytest.mark.parametrize("which", ["machine", "check-order"])
def test_rendered_svg_shows_every_state_and_transition(spec, machine, which: str) -> None:
    """Render with the system `dot` and look for every spec state and transition in the SVG."""
    if which == "machine":
        svg = graphviz.pipe("dot", "svg", machine_dot(machine).encode()).decode()
        states = [s.id for s in spec.states]
        transitions = [t.id for t in spec.transitions]
    else:
        flow = extract_check_flow(spec)
        svg = graphviz.pipe("dot", "svg", check_flow_dot(flow).encode()).decode()
        states = [g[0] for g in flow.groups]
        transitions = [d.transition for d in flow.decisions]
    _, texts = _svg_ids(svg)
    ids = {html.unescape(i) for i in re.findall(r'<g id="([^"]+)"', svg)}
    words = {w for text in texts for w in text.split()}
    for s in states:
        assert f"state-{s}" in ids, s
        assert s in texts, s
    for t in transitions:
        assert t in texts or any(t in i.split("_") for i in ids), t
        assert t in words, f"{t} has no visible label"


@needs_dot
def test_committed_svg_matches_the_sources_states_and_transitions(spec) -> None:
    svg = (DIAGRAMS / "machine.svg").read_text(encoding="utf-8")
    _, texts = _svg_ids(svg)
    for t in spec.transitions:
        assert t.id in texts, f"diagrams/machine.svg lacks {t.id}: run `loopspec diagram --out diagrams`"
    for s in spec.states:
        assert s.id in texts
