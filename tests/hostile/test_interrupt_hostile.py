"""Ctrl-C while loopspec is still starting (importing its modules, parsing the arguments): exit 130 and
one line ``interrupted`` on stderr, never a traceback and never death by SIGINT — through both ways of
starting it, the ``loopspec`` script and ``python -m loopspec``.

A Ctrl-C at a chosen moment is made deterministic by a ``sitecustomize`` put on the child's path: it
raises SIGINT in the child itself when the named module is about to be imported, from inside an
``exec`` of source text as dataclasses do while a module is imported (under ``python -m``, CPython
then counts the interrupt as unhandled even when it is caught: loopspec's ``__main__`` must still
exit 130). If the command never imports the module, the hook never fires and the command exits 0:
the test fails, so each injection point is known to be reached."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .runner import as_from_a_terminal

HOOK = '''
import os, signal, sys
_AT = os.environ.get("LOOPSPEC_TEST_CTRL_C_AT")
if _AT:
    class _CtrlC:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == _AT:
                sys.meta_path.remove(_CtrlC)
                exec("signal.raise_signal(signal.SIGINT)", {"signal": signal})
            return None
    sys.meta_path.insert(0, _CtrlC)
'''

SCRIPT = Path(sys.executable).parent / "loopspec"

#: (arguments, module whose import is interrupted): the start of --version (which imports no command),
#: of --help (the commands' modules) and of a command that loads the spec and builds the engine
POINTS = [
    (["--version"], "loopspec.support.text"),
    (["--help"], "argparse"),
    (["--help"], "loopspec.cli.fuzz"),
    (["spec"], "loopspec.spec.loader"),
    (["spec"], "loopspec.engine.reference"),
]


@pytest.mark.parametrize("entry", ["script", "module"])
@pytest.mark.parametrize(("args", "module"), POINTS, ids=[f"{a[0]}@{m}" for a, m in POINTS])
def test_ctrl_c_during_start_up_exits_130_without_a_traceback(tmp_path: Path, entry: str, args: list[str],
                                                              module: str) -> None:
    if entry == "script" and not SCRIPT.is_file():
        pytest.skip(f"no loopspec script next to {sys.executable}")
    (tmp_path / "sitecustomize.py").write_text(HOOK)
    env = dict(os.environ, LOOPSPEC_TEST_CTRL_C_AT=module,
               PYTHONPATH=os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p))
    env.pop("LOOPSPEC_DEBUG", None)
    cmd = [str(SCRIPT)] if entry == "script" else [sys.executable, "-m", "loopspec"]
    p = subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120,
                       start_new_session=True, preexec_fn=as_from_a_terminal)
    assert (p.returncode, p.stderr.strip().splitlines()[-1:]) == (130, ["loopspec: interrupted"]), \
        (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize(("signum", "code", "name"), [(15, 143, "SIGTERM"), (1, 129, "SIGHUP")])
def test_sigterm_and_sighup_mid_command_end_it_like_ctrl_c(signum: int, code: int, name: str) -> None:
    """``kill`` (SIGTERM, what a CI job's timeout sends) or a closed terminal (SIGHUP) while a command works:
    the command's own Ctrl-C path runs — one line ``terminated (SIG…)``, exit 128 + the signal, no traceback —
    instead of dying mid-write. (Fuzz campaigns: test_fuzz_hostile's interrupt tests.)"""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "loopspec", "verify", "--scope", "concurrent-4", "--progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=as_from_a_terminal)
    try:
        assert proc.stderr is not None
        first = proc.stderr.read(1)  # the progress line has begun: the exploration (minutes long) is under way
        time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=60)
        err = first + err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, (proc.returncode, err)
    assert f"loopspec verify: terminated ({name})".encode() in err, err
    assert b"Traceback" not in err
