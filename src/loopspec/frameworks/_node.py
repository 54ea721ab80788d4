"""The TypeScript adapters' runtime: Node.js (>= 20 on ``PATH``) and the pinned npm packages.

The adapters (``frameworks/js/src/*.ts``), their ``package.json`` and its committed ``package-lock.json`` ship in
the wheel. On first use (or ``loopspec frameworks install js``) the pinned packages are installed with ``npm ci``
into a cache directory named after a hash of package.json and the lock file, and the adapters compiled there with
the pinned TypeScript compiler into a directory named after a hash of their sources (:func:`cache_dir`); what it
does is printed on stderr. An upgrade of loopspec that changes the pins installs afresh; one that changes only
the adapters recompiles them. ``LOOPSPEC_JS_CACHE`` chooses the parent directory (default:
``$XDG_CACHE_HOME/loopspec`` or ``~/.cache/loopspec``).

Nothing here imports a framework or runs Node at import time.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "MIN_NODE",
    "SOURCE",
    "NodeMissing",
    "adapter_script",
    "cache_dir",
    "ensure_installed",
    "node_version",
    "package_version",
]

#: the oldest Node.js major version the adapters run on
MIN_NODE = 20

#: the shipped sources: package.json, package-lock.json, tsconfig.json and src/*.ts
SOURCE = Path(__file__).resolve().parent / "js"

_FILES = ("package.json", "package-lock.json", "tsconfig.json")


class NodeMissing(Exception):
    """Node.js or npm is missing or too old, or the install failed (the message says what to do)."""


def _sources() -> list[Path]:
    return [SOURCE / f for f in _FILES] + sorted((SOURCE / "src").glob("*.ts"))


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    """Where the compiled adapters of this loopspec's sources live: ``js-<hash of package.json and the lock
    file>/`` holds the installed packages (node_modules/, shared by every loopspec with the same pins) and
    ``build-<hash of the sources>/dist/`` the adapters compiled from them."""
    base = os.environ.get("LOOPSPEC_JS_CACHE")
    if base:
        parent = Path(base)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        parent = (Path(xdg) if xdg else Path.home() / ".cache") / "loopspec"
    deps = parent / f"js-{_digest([SOURCE / 'package.json', SOURCE / 'package-lock.json'])}"
    return deps / f"build-{_digest(_sources())}"


def node_version() -> tuple[int, ...]:
    """The version of ``node`` on PATH; :class:`NodeMissing` when there is none or it is older than MIN_NODE."""
    node = shutil.which("node")
    if node is None:
        raise NodeMissing(f"the TypeScript frameworks need Node.js >= {MIN_NODE} on PATH, and there is no `node` "
                          "(install Node.js from https://nodejs.org or your package manager)")
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
        ver = tuple(int(x) for x in out.lstrip("v").split("."))
    except (OSError, ValueError, subprocess.TimeoutExpired):
        raise NodeMissing(f"`{node} --version` did not print a version") from None
    if ver[0] < MIN_NODE:
        raise NodeMissing(f"the TypeScript frameworks need Node.js >= {MIN_NODE}, and `node` is {out}")
    return ver


def _step(argv: list[str], cwd: Path, what: str, quiet: bool) -> None:
    if not quiet:
        print(f"loopspec: {what}: {shlex.join(argv)} (in {cwd})", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NodeMissing(f"{what} failed: {exc}") from None
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise NodeMissing(f"{what} failed (exit {done.returncode}): {shlex.join(argv)}\n{tail}")


def _atomically(target: Path, fill: Any) -> None:
    """Make ``target`` (a directory) by filling a temporary sibling, then renaming it (under a lock: another
    process may be making the same directory)."""
    import fcntl

    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").is_file():
            return
        work = target.parent / f".{target.name}.tmp-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            fill(work)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        (work / ".complete").write_text("ok\n")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(work, target)


def ensure_installed(*, quiet: bool = False) -> Path:
    """The build directory with the pinned packages installed and the adapters compiled (installing them on
    first use: ``npm ci``, then ``tsc``); :class:`NodeMissing` when that cannot be done."""
    node_version()
    build = cache_dir()
    if (build / ".complete").is_file():
        return build
    npm = shutil.which("npm")
    if npm is None:
        raise NodeMissing("the TypeScript frameworks need npm (it comes with Node.js) on PATH, and there is none")
    deps = build.parent

    def install(work: Path) -> None:
        for f in ("package.json", "package-lock.json"):
            shutil.copyfile(SOURCE / f, work / f)
        _step([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], work,
              f"installing the pinned JS packages into {deps} (first use)", quiet)

    if not (deps / ".complete").is_file():
        _atomically(deps, install)

    def compile_(work: Path) -> None:
        (work / "src").mkdir()
        shutil.copyfile(SOURCE / "tsconfig.json", work / "tsconfig.json")
        for p in sorted((SOURCE / "src").glob("*.ts")):
            shutil.copyfile(p, work / "src" / p.name)
        _step([shutil.which("node") or "node", str(deps / "node_modules" / "typescript" / "bin" / "tsc"), "-p",
               "tsconfig.json"], work, f"compiling the TypeScript adapters into {build}", quiet)

    _atomically(build, compile_)
    return build


def adapter_script(module: str) -> Path:
    """The compiled adapter (``dist/MODULE.js``), installing on first use."""
    return ensure_installed() / "dist" / f"{module}.js"


def package_version(package: str) -> str | None:
    """The version ``package-lock.json`` pins for a top-level npm package."""
    import json

    lock = json.loads((SOURCE / "package-lock.json").read_text(encoding="utf-8"))
    entry = lock.get("packages", {}).get(f"node_modules/{package}")
    return entry.get("version") if isinstance(entry, dict) else None
