"""The Agent facade and the turn loop."""

from .agent import Agent, PolishManager, SecurityManager, SessionManager, ToolCallResult
from .context_window import ContextWindow
from .loop import TurnDeps, TurnEngine, TurnState
from .options import AgentOptions, TeamConfig
from .record import ApprovalDecision, ApprovalPause, PendingCall, QuestionPause, TurnRecord
from .state import DuplicateCallInterceptor, Outbox, SessionState, StatusTransition

__all__ = [
    "Agent",
    "AgentOptions",
    "ApprovalDecision",
    "ApprovalPause",
    "ContextWindow",
    "DuplicateCallInterceptor",
    "Outbox",
    "PendingCall",
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
