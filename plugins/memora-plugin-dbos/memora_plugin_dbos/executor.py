"""memora's turns as DBOS workflows.

Each run of a turn is one workflow, ``memora_turn(key)``, whose id is the turn's key
(``memora:<session>:<round>:<run>``) and whose input is the turn's state at its start: the
turn is recoverable from the moment it starts.  The workflow asks the turn for one segment at a
time — ``DBOS.run_step_async`` of ``memora_segment``: the engine runs on to its next checkpoint
(an LLM call answered, a tool's result, the intent to make a call that may not be repeated) and
the step's output is the state there — so DBOS keeps each checkpoint before the engine goes on.

On a worker that died, the workflow stays ``PENDING``.  A host that sees the worker gone (the
server: the session's lock is free) calls :meth:`DbosTurnExecutor.recover` with the turn rebuilt
from :meth:`~DbosTurnExecutor.last_state`: ``DBOS.resume_workflow`` puts the workflow on this
process's own queue, DBOS runs it here, on this event loop, and replays it — the kept segments
return their outputs without running, the first one not kept runs the rebuilt turn on.

DBOS is one per process (its functions are registered at import, its system database opened by
``DBOS.launch()`` on the event loop that runs the turns); every executor of the process shares it
and the last one to close destroys it.  Step outputs are JSON (``DBOSPortableJSONSerializer``),
never pickles.  The journal's application version is ``memora-turns-<journal version>``: any
memora that reads that journal version can take a turn over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
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

Emit = Callable[[AgentChunk], None]

__all__ = ["DbosTurnExecutor", "system_database_url"]

logger = logging.getLogger("memora.plugins.dbos")

WORKFLOW = "memora_turn"
SEGMENT = "memora_segment"
APP_VERSION = f"memora-turns-{TURN_STATE_VERSION}"
_UNFINISHED = ["PENDING", "ENQUEUED"]

_LIVE: dict[str, tuple[DurableTurn, Emit]] = {}
"""The turns running in this process, by key: what a segment step runs."""


@DBOS.workflow(name=WORKFLOW)
async def _turn(key: str, start: dict[str, Any]) -> str:
    """One run of a turn: its segments, each kept before the next (``start``: its state at its
    start, kept as the workflow's input)."""
    while True:
        state = await DBOS.run_step_async({"name": SEGMENT}, _segment, key)
        if state is None:
            return "ended"


async def _segment(key: str) -> dict[str, Any] | None:
    live = _LIVE.get(key)
    if live is None:  # a run nobody here asked for: never run a turn without its host
        raise RuntimeError(f"the turn {key} is not being run by this process")
    turn, emit = live
    return await turn.segment(emit)


class _Process:
    """DBOS in this process: launched once, by the first executor, destroyed by the last."""

    url: str | None = None
    users = 0
    queue: str | None = None


def system_database_url(options: Mapping[str, Any]) -> str:
    """Where the journal goes: ``system_database_url``, else the PostgreSQL memora's storage
    uses (its DSN), else ``turns.sqlite`` in the project's data folder."""
    url = options.get("system_database_url")
    if url:
        if not isinstance(url, str):
            raise InvalidConfigError("plugins.dbos.system_database_url must be a string")
        return url
    if options.get("storage") == "postgres":
        return _postgres_url(options.get("storage_options") or {})
    folder = Path(options["path"])
    return "sqlite:///" + str((folder / "turns.sqlite").resolve())


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
    default: memora's PostgreSQL, else ``<data folder>/turns.sqlite``), ``poll_seconds`` (how
    often this process looks for a turn it was asked to take over; default 0.2)."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.url = system_database_url(options)
        poll = options.get("poll_seconds", 0.2)
        if isinstance(poll, bool) or not isinstance(poll, (int, float)) or not 0.01 <= poll <= 10:
            raise InvalidConfigError(
                f"plugins.dbos.poll_seconds must be a number of seconds in 0.01..10, not {poll!r}"
            )
        self.poll_seconds = float(poll)
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
            Path(self.url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        config: DBOSConfig = {
            "name": "memora",
            "system_database_url": self.url,
            "executor_id": f"memora-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}",
            "application_version": APP_VERSION,
            "serializer": DBOSPortableJSONSerializer(),
            "log_level": "WARNING",
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

    async def _queue(self) -> str:
        """This process's own queue: a turn resumed on it runs here and nowhere else."""
        if _Process.queue is None:
            name = f"memora-{DBOS.executor_id}"
            await DBOS.register_queue_async(name, polling_interval_sec=self.poll_seconds)
            _Process.queue = name
        return _Process.queue

    # -- the TurnExecutor protocol -------------------------------------------------------------

    def execute(self, turn: DurableTurn) -> AsyncIterator[AgentChunk]:
        async def run(emit: Emit) -> None:
            _LIVE[turn.key] = (turn, emit)
            try:
                with SetWorkflowID(turn.key):
                    handle = await DBOS.start_workflow_async(_turn, turn.key, turn.state())
                await handle.get_result()
            finally:
                _LIVE.pop(turn.key, None)

        return run_elsewhere(turn, run)

    def recover(self, turn: DurableTurn) -> AsyncIterator[AgentChunk]:
        async def run(emit: Emit) -> None:
            _LIVE[turn.key] = (turn, emit)
            try:
                handle = await DBOS.resume_workflow_async(turn.key, queue_name=await self._queue())
                await handle.get_result()
            finally:
                _LIVE.pop(turn.key, None)

        return run_elsewhere(turn, run)

    async def last_state(self, key: str) -> dict[str, Any] | None:
        found = await DBOS.list_workflows_async(
            workflow_ids=[key], status=_UNFINISHED, load_input=True, load_output=False
        )
        if not found:
            return None
        steps = await DBOS.list_workflow_steps_async(key)
        kept = [s["output"] for s in steps if s["function_name"] == SEGMENT and s["output"]]
        if kept:
            return dict(kept[-1])
        inputs = found[0].input or {"args": ()}
        args = list(inputs.get("args") or ())
        return dict(args[1]) if len(args) > 1 and isinstance(args[1], dict) else None

    async def unfinished(self, session_id: str | None = None) -> list[UnfinishedTurn]:
        prefix = f"memora:{session_id}:" if session_id is not None else "memora:"
        found = await DBOS.list_workflows_async(
            status=_UNFINISHED,
            workflow_id_prefix=prefix,
            name=WORKFLOW,
            load_input=False,
            load_output=False,
        )
        out = []
        for status in found:
            parts = status.workflow_id.split(":")
            if len(parts) != 4:
                continue
            updated = (status.updated_at or 0) / 1000
            out.append(UnfinishedTurn(status.workflow_id, parts[1], parts[2], updated))
        return sorted(out, key=lambda t: t.updated_at)

    async def abandon(self, key: str) -> None:
        await DBOS.cancel_workflow_async(key)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _Process.users -= 1
        if _Process.users == 0:
            queue = _Process.queue
            if queue is not None:
                await DBOS.delete_queue_async(queue)
            _Process.url = _Process.queue = None
            await asyncio.to_thread(DBOS.destroy, destroy_registry=False)


def _redact(url: str | None) -> str:
    """A URL without its password (for messages and logs)."""
    if not url or "@" not in url or "://" not in url:
        return str(url)
    scheme, rest = url.split("://", 1)
    auth, host = rest.split("@", 1)
    user = auth.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in auth else url
