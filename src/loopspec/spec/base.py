"""What every spec loader shares: the definition error :class:`SpecError`, and where the spec is — the one
shipped with loopspec (:func:`shipped_spec_path`) or the one chosen with ``--spec`` (:func:`default_spec_path`).
``loader`` (loop.toml, SPEC.md) and ``writes`` (writes.toml) both import it; it imports neither.
"""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["SpecError", "default_spec_path", "shipped_spec_path", "spec_chosen"]

class SpecError(ValueError):
    """A definition error in the spec. ``entry`` names what is wrong, ``field`` where."""

    def __init__(
        self, message: str, *, entry: str = "", field: str = "", path: str = "", line: int = 0
    ) -> None:
        self.message = message
        self.entry = entry
        self.field = field
        self.path = path
        self.line = line
        where = f"{path}:{line}: " if path and line else (f"{path}: " if path else "")
        what = f"{entry}: " if entry else ""
        fld = f"{field}: " if field else ""
        super().__init__(f"{where}{what}{fld}{message}")


#: The spec chosen with ``--spec`` (innermost :func:`using_spec` last); empty: the shipped one.
_CHOSEN: list[Path] = []


@functools.cache
def shipped_spec_path() -> Path:
    """The spec shipped with loopspec: ``spec/loop.toml`` of the source tree when loopspec runs from
    one (an editable install, ``src/`` on the path), else the copy packaged in the wheel
    (``loopspec/spec/loop.toml``, put there at build time from the same top-level ``spec/``)."""
    package = Path(__file__).resolve().parents[1]  # .../loopspec
    repo = package.parents[1] / "spec" / "loop.toml"
    packaged = package / "spec" / "loop.toml"  # beside this module: the wheel puts the data in this package
    if package.parent.name == "src" and repo.is_file():
        return repo
    if packaged.is_file():
        return packaged
    if repo.is_file():
        return repo
    raise SpecError(f"cannot find the spec: neither {packaged} (an installed loopspec) nor {repo} "
                    "(a source checkout) exists; reinstall loopspec or give --spec FILE")


def spec_chosen() -> bool:
    """Whether a spec other than the shipped one is the default (:func:`using_spec`, ``--spec``)."""
    return bool(_CHOSEN)


def default_spec_path() -> Path:
    """The spec every default refers to: the one chosen with :func:`using_spec` (``--spec``), else the
    shipped one. Its rules (SPEC.md), bounds.toml, conformance/ and schema/ are looked for beside it."""
    return _CHOSEN[-1] if _CHOSEN else shipped_spec_path()
