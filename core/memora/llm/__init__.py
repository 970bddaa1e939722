"""LLM-facing types: the provider protocol, messages, deltas and the task router."""

from .provider import ErrorCategory, Provider, ProviderError
from .router import TASK_TYPES, ProviderRouter, TaskType
from .types import (
    Delta,
    FinishDelta,
    LLMRequest,
    Message,
    ReasoningDelta,
    Role,
    TextDelta,
    TokenUsage,
    ToolCall,
    ToolCallDelta,
    ToolSpec,
    UsageDelta,
)

__all__ = [
    "TASK_TYPES",
    "Delta",
    "ErrorCategory",
    "FinishDelta",
    "LLMRequest",
    "Message",
    "Provider",
    "ProviderError",
    "ProviderRouter",
    "ReasoningDelta",
    "Role",
    "TaskType",
    "TextDelta",
    "TokenUsage",
    "ToolCall",
    "ToolCallDelta",
    "ToolSpec",
    "UsageDelta",
]
