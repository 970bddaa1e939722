"""The Agent facade, its project runtime, live session, paused turns and the turn loop.

Names are imported on first use (as in :mod:`memora`): ``from memora import Agent`` loads the
facade, not the turn loop, the stores and the tools, which ``init()`` and the first turn load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_LAZY: dict[str, str] = {
    "Agent": "memora.agent.agent",
    "AgentOptions": "memora.agent.options",
    "ApprovalDecision": "memora.agent.record",
    "ApprovalPause": "memora.agent.record",
    "Checkpoint": "memora.agent.results",
    "ContextWindow": "memora.agent.context_window",
    "DuplicateCallInterceptor": "memora.agent.state",
    "DuplicateCheckContext": "memora.agent.state",
    "HostPause": "memora.agent.record",
    "LiveSession": "memora.agent.session",
    "Outbox": "memora.agent.state",
    "OutputRetry": "memora.agent.output",
    "OutputSpec": "memora.agent.output",
    "PauseMeta": "memora.agent.record",
    "PausedTurn": "memora.agent.pause",
    "PendingCall": "memora.agent.record",
    "PlanItemOutcome": "memora.agent.record",
    "PolishManager": "memora.agent.results",
    "ProjectResources": "memora.agent.project",
    "ProjectRuntime": "memora.agent.runtime",
    "Prompts": "memora.agent.prompts",
    "QuestionPause": "memora.agent.record",
    "SecurityManager": "memora.agent.results",
    "SessionManager": "memora.agent.results",
    "SessionState": "memora.agent.state",
    "StatusTransition": "memora.agent.state",
    "SummaryPlan": "memora.agent.session",
    "TeamConfig": "memora.agent.options",
    "ToolCallResult": "memora.agent.results",
    "ToolExposure": "memora.agent.exposure",
    "TurnControl": "memora.agent.pause",
    "TurnDeps": "memora.agent.loop",
    "TurnEngine": "memora.agent.loop",
    "TurnPrompts": "memora.agent.prompts",
    "TurnRecord": "memora.agent.record",
    "TurnState": "memora.agent.loop",
    "TurnTools": "memora.agent.exposure",
}

__all__ = [
    "Agent",
    "AgentOptions",
    "ApprovalDecision",
    "ApprovalPause",
    "Checkpoint",
    "ContextWindow",
    "DuplicateCallInterceptor",
    "DuplicateCheckContext",
    "HostPause",
    "LiveSession",
    "Outbox",
    "OutputRetry",
    "OutputSpec",
    "PauseMeta",
    "PausedTurn",
    "PendingCall",
    "PlanItemOutcome",
    "PolishManager",
    "ProjectResources",
    "ProjectRuntime",
    "Prompts",
    "QuestionPause",
    "SecurityManager",
    "SessionManager",
    "SessionState",
    "StatusTransition",
    "SummaryPlan",
    "TeamConfig",
    "ToolCallResult",
    "ToolExposure",
    "TurnControl",
    "TurnDeps",
    "TurnEngine",
    "TurnPrompts",
    "TurnRecord",
    "TurnState",
    "TurnTools",
]

if TYPE_CHECKING:  # "X as X": explicit re-exports for type checkers
    from .agent import (
        Agent as Agent,
    )
    from .context_window import (
        ContextWindow as ContextWindow,
    )
    from .exposure import (
        ToolExposure as ToolExposure,
        TurnTools as TurnTools,
    )
    from .loop import (
        TurnDeps as TurnDeps,
        TurnEngine as TurnEngine,
        TurnState as TurnState,
    )
    from .options import (
        AgentOptions as AgentOptions,
        TeamConfig as TeamConfig,
    )
    from .output import OutputRetry as OutputRetry, OutputSpec as OutputSpec
    from .pause import (
        PausedTurn as PausedTurn,
        TurnControl as TurnControl,
    )
    from .prompts import (
        Prompts as Prompts,
        TurnPrompts as TurnPrompts,
    )
    from .record import (
        ApprovalDecision as ApprovalDecision,
        ApprovalPause as ApprovalPause,
        HostPause as HostPause,
        PauseMeta as PauseMeta,
        PendingCall as PendingCall,
        PlanItemOutcome as PlanItemOutcome,
        QuestionPause as QuestionPause,
        TurnRecord as TurnRecord,
    )
    from .results import (
        Checkpoint as Checkpoint,
        PolishManager as PolishManager,
        SecurityManager as SecurityManager,
        SessionManager as SessionManager,
        ToolCallResult as ToolCallResult,
    )
    from .runtime import (
        ProjectRuntime as ProjectRuntime,
    )
    from .session import (
        LiveSession as LiveSession,
        SummaryPlan as SummaryPlan,
    )
    from .state import (
        DuplicateCallInterceptor as DuplicateCallInterceptor,
        DuplicateCheckContext as DuplicateCheckContext,
        Outbox as Outbox,
        SessionState as SessionState,
        StatusTransition as StatusTransition,
    )


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
