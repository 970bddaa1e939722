"""A throw-away PostgreSQL cluster for tests and benchmarks: ``initdb`` in a temporary folder
(as the ``postgres`` user when running as root), started on 127.0.0.1 on a free port with
durability off (it is thrown away), stopped and removed afterwards.

``with temporary_cluster() as dsn: ...`` raises :class:`ClusterUnavailable` with the reason when
no server can be started here (no binaries, initdb failing); memora's own tests skip loudly on
it, and fail under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

__all__ = ["ClusterUnavailable", "temporary_cluster"]

BIN_DIRS = [Path(f"/usr/lib/postgresql/{v}/bin") for v in (17, 16, 15, 14)]


def _bin_dir() -> Path | None:
    env = os.environ.get("MEMORA_TEST_PG_BIN")
    for d in ([Path(env)] if env else []) + BIN_DIRS:
        if (d / "initdb").is_file() and (d / "pg_ctl").is_file():
            return d
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ClusterUnavailable(RuntimeError):
    """No PostgreSQL server can be started here; the message says why."""


def _unavailable(reason: str) -> None:
    raise ClusterUnavailable(reason)


@contextlib.contextmanager
def temporary_cluster(
    settings: Mapping[str, str] | None = None, *, password: str | None = None
) -> Iterator[str]:
    """Yield a DSN (trust auth, user memora, database memora) of a fresh cluster; ``settings``
    are extra server settings (``{"shared_buffers": "1GB"}``).  With ``password``, every
    connection must give it (scram-sha-256), as a deployment's server would demand; the DSN
    carries it."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        _unavailable("no initdb/pg_ctl found (install PostgreSQL 15, or set MEMORA_TEST_PG_BIN)")
    assert bin_dir is not None
    as_user: list[str] = []
    owner = None
    if os.geteuid() == 0:  # initdb refuses root: run the server as the postgres user
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            _unavailable("running as root and there is no 'postgres' user to run the server")
        as_user = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="memora-pg-"))
    data, sockets = root / "data", root / "sock"
    sockets.mkdir()
    if owner is not None:
        for p in (root, sockets):
            os.chown(p, owner.pw_uid, owner.pw_gid)
    port = _free_port()
    log = root / "server.log"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*as_user, *args], capture_output=True, text=True, timeout=120, check=False
        )

    auth = ["--auth=trust"]
    if password is not None:
        secret = root / "pwfile"
        secret.write_text(password + "\n")
        if owner is not None:
            os.chown(secret, owner.pw_uid, owner.pw_gid)
        auth = ["--auth=scram-sha-256", f"--pwfile={secret}"]
    init = run(
        str(bin_dir / "initdb"), "-D", str(data), "-U", "memora", *auth,
        "-E", "UTF8", "--locale=C.UTF-8", "--no-sync",
    )  # fmt: skip
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        _unavailable(f"initdb failed: {init.stderr.strip()[-500:]}")
    opts = (
        f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off "
        "-c synchronous_commit=off -c full_page_writes=off -c max_connections=100"
        + "".join(f" -c {k}={v}" for k, v in (settings or {}).items())
    )
    start = run(str(bin_dir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(log), "-w", "start")
    if start.returncode != 0:
        text = log.read_text(errors="replace") if log.exists() else start.stderr
        shutil.rmtree(root, ignore_errors=True)
        _unavailable(f"the server did not start: {text.strip()[-500:]}")
    try:
        base = f"host=127.0.0.1 port={port} user=memora"
        env = dict(os.environ)
        if password is not None:
            base += f" password={password}"
            env["PGPASSWORD"] = password
        created = subprocess.run(
            [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "memora", "memora"],
            capture_output=True, text=True, timeout=60, check=False, env=env,
        )  # fmt: skip
        if created.returncode != 0:
            raise ClusterUnavailable(f"createdb failed: {created.stderr.strip()}")
        yield f"{base} dbname=memora"
    finally:
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        deadline = time.monotonic() + 10
        while (data / "postmaster.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(root, ignore_errors=True)
