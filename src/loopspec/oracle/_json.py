"""JSON parsing for the oracle: orjson when installed (the ``fast`` extra), else the standard library.

Both parsers behave the same on what matters here: UTF-8 bytes in, plain Python values out;
``NaN``/``Infinity`` are rejected (they are not JSON); nesting deeper than :data:`MAX_DEPTH` is
rejected with a clear message instead of a RecursionError.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

Json = Any

MAX_DEPTH: Final = 512


class JsonError(ValueError):
    """The text is not JSON (message without file or line: the caller adds them)."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_std_decoder = json.JSONDecoder(parse_constant=_no_constant)


def _std_loads(data: bytes | str) -> Json:
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    return _std_decoder.decode(data)


try:  # pragma: no cover - depends on the environment
    import orjson as _orjson

    _fast: Callable[[bytes | str], Json] | None = _orjson.loads
except ImportError:  # pragma: no cover
    _orjson = None
    _fast = None

#: The parser in use: "orjson" or "json".
PARSER: str = "orjson" if _fast is not None else "json"


def raw_loads(data: bytes | str) -> Json:
    """The fastest available parser, unguarded (the hot path: callers catch ValueError/RecursionError)."""
    return _fast(data) if _fast is not None else _std_loads(data)


loads_fast: Callable[[bytes | str], Json] = _fast if _fast is not None else _std_loads


def use_parser(name: str) -> None:
    """Select the parser ("orjson" or "json"); used by the benchmark to measure both."""
    global loads_fast, PARSER
    if name == "orjson":
        if _fast is None:
            raise ValueError("orjson is not installed (pip install 'loopspec[fast]')")
        loads_fast = _fast
    elif name == "json":
        loads_fast = _std_loads
    else:
        raise ValueError(f"unknown parser {name!r}")
    PARSER = name


def loads(data: bytes | str) -> Json:
    """Parse one JSON text; raises :class:`JsonError` with a one-line reason."""
    try:
        return loads_fast(data)
    except RecursionError:
        raise JsonError(f"nested more deeply than this parser allows (about {MAX_DEPTH} levels)") from None
    except UnicodeDecodeError as exc:
        raise JsonError(f"not UTF-8 (byte {exc.start})") from None
    except ValueError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "recursion" in msg.lower():
            msg = f"nested more deeply than this parser allows (about {MAX_DEPTH} levels)"
        raise JsonError(msg) from None


def depth_ok(value: Json, limit: int = MAX_DEPTH) -> bool:
    """Is ``value`` nested at most ``limit`` levels deep (iterative: never recurses)?"""
    stack: list[tuple[Json, int]] = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if d > limit:
            return False
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return True
