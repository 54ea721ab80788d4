"""Mermaid text for the loop machine (``stateDiagram-v2``) and the check flow (``flowchart``).

GitHub renders these without any tool. Pure: IR in, text out. Mermaid cannot style single
transitions of a state diagram, so error paths are told apart by their label (the error code, or
``stop …``) and the terminal states by class; overlays annotate labels (step numbers, hit counts)
and classes.
"""

from __future__ import annotations

import re

from . import style as st
from .dot import GEN_NOTE, short_effect
from .model import CheckFlow, Edge, Machine, merged_edges
from .overlay import Overlay

__all__ = ["check_flow_mermaid", "machine_mermaid"]


def _txt(text: str) -> str:
    """Label text safe for Mermaid: no characters that end a label or start an entity."""
    return re.sub(r"[;:#\"]", " ", text).strip()


def _edge_text(e: Edge, ov: Overlay | None, lead: str = "") -> str:
    parts = [e.id, lead, e.guard]
    eff = short_effect(e)
    if eff:
        parts.append("/ " + eff)
    text = " ".join(p for p in parts if p)
    if ov is not None and ov.has_trace:
        steps = ov.steps_of(e.id)
        ok = [str(s.number) for s in steps if not s.failed]
        bad = [str(s.number) for s in steps if s.failed]
        if ok:
            text += " ▸ step " + ",".join(ok)
        if bad:
            text += " ✖ failing step " + bad[0]
    if ov is not None and ov.has_coverage:
        text += f" ×{ov.count(e.id)}"
    return _txt(text)


def _class_defs() -> list[str]:
    out = []
    for status, (fill, line) in st.STATUS_STYLE.items():
        out.append(f"    classDef {status.lower()} fill:{fill},stroke:{line},color:{st.INK}")
    out += [
        f"    classDef visited fill:{st.PATH_FILL},stroke:{st.PATH_COLOR},stroke-width:3px",
        f"    classDef failing fill:{st.FAIL_FILL},stroke:{st.FAIL_COLOR},stroke-width:3px",
        f"    classDef unhit fill:#ffffff,stroke:{st.UNHIT_COLOR},stroke-dasharray:4 3",
    ]
    return out


def machine_mermaid(machine: Machine, overlay: Overlay | None = None) -> str:
    """The loop machine as a Mermaid ``stateDiagram-v2``."""
    ov = overlay if overlay is not None and (overlay.has_trace or overlay.has_coverage) else None
    title = f"{machine.name} {machine.version} — the tool-calling loop machine"
    if ov is not None and ov.has_trace:
        fs = ov.failed_step
        title += f" — trace {ov.trace_label or 'path'}, {len(ov.steps)} steps"
        title += f", failing step {fs.number} ({fs.transition})" if fs else ""
    if ov is not None and ov.has_coverage:
        hit = sum(1 for _, n in ov.counts if n)
        title += f" — coverage {ov.coverage_label or 'counts'}, {hit}/{len(ov.counts)} transitions hit"
    lines = ["---", f"title: {_txt(title)}", "---", "stateDiagram-v2", f"    %% {GEN_NOTE}", "    direction LR"]
    lines += _class_defs()
    all_active = {x.id for x in machine.active_states}
    wide = [e for e in machine.edges if len(e.sources) > 1]
    grouped = any(set(e.sources) == all_active for e in wide)
    ind = "        " if grouped else "    "

    def state_line(sid: str, pad: str) -> str:
        s = machine.state(sid)
        parts = [s.id]
        if s.terminal:
            if (s.status or "").lower() != s.id:
                parts.append(s.status or "")
            parts.append(" · ".join(s.stop_reasons))
        else:
            parts.append("on " + ", ".join(t for t in s.triggers if not any(
                e.trigger == t and set(e.sources) == all_active for e in wide)))
        if ov is not None and ov.has_coverage:
            parts.append(f"×{ov.state_count(s.id)}")
        return f'{pad}state "{"<br/>".join(_txt(p) for p in parts)}" as {s.id}'

    if grouped:
        lines.append("    state running {")
    for s in machine.active_states:
        lines.append(state_line(s.id, ind))
    lines.append(f"{ind}[*] --> {machine.initial}")
    inner = [(a_, b_, m) for a_, b_, m in merged_edges(machine) if a_ in all_active and b_ in all_active]
    for src, dst, members in inner:
        lines.append(f"{ind}{src} --> {dst} : " + "<br/>".join(_edge_text(m, ov) for m in members))
    if grouped:
        lines.append("    }")
    for s in machine.terminal_states:
        lines.append(state_line(s.id, "    "))
    for src, dst, members in merged_edges(machine):
        if (src, dst, members) in inner:
            continue
        lines.append(f"    {src} --> {dst} : " + "<br/>".join(_edge_text(m, ov) for m in members))
    for e in wide:
        if set(e.sources) == all_active:
            lines.append(f"    running --> {e.dest} : {_edge_text(e, ov, e.trigger + ' from any running state')}")
        else:
            for src in e.sources:
                lines.append(f"    {src} --> {e.dest} : {_edge_text(e, ov, e.trigger)}")
    for s in machine.terminal_states:
        lines.append(f"    {s.id} --> [*]")
    classes: dict[str, list[str]] = {}
    for s in machine.states:
        cls = (s.status or "").lower() if s.terminal else ""
        if ov is not None and ov.has_coverage and ov.state_count(s.id) == 0 and (s.terminal or not grouped):
            cls = "unhit"
        if ov is not None and ov.has_trace:
            fs = ov.failed_step
            if fs is not None and s.id == fs.dest:
                cls = "failing"
            elif s.id in ov.visited and (s.terminal or not grouped):
                cls = "visited"
        if cls:
            classes.setdefault(cls, []).append(s.id)
    for cls, ids in classes.items():
        lines.append(f"    class {','.join(ids)} {cls}")
    return "\n".join(lines) + "\n"


