"""Request bodies: their models, and the one reader every route's body passes through (JSON
only, at most ``max_body_bytes``, validated by its model with the field named on a refusal)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request

from memora.errors import ErrorCode, describe_validation_error

from .errors import ApiError, error_response

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_TURN_CHARS",
    "AnswersIn",
    "ApprovalIn",
    "BodyLimits",
    "ForkIn",
    "MemoryEditIn",
    "RolePackIn",
    "SessionIn",
    "TurnIn",
    "read_body",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


MAX_TURN_CHARS = 200_000
"""The longest message a turn takes, on every route (REST, AG-UI, A2A)."""
BODY_SECONDS = 30.0
"""How long a request's body may take to arrive, on every route."""
MAX_JSON_DEPTH = 64
"""Deeper JSON is refused before anything parses it (a parser recursing 1,000 levels fails)."""


_USER = (
    "The user (memory scope) the request acts for, as the X-Memora-User header: only a token "
    "added with --act-for-users (or this machine without tokens) may name another user than "
    "its own."
)


class TurnIn(_Body):
    text: str = Field(min_length=1, max_length=MAX_TURN_CHARS, description="The user's message.")
    output_schema: dict[str, Any] | None = Field(
        default=None,
        description="A JSON schema the turn's result must follow: the final `done` event "
        "carries it validated as `output` (an `error` with code OUTPUT_INVALID when it never "
        "validates).",
    )
    user: str | None = Field(default=None, max_length=200, description=_USER)
    background: bool = Field(
        default=False,
        description="Run the turn with no client attached: answered at once (202) with the "
        "turn's id; follow it at /turns/{turn}/events from any event, on any worker.",
    )


class SessionIn(_Body):
    title: str = Field(default="", max_length=200)
    user: str | None = Field(default=None, max_length=200, description=_USER)


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


class MemoryEditIn(_Body):
    content: str = Field(min_length=1, max_length=100_000, description="The corrected text.")


class RolePackIn(_Body):
    name: str = Field(min_length=1, max_length=200)


async def read_body(request: Request, model: type[BaseModel], limit: int) -> BaseModel:
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
    except RecursionError:
        raise ApiError(
            400, ErrorCode.INVALID_INPUT.value, "the body is nested too deeply"
        ) from None
    except ValueError as exc:
        raise ApiError(400, ErrorCode.INVALID_INPUT.value, f"the body is not JSON: {exc}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message = describe_validation_error(exc, "body", limit=1)
        raise ApiError(400, ErrorCode.INVALID_INPUT.value, message) from None


def json_depth_over(raw: bytes, limit: int) -> bool:
    """Whether the JSON text ``raw`` nests arrays and objects deeper than ``limit`` (brackets
    inside strings do not count).  Scanned only for a body with that many brackets at all."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    depth = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return False


class BodyLimits:
    """ASGI middleware: the one place every request body passes through — the route table's,
    AG-UI's and A2A's alike.  A body is JSON (``415`` otherwise), at most ``max_bytes``
    (``413``, from ``Content-Length`` at once or while it arrives) and nested at most
    :data:`MAX_JSON_DEPTH` deep (``400``); what passes is handed on unchanged."""

    def __init__(self, app: Any, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refuse_headers(headers)
        if refusal is None:
            body, refusal = await self._read(receive)
        if refusal is not None:
            status, code, message = refusal
            await error_response(status, code, message)(scope, receive, send)
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                after: dict[str, Any] = await receive()  # after the body: what the server says
                return after
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _refuse_headers(self, headers: dict[str, str]) -> tuple[int, str, str] | None:
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return 413, "TOO_LARGE", f"the body is over {self.max_bytes} bytes"
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if length not in (None, "0") and ctype != "application/json":
            return 415, "UNSUPPORTED_MEDIA_TYPE", "send the body as application/json"
        return None

    async def _read(self, receive: Any) -> tuple[bytes, tuple[int, str, str] | None]:
        try:
            async with asyncio.timeout(BODY_SECONDS):
                return await self._read_all(receive)
        except TimeoutError:  # a body sent a byte at a time holds a connection no longer
            return b"", (408, "REQUEST_TIMEOUT", f"the body took over {BODY_SECONDS:g} s")

    async def _read_all(self, receive: Any) -> tuple[bytes, tuple[int, str, str] | None]:
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return b"", (400, ErrorCode.INVALID_INPUT.value, "the client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return b"", (413, "TOO_LARGE", f"the body is over {self.max_bytes} bytes")
            parts.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(parts)
        if body and json_depth_over(body, MAX_JSON_DEPTH):
            return b"", (
                400,
                ErrorCode.INVALID_INPUT.value,
                f"the body is nested deeper than {MAX_JSON_DEPTH} levels",
            )
        return body, None
