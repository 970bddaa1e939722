"""The Agent facade and the turn loop."""

from .agent import Agent, PolishManager, SecurityManager, SessionManager
from .loop import TurnEngine, TurnState
from .options import AgentOptions, TeamConfig
from .state import DuplicateCallInterceptor, Outbox, SessionState

__all__ = [
    "Agent",
    "AgentOptions",
    "DuplicateCallInterceptor",
    "Outbox",
    "PolishManager",
    "SecurityManager",
    "SessionManager",
    "SessionState",
    "TeamConfig",
    "TurnEngine",
    "TurnState",
]
