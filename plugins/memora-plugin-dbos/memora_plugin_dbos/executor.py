"""memora's turns as DBOS workflows.

Each run of a turn is one workflow, ``memora_turn(id)``, whose id is the turn's key
(``memora:<session>:<round>:<run>``) under its project's tag — ``<tag>/<key>``
(:func:`project_tag`): one process keeps every project's turns in one journal, and a session
id is unique only within its project (an AG-UI thread's or an A2A context's is the client's
choice) — and whose input is the turn's state at its start: the turn is recoverable from the
moment it starts.  The workflow asks the turn for one segment at a time —
``DBOS.run_step_async`` of ``memora_segment``: the engine runs on to its next checkpoint (an
LLM call answered, a tool's result, the intent to make a call that may not be repeated) and the
step's output is the state there — so DBOS keeps each checkpoint before the engine goes on.

A turn's workflow is deleted once it has ended (done, paused, aborted) or been abandoned: the
journal holds the turns that may still go on, not a history.  The ended ones go together
(:class:`_Ended`: one statement for all that ended within ``SWEEP_SECONDS``, at most
``SWEEP_BATCH``; a deletion is a transaction of the journal's, 1.6 ms of CPU each on SQLite),
and whatever a process that died left ended is deleted by the next one to start.  On a worker that died, the
workflow stays ``PENDING``.  A host that sees the worker gone (the server: the session's lock
is free) calls :meth:`DbosTurnExecutor.recover` with the turn rebuilt from
:meth:`~DbosTurnExecutor.last_state`: ``DBOS.resume_workflow`` puts the workflow on this
process's own queue, DBOS runs it here, on this event loop, and replays it — the kept segments
return their outputs without running, the first one not kept runs the rebuilt turn on.

DBOS is one per process (its functions are registered at import, its system database opened by
``DBOS.launch()`` on the event loop that runs the turns); every executor of the process shares it
and the last one to close destroys it.  Step outputs are JSON (``DBOSPortableJSONSerializer``),
never pickles.  The journal's application version is ``memora-turns-<journal version>``: any
memora that reads that journal version can take a turn over.

**Where the journal is.**  A journal is instructions: DBOS runs the workflows it finds queued
there, unpickles any value a row marks ``py_pickle`` (whatever serializer it was given), and a
kept state names the calls to make next — one already approved among them.  So the default
SQLite journal lives in the user's memora folder (``<user dir>/turns/journal.sqlite``,
private; every project's turns, each tagged with its project), never in the project's data folder, which a cloned repository
fills: a ``turns.sqlite`` found there is not opened (:func:`journal_file`).  For the same
reason whoever may write a PostgreSQL journal's tables may run code in every worker that reads
it: give that database's write access to the people who may deploy memora, no one else.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dbos import DBOS, DBOSConfig, DBOSPortableJSONSerializer, SetWorkflowID

from memora import (
    TURN_STATE_VERSION,
    AgentChunk,
    DurableTurn,
    InvalidConfigError,
    NotAvailableError,
    UnfinishedTurn,
    run_elsewhere,
)
from memora.security.state import private_file, user_config_dir

Emit = Callable[[AgentChunk], None]

__all__ = ["DbosTurnExecutor", "journal_file", "project_tag", "system_database_url"]

logger = logging.getLogger("memora.plugins.dbos")

WORKFLOW = "memora_turn"
SEGMENT = "memora_segment"
APP_VERSION = f"memora-turns-{TURN_STATE_VERSION}"
_UNFINISHED = ["PENDING", "ENQUEUED"]

JOURNAL = "journal.sqlite"
"""The default journal's name, in ``<user dir>/turns``."""
LEGACY_JOURNAL = "turns.sqlite"
"""Where the first version kept the journal, in the project's data folder: never opened."""

