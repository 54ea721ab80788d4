"""Parse a JSON document and remember where each object starts, to name file lines in reports.

The standard library's pure-Python scanner is driven with a wrapped object parser that records the
offset of every object it builds (keyed by ``id``: the document keeps them alive). Slower than the C
parser, so it is used only for single-document transcript files up to :data:`LOCATE_LIMIT` bytes;
beyond that objects get the document's first line. The text is first accepted or refused by the
hardened loader (:mod:`loopspec.support.safejson`), so the limits and the error messages are the loader's.
"""

from __future__ import annotations

import bisect
import json
from json import decoder, scanner
from typing import Any, Final

from ...support import safejson

Json = Any

LOCATE_LIMIT: Final = 32 * 1024 * 1024

_UNSET: Any = object()


class Located:
    """A parsed document and a way to ask the line of any object in it."""

    def __init__(self, doc: Json, positions: dict[int, int], text: str, first_line: int = 1) -> None:
        self.doc = doc
        self._pos = positions
        self._newlines = [i for i, ch in enumerate(text) if ch == "\n"] if positions else []
        self.first_line = first_line

    def line(self, obj: Json) -> int:
        pos = self._pos.get(id(obj))
        if pos is None:
            return self.first_line
        return self.first_line + bisect.bisect_left(self._newlines, pos)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _Locating(json.JSONDecoder):
    def __init__(self) -> None:
        super().__init__(parse_constant=_no_constant)
        self.positions: dict[int, int] = {}
        orig = decoder.JSONObject

        def parse_object(s_and_end: tuple[str, int], *args: Any) -> tuple[Json, int]:
            obj, end = orig(s_and_end, *args)
            self.positions[id(obj)] = s_and_end[1] - 1
            return obj, end

        self.parse_object = parse_object  # type: ignore[assignment]
        self.scan_once = scanner.py_make_scanner(self)


def loads_located(text: str, first_line: int = 1, value: Json = _UNSET) -> Located:
    """Parse ``text`` — already accepted by :mod:`loopspec.support.safejson` (``value`` is what it gave) —
    and remember where each object starts. Past :data:`LOCATE_LIMIT` characters, or should the
    located parse fail where the loader did not, objects get the document's first line."""
    if value is _UNSET:
        value = safejson.loads(text, limits=safejson.Limits(max_bytes=max(len(text) * 4, 1)))
    if len(text) > LOCATE_LIMIT:
        return Located(value, {}, text, first_line)
    dec = _Locating()
    try:
        with safejson._recursion_headroom(6 * safejson.MAX_DEPTH + 200):
            doc = dec.decode(text)
    except (ValueError, RecursionError):  # pragma: no cover - the loader accepted the text
        return Located(value, {}, text, first_line)
    return Located(doc, dec.positions, text, first_line)
