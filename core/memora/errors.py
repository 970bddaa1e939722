"""Errors as values users can act on.

Every :class:`MemoraError` carries a machine-readable :class:`ErrorCode`, a message that says what
to do, and a ``context`` mapping with the facts behind it (a plugin name, a path, the list of what
is available).  Tool failures use the separate, smaller :class:`ToolErrorCode` set: those are shown
to the *model*, which may retry the retryable ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal

__all__ = [
    "RETRYABLE_TOOL_ERRORS",
    "AbortedError",
    "BusyError",
    "ConflictError",
    "ErrorCategory",
    "ErrorCode",
    "InvalidConfigError",
    "InvalidInputError",
    "MemoraError",
    "NotAvailableError",
    "NotFoundError",
    "NotInitializedError",
    "OutputValidationError",
    "PauseExpiredError",
    "PluginConflictError",
    "PluginError",
    "PluginHookError",
    "PluginLoadError",
    "ProjectLockedError",
    "ProviderError",
    "StorageError",
    "StorageFullError",
    "ToolError",
    "ToolErrorCode",
    "TurnFailedError",
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
    STORAGE_FULL = "STORAGE_FULL"
    """The disk (or the quota, or the database's own limit) a write needed is full; nothing of
    that write was kept, and the next one works once space is back."""
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
    TURN_FAILED = "TURN_FAILED"
    """A turn failed inside memora or a plugin (``chat_text``); ``mark_recovered()`` is needed."""
    ABORTED = "ABORTED"
    """A turn was aborted (``chat_text``): by ``abort()``, a stall or a cancellation."""
    OUTPUT_INVALID = "OUTPUT_INVALID"
    """A typed turn's result did not validate after ``output_retries`` tries."""


class MemoraError(Exception):
    """Base class of every error memora raises on purpose.

    ``code`` is stable and meant for programs; ``message`` is for people; ``context`` holds the
    details (never secrets).  Each code has its own subclass (``BusyError`` for ``BUSY``...), so
    hosts can ``except BusyError:``; ``MemoraError(ErrorCode.BUSY, ...)`` builds a
    ``BusyError``, and every subclass still carries its ``code``.
    """

    code: ErrorCode

    def __new__(cls, *args: Any, **kwargs: Any) -> MemoraError:
        if args and cls in _BASES:
            sub = _BY_CODE.get(str(args[0]))
            if sub is not None and issubclass(sub, cls):
                cls = sub
        return super().__new__(cls)

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

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.code, self.message, self.context), self.__dict__)

    def to_dict(self) -> dict[str, Any]:
        return {"code": str(self.code), "message": self.message, "context": self.context}


def _rebuild(
    cls: type[MemoraError], code: str, message: str, context: dict[str, Any]
) -> MemoraError:
    error = Exception.__new__(cls)
    MemoraError.__init__(error, code, message, context=context)
    return error


class _CodedError(MemoraError):
    """A subclass fixed to one code: ``XError(message, context=...)``; the two-argument form
    ``XError(code, message)`` is accepted too (it is what ``MemoraError(code, ...)`` passes)."""

    default_code: ErrorCode

    def __init__(self, *args: Any, context: Mapping[str, Any] | None = None) -> None:
        if len(args) == 2:
            code, message = args
        elif len(args) == 1:
            code, message = self.default_code, args[0]
        else:
            raise TypeError(f"{type(self).__name__}(message, *, context=None)")
        super().__init__(code, message, context=context)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "default_code" in cls.__dict__:
            _BY_CODE[str(cls.default_code)] = cls


_BY_CODE: dict[str, type[MemoraError]] = {}


class PluginError(MemoraError):
    """A plugin failed to load or raised inside a hook, or two plugins claimed one name;
    ``context['plugin']`` names it."""


class InvalidConfigError(_CodedError):
    """``INVALID_CONFIG``: a malformed option, manifest or config file; the message names the field."""

    default_code = ErrorCode.INVALID_CONFIG


class NotAvailableError(_CodedError):
    """``NOT_AVAILABLE``: something was asked for by name and nothing provides it;
    ``context['available']`` lists what does exist."""

    default_code = ErrorCode.NOT_AVAILABLE


