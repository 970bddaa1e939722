"""The ASGI application: a REST + server-sent-events API over a :class:`~.hub.Hub`.

Every route is declared once in :data:`API` (method, path, who may call it, body model, what it
returns); the Starlette routes and the OpenAPI document are both built from that table, so the
document cannot drift from what is served.  Every refusal is a JSON body
``{"error": {"code": ..., "message": ...}}`` with the matching HTTP status.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from ag_ui.core import RunAgentInput
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from memora.errors import ErrorCode, MemoraError, describe_validation_error

from .config import ServerSettings, TokenEntry
from .hub import Hub, RemoteTurnLog, TurnLog

logger = logging.getLogger("memora.server")

__all__ = ["API", "ApiError", "create_app", "openapi_document"]

KEEPALIVE_SECONDS = 15.0

_WORKER = str(os.getpid())
"""Sent as ``X-Memora-Worker`` with every API response: which process answered."""

_STATUS: dict[str, int] = {
    ErrorCode.INVALID_INPUT.value: 400,
    ErrorCode.INVALID_CONFIG.value: 400,
    ErrorCode.NOT_FOUND.value: 404,
    ErrorCode.BUSY.value: 409,
    ErrorCode.CONFLICT.value: 409,
    ErrorCode.PAUSE_EXPIRED.value: 410,
    ErrorCode.NOT_INITIALIZED.value: 503,
    ErrorCode.PROJECT_LOCKED.value: 503,
    ErrorCode.PROVIDER_ERROR.value: 502,
    ErrorCode.NOT_AVAILABLE.value: 501,
}


class ApiError(Exception):
    """A refusal by the service itself (auth, limits, the request's shape)."""

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


# -- request bodies ----------------------------------------------------------------------------


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnIn(_Body):
    text: str = Field(min_length=1, max_length=200_000, description="The user's message.")


class SessionIn(_Body):
    title: str = Field(default="", max_length=200)


class ForkIn(_Body):
    at_round_id: str | None = Field(
        default=None, description="Keep the rounds up to and including this one (None: all)."
    )


class ApprovalIn(_Body):
    decision: Literal["approve", "deny"]
    args: dict[str, Any] | None = Field(
        default=None, description="Edited arguments to run instead (approve only; re-validated)."
    )
    reason: str = Field(default="", max_length=2000, description="Why (deny only).")


class AnswersIn(_Body):
    answers: dict[str, str] = Field(description="Question id -> answer.")


class RolePackIn(_Body):
    name: str = Field(min_length=1, max_length=200)


# -- the route table ---------------------------------------------------------------------------

Access = Literal["public", "read", "write"]
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

    def param(self, name: str) -> str:
        return str(self.request.path_params[name])


def _sessions_of(call: Call) -> Any:
    return call.hub.project(call.param("project")).runtime.session_store


async def health(call: Call) -> Response:
    return JSONResponse({"status": "ok"})


async def ready(call: Call) -> Response:
    if not call.hub.ready:
        return error_response(503, "NOT_READY", "the server is starting or stopping")
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
    infos = await call.hub.list_sessions(call.param("project"), archived=archived)
    return JSONResponse({"sessions": infos})


async def create_session(call: Call) -> Response:
    info = await call.hub.create_session(call.param("project"), call.body.title)
    return JSONResponse(info, status_code=201)


async def get_session(call: Call) -> Response:
    project, sid = call.param("project"), call.param("session")
    info, rounds = await call.hub.session_info(project, sid)
    return JSONResponse(
        {
            **info,
            "rounds": [r.to_dict() for r in rounds],
            "pause": await call.hub.pause_of(project, sid),
            "running_turn": await call.hub.running_turn(project, sid),
        }
    )


async def fork_session(call: Call) -> Response:
    store, sid = _sessions_of(call), call.param("session")
    if not await store.exists(sid):
        raise MemoraError(ErrorCode.NOT_FOUND, f"no session {sid!r}", context={"session_id": sid})
    info, rounds = await store.fork(sid, call.body.at_round_id)
    return JSONResponse({**info.to_dict(), "rounds_copied": rounds}, status_code=201)


async def archive_session(call: Call) -> Response:
    store, sid = _sessions_of(call), call.param("session")
    if not await store.exists(sid):
        raise MemoraError(ErrorCode.NOT_FOUND, f"no session {sid!r}", context={"session_id": sid})
    info = await store.archive(sid, True)
    return JSONResponse(info.to_dict())


async def post_turn(call: Call) -> Response:
    log = await call.hub.start_turn(call.param("project"), call.param("session"), call.body.text)
    return _stream(call, log, 0)


async def turn_events(call: Call) -> Response:
    log = await call.hub.turn_log(call.param("project"), call.param("session"), call.param("turn"))
    return _stream(call, log, _last_event(call.request, log.id))


async def abort_turn(call: Call) -> Response:
    aborted = await call.hub.abort(call.param("project"), call.param("session"))
    return JSONResponse({"aborted": aborted})


async def get_pause(call: Call) -> Response:
    project, sid = call.param("project"), call.param("session")
    if not await call.hub.session_exists(project, sid):
        raise MemoraError(ErrorCode.NOT_FOUND, f"no session {sid!r}", context={"session_id": sid})
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
    )
    return _stream(call, log, 0)


