"""The TypeScript adapters' runtime: Node.js (>= 20 on ``PATH``) and the pinned npm packages.

The adapters (``frameworks/js/src/*.ts``), their ``package.json`` and its committed ``package-lock.json`` ship in
the wheel. On first use (or ``loopspec frameworks install js``) they are copied into a cache directory, the
pinned packages installed there with ``npm ci`` and the adapters compiled with the pinned TypeScript compiler;
what it does is printed on stderr. The directory is named after a hash of those files, so an upgrade of loopspec
installs afresh and two versions never share one. ``LOOPSPEC_JS_CACHE`` chooses the parent directory (default:
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


def cache_dir() -> Path:
    """Where the packages and the compiled adapters of this loopspec's sources live."""
    h = hashlib.sha256()
    for p in _sources():
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    base = os.environ.get("LOOPSPEC_JS_CACHE")
    if base:
        parent = Path(base)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        parent = (Path(xdg) if xdg else Path.home() / ".cache") / "loopspec"
    return parent / f"js-{h.hexdigest()[:16]}"


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


def ensure_installed(*, quiet: bool = False) -> Path:
    """The cache directory with the pinned packages installed and the adapters compiled (installing them on
    first use: ``npm ci``, then ``tsc``); :class:`NodeMissing` when that cannot be done."""
    node_version()
    target = cache_dir()
    if (target / ".complete").is_file():
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise NodeMissing("the TypeScript frameworks need npm (it comes with Node.js) on PATH, and there is none")
    target.parent.mkdir(parents=True, exist_ok=True)
    import fcntl

    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be installing the same directory
        if (target / ".complete").is_file():
            return target
        work = target.parent / f".{target.name}.tmp-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        (work / "src").mkdir(parents=True)
        for p in _sources():
            shutil.copyfile(p, work / ("src" if p.suffix == ".ts" else "") / p.name)

        def step(argv: list[str], what: str) -> None:
            if not quiet:
                print(f"loopspec: {what}: {shlex.join(argv)} (in {target})", file=sys.stderr, flush=True)
            try:
                done = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=900)
            except (OSError, subprocess.TimeoutExpired) as exc:
                shutil.rmtree(work, ignore_errors=True)
                raise NodeMissing(f"{what} failed: {exc}") from None
            if done.returncode != 0:
                shutil.rmtree(work, ignore_errors=True)
                tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
                raise NodeMissing(f"{what} failed (exit {done.returncode}): {shlex.join(argv)}\n{tail}")

        step([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
             "installing the pinned JS packages (first use)")
        step([shutil.which("node") or "node", "node_modules/typescript/bin/tsc", "-p", "tsconfig.json"],
             "compiling the TypeScript adapters")
        (work / ".complete").write_text("ok\n")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(work, target)
    return target


def adapter_script(module: str) -> Path:
    """The compiled adapter (``dist/MODULE.js``), installing on first use."""
    return ensure_installed() / "dist" / f"{module}.js"


def package_version(package: str) -> str | None:
    """The version ``package-lock.json`` pins for a top-level npm package."""
    import json

    lock = json.loads((SOURCE / "package-lock.json").read_text(encoding="utf-8"))
    entry = lock.get("packages", {}).get(f"node_modules/{package}")
    return entry.get("version") if isinstance(entry, dict) else None
