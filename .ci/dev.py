#!/usr/bin/env python3
"""Set up everything on a fresh machine (only python3 needed), then run a job.

    python3 .ci/dev.py demo     # the main job: the demo of the whole product
    python3 .ci/dev.py test     # the full test suite (what CI runs), on every CPU (pytest-xdist)
    python3 .ci/dev.py loopspec ARGS...   # any loopspec command inside the project's venv

The virtual environment lives in .venv/ and is rebuilt when pyproject.toml changes; Google ADK, which cannot
share it (.ci/adk-constraints.txt), gets its own in .venv-adk/ (for the test and loopspec jobs).
For the test job, Graphviz's `dot`, the PostgreSQL server binaries (for the PostgreSQL operation
ledger's tests) and Chromium (for the HTML report's browser tests) are installed with apt-get when they are
missing and we are root; the TypeScript frameworks' npm packages are installed when Node.js is on PATH.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".loopspec-installed"


def say(msg: str) -> None:
    print(f"[dev] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw: object) -> None:
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def ensure_venv() -> None:
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()
                          + (ROOT / ".ci" / "frameworks-constraints.txt").read_bytes()).hexdigest()
    if STAMP.is_file() and STAMP.read_text().strip() == want and PY.exists():
        return
    if not PY.exists():
        say("creating .venv")
        run([sys.executable, "-m", "venv", str(VENV)])
    say("installing loopspec and its test dependencies into .venv (first run only)")
    run([str(PY), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--upgrade", "pip"])
    # the test job also fuzzes the real agent frameworks (optional extras; about 30 s to install) and tests the
    # PostgreSQL operation ledger (psycopg binary wheels, a few seconds)
    run([str(PY), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-e", f"{ROOT}[test,frameworks,postgres]",
         "-c", str(ROOT / ".ci" / "frameworks-constraints.txt")])
    STAMP.write_text(want)


ADK_VENV = ROOT / ".venv-adk"
ADK_PY = ADK_VENV / ("Scripts" if os.name == "nt" else "bin") / "python"
ADK_STAMP = ADK_VENV / ".loopspec-installed"


def ensure_adk_venv() -> None:
    """Google ADK's own environment (.ci/adk-constraints.txt says why it cannot share .venv): loopspec without
    extras plus google-adk at the pinned versions; `--impl google-adk` runs its adapter there as a process.
    A failed install is not fatal: the ADK tests then skip, saying so."""
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()
                          + (ROOT / ".ci" / "adk-constraints.txt").read_bytes()).hexdigest()
    if ADK_STAMP.is_file() and ADK_STAMP.read_text().strip() == want and ADK_PY.exists():
        return
    say("installing Google ADK into its own environment .venv-adk (first run only)")
    try:
        if not ADK_PY.exists():
            run([sys.executable, "-m", "venv", str(ADK_VENV)])
        run([str(ADK_PY), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-e", str(ROOT),
             "google-adk", "-c", str(ROOT / ".ci" / "adk-constraints.txt")])
    except (subprocess.CalledProcessError, OSError) as exc:
        say(f"could not build .venv-adk ({exc}); the Google ADK tests will be skipped")
        return
    ADK_STAMP.write_text(want)


def ensure_js() -> None:
    """The TypeScript frameworks' packages (`loopspec frameworks install js`: npm ci of the committed
    package-lock.json into loopspec's cache directory, then tsc; about 15-60 s on a fresh machine, nothing once
    done). Needs Node.js >= 20 on PATH; without it, or when the install fails, those tests skip, saying so."""
    if not shutil.which("node"):
        say("Node.js is missing; the TypeScript framework tests will be skipped")
        return
    if subprocess.call([str(BIN / "loopspec"), "frameworks", "install", "js"], stdout=subprocess.DEVNULL) != 0:
        say("could not install the TypeScript frameworks' packages; their tests will be skipped or fail")


def ensure_graphviz() -> None:
    if shutil.which("dot"):
        return
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        say("installing Graphviz (apt-get install -y graphviz)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, stdout=subprocess.DEVNULL)
        run(["apt-get", "install", "-y", "-qq", "graphviz"], env=env, stdout=subprocess.DEVNULL)
    else:
        say("Graphviz `dot` is missing and cannot be installed here; tests that render SVG will be skipped")


def ensure_postgres() -> None:
    """Debian's PostgreSQL server (initdb, pg_ctl) for tests/test_oplog_postgres.py, which starts a throw-away
    server of its own. Measured on this machine's kind: download 40 MB in 5 s, unpack 9 s, apt-get update 4 s
    (about 20-35 s in all with configuration). A failed install is not fatal: those tests then skip, saying so."""
    import glob

    if shutil.which("initdb") or glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        return
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        say("installing the PostgreSQL server (apt-get install -y --no-install-recommends postgresql)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, stdout=subprocess.DEVNULL)
        try:
            rc = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "postgresql"],
                                check=False, env=env, stdout=subprocess.DEVNULL, timeout=600).returncode
        except subprocess.TimeoutExpired:
            rc = -1
        if rc != 0:
            say("could not install PostgreSQL; the PostgreSQL ledger tests will be skipped")
    else:
        say("PostgreSQL (initdb) is missing and cannot be installed here; the PostgreSQL ledger tests will be skipped")


def ensure_chromium() -> None:
    """Debian's Chromium for tests/test_reports_browser.py, which drives it through pytest-playwright (Playwright
    never downloads a browser of its own here). A failed install is not fatal: those tests then skip, saying so."""
    if shutil.which("chromium") or shutil.which("chromium-browser"):
        return
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        say("installing Chromium (apt-get install -y --no-install-recommends chromium)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, stdout=subprocess.DEVNULL)
        try:
            rc = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"],
                                check=False, env=env, stdout=subprocess.DEVNULL, timeout=900).returncode
        except subprocess.TimeoutExpired:
            rc = -1
        if rc != 0:
            say("could not install Chromium; the HTML report's browser tests will be skipped")
    else:
        say("Chromium is missing and cannot be installed here; the HTML report's browser tests will be skipped")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("demo", "test", "loopspec"):
        print(__doc__)
        return 2
    os.chdir(ROOT)
    ensure_venv()
    job, rest = argv[0], argv[1:]
    if job in ("test", "loopspec"):
        ensure_adk_venv()
        ensure_js()
    if job == "demo":
        return subprocess.call([str(BIN / "loopspec"), "demo", *rest])
    if job == "loopspec":
        return subprocess.call([str(BIN / "loopspec"), *rest])
    ensure_graphviz()
    ensure_postgres()
    ensure_chromium()
    return subprocess.call([str(PY), "-m", "pytest", *parallel(rest), *rest])


def parallel(rest: list[str]) -> list[str]:
    """pytest-xdist's options for the test job: one worker per CPU (CI has 2), tests marked
    ``xdist_group`` (those sharing an expensive module fixture: a wheel, a database server, a Java build)
    kept on one worker. None when the caller chose (-n, --numprocesses, -p no:xdist) or there is one CPU."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    chosen = any(a in ("-n", "--numprocesses", "no:xdist", "-pno:xdist") or a.startswith(("-n", "--numprocesses="))
                 for a in rest)
    if cpus < 2 or chosen:
        return []
    say(f"running the tests on {cpus} workers (pytest-xdist; add -n 0 to run them in one process)")
    return ["-n", str(cpus), "--dist", "loadgroup"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
