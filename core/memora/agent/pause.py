"""A paused turn as a value, and the signals a host sends a running one.

``agent.paused_turn`` is a :class:`PausedTurn` (as the OpenAI Agents SDK's ``RunState``): what the
turn waits for (``paused``: a ``QuestionPause``, ``ApprovalPause`` or ``HostPause``) and what can be
done with it — :meth:`~PausedTurn.approve`, :meth:`~PausedTurn.deny`, :meth:`~PausedTurn.answer`,
:meth:`~PausedTurn.to_json` (``Agent.resume(state)`` in a new process picks it up),
:meth:`~PausedTurn.discard`, and :meth:`~PausedTurn.resume` to run the turn on.  The Agent's own
``approve``/``reject``/``answer_question``/``continue_after_pause``/``pause_state``/
``discard_paused_turn`` are deprecated: they still do the same, and warn once per process.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..errors import InvalidInputError, PauseExpiredError, ToolError

if TYPE_CHECKING:  # a PausedTurn holds a TurnRecord: .record is loaded by the time one exists
    from ..chunks import AgentChunk
    from .agent import Agent
    from .machinery import SessionMachinery
    from .record import ApprovalPause, Pause, PauseMeta, TurnRecord

__all__ = [
    "PAUSE_STATE_VERSION",
    "PauseVerbs",
    "PausedTurn",
    "TurnControl",
    "deprecated_verb",
    "upgrade_pause_state",
]

PAUSE_STATE_VERSION = 2


@dataclass(slots=True)
class TurnControl:
    """The host's signals to the running turn (``TurnDeps.control``): the engine reads them."""

    abort: bool = False
    """The Agent's own abort was requested (``agent.abort()``)."""
    abort_reason: Literal["user", "timeout"] = "user"
    """The ``stop_reason`` that abort ends the turn with (``agent.abort(reason)``)."""
    pause_reason: str | None = None
    """The host asked the turn to pause (``agent.request_pause(reason)``): the reason."""
    left: bool = False
    """The host stopped iterating a turn that runs in a task of its own (a durable turn): the
    engine's cancellation then keeps it as ``interrupted``, without an ``aborted`` chunk."""


_WARNED: set[str] = set()


def deprecated_verb(name: str, instead: str) -> None:
    """``agent.<name>`` is the older spelling of ``agent.paused_turn.<instead>``: a
    ``DeprecationWarning`` the first time this process uses it (it keeps working)."""
    if name in _WARNED:
        return
    _WARNED.add(name)
    warnings.warn(
        f"agent.{name}() is deprecated; use agent.paused_turn.{instead}",
        DeprecationWarning,
        stacklevel=3,
    )


class PauseVerbs:
    """The Agent's older names for what ``agent.paused_turn`` does: each warns once per
    process (``DeprecationWarning``) and forwards, so hosts written against them keep working.
    The Agent provides :attr:`paused_turn` and ``_drop_paused``."""

    @property
    def paused_turn(self) -> PausedTurn | None:
        raise NotImplementedError

    def _drop_paused(self, record: TurnRecord | None) -> None:
        raise NotImplementedError

    def _paused(self) -> PausedTurn:
        """The paused turn (dropped with ``PAUSE_EXPIRED`` when it waited too long)."""
        paused = self.paused_turn
        if paused is None:
            raise InvalidInputError("no turn is paused")
        paused._live()
        return paused

    def answer_question(self, answers: Mapping[str, str] | str, answer: str | None = None) -> None:
        """Deprecated: ``agent.paused_turn.answer(answers)``."""
        deprecated_verb("answer_question", "answer(answers)")
        paused = self.paused_turn
        if paused is None:
            raise InvalidInputError("no question is pending")
        paused.answer(answers, answer)

    def approve(self, tool_call_id: str, args: Mapping[str, Any] | None = None) -> None:
        """Deprecated: ``agent.paused_turn.approve(args, tool_call_id=...)``."""
        deprecated_verb("approve", "approve(args, tool_call_id=...)")
        self._paused().approve(args, tool_call_id=tool_call_id)

    def reject(self, tool_call_id: str, reason: str = "") -> None:
        """Deprecated: ``agent.paused_turn.deny(reason, tool_call_id=...)``."""
        deprecated_verb("reject", "deny(reason, tool_call_id=...)")
        self._paused().deny(reason, tool_call_id=tool_call_id)

    async def continue_after_pause(self) -> AsyncIterator[AgentChunk]:
        """Deprecated: ``agent.paused_turn.resume()``."""
        deprecated_verb("continue_after_pause", "resume()")
        async for chunk in self._paused().resume():
            yield chunk

    def pause_state(self) -> dict[str, Any]:
        """Deprecated: ``agent.paused_turn.to_json()``."""
        deprecated_verb("pause_state", "to_json()")
        paused = self.paused_turn
        if paused is None:
            raise InvalidInputError("no turn is paused")
        return paused.to_json()

    def discard_paused_turn(self) -> None:
        """Deprecated: ``agent.paused_turn.discard()``."""
        deprecated_verb("discard_paused_turn", "discard()")
        paused = self.paused_turn
        self._drop_paused(paused.record if paused is not None else None)


