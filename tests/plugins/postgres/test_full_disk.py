"""PostgreSQL's disk full: a database whose tables live in a tablespace on a small tmpfs (as
root; skipped with the reason elsewhere).  A write the server refuses with SQLSTATE 53100
(``disk_full``) is ``STORAGE_FULL``, nothing of it is stored, and once space is back the next
one is written."""

from __future__ import annotations

import contextlib
import os
import pwd
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import errors

from memora.errors import ErrorCode, StorageError, StorageFullError
from memora.memory import NewMemory, RoundRecord
from memora_plugin_postgres.database import Database, server_disk_error
from memora_plugin_postgres.sessions import PostgresSessionStore
from memora_plugin_postgres.storage import PostgresStorage
from tests.small_disk import fill, small_disk


def test_the_server_disk_errors_are_memoras() -> None:
    full = server_disk_error(errors.DiskFull("could not extend file"))
    assert isinstance(full, StorageFullError) and full.code == ErrorCode.STORAGE_FULL
    assert full.context == {"sqlstate": "53100"}
    failing = server_disk_error(errors.IoError("could not read block"))
    assert type(failing) is StorageError and "58030" in failing.message
    assert server_disk_error(errors.UniqueViolation("duplicate key")) is None


@pytest.fixture
def small_database(pg_dsn: str) -> Iterator[tuple[str, Path]]:
    """A fresh database whose tables go to a tablespace on a 1 MiB tmpfs: its DSN and the
    tmpfs (catalogs and the write-ahead log stay on the cluster's own disk)."""
    try:
        server_user = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no 'postgres' user to own the tablespace's folder")
    name = f"full_{uuid.uuid4().hex[:8]}"
    # the server's user must reach the folder: not under pytest's private (0700) one
    mount_point = Path(tempfile.mkdtemp(prefix="memora-pg-full-"))
    mount_point.chmod(0o755)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(mount_point.rmdir)
        disk = cleanup.enter_context(small_disk(mount_point))
        folder = disk / "tablespace"
        folder.mkdir()
        os.chown(folder, server_user.pw_uid, server_user.pw_gid)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"CREATE TABLESPACE {name} LOCATION '{folder}'")
            admin.execute(f"CREATE DATABASE {name}")
            admin.execute(f"ALTER DATABASE {name} SET default_tablespace = {name}")
        try:
            yield pg_dsn.replace("dbname=memora", f"dbname={name}"), disk
        finally:
            with psycopg.connect(pg_dsn, autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                admin.execute(f"DROP TABLESPACE IF EXISTS {name}")


async def test_a_full_disk_on_the_server_is_storage_full(
    small_database: tuple[str, Path],
) -> None:
    dsn, disk = small_database
    db = Database(dsn)
    sessions, memories = PostgresSessionStore(db, "ns"), PostgresStorage(db, "ns")
    try:
        sid = (await sessions.create("full")).id
        await sessions.append_turn(
            sid, [{"role": "user", "content": "q0"}], RoundRecord("r0", "q0")
        )
        filler = fill(disk)
        acked, refused = ["r0"], []
        for n in range(1, 40):
            turn = [{"role": "user", "content": f"q{n}"}]
            try:
                await sessions.append_turn(sid, turn, RoundRecord(f"r{n}", f"q{n}", "a" * 3000))
            except StorageError as exc:
                refused.append(exc)
            else:
                acked.append(f"r{n}")
        assert refused, "the tablespace never filled: the test proves nothing"
        with pytest.raises(StorageFullError):
            await memories.add(NewMemory(source="round_summary", content="m " * 5000))
        for error in refused:
            assert isinstance(error, StorageFullError) and error.context["sqlstate"] == "53100"
        filler.unlink()
        await sessions.append_turn(sid, [], RoundRecord("r99", "after", "ok"))
        acked.append("r99")
        kept = await memories.add(NewMemory(source="round_summary", content="after the full disk"))
        assert [r.round_id for r in await sessions.rounds(sid)] == acked
        assert [m["content"] for m in await sessions.messages(sid)] == [
            f"q{r[1:]}" for r in acked if r != "r99"
        ]
        assert [m.id for m in await memories.list()] == [kept.id]
    finally:
        await memories.close()
        await db.close()
