"""Who may run which tool: the kernel's own gates, before any plugin check."""

from __future__ import annotations

from typing import Literal

from ..errors import ToolError, ToolErrorCode

__all__ = ["Permission", "check_permission"]

Permission = Literal["owner", "guest"]


def check_permission(
    name: str, *, writes: bool, runs_code: bool, permission: Permission, readonly: bool
) -> None:
    """Raise ``PERMISSION_DENIED`` when the permission level or read-only strategy forbids it."""
    if permission == "guest" and (writes or runs_code):
        raise ToolError(
            ToolErrorCode.PERMISSION_DENIED,
            f"{name} is not available to a guest: guests can read and search but cannot write files "
            "or run commands",
        )
    if readonly and writes:
        raise ToolError(
            ToolErrorCode.PERMISSION_DENIED,
            f"{name} changes files and this role is read-only (toolReadonly = readonly); "
            "describe the change instead of making it",
        )
