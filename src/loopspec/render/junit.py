"""JUnit XML, the test report CI systems read (Jenkins, GitLab, GitHub Actions' test reporters, Azure DevOps).

The file is the common Ant/Surefire form, valid against the ``junit-10.xsd`` schema Jenkins' xUnit plugin
publishes (``tests/golden/junit/`` has it with its source, and a test validates every file we write against
it)::

    <testsuites name="loopspec fuzz" tests="…" failures="…" errors="…" time="…">
      <testsuite name="…" tests="…" failures="…" errors="…" skipped="…" time="…" timestamp="…">
        <properties><property name="command" value="loopspec fuzz …"/>…</properties>
        <testcase classname="loopspec.fuzz.batch" name="R6 MUST …" time="…">
          <failure type="R6 replay-re-executed" message="…">Let … Then …  replay: loopspec replay …</failure>
        </testcase>
        …

:class:`JunitWriter` streams: cases go to a spool file as they come (a check of a million runs never holds
them in memory) and :meth:`JunitWriter.finish` writes the suite, counts first, atomically. A case added
again under the same key (a run first judged conforming that a later event shows violating) replaces the
earlier one.

XML 1.0 cannot carry most control characters even escaped; text from an implementation or a recording may
hold them (an id ``"\\x1c"``), so each is written as its escape (``\\x1c``), and so is a lone surrogate.
"""

from __future__ import annotations

import io
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Final

from ..support.text import open_atomic
from .report import Case, Report

__all__ = ["JunitWriter", "junit_xml", "write_junit", "xml_text"]

_NOT_XML: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
_ESCAPES: Final = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
#: in attributes, quotes are escaped, and line breaks and tabs are written as references, so a parser keeps them
_ATTR_ESCAPES: Final = {**_ESCAPES, '"': "&quot;", "\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}
#: a message attribute is one line a CI system shows; the full text is in the element
MAX_MESSAGE: Final = 500


def xml_text(text: str, *, attribute: bool = False) -> str:
    """``text`` escaped for XML 1.0 (characters XML cannot hold become visible escapes such as ``\\x1c``)."""
    text = _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)
    table = _ATTR_ESCAPES if attribute else _ESCAPES
    return "".join(table.get(ch, ch) for ch in text) if any(ch in table for ch in text) else text


def _attrs(pairs: Iterable[tuple[str, str | int | float | None]]) -> str:
    return "".join(f' {k}="{xml_text(str(v), attribute=True)}"' for k, v in pairs if v is not None)


def _seconds(value: float | None) -> str | None:
    """Surefire's time: seconds with at most three decimals, no exponent, no sign."""
    return None if value is None else f"{max(value, 0.0):.3f}"


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 1] + "…"


def case_xml(case: Case) -> str:
    head = f"    <testcase{_attrs((('classname', case.classname), ('name', case.name), ('time', _seconds(case.seconds))))}"
    tag = {"failed": "failure", "error": "error", "skipped": "skipped"}.get(case.status)
    if tag is None:
        if not case.text:
            return head + "/>\n"
        return head + f">\n      <system-out>{xml_text(case.text)}</system-out>\n    </testcase>\n"
    attrs = _attrs((("type", case.kind or None), ("message", _one_line(case.message) if case.message else None)))
    body = f"<{tag}{attrs}>{xml_text(case.text)}</{tag}>" if case.text else f"<{tag}{attrs}/>"
    return head + f">\n      {body}\n    </testcase>\n"


class JunitWriter:
    """One test suite written to ``path`` when :meth:`finish` is called; :meth:`add` spools each case."""

    def __init__(self, path: str | Path, *, suite: str, properties: Sequence[tuple[str, str]] = ()) -> None:
        self.path = Path(path)
        self.suite = suite
        self.properties = list(properties)
        self._spool: IO[str] = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 - closed by finish
        self._status: dict[str, str] = {}  # key -> status of the case last written under it
        self._superseded: Counter[int] = Counter()  # spool line numbers replaced by a later case
        self._line_of: dict[str, int] = {}
        self._lines = 0

    def add(self, case: Case, key: str | None = None) -> None:
        """Spool one case; a case with the ``key`` of an earlier one replaces it."""
        if key is not None:
            if key in self._line_of:
                self._superseded[self._line_of[key]] += 1
            self._line_of[key] = self._lines
            self._status[key] = case.status
        else:
            self._status[f"\x00{self._lines}"] = case.status
        self._spool.write(case_xml(case).replace("\n", "\x00") + "\n")  # one spool line per case
        self._lines += 1

    def counts(self) -> dict[str, int]:
        c = Counter(self._status.values())
        return {"tests": len(self._status), "failures": c["failed"], "errors": c["error"], "skipped": c["skipped"]}

    def write_to(self, out: IO[str], *, seconds: float | None = None, timestamp: str = "") -> None:
        """Write the XML document to ``out``."""
        c = self.counts()
        out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
        total = (("tests", c["tests"]), ("failures", c["failures"]), ("errors", c["errors"]))
        out.write(f"<testsuites{_attrs((('name', self.suite), *total, ('time', _seconds(seconds))))}>\n")
        suite = (("name", self.suite), *total, ("skipped", c["skipped"]), ("time", _seconds(seconds)),
                 ("timestamp", timestamp or None))
        out.write(f"  <testsuite{_attrs(suite)}>\n")
        if self.properties:
            out.write("    <properties>\n")
            for k, v in self.properties:
                out.write(f"      <property{_attrs((('name', k), ('value', v)))}/>\n")
            out.write("    </properties>\n")
        self._spool.seek(0)
        for n, line in enumerate(self._spool):
            if not self._superseded[n]:
                out.write(line[:-1].replace("\x00", "\n"))
        out.write("  </testsuite>\n</testsuites>\n")

    def finish(self, *, seconds: float | None = None, timestamp: str = "") -> Path:
        """Write the file (atomically: a temporary file renamed over ``path``) and return its path."""
        try:
            with open_atomic(self.path) as out:
                self.write_to(out, seconds=seconds, timestamp=timestamp)
        finally:
            self._spool.close()
        return self.path

    def close(self) -> None:
        """Drop the spool without writing (the command failed before it had a result)."""
        self._spool.close()


def _properties(report: Report) -> list[tuple[str, str]]:
    props = [("command", report.command_line)]
    if report.version:
        props.append(("loopspec", report.version))
    props += [(k, v) for k, v in report.summary]
    return props


def _writer(report: Report, path: str | Path) -> JunitWriter:
    w = JunitWriter(path, suite=report.title, properties=_properties(report))
    for case in report.cases:
        w.add(case)
    return w


def write_junit(path: str | Path, report: Report) -> Path:
    """The report's cases as a JUnit XML file at ``path`` (written atomically)."""
    return _writer(report, path).finish(seconds=report.seconds, timestamp=report.timestamp)


def junit_xml(report: Report) -> str:
    """The report's cases as JUnit XML text (what :func:`write_junit` writes)."""
    w = _writer(report, Path("junit.xml"))
    buf = io.StringIO()
    try:
        w.write_to(buf, seconds=report.seconds, timestamp=report.timestamp)
    finally:
        w.close()
    return buf.getvalue()
