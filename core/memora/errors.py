"""Errors as values users can act on.

Every :class:`MemoraError` carries a machine-readable :class:`ErrorCode`, a message that says what
to do, and a ``context`` mapping with the facts behind it (a plugin name, a path, the list of what
is available).  Tool failures use the separate, smaller :class:`ToolErrorCode` set: those are shown
to the *model*, which may retry the retryable ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

__all__ = [
    "RETRYABLE_TOOL_ERRORS",
    "ErrorCode",
    "MemoraError",
    "NotAvailableError",
    "PluginConflictError",
    "PluginError",
    "ToolError",
    "ToolErrorCode",
    "describe_validation_error",
    "is_retryable",
]


class ErrorCode(StrEnum):
    """Codes of kernel errors raised to the host."""

    INVALID_CONFIG = "INVALID_CONFIG"
    """An option, manifest or config file is malformed; the message names the field."""
    NOT_AVAILABLE = "NOT_AVAILABLE"
    """A requested provider, backend or capability is not installed or not supported here."""
    PLUGIN_LOAD_FAILED = "PLUGIN_LOAD_FAILED"
    """A plugin could not be imported (only raised under ``MEMORA_STRICT_PLUGINS=1``)."""
    PLUGIN_CONFLICT = "PLUGIN_CONFLICT"
    """Two plugins registered the same name for the same kind of thing."""
    PLUGIN_HOOK_FAILED = "PLUGIN_HOOK_FAILED"
    """A plugin raised inside one of its hooks."""
    NOT_INITIALIZED = "NOT_INITIALIZED"
    """An Agent attribute was used before ``await agent.init()``."""
    PROJECT_LOCKED = "PROJECT_LOCKED"
    """Another process holds the project lock."""
    BUSY = "BUSY"
    """The Agent is already running a turn."""
    STORAGE_ERROR = "STORAGE_ERROR"
    """A storage backend failed to read or write."""
    PROVIDER_ERROR = "PROVIDER_ERROR"
    """An LLM provider failed in a way retries did not fix."""
    INVALID_INPUT = "INVALID_INPUT"
    """A call received an argument outside its legal range."""
    NOT_FOUND = "NOT_FOUND"
    """A named object (session, memory, role pack) does not exist."""
    CONFLICT = "CONFLICT"
    """The host's check refused a change (a role-pack edit); nothing was changed."""
    PAUSE_EXPIRED = "PAUSE_EXPIRED"
    """A paused turn waited longer than ``pause_timeout``; it was dropped."""


class MemoraError(Exception):
    """Base class of every error memora raises on purpose.

    ``code`` is stable and meant for programs; ``message`` is for people; ``context`` holds the
    details (never secrets).
    """

    code: ErrorCode

    def __init__(
        self,
        code: ErrorCode | str,
        message: str,
        *,
        context: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.context: dict[str, Any] = dict(context or {})

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"code": str(self.code), "message": self.message, "context": self.context}


class NotAvailableError(MemoraError):
    """Something was asked for by name and nothing provides it; ``context['available']`` lists
    what does exist."""

    def __init__(self, message: str, *, context: Mapping[str, Any] | None = None) -> None:
        super().__init__(ErrorCode.NOT_AVAILABLE, message, context=context)


class PluginError(MemoraError):
    """A plugin failed to load or raised inside a hook; ``context['plugin']`` names it."""


class PluginConflictError(PluginError):
    """Two plugins claimed the same name; ``context['owners']`` names both."""

    def __init__(self, message: str, *, context: Mapping[str, Any] | None = None) -> None:
        super().__init__(ErrorCode.PLUGIN_CONFLICT, message, context=context)


class ToolErrorCode(StrEnum):
    """The ten codes a tool failure can carry.  Five are retryable (see :func:`is_retryable`)."""

    PATH_NOT_ALLOWED = "PATH_NOT_ALLOWED"
    """The path resolves outside ``allowed_paths``.  Not retryable with the same path."""
    FILE_NOT_FOUND = "FILE_NOT_FOUND"
    """The file or folder does not exist.  Retryable: list the folder and try another path."""
    PERMISSION_DENIED = "PERMISSION_DENIED"
    """The permission level, read-only strategy or a policy hook refuses the call."""
    INVALID_ARGS = "INVALID_ARGS"
    """The arguments do not match the tool's schema.  Retryable with corrected arguments."""
    NOT_AVAILABLE = "NOT_AVAILABLE"
    """The tool or what it needs is not installed or not enabled for this role pack."""
    TIMEOUT = "TIMEOUT"
    """The tool ran out of time.  Retryable, perhaps with a smaller request."""
    RATE_LIMITED = "RATE_LIMITED"
    """A service asked to slow down.  Retryable later."""
    NETWORK_ERROR = "NETWORK_ERROR"
    """A network request failed.  Retryable."""
    EXECUTION_FAILED = "EXECUTION_FAILED"
    """The tool ran and failed (a command's non-zero exit, a script error)."""
    OUTPUT_TOO_LARGE = "OUTPUT_TOO_LARGE"
    """The result exceeded a cap; ask for a smaller range."""


RETRYABLE_TOOL_ERRORS: frozenset[ToolErrorCode] = frozenset(
    {
        ToolErrorCode.FILE_NOT_FOUND,
        ToolErrorCode.INVALID_ARGS,
        ToolErrorCode.TIMEOUT,
        ToolErrorCode.RATE_LIMITED,
        ToolErrorCode.NETWORK_ERROR,
    }
)


def describe_validation_error(exc: Any, root: str, limit: int = 8) -> str:
    """``loc: message; ...`` for a pydantic ``ValidationError`` (duck-typed: no pydantic import
    here, so ``import memora`` stays light)."""
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(x) for x in err.get("loc", ())) or root
        parts.append(f"{loc}: {err.get('msg')}")
    return "; ".join(parts)


def is_retryable(code: ToolErrorCode | str) -> bool:
    """True when the model may reasonably retry after an error with this code."""
    try:
        return ToolErrorCode(code) in RETRYABLE_TOOL_ERRORS
    except ValueError:
        return False


class ToolError(Exception):
    """Raised by a tool to report a failure the model should see.

    The message should tell the model what to do instead (``"use list_dir to see what exists"``).
    """

    def __init__(
        self, code: ToolErrorCode | str, message: str, *, context: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = ToolErrorCode(code)
        self.message = message
        self.context: dict[str, Any] = dict(context or {})

    @property
    def retryable(self) -> bool:
        return is_retryable(self.code)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"
