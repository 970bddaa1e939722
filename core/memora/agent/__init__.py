"""The Agent facade and the turn loop."""

from .agent import (
    Agent,
    Checkpoint,
    PolishManager,
    SecurityManager,
    SessionManager,
    ToolCallResult,
)
from .context_window import ContextWindow
from .loop import TurnDeps, TurnEngine, TurnState
from .options import AgentOptions, TeamConfig
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
    "Outbox",
    "PauseMeta",
    "PendingCall",
    "PlanItemOutcome",
    "PolishManager",
    "QuestionPause",
    "SecurityManager",
    "SessionManager",
    "SessionState",
    "StatusTransition",
    "TeamConfig",
    "ToolCallResult",
    "TurnDeps",
    "TurnEngine",
    "TurnRecord",
    "TurnState",
]
