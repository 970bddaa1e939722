"""Request bodies: their models, and the one reader every route's body passes through (JSON
only, at most ``max_body_bytes``, validated by its model with the field named on a refusal)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request

from memora.errors import ErrorCode, describe_validation_error

from .errors import ApiError

__all__ = [
    "AnswersIn",
    "ApprovalIn",
    "ForkIn",
    "RolePackIn",
    "SessionIn",
    "TurnIn",
    "read_body",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnIn(_Body):
    text: str = Field(min_length=1, max_length=200_000, description="The user's message.")
    output_schema: dict[str, Any] | None = Field(
        default=None,
        description="A JSON schema the turn's result must follow: the final `done` event "
        "carries it validated as `output` (an `error` with code OUTPUT_INVALID when it never "
        "validates).",
    )


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
    except ValueError as exc:
        raise ApiError(400, ErrorCode.INVALID_INPUT.value, f"the body is not JSON: {exc}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message = describe_validation_error(exc, "body", limit=1)
        raise ApiError(400, ErrorCode.INVALID_INPUT.value, message) from None
