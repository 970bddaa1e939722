"""How the service refuses: one JSON shape, ``{"error": {"code", "message"}}``, with the HTTP
status that matches the code; every route, the guard and the adapters answer through here."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import JSONResponse

from memora.errors import ErrorCode, MemoraError

__all__ = ["STATUS", "ApiError", "error_response", "memora_error_response"]

STATUS: dict[str, int] = {
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
    # the request was fine; the server's disk (or database) has no room to store it
    ErrorCode.STORAGE_FULL.value: 507,
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


def memora_error_response(exc: MemoraError) -> JSONResponse:
    """A :class:`~memora.errors.MemoraError` as the refusal its code stands for (500 for a code
    that names no refusal of the request)."""
    return error_response(STATUS.get(exc.code.value, 500), exc.code.value, exc.message)