class PausedTurn:
    """A turn waiting for the host (see the module docstring)."""

    __slots__ = ("_agent", "_session", "record")

    def __init__(self, agent: Agent, session: SessionMachinery, record: TurnRecord) -> None:
        self._agent = agent
        self._session = session
        self.record = record
        """The turn's record (messages, events, pending calls)."""

    def __repr__(self) -> str:
        return f"PausedTurn({self.kind}, round_id={self.round_id!r})"

    @property
    def paused(self) -> Pause:
        """What the turn waits for: ``QuestionPause``, ``ApprovalPause`` or ``HostPause``."""
        pause = self.record.paused
        if pause is None:
            raise InvalidInputError("this turn is no longer paused")
        return pause

    @property
    def kind(self) -> str:
        """``question``, ``approval`` or ``host``."""
        from .record import ApprovalPause, QuestionPause

        pause = self.record.paused
        if isinstance(pause, QuestionPause):
            return "question"
        return "approval" if isinstance(pause, ApprovalPause) else "host"

    @property
    def round_id(self) -> str:
        return self.record.round_id

    @property
    def session_id(self) -> str:
        return self.record.session_id

    @property
    def pause_meta(self) -> PauseMeta | None:
        return self.record.pause_meta

    def _live(self) -> None:
        """Drop the turn with ``PAUSE_EXPIRED`` when it waited past ``pause_timeout``, and
        refuse a turn that is no longer the Agent's paused one."""
        agent = self._agent
        if self._session.live.turn is not self.record or self.record.paused is None:
            raise InvalidInputError("this turn is no longer paused")
        timeout = agent.options.pause_timeout
        state = agent.session_state
        if timeout is not None and state.pause_expired(timeout):
            waited = time.time() - (state.paused_at or time.time())
            self.discard()
            raise PauseExpiredError(
                f"the paused turn waited {waited:.0f} s, longer than pause_timeout "
                f"({timeout:g} s); it was dropped — send the request again"
            )

    def answer(self, answers: Mapping[str, str] | str, answer: str | None = None) -> None:
        """Answer a question: ``answer({"slot": "text"})`` or ``answer("slot", "text")``."""
        from .record import QuestionPause

        self._live()
        paused = self.record.paused
        if not isinstance(paused, QuestionPause):
            raise InvalidInputError("no question is pending")
        given = {answers: answer or ""} if isinstance(answers, str) else dict(answers)
        slots = [q.slot for q in paused.questions]
        unknown = set(given) - set(slots)
        if unknown:
            raise InvalidInputError(f"unknown slot(s) {sorted(unknown)}; pending: {slots}")
        for q in paused.questions:
            value = given.get(q.slot)
            if value is not None and q.options and not q.allow_custom and value not in q.options:
                raise InvalidInputError(f"answer for {q.slot!r} must be one of {q.options}")
        self.record.answers.update({k: str(v) for k, v in given.items()})

    def _approval(self, tool_call_id: str | None) -> ApprovalPause:
        from .record import ApprovalPause

        self._live()
        paused = self.record.paused
        if not isinstance(paused, ApprovalPause):
            raise InvalidInputError("no approval is pending")
        if tool_call_id is not None and paused.tool_call_id != tool_call_id:
            raise InvalidInputError(
                f"the pending call is {paused.tool_call_id!r}, not {tool_call_id!r}"
            )
        return paused

    def approve(
        self, args: Mapping[str, Any] | None = None, *, tool_call_id: str | None = None
    ) -> None:
        """Approve the pending call, optionally with **edited** arguments (re-validated: what
        runs is exactly what was approved).  ``tool_call_id`` checks it is the call meant."""
        from .record import ApprovalDecision

        paused = self._approval(tool_call_id)
        approved_args = None
        if args is not None:
            tool = self._agent.tools.get(paused.name)
            if tool is None:
                raise InvalidInputError(f"tool {paused.name!r} is gone")
            try:
                approved_args = tool.parse_args(dict(args))
            except ToolError as exc:  # the host's edit is bad input; the pause stays as it was
                raise InvalidInputError(
                    f"the edited arguments: {exc}", context={"tool": paused.name}
                ) from None
        self.record.approval = ApprovalDecision(paused.tool_call_id, True, approved_args)

    def deny(self, reason: str = "", *, tool_call_id: str | None = None) -> None:
        """Refuse the pending call; the model is told ``reason``."""
        from .record import ApprovalDecision

        paused = self._approval(tool_call_id)
        self.record.approval = ApprovalDecision(paused.tool_call_id, False, None, reason)

    def to_json(self) -> dict[str, Any]:
        """The paused turn as JSON-able data; ``Agent.resume(state)`` in a new process picks it
        up.  It holds the whole turn record: the pause, the turn's messages and events, the
        outbox, the duplicate-call state, the file stamps, the per-turn counters and the plan."""
        agent = self._agent
        return {
            "version": PAUSE_STATE_VERSION,
            "session_id": self.record.session_id,
            "role_pack": agent.role_pack.active.name,
            "turn": self.record.to_dict(),
            "session_state": agent.session_state.to_dict(),
        }

    def discard(self) -> None:
        """Drop the turn without finishing it: its messages leave the live history (they were
        never stored), so no tool call is left without a result; nothing of it is stored.
        Calls it already executed stay in the outbox."""
        self._session.drop_paused(self.record)

    async def resume(self) -> AsyncIterator[AgentChunk]:
        """Run the turn on (same round) after answering or approving — or, for a pause the
        host requested, as it is."""
        from .record import ApprovalPause, HostPause, QuestionPause

        self._live()
        record = self.record
        if isinstance(record.paused, HostPause):
            record.paused = None
            record.pause_meta = None
            self._session.driver.control.pause_reason = None
        if isinstance(record.paused, QuestionPause) and not record.answers:
            raise InvalidInputError("answer the pending question first (paused_turn.answer)")
        if isinstance(record.paused, ApprovalPause) and record.approval is None:
            raise InvalidInputError("approve or reject the pending call first")
        async for chunk in self._session.continue_turn(record):
            yield chunk


def upgrade_pause_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """The turn of a saved pause state, in version 2's shape (version 1 kept the outbox, the
    duplicate-call state and the plan next to the turn)."""
    version = state.get("version")
    if version not in (1, PAUSE_STATE_VERSION):
        raise InvalidInputError(
            f"unsupported pause state version {version!r} (this memora reads 1 and "
            f"{PAUSE_STATE_VERSION})"
        )
    data = dict(state["turn"])
    if version == 1:
        data.setdefault("outbox", state.get("outbox") or [])
        data.setdefault("duplicates", state.get("duplicates") or {})
        data.setdefault("plan", state.get("task_table") or [])
        paused = data.get("paused") or {}
        data.setdefault("step", "tools" if data.get("pending_calls") else "model")
        if paused.get("kind") == "question":
            paused.setdefault("name", "ask_user")
    return data
