"""Reading untrusted input: one loader, one set of limits, one error type.

Everything loopspec reads from outside — ledgers, transcripts and traces (``check``), fuzz cases
(``replay``), overlay traces (``diagram --trace``), bounds and spec files (``verify --bounds``,
``spec --file``), vector files (``vectors --file``) and adapter messages (``serve``, the fuzzer's
harness) — is parsed here, with the same limits whatever JSON parser is installed:

==========================  ================================================================
limit                        past it
==========================  ================================================================
``max_bytes`` (16 MiB)       a line, a protocol message or a whole-file document longer than
                             this is refused without being held (a longer line is skipped)
``max_depth`` (128)          arrays/objects nested deeper are refused
``max_int_digits`` (20)      an integer with more digits is refused (every 64-bit integer fits)
finite numbers               ``NaN``, ``Infinity`` and numbers that overflow a double (``1e400``)
                             are refused: they are not JSON
UTF-8                        invalid UTF-8 is refused, and so is a lone UTF-16 surrogate escape
                             (``"\\ud800"``): it is not text. A UTF-8 byte order mark at the very
                             start of a file is skipped; anywhere else it is refused
==========================  ================================================================

A refusal raises :class:`JsonInputError` (a ``ValueError``), whose ``str`` is one line naming the
file, the line and, where known, the field: ``runs.ndjson:57: not JSON: Expecting ',' delimiter
(column 12)``.

**One behaviour, two parsers.** The standard library's decoder, with hooks for the limits, defines
what is accepted and every error message (the *canonical* parser). orjson, when installed, is a fast
path used only where it provably agrees: a text with a digit run long enough to exceed orjson's
64-bit integers (which it would silently turn into floats) goes to the canonical parser, and so does
every text orjson refuses — so the error message, and whether the text is refused at all, are the
canonical parser's. ``LOOPSPEC_JSON_PARSER=json`` (or ``orjson``) selects the parser for a process.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Final

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "JsonInputError",
    "Limits",
    "check_value",
    "decode_text",
    "dumps",
    "fast_loader",
    "iter_lines",
    "load_json",
    "load_toml",
    "loads",
    "parse_line",
    "parser",
    "read_file",
    "read_text",
    "use_parser",
]

Json = Any

MAX_BYTES: Final = 16 * 1024 * 1024
MAX_DEPTH: Final = 128
MAX_INT_DIGITS: Final = 20

_BOM: Final = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Limits:
    """The limits one read applies. ``flag`` names the command-line option that raises
    ``max_bytes`` (quoted in the message when a line or document is too long)."""

    max_bytes: int = MAX_BYTES
    max_depth: int = MAX_DEPTH
    max_int_digits: int = MAX_INT_DIGITS
    flag: str | None = None

    def with_max_bytes(self, n: int, flag: str | None = None) -> Limits:
        return replace(self, max_bytes=n, flag=flag if flag is not None else self.flag)

    def too_long(self, what: str) -> str:
        return (f"{what} longer than {self.max_bytes} bytes (the limit"
                + (f"; {self.flag} raises it" if self.flag else "") + ")")


DEFAULT_LIMITS: Final = Limits()


class JsonInputError(ValueError):
    """Input that cannot be read: ``reason`` plus where (file, line, column, field), each when known."""

    def __init__(self, reason: str, *, file: str | None = None, line: int | None = None,
                 column: int | None = None, field: str | None = None) -> None:
        self.reason = reason
        self.file = file
        self.line = line
        self.column = column
        self.field = field
        super().__init__(reason)

    def at(self, *, file: str | None = None, line: int | None = None, field: str | None = None,
           line_offset: int = 0) -> JsonInputError:
        """The same error placed in a file: ``line_offset`` is added to a line counted within a text
        that starts on a later line of the file."""
        ln = self.line + line_offset if self.line is not None else line
        return JsonInputError(self.reason, file=self.file or file, line=ln, column=self.column,
                              field=self.field or field)

    def message(self) -> str:
        """The reason with the field and column, without file and line."""
        text = f"{self.field}: {self.reason}" if self.field else self.reason
        if self.column is not None:
            text += f" (column {self.column})"
        return text

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = f"{self.file}:{self.line}: " if self.line is not None else f"{self.file}: "
        elif self.line is not None:
            where = f"line {self.line}: "
        return where + self.message()


# --------------------------------------------------------------------------------------------
# The canonical parser (the standard library's decoder with hooks) and the orjson fast path
# --------------------------------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, reason: str, token: str) -> None:
        self.reason, self.token = reason, token
        super().__init__(reason)


def _refuse_constant(name: str) -> Any:
    raise _Refused(f"{name} is not JSON (non-finite numbers are refused)", name)


def _finite_float(s: str) -> float:
    f = float(s)
    if f - f != 0.0:  # inf or nan
        raise _Refused(f"the number {_clip(s)} overflows a double (non-finite numbers are refused)", s)
    return f


def _clip(s: str, n: int = 24) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _int_hook(limit: int) -> Callable[[str], int]:
    def parse_int(s: str) -> int:
        digits = len(s) - (s[:1] == "-")
        if digits > limit:
            raise _Refused(f"an integer of {digits} digits (the limit is {limit} digits)", s)
        return int(s)

    return parse_int


_DECODERS: dict[tuple[int, bool], json.JSONDecoder] = {}


def _decoder(int_limit: int, check_ints: bool) -> json.JSONDecoder:
    key = (int_limit, check_ints)
    dec = _DECODERS.get(key)
    if dec is None:
        dec = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float,
                               parse_int=_int_hook(int_limit) if check_ints else None)
        _DECODERS[key] = dec
    return dec


_DIGIT_RUNS: dict[int, tuple[re.Pattern[str], re.Pattern[bytes]]] = {}


def _digit_run(n: int) -> tuple[re.Pattern[str], re.Pattern[bytes]]:
    """Patterns finding a run of ``n`` digits (a text without one has no integer of ``n`` digits)."""
    p = _DIGIT_RUNS.get(n)
    if p is None:
        p = _DIGIT_RUNS[n] = (re.compile("[0-9]{" + str(n) + "}"), re.compile(b"[0-9]{" + str(n).encode() + b"}"))
    return p


#: bytes.translate table: every ASCII digit becomes "0", "[" and "{" become "[", everything else a space.
_SHAPE: Final = bytes(48 if 48 <= i <= 57 else 91 if i in (91, 123) else 32 for i in range(256))

_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89abcdefABCDEF]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _position(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def _locate_token(text: str, token: str) -> tuple[int | None, int | None]:
    m = re.search(r"(?<![0-9A-Za-z.+\-])" + re.escape(token) + r"(?![0-9A-Za-z.])", text)
    if m is None:
        return None, None
    return _position(text, m.start())


def _depth_error(limits: Limits, text: str | None = None) -> JsonInputError:
    line = col = None
    if text is not None:
        line, col = _deep_position(text, limits.max_depth)
    return JsonInputError(f"nested more than {limits.max_depth} levels deep (the limit)", line=line, column=col)


_TOKENS: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)


def _deep_position(text: str, limit: int) -> tuple[int | None, int | None]:
    """Where nesting first goes past ``limit`` (strings skipped); bounded work."""
    depth = 0
    for k, m in enumerate(_TOKENS.finditer(text)):
        if k > 4_000_000:
            break
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > limit:
                return _position(text, m.start())
        elif c in "]}":
            depth -= 1
    return None, None


def _walk(value: Json, limits: Limits, strings: bool) -> str | None:
    """Check what a parser cannot: nesting depth, and (``strings``) lone surrogates. Iterative."""
    max_depth = limits.max_depth
    stack: list[tuple[Json, int]] = [(value, 1)]
    search = _SURROGATE.search
    while stack:
        v, d = stack.pop()
        if v.__class__ is dict:
            if d > max_depth:
                return "depth"
            for k, x in v.items():
                if strings and search(k):
                    return "surrogate"
                if x.__class__ is dict or x.__class__ is list:
                    stack.append((x, d + 1))
                elif strings and x.__class__ is str and search(x):
                    return "surrogate"
        elif v.__class__ is list:
            if d > max_depth:
                return "depth"
            for x in v:
                if x.__class__ is dict or x.__class__ is list:
                    stack.append((x, d + 1))
                elif strings and x.__class__ is str and search(x):
                    return "surrogate"
        elif strings and v.__class__ is str and search(v):
            return "surrogate"
    return None


def _decode_utf8(data: bytes | bytearray | memoryview) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _utf8_error(bytes(data), exc) from None


def _utf8_error(data: bytes, exc: UnicodeDecodeError) -> JsonInputError:
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return JsonInputError("UTF-16 text (it starts with a UTF-16 byte order mark): loopspec reads UTF-8")
    start = exc.start
    line = data.count(b"\n", 0, start) + 1
    col = start - (data.rfind(b"\n", 0, start) + 1) + 1
    return JsonInputError(f"not UTF-8: byte 0x{data[start]:02x} cannot start or continue a character",
                          line=line, column=col)


def _canonical(data: bytes | bytearray | memoryview | str, limits: Limits) -> Json:
    text = data if isinstance(data, str) else _decode_utf8(data)
    if text[:1] == "\ufeff":
        raise JsonInputError("a byte order mark (BOM) before the JSON value (only a file may start with one)",
                             line=1, column=1)
    long_digits = limits.max_int_digits < 18 or _digit_run(limits.max_int_digits + 1)[0].search(text) is not None
    dec = _decoder(limits.max_int_digits, long_digits)
    try:
        value = dec.decode(text)
    except json.JSONDecodeError as exc:
        line, col = exc.lineno, exc.colno
        if exc.msg == "Expecting value" and not text.strip():
            raise JsonInputError("not JSON: nothing but whitespace", line=1) from None
        raise JsonInputError(f"not JSON: {exc.msg}", line=line, column=col) from None
    except _Refused as exc:
        line, col = _locate_token(text, exc.token)
        raise JsonInputError(exc.reason, line=line, column=col) from None
    except RecursionError:
        raise _depth_error(limits, text) from None
    strings = _SURROGATE_ESCAPE.search(text) is not None or (
        isinstance(data, str) and _SURROGATE.search(text) is not None)
    if strings or text.count("[") + text.count("{") > limits.max_depth:
        problem = _walk(value, limits, strings)
        if problem == "depth":
            raise _depth_error(limits, text)
        if problem == "surrogate":
            m = _SURROGATE_ESCAPE.search(text)
            line, col = _position(text, m.start()) if m is not None else (None, None)
            raise JsonInputError("a lone UTF-16 surrogate (\\ud800-\\udfff without its pair) in a string: not text",
                                 line=line, column=col)
    return value


try:  # pragma: no cover - depends on the environment
    import orjson as _orjson

    _ORJSON_LOADS: Callable[[Any], Json] | None = _orjson.loads
    _ORJSON_ERROR: type[Exception] = _orjson.JSONDecodeError
except ImportError:  # pragma: no cover
    _ORJSON_LOADS = None
    _ORJSON_ERROR = ValueError

_want = os.environ.get("LOOPSPEC_JSON_PARSER", "").strip().lower()
_use_orjson: bool = _ORJSON_LOADS is not None and _want != "json"


def parser() -> str:
    """The parser in use for the fast path: ``"orjson"`` or ``"json"``."""
    return "orjson" if _use_orjson else "json"


def use_parser(name: str) -> None:
    """Select the parser (``"orjson"`` or ``"json"``) for this process: benchmarks and tests."""
    global _use_orjson
    if name == "orjson":
        if _ORJSON_LOADS is None:
            raise ValueError("orjson is not installed (pip install 'loopspec[fast]')")
        _use_orjson = True
    elif name == "json":
        _use_orjson = False
    else:
        raise ValueError(f"unknown parser {name!r} (json or orjson)")
    _LOADERS.clear()


_LOADERS: dict[Limits, Callable[[Any], Json]] = {}


def fast_loader(limits: Limits = DEFAULT_LIMITS) -> Callable[[Any], Json]:
    """A function parsing one JSON text (bytes or str) under ``limits`` — the hot path of a reader.
    It raises :class:`JsonInputError` without file or line (the caller knows them). It does not
    check the length: a reader bounds its lines before parsing."""
    fn = _LOADERS.get(limits)
    if fn is not None:
        return fn
    max_depth = limits.max_depth
    shallow = 2 * max_depth + 1  # a shorter text cannot nest deeper than max_depth
    run = min(19, limits.max_int_digits + 1)  # orjson reads up to 64-bit integers exactly
    s_search = _digit_run(run)[0].search
    zeros = b"0" * run
    find = bytes.find

    if _use_orjson:
        oloads = _ORJSON_LOADS
        assert oloads is not None
        oerror = _ORJSON_ERROR

        def load(data: Any) -> Json:
            if data.__class__ is bytes:
                shape = data.translate(_SHAPE)  # digits as "0", "[" and "{" as "[", the rest as " "
                if find(shape, zeros) >= 0:  # a long digit run: orjson could make it a float (find: cheaper than `in`)
                    return _canonical(data, limits)
                deep = len(data) > shallow and shape.count(b"[") > max_depth
            elif data.__class__ is str:
                if s_search(data) is not None:
                    return _canonical(data, limits)
                deep = len(data) > shallow and data.count("[") + data.count("{") > max_depth
            else:
                return load(bytes(data))
            try:
                value = oloads(data)
            except oerror:
                return _canonical(data, limits)
            if deep and _walk(value, limits, False):
                raise _depth_error(limits, data if data.__class__ is str else data.decode("utf-8"))
            return value
    else:
        def load(data: Any) -> Json:
            return _canonical(data, limits)

    _LOADERS[limits] = load
    return load


def _size(data: bytes | bytearray | memoryview | str) -> int:
    if isinstance(data, str):
        n = len(data)
        return n if n * 4 <= MAX_BYTES else len(data.encode("utf-8", "surrogatepass"))
    return len(data)


def loads(data: bytes | bytearray | memoryview | str, *, limits: Limits = DEFAULT_LIMITS) -> Json:
    """Parse one JSON text (a line, a message or a whole document) under ``limits``. Errors carry
    the line and column within ``data``."""
    if _size(data) > limits.max_bytes:
        raise JsonInputError(limits.too_long("a JSON text"))
    return fast_loader(limits)(data)


def parse_line(data: bytes | bytearray | memoryview | str, *, file: str | None = None, line: int | None = None,
               limits: Limits = DEFAULT_LIMITS, what: str = "line") -> Json:
    """Parse one NDJSON line or one protocol message (``what`` names it in messages). Errors carry
    ``file`` and ``line``; a byte order mark is refused (only a file may start with one)."""
    if _size(data) > limits.max_bytes:
        raise JsonInputError(limits.too_long(f"a {what}"), file=file, line=line)
    try:
        return fast_loader(limits)(data)
    except JsonInputError as exc:
        exc.file = exc.file or file
        exc.line = line if line is not None else exc.line
        raise


def check_value(value: Json, *, limits: Limits = DEFAULT_LIMITS, where: str = "$") -> None:
    """Check a value built elsewhere (a TOML document, an in-process message) against the limits
    JSON input gets: depth, integer digits, finite numbers, text. Raises :class:`JsonInputError`
    naming the field (a JSON path from ``where``)."""
    stack: list[tuple[Json, str, int]] = [(value, where, 1)]
    digits = limits.max_int_digits
    bound = 10 ** digits
    while stack:
        v, path, d = stack.pop()
        if isinstance(v, dict):
            if d > limits.max_depth:
                raise JsonInputError(f"nested more than {limits.max_depth} levels deep (the limit)", field=path)
            for k, x in v.items():
                if not isinstance(k, str):
                    raise JsonInputError("a key must be a string", field=path)
                if _SURROGATE.search(k):
                    raise JsonInputError("a lone UTF-16 surrogate in a key: not text", field=path)
                stack.append((x, f"{path}.{k}" if _PLAIN_KEY.fullmatch(k) else f"{path}[{json.dumps(k)}]", d + 1))
        elif isinstance(v, (list, tuple)):
            if d > limits.max_depth:
                raise JsonInputError(f"nested more than {limits.max_depth} levels deep (the limit)", field=path)
            stack.extend((x, f"{path}[{i}]", d + 1) for i, x in enumerate(v))
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, int):
            if not -bound < v < bound:
                raise JsonInputError(f"an integer of more than {digits} digits (the limit)", field=path)
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise JsonInputError(f"the number {v!r} is not finite (non-finite numbers are refused)", field=path)
        elif isinstance(v, str) and _SURROGATE.search(v):
            raise JsonInputError("a lone UTF-16 surrogate in a string: not text", field=path)


_PLAIN_KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


# --------------------------------------------------------------------------------------------
# Writing: strict JSON that is also safe to show on a terminal
# --------------------------------------------------------------------------------------------

# Characters a terminal may act on (C0/C1 controls, DEL) or that reorder what is shown (bidi
# overrides, line/paragraph separators): escaped as \uXXXX inside JSON strings.
_UNSAFE_IN_JSON: Final = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def dumps(value: Json, *, indent: int | None = None, sort_keys: bool = False, compact: bool = True) -> str:
    """Strict JSON text (``NaN``/``Infinity`` refused with ``ValueError``) in which control and
    bidi characters are escaped, so the output is safe on a terminal and parses everywhere.
    ``compact``: no spaces after separators (when not indented)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, indent=indent, sort_keys=sort_keys,
                      separators=(",", ":") if compact and indent is None else None)
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def read_file(path: str | Path, *, limits: Limits = DEFAULT_LIMITS, what: str = "file") -> bytes:
    """The bytes of a file (``-``: standard input), at most ``limits.max_bytes``. Raises
    :class:`JsonInputError` naming the file: missing, a directory, unreadable, or too large."""
    name = str(path)
    try:
        if name == "-":
            data = sys.stdin.buffer.read(limits.max_bytes + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(limits.max_bytes + 1)
    except FileNotFoundError:
        raise JsonInputError("no such file", file=name) from None
    except IsADirectoryError:
        raise JsonInputError("is a directory, not a file", file=name) from None
    except OSError as exc:
        raise JsonInputError(f"cannot read: {exc.strerror or exc}", file=name) from None
    if len(data) > limits.max_bytes:
        raise JsonInputError(f"the {what} is larger than {limits.max_bytes} bytes (the limit"
                             + (f"; {limits.flag} raises it" if limits.flag else "") + ")", file=name)
    return data


def decode_text(data: bytes, *, file: str | None = None) -> str:
    """UTF-8 text of a whole file, a leading byte order mark skipped; invalid UTF-8 is refused with
    the line of the first bad byte."""
    if data[:3] == _BOM:
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _utf8_error(data, exc).at(file=file) from None


def read_text(path: str | Path, *, limits: Limits = DEFAULT_LIMITS, what: str = "file") -> str:
    """A whole text file (see :func:`read_file`, :func:`decode_text`)."""
    return decode_text(read_file(path, limits=limits, what=what), file=str(path))


def load_json(path: str | Path, *, limits: Limits = DEFAULT_LIMITS, what: str = "file") -> Json:
    """A file holding one JSON document (a leading BOM skipped). Errors name the file and line."""
    data = read_file(path, limits=limits, what=what)
    if data[:3] == _BOM:
        data = data[3:]
    try:
        return fast_loader(limits)(data)
    except JsonInputError as exc:
        raise exc.at(file=str(path)) from None


_TOML_LINE: Final = re.compile(r"\(at line (\d+), column (\d+)\)")


def load_toml(path: str | Path, *, limits: Limits = DEFAULT_LIMITS, what: str = "file") -> dict[str, Any]:
    """A TOML file under the JSON limits (depth, integer digits, finite numbers, UTF-8, size).
    Errors name the file and line (or the field)."""
    text = read_text(path, limits=limits, what=what)
    name = str(path)
    return parse_toml(text, file=name, limits=limits)


def parse_toml(text: str, *, file: str | None = None, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """TOML text under the JSON limits (see :func:`load_toml`)."""
    try:
        with _recursion_headroom(4 * limits.max_depth + 200):
            doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _TOML_LINE.search(msg)
        reason = _TOML_LINE.sub("", msg).strip()
        raise JsonInputError(f"not valid TOML: {reason}", file=file, line=int(m.group(1)) if m else None,
                             column=int(m.group(2)) if m else None) from None
    except RecursionError:
        line, col = _deep_position(text, limits.max_depth)
        raise JsonInputError(f"nested more than {limits.max_depth} levels deep (the limit)", file=file, line=line,
                             column=col) from None
    except ValueError as exc:  # an integer past Python's conversion limit (4300 digits)
        m = re.search("[0-9_]{" + str(limits.max_int_digits + 1) + ",}", text)
        if m is not None:
            line, col = _position(text, m.start())
            digits = len(m.group().replace("_", ""))
            raise JsonInputError(f"an integer of {digits} digits (the limit is {limits.max_int_digits} digits)",
                                 file=file, line=line, column=col) from None
        raise JsonInputError(f"not TOML loopspec can read: {str(exc).splitlines()[0]}", file=file) from None
    try:
        check_value(doc, limits=limits, where="$")
    except JsonInputError as exc:
        field = (exc.field or "$").removeprefix("$.").removeprefix("$")
        line = col = None
        if exc.reason.startswith("nested"):  # the line says more than a path of [0][0][0]…
            line, col = _deep_position(text, limits.max_depth)
            field = ""
        raise JsonInputError(exc.reason, file=file, line=line, column=col, field=field or None) from None
    return doc


@contextlib.contextmanager
def _recursion_headroom(frames: int) -> Iterator[None]:
    """Room for ``frames`` more Python frames (a recursive parser on input within the depth limit)."""
    old = sys.getrecursionlimit()
    want = _stack_depth() + frames
    if want > old:
        sys.setrecursionlimit(want)
    try:
        yield
    finally:
        if want > old:
            sys.setrecursionlimit(old)


def _stack_depth() -> int:
    f = sys._getframe()
    n = 0
    while f is not None:
        n += 1
        f = f.f_back  # type: ignore[assignment]
    return n


def iter_lines(fh: IO[bytes], *, limits: Limits = DEFAULT_LIMITS, first_line: int = 1,
               head: int = 4096) -> Iterator[tuple[int, bytes | None, str | None, bytes]]:
    """The lines of a byte stream: ``(line number, the line or None, why it is None, its head)``.
    A line longer than ``limits.max_bytes`` is skipped without being held (``None`` and a reason);
    its first ``head`` bytes are kept so a caller can tell whose line it was. A leading byte order
    mark is skipped."""
    n = first_line - 1
    readline = fh.readline
    limit = limits.max_bytes
    first = True
    while True:
        line = readline(limit + 1)
        if not line:
            return
        n += 1
        if first:
            first = False
            if line[:3] == _BOM and n == 1:
                line = line[3:]
        if len(line) > limit:
            start = line[:head]
            while line and not line.endswith(b"\n"):
                line = readline(1 << 20)
            yield n, None, limits.too_long("line") + ": skipped", start
            continue
        yield n, line, None, b""
