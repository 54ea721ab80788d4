"""Reading one message from an implementation, through the project's hardened loader
(:mod:`loopspec.support.safejson`: limits on line length, depth, integer digits, non-finite numbers,
invalid UTF-8), with each refusal named by a protocol *kind* for the finding (spec/PROTOCOL.md,
"Limits"). The only place where bytes from the implementation become Python values; nothing it
accepts can later break an encoder.
"""

from __future__ import annotations

from typing import Any, Final

from ..support.safejson import MAX_BYTES, MAX_DEPTH, MAX_INT_DIGITS, JsonInputError, check_value, fast_loader

__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "MAX_LINE", "WireError", "check_message", "decode_line"]

Json = Any

MAX_LINE: Final = MAX_BYTES  # bytes in one message line

_load = fast_loader()


class WireError(ValueError):
    """A line that is not an acceptable JSON value. ``kind`` names what was wrong."""

    def __init__(self, kind: str, detail: str) -> None:
        self.kind, self.detail = kind, detail
        super().__init__(f"{kind}: {detail}")


def _kind(reason: str) -> str:
    r = reason.lower()
    if "digits" in r:
        return "integer-too-long"
    if "nested" in r:
        return "too-deep"
    if "non-finite" in r:
        return "non-finite-number"
    if "utf-8" in r or "utf-16" in r or "surrogate" in r:
        return "invalid-utf8"
    if "longer than" in r:
        return "line-too-long"
    return "malformed-json"


def _error(exc: JsonInputError, raw: bytes | None = None) -> WireError:
    detail = exc.message()
    if _kind(exc.reason) == "malformed-json" and raw is not None:
        text = raw[:480].decode("utf-8", errors="replace")
        detail += f": {text[:120]!r}" + ("…" if len(text) > 120 else "")
    return WireError(_kind(exc.reason), detail)


def decode_line(line: bytes) -> Json:
    """The JSON value on ``line`` (without its newline), or :class:`WireError`."""
    if len(line) > MAX_LINE:
        raise WireError("line-too-long", f"a line of {len(line)} bytes (the limit is {MAX_LINE})")
    try:
        return _load(line)
    except JsonInputError as exc:
        raise _error(exc, line) from None


def check_message(value: Json, what: str) -> None:
    """An in-process value under the same limits as a message on the wire (raises WireError)."""
    try:
        check_value(value, where=what)
    except JsonInputError as exc:
        raise _error(exc) from None