DEFAULT_THREADS = min(32, (os.cpu_count() or 1) + 4)
"""DBOS's thread pool, by default the size of Python's own default executor.  DBOS's is
unbounded otherwise: under 100 concurrent turns it ran a thread a journal call, and their
contention for the GIL and SQLite's lock cost more CPU than the calls (bench_serve: 15.6 ms of
server CPU a turn unbounded, 11.4-12.0 with 1, 2 or 4 threads)."""
SWEEP_SECONDS = 1.0
"""An ended turn's workflow leaves the journal within this long (with others that ended)."""
SWEEP_BATCH = 256
"""At most this many ended workflows are deleted in one statement."""
LEFT_ENDED_SECONDS = 60.0
"""At its start a process deletes the ended workflows older than this (another process's,
ended in the last minute, are still its own to delete)."""
LEFT_CANCELLED_SECONDS = 3600.0
"""... and the cancelled ones that began more than this long ago."""
_ENDED = ["SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"]

_LIVE: dict[str, tuple[DurableTurn, Emit]] = {}
"""The turns running in this process, by workflow id: what a segment step runs."""


@DBOS.workflow(name=WORKFLOW)
async def _turn(workflow_id: str, start: dict[str, Any]) -> str:
    """One run of a turn: its segments, each kept before the next (``start``: its state at its
    start, kept as the workflow's input)."""
    while True:
        state = await DBOS.run_step_async({"name": SEGMENT}, _segment, workflow_id)
        if state is None:
            return "ended"


async def _segment(workflow_id: str) -> dict[str, Any] | None:
    live = _LIVE.get(workflow_id)
    if live is None:  # a run nobody here asked for: never run a turn without its host
        raise RuntimeError(f"the turn {workflow_id} is not being run by this process")
    turn, emit = live
    return await turn.segment(emit)


class _Process:
    """DBOS in this process: launched once, by the first executor, destroyed by the last."""

    url: str | None = None
    users = 0
    queue: str | None = None
    ended: _Ended | None = None


class _Ended:
    """The workflows of ended turns, deleted together: every ``SWEEP_SECONDS`` (or once
    ``SWEEP_BATCH`` are waiting), in one statement.  A failure costs the space, not a turn:
    they are ended, and the next process to start deletes what is left."""

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._sweep: asyncio.Task[None] | None = None
        self.swept_left = False
        """Whether the ended workflows a process that died left were deleted."""

    def add(self, workflow_id: str) -> None:
        self._ids.append(workflow_id)
        if self._sweep is None or self._sweep.done():
            delay = 0.0 if len(self._ids) >= SWEEP_BATCH else SWEEP_SECONDS
            self._sweep = asyncio.get_running_loop().create_task(
                self._later(delay), name="memora-dbos-sweep"
            )

    async def _later(self, delay: float) -> None:
        await asyncio.sleep(delay)
        if not self.swept_left:  # once, at the first sweep: never inside a turn's end
            self.swept_left = True
            await _delete_left_ended()
        while self._ids:
            await self.flush()

    async def flush(self) -> None:
        """Delete what is waiting now (the last executor's close: before DBOS goes)."""
        ids, self._ids = self._ids[:SWEEP_BATCH], self._ids[SWEEP_BATCH:]
        if ids:
            await _delete(ids)

    async def close(self) -> None:
        sweep, self._sweep = self._sweep, None
        if sweep is not None and not sweep.done():
            sweep.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweep
        while self._ids:
            await self.flush()


def system_database_url(options: Mapping[str, Any]) -> str:
    """Where the journal goes: ``system_database_url``, else the PostgreSQL memora's storage
    uses (its DSN), else a SQLite file of the user's own (:func:`journal_file`)."""
    url = options.get("system_database_url")
    if url:
        if not isinstance(url, str):
            raise InvalidConfigError("plugins.dbos.system_database_url must be a string")
        return url
    if options.get("storage") == "postgres":
        return _postgres_url(options.get("storage_options") or {})
    return "sqlite:///" + str(journal_file(options))


def journal_file(options: Mapping[str, Any]) -> Path:
    """The default journal: ``<user dir>/turns/journal.sqlite`` (``user_dir``: the host's user
    folder, else ``$MEMORA_HOME`` or the XDG one) — one per user, every project's turns in it
    (tagged: :func:`project_tag`), so one process serves several projects on the default; every
    worker and ``memora run`` of the user's on this machine finds the same file.  Never in the
    data folder: a cloned project brings that folder's content, and a journal there would be
    run (see the module docstring)."""
    return user_config_dir(options.get("user_dir")) / "turns" / JOURNAL


