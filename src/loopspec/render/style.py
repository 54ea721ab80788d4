"""Colours, fonts and the coverage scale shared by the renderers (pure data and arithmetic)."""

from __future__ import annotations

import math
from typing import Final

FONT: Final = "Helvetica,Arial,sans-serif"
MONO: Final = "DejaVu Sans Mono,Menlo,Consolas,monospace"

INK: Final = "#1f2937"
MUTED: Final = "#6b7280"
FAINT: Final = "#c4c9d1"

#: Edge kind -> (colour, dot style, pen width). Chosen to stay distinct in greyscale too
#: (solid / dashed / bold) and for the common colour-vision deficiencies (orange vs red vs green
#: differ in lightness and in line style).
EDGE_STYLE: Final[dict[str, tuple[str, str, float]]] = {
    "normal": ("#374151", "solid", 1.2),
    "error": ("#c2410c", "dashed", 1.3),
    "abort": ("#b91c1c", "bold", 2.0),
    "complete": ("#15803d", "bold", 2.0),
}

#: Terminal status -> (fill, outline).
STATUS_STYLE: Final[dict[str, tuple[str, str]]] = {
    "COMPLETED": ("#dcfce7", "#15803d"),
    "TRUNCATED": ("#fef3c7", "#b45309"),
    "REJECTED": ("#fee2e2", "#b91c1c"),
    "FAILED": ("#fee2e2", "#b91c1c"),
    "CANCELLED": ("#e5e7eb", "#4b5563"),
}
STATE_FILL: Final = "#eef2f7"
STATE_LINE: Final = "#334155"

#: Trace overlay.
PATH_COLOR: Final = "#1d4ed8"
PATH_FILL: Final = "#dbeafe"
FAIL_COLOR: Final = "#dc2626"
FAIL_FILL: Final = "#fecaca"

#: Coverage overlay: a sequential blue scale from "hit once" to "hit most"; zero hits are drawn
#: apart (dotted, in the warning colour) so that the gaps stand out.
COVER_LOW: Final = (0xDB, 0xEA, 0xFE)
COVER_HIGH: Final = (0x0B, 0x2E, 0x6F)
UNHIT_COLOR: Final = "#d97706"


def _hex(rgb: tuple[float, float, float]) -> str:
    return "#" + "".join(f"{round(c):02x}" for c in rgb)


def coverage_level(count: int, top: int) -> float:
    """0.0 for no hit, then (0, 1] growing with ``log(1 + count)``; monotone in ``count``."""
    if count <= 0 or top <= 0:
        return 0.0
    return max(1e-9, min(1.0, math.log1p(count) / math.log1p(max(top, count))))


def coverage_color(count: int, top: int) -> str:
    """The shade of ``count`` hits when the most-hit item has ``top``: darker means more hits."""
    if count <= 0:
        return "#ffffff"
    t = coverage_level(count, top)
    return _hex(tuple(lo + (hi - lo) * t for lo, hi in zip(COVER_LOW, COVER_HIGH, strict=True)))  # type: ignore[arg-type]


def coverage_penwidth(count: int, top: int) -> float:
    return round(1.0 + 3.0 * coverage_level(count, top), 2)


def luminance(color: str) -> float:
    """Relative luminance (WCAG) of ``#rrggbb``; used to pick readable text on a fill."""
    def lin(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)


def text_on(fill: str) -> str:
    return "#ffffff" if luminance(fill) < 0.3 else INK
