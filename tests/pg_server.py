"""A throw-away PostgreSQL cluster for the tests (and the script that regenerates docs/writes.md's fault table):
Debian's ``initdb`` / ``pg_ctl`` in a temporary directory, on a Unix socket and a free port, as the ``postgres``
user when run as root (initdb refuses root). :func:`postgres_server` yields a conninfo template (``{db}`` to
fill) and raises :class:`Unavailable`, saying why, when the binaries, psycopg or the user are missing."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator


class Unavailable(Exception):
    """No PostgreSQL server can be started here (the reason is the message)."""


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    hits = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return hits[-1] if hits else None


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    try:
        import psycopg  # noqa: F401 - the tests need it to talk to the server
    except ImportError as exc:
        raise Unavailable("psycopg 3 is not installed (pip install 'loopspec[postgres]')") from exc
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if not initdb or not pg_ctl:
        raise Unavailable("PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql")
    as_user: list[str] = []
    root = tempfile.mkdtemp(prefix="lspg")
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # initdb refuses to run as root
        try:
            shutil.chown(root, "postgres", "postgres")
        except (LookupError, OSError) as exc:
            shutil.rmtree(root, ignore_errors=True)
            raise Unavailable("running as root and there is no `postgres` user to run the server as") from exc
        as_user = ["runuser", "-u", "postgres", "--"]
    data, sock = os.path.join(root, "data"), root
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        subprocess.run([*as_user, initdb, "-D", data, "-U", "postgres", "-A", "trust", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        subprocess.run([*as_user, pg_ctl, "-D", data, "-l", os.path.join(root, "log"), "-w", "-t", "60", "-o",
                        f"-k {sock} -p {port} -c listen_addresses='' -c fsync=off", "start"],
                       check=True, capture_output=True, timeout=120)
    except (subprocess.SubprocessError, OSError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise Unavailable(f"could not start a PostgreSQL server: {exc}") from exc
    try:
        yield f"postgresql://postgres@/{{db}}?host={sock}&port={port}"
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", data, "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def create_database(server: str, name: str) -> str:
    """A fresh database ``name`` on ``server`` (a template from :func:`postgres_server`): its conninfo."""
    import psycopg

    with psycopg.connect(server.format(db="postgres"), autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    return server.format(db=name)
