"""Deterministic fakes for tests of hosts, plugins and the kernel itself.

* :class:`ScriptedProvider` — an LLM that replays scripted responses (or calls a function per
  request) and records every request it received.
"""

from .scripted import ScriptedProvider, ScriptedResponse, reasoning, text, tool_call

__all__ = ["ScriptedProvider", "ScriptedResponse", "reasoning", "text", "tool_call"]
