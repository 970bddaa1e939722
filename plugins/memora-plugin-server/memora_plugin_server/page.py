"""The web page: ``/`` and its own static files, under a strict Content-Security-Policy."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from memora.errors import ErrorCode

from .errors import error_response

__all__ = ["STATIC", "page", "static_file"]

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