async def answer(call: Call) -> Response:
    log = await call.hub.continue_turn(
        call.param("project"), call.param("session"), answers=call.body.answers
    )
    return _stream(call, log, 0)


async def tasks(call: Call) -> Response:
    agent = await call.hub.agent(call.param("project"), call.param("session"))
    return JSONResponse({"tasks": [i.to_dict() for i in agent.plan]})


async def role_packs(call: Call) -> Response:
    project = call.param("project")
    session = call.request.query_params.get("session")
    if session:
        packs = (await call.hub.agent(project, session)).role_pack.list_meta()
    else:
        packs = call.hub.role_packs(project).list_meta()
    return JSONResponse({"role_packs": [p.to_dict() for p in packs]})


async def switch_role_pack(call: Call) -> Response:
    active = await call.hub.switch_role_pack(
        call.param("project"), call.param("session"), call.body.name
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
    memory = call.hub.project(call.param("project")).runtime.memory
    hits = await memory.search(query, limit=limit)
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
                    "created_at": h.record.created_at,
                }
                for h in hits
            ]
        }
    )


async def memory_stats(call: Call) -> Response:
    snapshot = await call.hub.project(call.param("project")).runtime.memory.snapshot()
    return JSONResponse(snapshot.to_dict())


async def agui_run(call: Call) -> Response:
    from .agui import encode, run

    log, translator = await run(call.hub, call.param("project"), call.body)
    return StreamingResponse(
        encode(log, translator),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no", "X-Memora-Turn": log.id},
    )


async def openapi(call: Call) -> Response:
    return JSONResponse(openapi_document())


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
        "Send a message: the turn's chunks as server-sent events (id `TURN:N`).",
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
    Api("POST", _S + "/abort", "write", "Abort the running turn.", abort_turn),
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


# -- turns as server-sent events ---------------------------------------------------------------


def _last_event(request: Request, turn_id: str) -> int:
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if ":" in raw:
        prefix, _, raw = raw.rpartition(":")
        if prefix != turn_id:
            raise ApiError(
                400,
                ErrorCode.INVALID_INPUT.value,
                f"Last-Event-ID {prefix}:… is an event of another turn than {turn_id}",
            )
    try:
        return max(0, int(raw))
    except ValueError:
        raise ApiError(
            400, ErrorCode.INVALID_INPUT.value, "Last-Event-ID: TURN:N or N, N an integer"
        ) from None


def _stream(call: Call, log: TurnLog | RemoteTurnLog, after: int) -> StreamingResponse:
    project, session = call.param("project"), call.param("session")
    return StreamingResponse(
        _events(log, after),
        media_type="text/event-stream",
        headers={
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # nginx: pass events on as they come
            "X-Memora-Turn": log.id,
            "Content-Location": f"/v1/projects/{project}/sessions/{session}/turns/{log.id}/events",
        },
    )


async def _events(log: TurnLog | RemoteTurnLog, after: int) -> AsyncIterator[bytes]:
    yield f"retry: 1000\n: turn {log.id}\n\n".encode()
    prefix = f"id: {log.id}:"
    async for batch in log.batches(after, KEEPALIVE_SECONDS):
        if not batch:
            yield b": keep-alive\n\n"
            continue
        # every event already there in one write
        yield "".join(f"{prefix}{seq}\ndata: {data}\n\n" for seq, data in batch).encode()


# -- auth, limits, errors ----------------------------------------------------------------------


class _Buckets:
    """A token bucket per caller: ``per_minute`` requests a minute, bursts of a tenth of it."""

    def __init__(self, per_minute: int) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(10.0, per_minute / 10.0)
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, who: str) -> float:
        """0 when the request may go, else the seconds until it may."""
        now = time.monotonic()
        level, at = self._buckets.get(who, (self.capacity, now))
        level = min(self.capacity, level + (now - at) * self.rate)
        if level < 1.0:
            self._buckets[who] = (level, now)
            return (1.0 - level) / self.rate
        self._buckets[who] = (level - 1.0, now)
        if len(self._buckets) > 10_000:  # forget full buckets: they are the default
            self._buckets = {k: v for k, v in self._buckets.items() if v[0] < self.capacity - 1e-9}
        return 0.0


_PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")
"""A request a proxy passed on is not from this machine, whatever its address."""


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def _host_name(host_header: str) -> str:
    if host_header.startswith("["):
        return host_header[: host_header.find("]") + 1]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class _Guard:
    """Who is calling and whether they may: bearer tokens, loopback without them, the origin,
    the rate limit."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.buckets = _Buckets(settings.rate_limit_per_minute)

    def check(self, request: Request, api: Api) -> TokenEntry | None:
        project = request.path_params.get("project")
        return self.check_access(request, api.access, str(project) if project else None)

    async def refusal(self, request: Request, access: str, project: str) -> Response | None:
        """For routes outside :data:`API` (A2A): the refusal as a response, or None."""
        try:
            self.check_access(request, cast("Access", access), project)
        except ApiError as exc:
            return error_response(exc.status, exc.code, exc.message, exc.headers)
        return None

    def check_access(
        self, request: Request, access: Access, project: str | None
    ) -> TokenEntry | None:
        client = request.client.host if request.client else None
        self._check_origin(request)
        if access == "public":
            return None
        token: TokenEntry | None = None
        if self.settings.tokens:
            token = self._token(request)
        else:
            # no token configured: this machine only, by address and by Host (a web page
            # elsewhere must not reach a loopback service through a rebound DNS name)
            proxied = any(h in request.headers for h in _PROXY_HEADERS)
            if (
                proxied
                or not _is_loopback(client)
                or not _is_loopback(_host_name(request.headers.get("host", "")))
            ):
                raise ApiError(
                    403,
                    "LOOPBACK_ONLY",
                    "no token is configured, so only this machine may call (add one with "
                    "`memora serve-tokens add NAME`)",
                )
        wait = self.buckets.take(token.name if token else f"ip:{client}")
        if wait:
            raise ApiError(
                429,
                "RATE_LIMITED",
                f"more than {self.settings.rate_limit_per_minute} requests a minute",
                {"Retry-After": str(math.ceil(wait))},
            )
        if token is not None:
            if access == "write" and token.access != "full":
                raise ApiError(403, "FORBIDDEN", f"token {token.name!r} is read-only")
            if project is not None and not token.allows(str(project), write=False):
                raise ApiError(
                    403, "FORBIDDEN", f"token {token.name!r} may not use project {project!r}"
                )
        return token

    def _token(self, request: Request) -> TokenEntry:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise ApiError(
                401,
                "UNAUTHORIZED",
                "a bearer token is required (Authorization: Bearer TOKEN)",
                {"WWW-Authenticate": 'Bearer realm="memora"'},
            )
        entry = self.settings.token_for(value.strip())
        if entry is None:
            raise ApiError(
                401,
                "UNAUTHORIZED",
                "unknown token",
                {"WWW-Authenticate": 'Bearer realm="memora", error="invalid_token"'},
            )
        return entry

    def _check_origin(self, request: Request) -> None:
        origin = request.headers.get("origin")
        if origin is None:
            return
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        allowed = self.settings.cors_origins
        if origin.rstrip("/") != own and origin.rstrip("/") not in allowed and "*" not in allowed:
            raise ApiError(
                403, "ORIGIN_REFUSED", f"requests from {origin} are not allowed (cors_origins)"
            )


async def _read_body(request: Request, model: type[BaseModel], limit: int) -> BaseModel:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise ApiError(415, "UNSUPPORTED_MEDIA_TYPE", "send the body as application/json")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "TOO_LARGE", f"the body is over {limit} bytes")
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "TOO_LARGE", f"the body is over {limit} bytes")
        parts.append(chunk)
    raw = b"".join(parts) or b"{}"
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, ErrorCode.INVALID_INPUT.value, f"the body is not JSON: {exc}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message = describe_validation_error(exc, "body", limit=1)
        raise ApiError(400, ErrorCode.INVALID_INPUT.value, message) from None


def _endpoint(api: Api, hub: Hub, guard: _Guard) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            token = guard.check(request, api)
            body = (
                await _read_body(request, api.body, guard.settings.max_body_bytes)
                if api.body is not None
                else None
            )
            response = await api.handler(Call(request, hub, body, token))
            response.headers["X-Memora-Worker"] = _WORKER
            return response
        except ApiError as exc:
            return error_response(exc.status, exc.code, exc.message, exc.headers)
        except MemoraError as exc:
            return error_response(_STATUS.get(exc.code.value, 500), exc.code.value, exc.message)
        except Exception:
            logger.exception("%s %s failed", request.method, request.url.path)
            return error_response(500, "INTERNAL", "the server failed; its log has the details")

    endpoint.__name__ = api.handler.__name__
    return endpoint


# -- the web page ------------------------------------------------------------------------------

STATIC = Path(__file__).parent / "static"
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
_PAGE_HEADERS = {
    # the page runs only its own files and talks only to this server
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


async def page(request: Request) -> Response:
    return Response(
        (STATIC / "index.html").read_bytes(), headers=_PAGE_HEADERS, media_type=_TYPES[".html"]
    )


async def static_file(request: Request) -> Response:
    name = str(request.path_params["name"])
    files = {p.name: p for p in STATIC.iterdir() if p.suffix in _TYPES}
    found = files.get(name)
    if found is None:
        return error_response(404, ErrorCode.NOT_FOUND.value, f"no file {name!r}")
    return Response(found.read_bytes(), headers=_PAGE_HEADERS, media_type=_TYPES[found.suffix])


# -- the application ---------------------------------------------------------------------------


def create_app(
    projects: Mapping[str, str | Path] | Sequence[str | Path] | str | Path,
    *,
    settings: ServerSettings | None = None,
    approvals: str = "ask",
    idle_seconds: float = 300.0,
    shared: bool | None = None,
    **runtime_options: Any,
) -> Starlette:
    """The service as an ASGI app, for ``memora serve`` or a host's own ASGI server.

    ``projects``: one folder, a list of folders (named after the folder), or ``{name: folder}``.
    ``settings``: tokens, CORS and limits (default: none, so loopback only). ``runtime_options``
    go to each project's :class:`~memora.ProjectRuntime` (``provider=``, ``storage=``...).
    The runtimes open when the app starts (ASGI lifespan) and close when it stops.
    ``shared=True`` when several processes serve the same projects (each one's app made with
    it); ``None``: shared when a project's storage is PostgreSQL (other machines may serve it).
    See :class:`~.hub.Hub`."""
    named = _project_names(projects)
    settings = settings or ServerSettings()
    hub = Hub(
        named,
        runtime_options=runtime_options,
        approvals=approvals,
        idle_seconds=idle_seconds,
        shared=shared,
    )
    guard = _Guard(settings)
    if not settings.tokens:
        logger.warning(
            "no server token is configured: only this machine may call "
            "(memora serve-tokens add NAME)"
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await hub.start()
        try:
            yield
        finally:
            await hub.close()

    middleware = []
    if settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=settings.cors_origins,
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
                expose_headers=["X-Memora-Turn", "Content-Location"],
            )
        )
    routes: list[BaseRoute] = [
        Route(api.path, _endpoint(api, hub, guard), methods=[api.method]) for api in API
    ]
    routes += [Route("/", page), Route("/static/{name}", static_file)]
    from .a2a import a2a_routes

    routes += a2a_routes(hub, secured=bool(settings.tokens), guard=guard.refusal)
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.hub = hub
    return app


def _project_names(
    projects: Mapping[str, str | Path] | Sequence[str | Path] | str | Path,
) -> dict[str, Path]:
    if isinstance(projects, (str, Path)):
        projects = [projects]
    if isinstance(projects, Mapping):
        return {str(k): Path(v).resolve() for k, v in projects.items()}
    named: dict[str, Path] = {}
    for folder in projects:
        path = Path(folder).resolve()
        name, n = path.name or "project", 1
        while name in named:
            n += 1
            name = f"{path.name}-{n}"
        named[name] = path
    return named


# -- OpenAPI -----------------------------------------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """OpenAPI 3.1 for :data:`API`."""
    from . import __version__

    paths: dict[str, dict[str, Any]] = {}
    schemas: dict[str, Any] = {
        "Error": {
            "type": "object",
            "properties": {
                "error": {
                    "type": "object",
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                    "required": ["code", "message"],
                }
            },
        }
    }
    for api in API:
        op: dict[str, Any] = {
            "summary": api.summary,
            "operationId": api.handler.__name__,
            "responses": {
                "200": (
                    {
                        "description": "server-sent events; each `data:` is one chunk's JSON",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    }
                    if api.stream
                    else {"description": "JSON", "content": {"application/json": {}}}
                ),
                "default": {
                    "description": "a refusal",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                    },
                },
            },
        }
        params = [p.strip("{}") for p in api.path.split("/") if p.startswith("{")]
        if params:
            op["parameters"] = [
                {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                for p in params
            ]
        if api.access != "public":
            op["security"] = [{"bearer": []}]
        if api.body is not None:
            schemas[api.body.__name__] = api.body.model_json_schema()
            op["requestBody"] = {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {"$ref": f"#/components/schemas/{api.body.__name__}"}
                    }
                },
            }
        paths.setdefault(api.path, {})[api.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "memora", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
