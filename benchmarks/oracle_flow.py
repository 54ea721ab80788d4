"""How control flows between the oracle's modules while ``loopspec check`` reads one file.

For each file given (default: one ledger, one telemetry export and one transcript of the golden corpus),
checks it in process under :func:`sys.setprofile` and counts, for every module of ``loopspec.oracle``,
how many times control *enters* it from another module of ``loopspec.oracle``: a call, or the resumption of
a generator (both are ``call`` events; a generator that is resumed is entered again). It prints the
entries per module and per edge (caller module → callee module).

With the oracle's stage contract in ``pyproject.toml`` (the import-linter ``layers`` contract whose
container is ``loopspec.oracle``), it also counts the *backward* entries: control entering a module of an
earlier stage (a higher layer) from a later one. A straight pipeline has none.

    python benchmarks/oracle_flow.py                      # the three golden files
    python benchmarks/oracle_flow.py FILE... --edges      # other files, and every edge

No timing: these are counts, the same on every machine.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "oracle"
DEFAULT_FILES = ("ledger-fail-reexecute-replay.ndjson", "rec-langgraph-pass.otlp.jsonl", "chat-pass.json")
PKG = "loopspec.oracle"


def _module(frame: FrameType | None) -> str | None:
    if frame is None:
        return None
    name = frame.f_globals.get("__name__")
    return name if isinstance(name, str) and (name == PKG or name.startswith(PKG + ".")) else None


def stage_order() -> tuple[dict[str, int], list[str]] | None:
    """(module -> its layer, 0 = the top; each layer's name) in the oracle's stage contract, or None without one."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for c in conf.get("tool", {}).get("importlinter", {}).get("contracts", []):
        if c.get("type") == "layers" and c.get("containers") == [PKG]:
            out: dict[str, int] = {}
            names = []
            for k, layer in enumerate(c["layers"]):
                mods = [m.strip() for m in layer.replace(":", "|").split("|")]
                names.append(mods[0] if len(mods) == 1 else "shared data" if k == len(c["layers"]) - 1
                             else " | ".join(mods))
                for m in mods:
                    out[f"{PKG}.{m}"] = k
            return out, names
    return None


def _layer(order: dict[str, int], module: str) -> int | None:
    """The layer of ``module`` (or of the package it is in)."""
    while module and module != PKG:
        if module in order:
            return order[module]
        module = module.rpartition(".")[0]
    return None


def trace(path: Path) -> tuple[Counter[str], Counter[tuple[str, str]], int]:
    """(entries per module, entries per edge, exit code) of checking ``path``."""
    from loopspec.oracle import check_file

    per_module: Counter[str] = Counter()
    per_edge: Counter[tuple[str, str]] = Counter()

    def prof(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = _module(frame)
        if callee is None:
            return
        caller = _module(frame.f_back)
        if caller is None or caller == callee:
            return
        per_module[callee] += 1
        per_edge[(caller, callee)] += 1

    check_file(str(path))  # warm: imports and caches, so only the file's own flow is counted
    sys.setprofile(prof)
    try:
        res = check_file(str(path))
    finally:
        sys.setprofile(None)
    return per_module, per_edge, res.summary.exit_code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help=f"files to check (default: {', '.join(DEFAULT_FILES)} of the golden "
                                             "corpus)")
    ap.add_argument("--edges", action="store_true", help="print every edge, not only the module totals")
    args = ap.parse_args(argv)
    files = [Path(f) for f in args.files] or [GOLDEN / f for f in DEFAULT_FILES]
    order = stage_order()
    for path in files:
        mods, edges, code = trace(path)
        short = {m: m.removeprefix(PKG + ".") for m in {*mods, *(a for a, _ in edges)}}
        print(f"{path.name} (exit {code}): control enters oracle modules from other oracle modules "
              f"{sum(mods.values())} times")
        for m, n in sorted(mods.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {short[m]:<24} entered {n:>5} times")
        if order is not None:
            layers, names = order
            between: Counter[tuple[int, int]] = Counter()
            for (a, b), n in edges.items():
                la, lb = _layer(layers, a), _layer(layers, b)
                if la is not None and lb is not None and la != lb:
                    between[(la, lb)] += n
            print("  between layers of the stage contract (caller -> callee: entries):")
            for (la, lb), n in sorted(between.items()):
                print(f"    {names[la]:>12} -> {names[lb]:<12} {n:>5}" + ("   BACKWARD" if lb < la else ""))
            back = sum(n for (la, lb), n in between.items() if lb < la)
            print(f"  backward entries (into an earlier stage or a driver): {back}")
        if args.edges:
            for (a, b), n in sorted(edges.items(), key=lambda kv: (-kv[1], kv[0])):
                print(f"    {short[a]:>24} -> {short[b]:<24} {n:>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
