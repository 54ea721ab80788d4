"""Diagrams rendered from the spec: extract (``model``) → renderers (``dot``, ``mermaid``, ``markdown``),
with trace and coverage overlays (``overlay``); and the reports of ``fuzz``, ``check`` and ``verify`` drawn
with them: a report as plain data (``report``), a self-contained HTML page (``html``) and JUnit XML
(``junit``). Every function here is pure but the JUnit writer, which spools and writes its file atomically;
the commands do the rest of the I/O and run Graphviz.

Layer: a driver, beside ``fuzz``, ``oracle`` and ``checker`` (none of which it imports); it may import
``spec`` and ``support``.
"""

from .dot import check_flow_dot, machine_dot
from .markdown import check_flow_markdown, machine_markdown, overlay_markdown
from .mermaid import check_flow_mermaid, machine_mermaid
from .model import CheckFlow, Edge, Machine, StateNode, extract_check_flow, extract_machine
from .overlay import Coverage, Overlay, OverlayError, Trace, make_overlay, read_coverage, read_trace

__all__ = [
    "CheckFlow",
    "Coverage",
    "Edge",
    "Machine",
    "Overlay",
    "OverlayError",
    "StateNode",
    "Trace",
    "check_flow_dot",
    "check_flow_markdown",
    "check_flow_mermaid",
    "extract_check_flow",
    "extract_machine",
    "machine_dot",
    "machine_markdown",
    "machine_mermaid",
    "make_overlay",
    "overlay_markdown",
    "read_coverage",
    "read_trace",
]