class PluginLoadError(_CodedError, PluginError):
    """``PLUGIN_LOAD_FAILED``: a plugin could not be imported or is blocked."""

    default_code = ErrorCode.PLUGIN_LOAD_FAILED


class PluginConflictError(_CodedError, PluginError):
    """``PLUGIN_CONFLICT``: two plugins claimed the same name; ``context['owners']`` names both."""

    default_code = ErrorCode.PLUGIN_CONFLICT


class PluginHookError(_CodedError, PluginError):
    """``PLUGIN_HOOK_FAILED``: a plugin raised inside one of its hooks."""

    default_code = ErrorCode.PLUGIN_HOOK_FAILED


class NotInitializedError(_CodedError):
    """``NOT_INITIALIZED``: the Agent is not initialised yet, or is closed."""

    default_code = ErrorCode.NOT_INITIALIZED


class ProjectLockedError(_CodedError):
    """``PROJECT_LOCKED``: another process holds the project lock."""

    default_code = ErrorCode.PROJECT_LOCKED


class BusyError(_CodedError):
    """``BUSY``: a turn is running or paused on this Agent, or the session is held elsewhere."""

    default_code = ErrorCode.BUSY


class StorageError(_CodedError):
    """``STORAGE_ERROR``: a storage backend failed to read or write."""

    default_code = ErrorCode.STORAGE_ERROR


class StorageFullError(StorageError):
    """``STORAGE_FULL``: a write found its disk, quota or database full (``ENOSPC``,
    ``EDQUOT``, ``SQLITE_FULL``, PostgreSQL's ``53100``); nothing of it was kept.  A
    ``StorageError`` too, so ``except StorageError:`` still catches it."""

    default_code = ErrorCode.STORAGE_FULL


class InvalidInputError(_CodedError):
    """``INVALID_INPUT``: a call received an argument outside its legal range."""

    default_code = ErrorCode.INVALID_INPUT


class NotFoundError(_CodedError):
    """``NOT_FOUND``: a named object (session, memory, role pack) does not exist."""

    default_code = ErrorCode.NOT_FOUND


class ConflictError(_CodedError):
    """``CONFLICT``: the host's check refused a change; nothing was changed."""

    default_code = ErrorCode.CONFLICT


class PauseExpiredError(_CodedError):
    """``PAUSE_EXPIRED``: a paused turn waited longer than ``pause_timeout``; it was dropped."""

    default_code = ErrorCode.PAUSE_EXPIRED


class TurnFailedError(_CodedError):
    """``TURN_FAILED``: the turn failed inside memora or a plugin (``chat_text``); the session
    needs ``mark_recovered()``."""

    default_code = ErrorCode.TURN_FAILED


class OutputValidationError(_CodedError):
    """``OUTPUT_INVALID``: a typed turn's result still did not validate after its
    ``output_retries``; ``raw`` is the model's last answer (text, or ``final_result``'s
    arguments), ``errors`` what was wrong with it (``type``, ``loc``, ``msg`` each)."""

    default_code = ErrorCode.OUTPUT_INVALID

    @property
    def raw(self) -> str:
        return str(self.context.get("raw", ""))

    @property
    def errors(self) -> list[dict[str, Any]]:
        return list(self.context.get("errors") or [])


class AbortedError(_CodedError):
    """``ABORTED``: the turn was aborted (``chat_text``); ``context['stop_reason']`` says why."""

    default_code = ErrorCode.ABORTED


ErrorCategory = Literal["connection", "timeout", "unknown"]


class ProviderError(MemoraError):
    """``PROVIDER_ERROR``: an LLM call failed.

    ``retryable`` is true for transient failures (429, 5xx, a dropped connection);
    ``retry_after`` is the delay the server asked for, in seconds, when it said one.
    """

    def __init__(
        self,
        *args: Any,
        category: ErrorCategory = "unknown",
        retryable: bool = False,
        retry_after: float | None = None,
        status: int | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> None:
        message = args[-1] if args else ""
        super().__init__(
            ErrorCode.PROVIDER_ERROR,
            message,
            context={
                "category": category,
                "retryable": retryable,
                "status": status,
                **(context or {}),
            },
        )
        self.category: ErrorCategory = category
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status


_BY_CODE[str(ErrorCode.PROVIDER_ERROR)] = ProviderError
_BASES = frozenset({MemoraError, PluginError})


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
