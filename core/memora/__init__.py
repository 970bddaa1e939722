"""memora — an embeddable, plugin-based LLM agent kernel.

The public API is re-exported here and imported lazily, so ``import memora`` stays cheap for
hosts that only need part of it.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

logging.getLogger("memora").addHandler(logging.NullHandler())

_LAZY: dict[str, str] = {
    "hookimpl": "memora.hookspecs",
    # the agent
    "Agent": "memora.agent",
    "AgentOptions": "memora.agent",
    "ProjectRuntime": "memora.agent",
    "PausedTurn": "memora.agent",
    "Messages": "memora.messages",
    "load_config": "memora.config",
    "create_provider_from_config": "memora.config",
    "tool": "memora.tools",
    "Tool": "memora.tools",
    "ToolContext": "memora.tools",
    # errors
    "MemoraError": "memora.errors",
    "ErrorCode": "memora.errors",
    "NotAvailableError": "memora.errors",
    "PluginError": "memora.errors",
    "PluginConflictError": "memora.errors",
    "AbortedError": "memora.errors",
    "BusyError": "memora.errors",
    "ConflictError": "memora.errors",
    "InvalidConfigError": "memora.errors",
    "InvalidInputError": "memora.errors",
    "NotFoundError": "memora.errors",
    "NotInitializedError": "memora.errors",
    "PauseExpiredError": "memora.errors",
    "PluginHookError": "memora.errors",
    "PluginLoadError": "memora.errors",
    "ProjectLockedError": "memora.errors",
    "StorageError": "memora.errors",
    "TurnFailedError": "memora.errors",
    "ToolError": "memora.errors",
    "ToolErrorCode": "memora.errors",
    "is_retryable": "memora.errors",
    # plugins & capabilities
    "create_plugin_manager": "memora.plugins",
    "Plugins": "memora.plugins",
    "compute_capability_map": "memora.capabilities",
    "CapabilityMap": "memora.capabilities",
    # checks
    "Allow": "memora.checks",
    "Deny": "memora.checks",
    "Ask": "memora.checks",
    "Skip": "memora.checks",
    "Rewrite": "memora.checks",
    "ToolCallInfo": "memora.checks",
    "CheckContext": "memora.checks",
    # chunks
    "AgentChunk": "memora.chunks",
    "chunk_adapter": "memora.chunks",
    # llm
    "Message": "memora.llm",
    "LLMRequest": "memora.llm",
    "Provider": "memora.llm",
    "ProviderError": "memora.llm",
    "ProviderRouter": "memora.llm",
    "ToolSpec": "memora.llm",
    # tracing
    "Tracer": "memora.tracing",
    "Span": "memora.tracing",
}

__all__ = ["__version__", *sorted(_LAZY)]

if TYPE_CHECKING:
    from .agent import Agent, AgentOptions, PausedTurn, ProjectRuntime
    from .capabilities import CapabilityMap, compute_capability_map
    from .checks import Allow, Ask, CheckContext, Deny, Rewrite, Skip, ToolCallInfo
    from .chunks import AgentChunk, chunk_adapter
    from .config import create_provider_from_config, load_config
    from .errors import (
        AbortedError,
        BusyError,
        ConflictError,
        ErrorCode,
        InvalidConfigError,
        InvalidInputError,
        MemoraError,
        NotAvailableError,
        NotFoundError,
        NotInitializedError,
        PauseExpiredError,
        PluginConflictError,
        PluginError,
        PluginHookError,
        PluginLoadError,
        ProjectLockedError,
        StorageError,
        ToolError,
        ToolErrorCode,
        TurnFailedError,
        is_retryable,
    )
    from .hookspecs import hookimpl as hookimpl
    from .llm import LLMRequest, Message, Provider, ProviderError, ProviderRouter, ToolSpec
    from .messages import Messages
    from .plugins import Plugins, create_plugin_manager
    from .tools import Tool, ToolContext, tool
    from .tracing import Span, Tracer


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memora' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
