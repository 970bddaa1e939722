"""The Agent facade, its project runtime, live session, paused turns and the turn loop."""

from .agent import (
    Agent,
    Checkpoint,
    PolishManager,
    SecurityManager,
    SessionManager,
    ToolCallResult,
)
from .context_window import ContextWindow
from .exposure import ToolExposure, TurnTools
from .loop import TurnDeps, TurnEngine, TurnState
from .options import AgentOptions, TeamConfig
from .pause import PausedTurn, TurnControl
from .prompts import Prompts, TurnPrompts
from .record import (
    ApprovalDecision,
    ApprovalPause,
    HostPause,
    PauseMeta,
    PendingCall,
    PlanItemOutcome,
    QuestionPause,
    TurnRecord,
)
from .runtime import ProjectRuntime
from .session import LiveSession, SummaryPlan
from .state import (
    DuplicateCallInterceptor,
    DuplicateCheckContext,
    Outbox,
    SessionState,
    StatusTransition,
)

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
    "PauseMeta",
    "PausedTurn",
    "PendingCall",
    "PlanItemOutcome",
    "PolishManager",
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
