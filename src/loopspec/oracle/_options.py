"""The options of a check (``loopspec check``'s flags), shared by every stage of the pipeline.

Shared data, below the stages: it imports nothing of the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ..support import safejson

#: Default longest line read (bytes); longer lines are skipped with an error naming the line. The same
#: limit bounds a transcript or trace file that is one JSON document.
DEFAULT_MAX_LINE: Final = safejson.MAX_BYTES


@dataclass(frozen=True)
class Options:
    max_line: int = DEFAULT_MAX_LINE
    allow_incomplete: bool = False
    validate: bool = False  # validate every event against the ledger JSON Schema (slow)

    @property
    def limits(self) -> safejson.Limits:
        """The loader's limits for these options (``max_line`` bounds a line and a whole document)."""
        return safejson.Limits(max_bytes=self.max_line, flag="--max-line-bytes")


DEFAULT_OPTIONS: Final = Options()
