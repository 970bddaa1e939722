"""memora — an embeddable, plugin-based LLM agent kernel.

The public API is re-exported here and imported lazily, so ``import memora`` stays cheap for
hosts that only need part of it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ._lazy import lazy_exports
from ._version import __version__

logging.getLogger("memora").addHandler(logging.NullHandler())

_LAZY: dict[str, str] = {
    "hookimpl": "memora.hookspecs",
    # the agent
    "Agent": "memora.agent",
    "AgentOptions": "memora.agent",
    "ProjectRuntime": "memora.agent",
    "PausedTurn": "memora.agent",
    "OutputSpec": "memora.agent",
    "ApprovalPause": "memora.agent",
    "QuestionPause": "memora.agent",
    "HostPause": "memora.agent",
    # durable turns (a turn executor plugin's vocabulary)
    "TurnExecutor": "memora.agent.durable",
    "DurableTurn": "memora.agent.durable",
    "UnfinishedTurn": "memora.agent.durable",
    "run_elsewhere": "memora.agent.durable",
    "check_state_version": "memora.agent.durable",
    "TURN_STATE_VERSION": "memora.agent.durable",
    "RolePackManager": "memora.role_pack.manager",
    "check_scope": "memora.memory.types",
    "Forgotten": "memora.memory.forgetting",
    "Messages": "memora.messages",
    "load_config": "memora.settings",
    "create_provider_from_config": "memora.settings",
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
    "StorageFullError": "memora.errors",
    "TurnFailedError": "memora.errors",
    "OutputValidationError": "memora.errors",
    "OutputRetry": "memora.agent.output",
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

if TYPE_CHECKING:  # "X as X": an explicit re-export, so `from memora import Agent` type-checks
    from .agent import (
        Agent as Agent,
        AgentOptions as AgentOptions,
        ApprovalPause as ApprovalPause,
        HostPause as HostPause,
        OutputSpec as OutputSpec,
        PausedTurn as PausedTurn,
        ProjectRuntime as ProjectRuntime,
        QuestionPause as QuestionPause,
    )
    from .agent.durable import (
        TURN_STATE_VERSION as TURN_STATE_VERSION,
        DurableTurn as DurableTurn,
        TurnExecutor as TurnExecutor,
        UnfinishedTurn as UnfinishedTurn,
        check_state_version as check_state_version,
        run_elsewhere as run_elsewhere,
    )
    from .agent.output import OutputRetry as OutputRetry
    from .capabilities import (
        CapabilityMap as CapabilityMap,
        compute_capability_map as compute_capability_map,
    )
    from .checks import (
        Allow as Allow,
        Ask as Ask,
        CheckContext as CheckContext,
        Deny as Deny,
        Rewrite as Rewrite,
        Skip as Skip,
        ToolCallInfo as ToolCallInfo,
    )
    from .chunks import AgentChunk as AgentChunk, chunk_adapter as chunk_adapter
    from .errors import (
        AbortedError as AbortedError,
        BusyError as BusyError,
        ConflictError as ConflictError,
        ErrorCode as ErrorCode,
        InvalidConfigError as InvalidConfigError,
        InvalidInputError as InvalidInputError,
        MemoraError as MemoraError,
        NotAvailableError as NotAvailableError,
        NotFoundError as NotFoundError,
        NotInitializedError as NotInitializedError,
        OutputValidationError as OutputValidationError,
        PauseExpiredError as PauseExpiredError,
        PluginConflictError as PluginConflictError,
        PluginError as PluginError,
        PluginHookError as PluginHookError,
        PluginLoadError as PluginLoadError,
        ProjectLockedError as ProjectLockedError,
        StorageError as StorageError,
        StorageFullError as StorageFullError,
        ToolError as ToolError,
        ToolErrorCode as ToolErrorCode,
        TurnFailedError as TurnFailedError,
        is_retryable as is_retryable,
    )
    from .hookspecs import hookimpl as hookimpl
    from .llm import (
        LLMRequest as LLMRequest,
        Message as Message,
        Provider as Provider,
        ProviderError as ProviderError,
        ProviderRouter as ProviderRouter,
        ToolSpec as ToolSpec,
    )
    from .memory.forgetting import Forgotten as Forgotten
    from .memory.types import check_scope as check_scope
    from .messages import Messages as Messages
    from .plugins import Plugins as Plugins, create_plugin_manager as create_plugin_manager
    from .role_pack.manager import RolePackManager as RolePackManager
    from .settings import (
        create_provider_from_config as create_provider_from_config,
        load_config as load_config,
    )
    from .tools import Tool as Tool, ToolContext as ToolContext, tool as tool
    from .tracing import Span as Span, Tracer as Tracer


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
