"""Support code every layer may use: the safe JSON reader (``safejson``: size, depth and number limits, a
clear error naming the line and field), progress lines on stderr (``progress``), and text helpers for reports
(``text``).

Layer: the bottom. It owns no spec concept and imports nothing of loopspec; anything may import it.
"""
