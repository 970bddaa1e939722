"""The route table and its handlers.

Every route is declared once in :data:`API` (method, path, who may call it, body model, what it
returns); the Starlette routes (:mod:`.app`) and the OpenAPI document (:mod:`.openapi`) are both
built from it.  A handler gets a :class:`Call`: the request, authorised, with its parsed body.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ag_ui.core import RunAgentInput
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from memora import OutputSpec
from memora.errors import ErrorCode, MemoraError

from .bodies import AnswersIn, ApprovalIn, ForkIn, MemoryEditIn, RolePackIn, SessionIn, TurnIn
from .config import TokenEntry
from .errors import ApiError, error_response
from .guard import USER_HEADER, Access, scope_for
from .hub import Hub
from .openapi import openapi_document
from .sse import event_stream, last_event
from .turns import RemoteTurnLog, TurnLog

__all__ = ["API", "Api", "Call", "Handler"]

Handler = Callable[["Call"], Awaitable[Response]]


@dataclass(frozen=True)
class Api:
    method: str
    path: str
    access: Access
    summary: str
    handler: Handler
    body: type[BaseModel] | None = None
    stream: bool = False
    """The response is ``text/event-stream`` of chunk JSON."""


@dataclass
class Call:
    """One request, authorised: the parsed body, the path parameters and the hub."""

    request: Request
    hub: Hub
    body: Any
    token: TokenEntry | None
    known: bool = False
    """A public route's caller who may see what is served (a valid token, or this machine
    when no token is configured)."""

    def param(self, name: str) -> str:
        return str(self.request.path_params[name])

    @property
    def scope(self) -> str | None:
        """The memory scope (user) the request acts in: its token's, or the user it names
        (``X-Memora-User``, or a body's ``user``) when its caller may act for users."""
        header = self.request.headers.get(USER_HEADER)
        named = getattr(self.body, "user", None)
        if header is not None and named is not None and header != named:
            raise ApiError(
                400, "INVALID_INPUT", "the X-Memora-User header and the body's user differ"
            )
        return scope_for(self.token, named if named is not None else header)


def _stream(call: Call, log: TurnLog | RemoteTurnLog, after: int) -> StreamingResponse:
    return event_stream(log, after, call.param("project"), call.param("session"))


def _sessions_of(call: Call) -> Any:
    return call.hub.project(call.param("project")).runtime.session_store


async def health(call: Call) -> Response:
    return JSONResponse({"status": "ok"})


async def ready(call: Call) -> Response:
    if not call.hub.ready:
        return error_response(503, "NOT_READY", "the server is starting or stopping")
    if not call.known:  # a load balancer's probe needs the status, not what is served
        return JSONResponse({"status": "ready"})
    return JSONResponse({"status": "ready", "projects": sorted(call.hub.projects)})


async def list_projects(call: Call) -> Response:
    token = call.token
    names = [n for n in sorted(call.hub.projects) if token is None or token.allows(n, write=False)]
    return JSONResponse({"projects": [{"name": n} for n in names]})


async def list_plugins(call: Call) -> Response:
    project = next(iter(call.hub.projects.values()))
    infos = project.runtime.plugins.plugin_infos(include_builtin=False)
    return JSONResponse(
        {
            "plugins": [
                {
                    "name": i.name,
                    "distribution": i.distribution,
                    "version": i.version,
                    "provides": {k: list(v) for k, v in i.registers.items()},
                }
                for i in infos
            ]
        }
    )


async def list_sessions(call: Call) -> Response:
    archived = call.request.query_params.get("archived") in ("1", "true", "yes")
    infos = await call.hub.list_sessions(call.param("project"), archived=archived, scope=call.scope)
    return JSONResponse({"sessions": infos})


async def create_session(call: Call) -> Response:
    info = await call.hub.create_session(call.param("project"), call.body.title, scope=call.scope)
    return JSONResponse(info, status_code=201)


async def get_session(call: Call) -> Response:
    project, sid = call.param("project"), call.param("session")
    info, rounds = await call.hub.session_info(project, sid, scope=call.scope)
    return JSONResponse(
        {
            **info,
            "rounds": [r.to_dict() for r in rounds],
            "pause": await call.hub.pause_of(project, sid),
            # a turn whose round is stored is shown from it (a reload while its end is being
            # written would show it twice: stored, and replayed from its events)
            "running_turn": await call.hub.running_turn(
                project, sid, stored={r.round_id for r in rounds}
            ),
            "running_text": call.hub.running_text(project, sid),
        }
    )


async def fork_session(call: Call) -> Response:
    store, sid = _sessions_of(call), call.param("session")
    await call.hub.check_session(call.param("project"), sid, call.scope)
    info, rounds = await store.fork(sid, call.body.at_round_id)
    return JSONResponse({**info.to_dict(), "rounds_copied": rounds}, status_code=201)


async def archive_session(call: Call) -> Response:
    store, sid = _sessions_of(call), call.param("session")
    await call.hub.check_session(call.param("project"), sid, call.scope)
    info = await store.archive(sid, True)
    return JSONResponse(info.to_dict())


async def post_turn(call: Call) -> Response:
    body: TurnIn = call.body
    output = OutputSpec.from_json_schema(body.output_schema) if body.output_schema else None
    project, sid = call.param("project"), call.param("session")
    log = await call.hub.start_turn(project, sid, body.text, output=output, scope=call.scope)
    if body.background:  # the turn runs in the hub's task whether or not anyone follows it
        events = f"/v1/projects/{project}/sessions/{sid}/turns/{log.id}/events"
        return JSONResponse(
            {"turn_id": log.id, "session_id": sid, "events": events},
            status_code=202,
            headers={"X-Memora-Turn": log.id},
        )
    return _stream(call, log, 0)


async def turn_events(call: Call) -> Response:
    log = await call.hub.turn_log(
        call.param("project"), call.param("session"), call.param("turn"), scope=call.scope
    )
    return _stream(call, log, last_event(call.request, log.id))


async def abort_turn(call: Call) -> Response:
    aborted = await call.hub.abort(call.param("project"), call.param("session"), scope=call.scope)
    return JSONResponse({"aborted": aborted})


async def get_pause(call: Call) -> Response:
    project, sid = call.param("project"), call.param("session")
    await call.hub.check_session(project, sid, call.scope)
    doc = await call.hub.pause_of(project, sid)
    if doc is None:
        raise MemoraError(ErrorCode.NOT_FOUND, "this session has no paused turn")
    return JSONResponse(doc)


async def decide(call: Call) -> Response:
    body: ApprovalIn = call.body
    call_id = call.param("tool_call")
    log = await call.hub.continue_turn(
        call.param("project"),
        call.param("session"),
        approve=(call_id, body.args) if body.decision == "approve" else None,
        deny=(call_id, body.reason) if body.decision == "deny" else None,
        scope=call.scope,
    )
    return _stream(call, log, 0)


async def answer(call: Call) -> Response:
    log = await call.hub.continue_turn(
        call.param("project"), call.param("session"), answers=call.body.answers, scope=call.scope
    )
    return _stream(call, log, 0)


async def tasks(call: Call) -> Response:
    agent = await call.hub.agent(call.param("project"), call.param("session"), scope=call.scope)
    return JSONResponse({"tasks": [i.to_dict() for i in agent.plan]})


async def role_packs(call: Call) -> Response:
    project = call.param("project")
    session = call.request.query_params.get("session")
    if session:
        packs = (await call.hub.agent(project, session, scope=call.scope)).role_pack.list_meta()
    else:
        packs = call.hub.role_packs(project).list_meta()
    return JSONResponse({"role_packs": [p.to_dict() for p in packs]})


async def switch_role_pack(call: Call) -> Response:
    active = await call.hub.switch_role_pack(
        call.param("project"), call.param("session"), call.body.name, scope=call.scope
    )
    return JSONResponse({"active": active})


async def memory_search(call: Call) -> Response:
    query = call.request.query_params.get("q", "").strip()
    if not query:
        raise ApiError(400, ErrorCode.INVALID_INPUT.value, "q: the search words are missing")
    try:
        limit = int(call.request.query_params.get("limit", "10"))
    except ValueError:
        limit = -1
    if not 1 <= limit <= 100:
        raise ApiError(400, ErrorCode.INVALID_INPUT.value, "limit: an integer from 1 to 100")
    hits = await _memory(call).search(query, limit=limit)
    return JSONResponse(
        {
            "hits": [
                {
                    "id": h.record.id,
                    "score": h.score,
                    "name": h.record.name,
                    "content": h.record.content,
                    "source": h.record.source,
                    "session_id": h.record.session_id,
                    "round_id": h.record.round_id,
                    "created_at": h.record.created_at,
                    "scope": h.record.scope,
                    "meta": h.record.meta,
                }
                for h in hits
            ]
        }
    )


def _memory(call: Call) -> Any:
    """The project's memory as the caller's scope sees it (its own and the unscoped)."""
    return call.hub.project(call.param("project")).runtime.memory.for_scope(call.scope)


def _who(call: Call) -> str:
    """Who acts, for a memory's audit: the token's name, or this machine without tokens."""
    return f"token:{call.token.name}" if call.token is not None else "local"


async def memory_get(call: Call) -> Response:
    return JSONResponse((await _memory(call).get(call.param("memory"))).to_dict())


async def memory_edit(call: Call) -> Response:
    body: MemoryEditIn = call.body
    record = await _memory(call).edit(call.param("memory"), body.content, by=_who(call))
    return JSONResponse(record.to_dict(), status_code=201)


async def memory_forget(call: Call) -> Response:
    if call.request.query_params.get("everywhere") not in ("1", "true", "yes"):
        record = await _memory(call).forget(call.param("memory"), by=_who(call))
        return JSONResponse(record.to_dict(), status_code=201)
    # its text out of its history and out of the session's log too; the sessions it touched
    # are read again by whoever holds them open
    forgotten = await call.hub.forget_everywhere(
        call.param("project"), call.param("memory"), scope=call.scope, by=_who(call)
    )
    return JSONResponse(
        {**forgotten.tombstone.to_dict(), "everywhere": forgotten.to_dict()}, status_code=201
    )


async def memory_pin(call: Call) -> Response:
    record = await _memory(call).pin(call.param("memory"), by=_who(call))
    return JSONResponse(record.to_dict())


async def memory_unpin(call: Call) -> Response:
    record = await _memory(call).unpin(call.param("memory"), by=_who(call))
    return JSONResponse(record.to_dict())


async def memory_pinned(call: Call) -> Response:
    records = await _memory(call).pinned(fresh=True)
    return JSONResponse({"pinned": [r.to_dict() for r in records]})


async def memory_stats(call: Call) -> Response:
    snapshot = await _memory(call).snapshot()
    return JSONResponse(snapshot.to_dict())


async def agui_run(call: Call) -> Response:
    from .agui import encode, run

    props = call.body.forwarded_props
    user = props.get("user") if isinstance(props, dict) else None
    header = call.request.headers.get(USER_HEADER)
    if user is not None and header is not None and user != header:
        raise ApiError(
            400, "INVALID_INPUT", "the X-Memora-User header and forwardedProps.user differ"
        )
    scope = scope_for(call.token, user if user is not None else header)
    log, translator = await run(call.hub, call.param("project"), call.body, scope=scope)
    return StreamingResponse(
        encode(log, translator),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no", "X-Memora-Turn": log.id},
    )


async def openapi(call: Call) -> Response:
    return JSONResponse(openapi_document(API))


_S = "/v1/projects/{project}/sessions/{session}"

API: tuple[Api, ...] = (
    Api("GET", "/health", "public", "Liveness: the process answers.", health),
    Api("GET", "/ready", "public", "Readiness: every project's runtime is open.", ready),
    Api("GET", "/openapi.json", "public", "This document.", openapi),
    Api("GET", "/v1/projects", "read", "The projects this token may use.", list_projects),
    Api("GET", "/v1/plugins", "read", "Installed plugins and what they provide.", list_plugins),
    Api(
        "GET",
        "/v1/projects/{project}/sessions",
        "read",
        "Sessions, most recent first (?archived=1: with archived ones).",
        list_sessions,
    ),
    Api(
        "POST",
        "/v1/projects/{project}/sessions",
        "write",
        "Create a session.",
        create_session,
        SessionIn,
    ),
    Api("GET", _S, "read", "A session with its rounds and its pause, if any.", get_session),
    Api("POST", _S + "/fork", "write", "Fork a session.", fork_session, ForkIn),
    Api("POST", _S + "/archive", "write", "Archive a session.", archive_session),
    Api(
        "POST",
        _S + "/turns",
        "write",
        "Send a message: the turn's chunks as server-sent events (id `TURN:N`); with "
        "`background: true`, 202 and the turn's id at once.",
        post_turn,
        TurnIn,
        stream=True,
    ),
    Api(
        "GET",
        _S + "/turns/{turn}/events",
        "read",
        "Follow a turn from the event after `Last-Event-ID` (or ?after=N).",
        turn_events,
        stream=True,
    ),
    Api(
        "POST",
        _S + "/abort",
        "write",
        "Abort the running turn, or cancel the paused one (the session is ready for the next "
        "message).",
        abort_turn,
    ),
    Api("GET", _S + "/pause", "read", "The question or approval the turn waits for.", get_pause),
    Api(
        "POST",
        _S + "/approvals/{tool_call}",
        "write",
        "Approve (optionally with edited arguments) or deny the paused call; the rest of the "
        "turn as server-sent events.",
        decide,
        ApprovalIn,
        stream=True,
    ),
    Api(
        "POST",
        _S + "/answers",
        "write",
        "Answer the paused turn's questions; the rest of the turn as server-sent events.",
        answer,
        AnswersIn,
        stream=True,
    ),
    Api("GET", _S + "/tasks", "read", "The session's task table.", tasks),
    Api(
        "POST",
        _S + "/role-pack",
        "write",
        "Switch the session's role pack.",
        switch_role_pack,
        RolePackIn,
    ),
    Api(
        "GET",
        "/v1/projects/{project}/role-packs",
        "read",
        "Role packs with their chips (?session=ID: which is active there).",
        role_packs,
    ),
    Api(
        "GET",
        "/v1/projects/{project}/memory/search",
        "read",
        "Keyword search over the project's memory (?q=...&limit=10).",
        memory_search,
    ),
    Api("GET", "/v1/projects/{project}/memory/stats", "read", "Memories by source.", memory_stats),
    Api(
        "GET",
        "/v1/projects/{project}/memory/pinned",
        "read",
        "The pinned memories the caller's turns keep in mind (its scope's and the project's).",
        memory_pinned,
    ),
    Api(
        "GET",
        "/v1/projects/{project}/memory/{memory}",
        "read",
        "One memory whole, with where it came from and how it was written or changed.",
        memory_get,
    ),
    Api(
        "POST",
        "/v1/projects/{project}/memory/{memory}/edit",
        "write",
        "Correct a memory: the new text supersedes it (its history keeps who and when).",
        memory_edit,
        MemoryEditIn,
    ),
    Api(
        "POST",
        "/v1/projects/{project}/memory/{memory}/forget",
        "write",
        "Take a memory out of recall (its history keeps who forgot it and when); "
        "?everywhere=1: its text out of its history and out of the session's log too.",
        memory_forget,
    ),
    Api(
        "POST",
        "/v1/projects/{project}/memory/{memory}/pin",
        "write",
        "Pin a memory: its scope's turns keep it in their system prompt (at most 10 a scope).",
        memory_pin,
    ),
    Api(
        "POST",
        "/v1/projects/{project}/memory/{memory}/unpin",
        "write",
        "Unpin a memory (it stays in memory and recall).",
        memory_unpin,
    ),
    Api(
        "POST",
        "/v1/projects/{project}/ag-ui",
        "write",
        "AG-UI: run a turn from a RunAgentInput (threadId = session); AG-UI events as "
        "server-sent events.",
        agui_run,
        RunAgentInput,
        stream=True,
    ),
)
