"""Deterministic fakes for tests of hosts, plugins and the kernel itself.

* :class:`ScriptedProvider` — an LLM that replays scripted responses (or calls a function per
  request) and records every request it received.
* :class:`InMemoryTurnExecutor` — durable turns kept in a dict, and a worker's death at a chosen
  checkpoint (:mod:`memora.testing.turns`).
"""

import sys

from .scripted import ScriptedProvider, ScriptedResponse, reasoning, text, tool_call
from .turns import InMemoryTurnExecutor, WorkerDied

# under pytest, the storage conformance suite's assertions show the values they compared (and
# their message says which rule of the protocol failed), in a plugin's own test run too: pytest
# rewrites only test modules unless told (outside pytest nothing is imported for it)
if "pytest" in sys.modules:
    sys.modules["pytest"].register_assert_rewrite("memora.testing.storage_conformance")

__all__ = [
    "InMemoryTurnExecutor",
    "ScriptedProvider",
    "ScriptedResponse",
    "WorkerDied",
    "reasoning",
    "text",
    "tool_call",
]