def project_tag(options: Mapping[str, Any]) -> str:
    """Whose turns, in a journal every project of the process shares: the project as its
    storage knows it — the PostgreSQL ``namespace`` (hosts on several machines serving one
    project set the same), else the absolute data folder — as 16 hex digits."""
    storage = options.get("storage_options") or {}
    namespace = storage.get("namespace") if options.get("storage") == "postgres" else None
    whose = str(namespace) if namespace else str(Path(options["path"]).resolve())
    return hashlib.sha256(whose.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _postgres_url(storage: Mapping[str, Any]) -> str:
    """The storage's DSN (``plugins.postgres.dsn`` or ``MEMORA_POSTGRES_DSN``, libpq keywords
    or a URL) as the SQLAlchemy URL DBOS takes; a password comes with it only when the DSN held
    one (``PGPASSWORD`` and ``~/.pgpass`` are read by libpq as usual)."""
    from psycopg.conninfo import conninfo_to_dict

    dsn = str(storage.get("dsn") or os.environ.get("MEMORA_POSTGRES_DSN", "")).strip()
    if not dsn:
        raise InvalidConfigError(
            "the dbos turn executor keeps its journal in memora's PostgreSQL, and no DSN is set "
            "(MEMORA_POSTGRES_DSN or plugins.postgres.dsn); or set plugins.dbos."
            "system_database_url"
        )
    parts = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    user = quote(parts.get("user", ""), safe="")
    password = parts.get("password")
    auth = f"{user}:{quote(password, safe='')}@" if password else (f"{user}@" if user else "")
    host = parts.get("host", "")
    query = []
    if host.startswith("/"):  # a Unix socket's folder
        query.append(f"host={quote(host, safe='')}")
        host = ""
    port = f":{parts['port']}" if "port" in parts and not query else ""
    if query and "port" in parts:
        query.append(f"port={parts['port']}")
    database = quote(parts.get("dbname", ""), safe="")
    return f"postgresql://{auth}{host}{port}/{database}" + (f"?{'&'.join(query)}" if query else "")


class DbosTurnExecutor:
    """A :class:`memora.TurnExecutor` on DBOS Transact (see the module docstring).

    Options (``plugins.dbos``, the user's side only): ``system_database_url`` (a SQLAlchemy URL;
    default: memora's PostgreSQL, else :func:`journal_file`), ``poll_seconds`` (how often this
    process looks for a turn it was asked to take over; default 0.2), ``threads`` (DBOS's
    thread pool; default :data:`DEFAULT_THREADS`).  From the host: ``path``
    (the data folder), ``storage`` and ``storage_options``, ``user_dir``."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.url = system_database_url(options)
        self.tag = project_tag(options)
        """This project's turns in the journal: their workflow ids begin ``<tag>/``."""
        if not options.get("system_database_url"):
            _refuse_legacy(Path(options["path"]), self.url)
        poll = options.get("poll_seconds", 0.2)
        if isinstance(poll, bool) or not isinstance(poll, (int, float)) or not 0.01 <= poll <= 10:
            raise InvalidConfigError(
                f"plugins.dbos.poll_seconds must be a number of seconds in 0.01..10, not {poll!r}"
            )
        self.poll_seconds = float(poll)
        threads = options.get("threads", DEFAULT_THREADS)
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 256:
            raise InvalidConfigError(
                f"plugins.dbos.threads must be a whole number in 1..256, not {threads!r}"
            )
        self.threads = threads
        """DBOS's thread pool (its journal's calls; the event loop's default executor while it
        runs): the first executor of the process sets it."""
        self._closed = False
        self._launch()

    def _launch(self) -> None:
        if _Process.users:
            if self.url != _Process.url:
                raise InvalidConfigError(
                    "one process keeps its turns in one journal: this project's is "
                    f"{_redact(self.url)}, the one in use here {_redact(_Process.url)} "
                    "(set plugins.dbos.system_database_url the same for every project)"
                )
            _Process.users += 1
            return
        if self.url.startswith("sqlite:///"):
            _private_sqlite(Path(self.url.removeprefix("sqlite:///")))
        config: DBOSConfig = {
            "name": "memora",
            "system_database_url": self.url,
            "executor_id": f"memora-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}",
            "application_version": APP_VERSION,
            "serializer": DBOSPortableJSONSerializer(),
            "log_level": "WARNING",
            "max_executor_threads": self.threads,
        }
        try:
            DBOS(config=config)
            # on the running event loop: DBOS then runs the workflows it dequeues (a recovered
            # turn) on this loop, where the Agents live; its schema set-up is a start-up cost
            DBOS.launch()
        except Exception as exc:
            with contextlib.suppress(Exception):
                DBOS.destroy(destroy_registry=False)
            raise NotAvailableError(
                f"the dbos turn executor could not open its journal at {_redact(self.url)}: "
                f"{type(exc).__name__}: {exc}",
                context={"system_database_url": _redact(self.url)},
            ) from exc
        _Process.url = self.url
        _Process.users = 1
        _Process.queue = None
        _Process.ended = _Ended()

    async def _queue(self) -> str:
        """This process's own queue: a turn resumed on it runs here and nowhere else."""
        if _Process.queue is None:
            name = f"memora-{DBOS.executor_id}"
            await DBOS.register_queue_async(name, polling_interval_sec=self.poll_seconds)
            _Process.queue = name
        return _Process.queue

    def _id(self, key: str) -> str:
        """The workflow id of the turn ``key`` of this project."""
        return f"{self.tag}/{key}"

    # -- the TurnExecutor protocol -------------------------------------------------------------

    def execute(self, turn: DurableTurn) -> AsyncIterator[AgentChunk]:
        workflow_id = self._id(turn.key)

        async def run(emit: Emit) -> None:
            _LIVE[workflow_id] = (turn, emit)
            try:
                with SetWorkflowID(workflow_id):
                    handle = await DBOS.start_workflow_async(_turn, workflow_id, turn.state())
                await handle.get_result()
            finally:
                _LIVE.pop(workflow_id, None)
            await self._ended(workflow_id)

        return run_elsewhere(turn, run)

    async def _ended(self, workflow_id: str) -> None:
        """The turn's workflow ended: out of the journal with the next sweep."""
        ended = _Process.ended
        if ended is None:  # closed meanwhile: at once
            await _delete([workflow_id])
            return
        ended.add(workflow_id)

    def recover(self, turn: DurableTurn) -> AsyncIterator[AgentChunk]:
        workflow_id = self._id(turn.key)

        async def run(emit: Emit) -> None:
            _LIVE[workflow_id] = (turn, emit)
            try:
                queue = await self._queue()
                handle = await DBOS.resume_workflow_async(workflow_id, queue_name=queue)
                await handle.get_result()
            finally:
                _LIVE.pop(workflow_id, None)
            await self._ended(workflow_id)

        return run_elsewhere(turn, run)

    async def last_state(self, key: str) -> dict[str, Any] | None:
        workflow_id = self._id(key)
        found = await DBOS.list_workflows_async(
            workflow_ids=[workflow_id], status=_UNFINISHED, load_input=True, load_output=False
        )
        if not found:
            return None
        steps = await DBOS.list_workflow_steps_async(workflow_id)
        kept = [s["output"] for s in steps if s["function_name"] == SEGMENT and s["output"]]
        if kept:
            return dict(kept[-1])
        inputs = found[0].input or {"args": ()}
        args = list(inputs.get("args") or ())
        return dict(args[1]) if len(args) > 1 and isinstance(args[1], dict) else None

    async def unfinished(self, session_id: str | None = None) -> list[UnfinishedTurn]:
        mine = self._id("memora:")
        found = await DBOS.list_workflows_async(
            status=_UNFINISHED,
            workflow_id_prefix=mine if session_id is None else f"{mine}{session_id}:",
            name=WORKFLOW,
            load_input=False,
            load_output=False,
        )
        out = []
        for status in found:
            key = status.workflow_id.removeprefix(f"{self.tag}/")
            parts = key.split(":")
            # a session id has no ":" (the stores refuse one); anything else is not a turn
            # of this project's, whatever its id begins with
            if len(parts) != 4 or (session_id is not None and parts[1] != session_id):
                continue
            updated = (status.updated_at or 0) / 1000
            out.append(UnfinishedTurn(key, parts[1], parts[2], updated))
        return sorted(out, key=lambda t: t.updated_at)

    async def abandon(self, key: str) -> None:
        # cancelled first: a run still going somewhere stops at its next step; then out of
        # the journal, its text with it (nothing goes on with it any more)
        await DBOS.cancel_workflow_async(self._id(key))
        await _delete([self._id(key)])

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _Process.users -= 1
        if _Process.users == 0:
            ended, _Process.ended = _Process.ended, None
            if ended is not None:
                await ended.close()
            queue = _Process.queue
            if queue is not None:
                await DBOS.delete_queue_async(queue)
            _Process.url = _Process.queue = None
            await asyncio.to_thread(DBOS.destroy, destroy_registry=False)
            # DBOS made its thread pool this loop's default executor (at its first async
            # call) and leaves it there, shut down: every asyncio.to_thread on the loop would
            # then fail ("cannot schedule new futures after shutdown") — memora's own file
            # writes among them, for a host that goes on after this runtime closed.  The loop
            # gets a pool of its own again.
            asyncio.get_running_loop().set_default_executor(
                ThreadPoolExecutor(thread_name_prefix="asyncio")
            )


async def _delete(workflow_ids: list[str]) -> None:
    """Ended turns' workflows out of the journal: nothing reads them again, and each of their
    steps keeps the whole turn as it stood (a 16-step turn of 5 KB tool results: 1.7 MB), so a
    journal that kept every turn grew without end.  A failure costs the space, not a turn."""
    try:
        await DBOS.delete_workflows_async(workflow_ids)
    except Exception as exc:
        logger.warning(
            "%d ended turns stay in the journal (%s): %s",
            len(workflow_ids),
            ", ".join(workflow_ids[:3]) + (" ..." if len(workflow_ids) > 3 else ""),
            exc,
        )


async def _delete_left_ended() -> None:
    """The ended workflows of turns a process that died had not deleted yet: those that ended
    more than ``LEFT_ENDED_SECONDS`` ago (a live process deletes its own, and may still read a
    recovered turn's result from its row meanwhile), and those cancelled (given up: DBOS may
    not give them an end time) that began more than ``LEFT_CANCELLED_SECONDS`` ago."""
    now = datetime.now(UTC)
    ended_before = (now - timedelta(seconds=LEFT_ENDED_SECONDS)).isoformat()
    begun_before = (now - timedelta(seconds=LEFT_CANCELLED_SECONDS)).isoformat()
    try:
        left = await DBOS.list_workflows_async(
            status=_ENDED,
            name=WORKFLOW,
            completed_before=ended_before,
            load_input=False,
            load_output=False,
        )
        cancelled = await DBOS.list_workflows_async(
            status="CANCELLED",
            name=WORKFLOW,
            end_time=begun_before,
            load_input=False,
            load_output=False,
        )
    except Exception as exc:
        logger.warning("the journal's ended turns could not be listed: %s", exc)
        return
    ids = list(dict.fromkeys(w.workflow_id for w in [*left, *cancelled]))
    for at in range(0, len(ids), SWEEP_BATCH):
        await _delete(ids[at : at + SWEEP_BATCH])


def _private_sqlite(path: Path) -> None:
    """The journal's folder made (0700) and its file created 0600 before SQLite opens it with
    the umask's mode: it holds the turns' messages and tool results."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        private_file(path)
    except OSError as exc:
        raise NotAvailableError(
            f"the dbos turn executor could not make its journal {path}: {exc}",
            context={"path": str(path)},
        ) from exc


def _refuse_legacy(data: Path, url: str) -> None:
    """Say once that a journal found in the project's data folder is not read (a cloned
    project may have brought it; see the module docstring)."""
    found = data / LEGACY_JOURNAL
    if os.path.lexists(found):
        logger.warning(
            "%s is not read: a turn journal in a project's folder may come with the project "
            "(a cloned repository) and would run what it holds; this user's durable turns "
            "are kept in %s",
            found,
            _redact(url),
        )


def _redact(url: str | None) -> str:
    """A URL without its password (for messages and logs)."""
    if not url or "@" not in url or "://" not in url:
        return str(url)
    scheme, rest = url.split("://", 1)
    auth, host = rest.split("@", 1)
    user = auth.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in auth else url
