"""JSON parsing for the oracle: the hardened loader (:mod:`loopspec.support.safejson`) under the default
limits, plus the bare parser the benchmark measures as the limit.

orjson is used when installed (the ``fast`` extra), else the standard library; both give the same
values and the same errors (see :mod:`loopspec.support.safejson`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

from ..support import safejson
from ..support.safejson import JsonInputError

Json = Any

MAX_DEPTH: Final = safejson.MAX_DEPTH

#: The error every parse raises (a ValueError naming the reason; file and line added by the caller).
JsonError = JsonInputError

try:  # pragma: no cover - depends on the environment
    import orjson as _orjson

    _fast: Callable[[bytes | str], Json] | None = _orjson.loads
except ImportError:  # pragma: no cover
    _fast = None


def use_parser(name: str) -> None:
    """Select the parser ("orjson" or "json"); used by the benchmark to measure both."""
    safejson.use_parser(name)


def raw_parser() -> Callable[[bytes | str], Json]:
    """The bare parser in use, without the loader's checks: what the benchmark measures as the limit."""
    if safejson.parser() == "orjson" and _fast is not None:
        return _fast
    decode = _std.decode

    def std_loads(data: bytes | str) -> Json:
        return decode(data.decode("utf-8") if isinstance(data, bytes) else data)

    return std_loads


_std = json.JSONDecoder()


def loads(data: bytes | str) -> Json:
    """Parse one JSON text under the default limits; raises :class:`JsonError` with a one-line reason."""
    return safejson.loads(data)


def loads_fast(data: bytes | str) -> Json:
    """:func:`loads` without the length check (a reader bounds its lines before parsing)."""
    return safejson.fast_loader()(data)


def depth_ok(value: Json, limit: int = MAX_DEPTH) -> bool:
    """Is ``value`` nested at most ``limit`` levels deep (iterative: never recurses)?"""
    try:
        safejson.check_value(value, limits=safejson.Limits(max_depth=limit, max_int_digits=10**6))
    except JsonInputError as exc:
        return "nested" not in exc.reason
    return True
