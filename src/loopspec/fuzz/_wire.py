"""Reading one message from an implementation: JSON with limits (spec/PROTOCOL.md, "Limits").

One small module on purpose: it is the only place that turns bytes from the implementation into
Python values, so it can be swapped for the project's shared hardened loader without touching the
harness. Everything it refuses raises :class:`WireError` with a protocol kind and a one-line detail;
nothing it accepts can later break an encoder (no NaN/Infinity, no integer the ``int``/``str``
conversion limit refuses, no nesting that ``json.dumps`` cannot write back).
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "MAX_LINE", "WireError", "decode_line", "depth_exceeds"]

Json = Any

MAX_LINE: Final = 16 * 1024 * 1024  # bytes in one message line
MAX_DEPTH: Final = 64  # nesting of arrays/objects in one message
MAX_INT_DIGITS: Final = 1000  # digits of one integer literal


class WireError(ValueError):
    """A line that is not an acceptable JSON value. ``kind`` names what was wrong."""

    def __init__(self, kind: str, detail: str) -> None:
        self.kind, self.detail = kind, detail
        super().__init__(f"{kind}: {detail}")


def _bad_constant(name: str) -> Json:
    raise WireError("non-finite-number", f"the non-finite number {name} (JSON has no NaN or Infinity)")


def _float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise WireError("non-finite-number", f"the number {text[:40]} is out of range (it would be Infinity)")
    return v


def _int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS + 1:
        raise WireError("integer-too-long", f"an integer of {len(text.lstrip('-'))} digits (the limit is {MAX_INT_DIGITS})")
    return int(text)


def depth_exceeds(value: Json, limit: int = MAX_DEPTH) -> bool:
    """Is ``value`` nested deeper than ``limit`` arrays/objects? (iterative: never a RecursionError)"""
    stack: list[tuple[Json, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            if d > limit:
                return True
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            if d > limit:
                return True
            stack.extend((x, d + 1) for x in v)
    return False


def _excerpt(raw: bytes, limit: int = 120) -> str:
    text = raw[: limit * 4].decode("utf-8", errors="replace")
    return repr(text if len(text) <= limit else text[:limit] + "…")


def decode_line(line: bytes) -> Json:
    """The JSON value on ``line`` (without its newline), or :class:`WireError`."""
    if len(line) > MAX_LINE:
        raise WireError("line-too-long", f"a line of {len(line)} bytes (the limit is {MAX_LINE})")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError("invalid-utf8", f"a line that is not UTF-8 (byte {exc.start}): {_excerpt(line)}") from None
    # a cheap bound first: fewer opening brackets than the limit cannot nest deeper than it
    deep = line.count(b"[") + line.count(b"{") > MAX_DEPTH
    try:
        value = json.loads(text, parse_constant=_bad_constant, parse_float=_float, parse_int=_int)
    except WireError:
        raise
    except RecursionError:
        raise WireError("too-deep", f"a value nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, and int() past the interpreter's digit limit
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise WireError("malformed-json", f"a line that is not JSON ({msg}): {_excerpt(line)}") from None
    if deep and depth_exceeds(value):
        raise WireError("too-deep", f"a value nested deeper than {MAX_DEPTH} levels")
    return value