def check_flow_mermaid(flow: CheckFlow) -> str:
    """The per-call check order (R1) as a Mermaid ``flowchart``."""
    lines = [
        "---", f"title: {_txt(f'{flow.name} {flow.version} — the per-call check order (R1)')}", "---",
        "flowchart TD", f"    %% {GEN_NOTE}",
    ]
    groups = flow.by_group()
    entries = [f"entry_{i}" for i in range(len(groups))]
    kinds: dict[str, list[str]] = {}
    for i, ((state, trigger), _) in enumerate(groups):
        lines.append(f'    {entries[i]}(["{_txt(state)}<br/>on {_txt(trigger)}"])')
        kinds.setdefault("state", []).append(entries[i])
    for i, (_, decisions) in enumerate(groups):
        nxt = groups[i + 1][0][0] if i + 1 < len(groups) else None
        cur: str | None = entries[i]
        cur_label = ""
        for d in decisions:
            joins = nxt is not None and d.dest == nxt
            target = entries[i + 1] if joins else f"out_{d.transition}"
            if not joins:
                head = d.code or (d.effect_label.split("(", 1)[1].rstrip(")")
                                  if d.kind in ("abort", "complete") else d.effect or "")
                lines.append(f'    {target}["{_txt(head)}<br/>{d.transition} → {_txt(d.dest)}"]')
                kinds.setdefault(d.kind, []).append(target)
            fire = d.fires_on + (f" / {d.effect}" if joins and d.effect else "")
            arrow = "-.->" if d.kind == "error" else ("==>" if d.kind in ("abort", "complete") else "-->")
            if d.question:
                q = f"q_{d.transition}"
                lines.append(f'    {q}{{"{d.transition}<br/>{_txt(d.question)}"}}')
                if cur is not None:
                    lines.append(f"    {cur} -->{'|' + cur_label + '|' if cur_label else ''} {q}")
                lines.append(f"    {q} {arrow}|{_txt(fire)}| {target}")
                cur, cur_label = q, ("no" if d.fires_on == "yes" else "yes")
            else:
                if cur is not None:
                    lines.append(f"    {cur} {arrow}{'|' + cur_label + '|' if cur_label else ''} {target}")
                cur, cur_label = None, ""
    fills = {"state": (st.STATE_FILL, st.STATE_LINE), "error": ("#fff7ed", st.EDGE_STYLE["error"][0]),
             "abort": ("#fee2e2", st.EDGE_STYLE["abort"][0]), "complete": ("#dcfce7", st.EDGE_STYLE["complete"][0]),
             "normal": (st.STATE_FILL, st.STATE_LINE)}
    for kind, ids in kinds.items():
        fill, line = fills[kind]
        lines.append(f"    classDef {kind} fill:{fill},stroke:{line},color:{st.INK}")
        lines.append(f"    class {','.join(ids)} {kind}")
    return "\n".join(lines) + "\n"
