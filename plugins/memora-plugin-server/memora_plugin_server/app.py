"""The ASGI application: a REST + server-sent-events API over a :class:`~.hub.Hub`.

The service in rooms: the route table and its handlers (:mod:`.routes`), who may call
(:mod:`.guard`), request bodies and their limits (:mod:`.bodies`), turns as server-sent events
(:mod:`.sse`), the OpenAPI document (:mod:`.openapi`), the web page (:mod:`.page`) and how a
refusal looks (:mod:`.errors`); this module puts them together.  Every refusal is a JSON body
``{"error": {"code": ..., "message": ...}}`` with the matching HTTP status.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from memora.errors import MemoraError

from .a2a import a2a_routes
from .bodies import BodyLimits, read_body
from .config import MAX_OPEN_SESSIONS, ServerSettings
from .errors import ApiError, error_response, memora_error_response
from .guard import Guard
from .hub import Hub
from .openapi import openapi_document as _openapi_document
from .page import page, static_file
from .routes import API, Api, Call

logger = logging.getLogger("memora.server")

__all__ = ["API", "ApiError", "create_app", "openapi_document", "project_names"]

_WORKER = str(os.getpid())
"""Sent as ``X-Memora-Worker`` with every API response: which process answered."""


def openapi_document() -> dict[str, Any]:
    """OpenAPI 3.1 for :data:`API`, the routes this app serves."""
    return _openapi_document(API)


def _endpoint(api: Api, hub: Hub, guard: Guard) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            token = guard.check(request, api.access)
            body = (
                await read_body(request, api.body, guard.settings.max_body_bytes)
                if api.body is not None
                else None
            )
            known = token is not None or (api.access == "public" and guard.known(request))
            response = await api.handler(Call(request, hub, body, token, known))
            response.headers["X-Memora-Worker"] = _WORKER
            return response
        except ApiError as exc:
            refusal = error_response(exc.status, exc.code, exc.message, exc.headers)
        except MemoraError as exc:
            refusal = memora_error_response(exc)
        except Exception:
            logger.exception("%s %s failed", request.method, request.url.path)
            refusal = error_response(500, "INTERNAL", "the server failed; its log has the details")
        refusal.headers["X-Memora-Worker"] = _WORKER
        return refusal

    endpoint.__name__ = api.handler.__name__
    return endpoint


def create_app(
    projects: Mapping[str, str | Path] | Sequence[str | Path] | str | Path,
    *,
    settings: ServerSettings | None = None,
    approvals: str = "ask",
    idle_seconds: float = 300.0,
    max_open_sessions: int = MAX_OPEN_SESSIONS,
    shared: bool | None = None,
    settings_dir: Path | None = None,
    rate_file: Path | None = None,
    secured: bool = False,
    **runtime_options: Any,
) -> Starlette:
    """The service as an ASGI app, for ``memora serve`` or a host's own ASGI server.

    ``projects``: one folder, a list of folders (named after the folder), or ``{name: folder}``.
    ``settings``: tokens, CORS and limits (default: none, so loopback only). ``runtime_options``
    go to each project's :class:`~memora.ProjectRuntime` (``provider=``, ``storage=``...).
    The runtimes open when the app starts (ASGI lifespan) and close when it stops.
    ``shared=True`` when several processes serve the same projects (each one's app made with
    it); ``None``: shared when a project's storage is PostgreSQL (other machines may serve it).
    ``settings_dir``: the folder of ``server.json`` to follow — tokens and limits changed there
    apply within a second, with no restart (``memora serve`` passes the user config folder).
    ``rate_file``: a file whose rate-limit buckets every process of this server shares, so N
    processes are one allowance (``memora serve --workers N`` passes one; see
    :mod:`.ratelimit`); None: each process counts alone.  ``idle_seconds`` and
    ``max_open_sessions``: how long and how many sessions keep their Agent open between
    requests, per process.  ``secured``: ask every caller for a token even when ``settings``
    names none — the app of a worker of a server that was started with tokens (``memora serve
    --workers N`` passes it), which a restart after the last token was revoked must not open.
    See :class:`~.hub.Hub`."""
    named = project_names(projects)
    settings = settings or ServerSettings()
    hub = Hub(
        named,
        runtime_options=runtime_options,
        approvals=approvals,
        idle_seconds=idle_seconds,
        max_open_sessions=max_open_sessions,
        shared=shared,
    )
    guard = Guard(settings, follow=settings_dir, rate_file=rate_file, secured=secured)
    if not guard.secured:
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
            guard.close()

    middleware = []
    if settings.cors_origins:  # outermost: its headers go on refusals too
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=settings.cors_origins,
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
                expose_headers=["X-Memora-Turn", "Content-Location"],
            )
        )
    # every body, whatever route it is for (the table's, AG-UI's, A2A's), passes one check
    middleware.append(Middleware(BodyLimits, max_bytes=settings.max_body_bytes))
    routes: list[BaseRoute] = [
        Route(api.path, _endpoint(api, hub, guard), methods=[api.method]) for api in API
    ]
    routes += [Route("/", page), Route("/static/{name}", static_file)]
    routes += a2a_routes(hub, secured=guard.secured, guard=guard.refusal)
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.hub = hub
    return app


def project_names(
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
