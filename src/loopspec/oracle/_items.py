"""The events a conversation is read into, whatever recorded it (a transcript, a framework history, the spans of
a telemetry run): a user turn, a proposal (one model response's calls), a final answer, a tool result, and —
from telemetry — an execution. The read and group stages produce them; the judge walks them.

Shared data, below the stages: it imports nothing of the oracle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Json = Any


class TranscriptError(ValueError):
    """A conversation that does not have the shape of its format: ``where`` is a JSON path."""

    def __init__(self, where: str, message: str, line: int | None = None) -> None:
        self.where, self.message, self.line = where, message, line
        super().__init__(f"{where}: {message}")


@dataclass
class Call:
    id: Json
    name: Json
    args: Json
    args_ok: bool
    path: str
    line: int
    index: int = 0  # request index across the conversation
    cls: str = "fresh"  # fresh | replay | conflict | malformed


@dataclass
class Result:
    id: Json
    content: Json
    is_error: bool | None
    path: str
    line: int


@dataclass
class Execution:
    """A tool execution recorded by telemetry (an ``execute_tool`` span): what ran, and how it ended."""

    id: Json  # the call id the span records, or None when it records none
    name: Json
    args: Json
    args_known: bool  # the arguments were recorded as a JSON object
    ok: bool | None  # True: succeeded, False: failed, None: not recorded
    path: str
    line: int
    start: int | None = None  # when it started and ended (ns), when recorded: executions overlap (section 5)
    end: int | None = None


@dataclass
class Item:
    kind: str  # user | proposal | final | result | execution | unrecorded (a model call's input, not recorded)
    pos: int  # position in the conversation (event index)
    path: str
    line: int
    calls: list[Call] = field(default_factory=list)
    result: Result | None = None
    execution: Execution | None = None


LineOf = Callable[[Json], int]


class TelemetryError(TranscriptError):
    """A span or document that does not have the shape of its format."""


@dataclass
class Span:
    trace: str
    span: str
    parent: str | None
    name: str
    start: int  # ns since the epoch
    end: int
    attrs: dict[str, Json]
    error: bool
    path: str
    line: int
    order: int = 0  # position in the file
    op: str | None = None  # chat | tool | agent | None


@dataclass
class Conversation:
    """One conversation of a transcript or history file, read: its items, or why it cannot be read."""

    id: str
    format: str
    line: int  # where it starts
    entries: int  # its messages or items, as recorded
    items: list[Item] | None  # None: it cannot be read (``error``)
    error: str | None = None
    error_line: int | None = None


@dataclass
class TelemetryRun:
    """One run of a telemetry file, grouped from its spans: its conversation and executions as items, and what
    its spans record (or why they cannot be read as a run)."""

    id: str
    spans: int  # the run's model call and tool spans
    lines: tuple[int, int]
    agent: str | None  # the agent's name, when recorded
    items: list[Item] | None  # None: the run cannot be read (``error``)
    tools: dict[str, Any] | None = None  # the recorded allow-list: name -> schema (core.ToolSchema or None)
    schemas: dict[str, Any] = field(default_factory=dict)  # per-tool schemas recorded on tool spans
    recorded: list[str] = field(default_factory=list)  # what the run records: messages, executions, ...
    notes: list[str] = field(default_factory=list)  # how the conversation was read where the recording was incomplete
    error: str | None = None
    error_line: int | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # what was recorded, for the verdict's coverage
    stitched: dict[str, Any] | None = None  # the traces stitched into this run and the evidence of each join
