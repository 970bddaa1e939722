"""Per-session and per-turn state: the session state machine, the duplicate-call interceptor,
the idempotency outbox, goal-drift detection, and the Agent's attributes that need ``init()``."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, cast, overload

from ..errors import ErrorCode, MemoraError

__all__ = [
    "AfterInit",
    "DuplicateCallInterceptor",
    "DuplicateCheckContext",
    "Outbox",
    "SessionState",
    "StatusTransition",
    "args_key",
    "goal_similarity",
]


T = TypeVar("T")


class AfterInit(Generic[T]):
    """An attribute a host reads after ``init()`` (``agent.role_pack: AfterInit[RolePackManager]``):
    ``get(owner, name)`` finds it — the owner's session part or its runtime's — and raises the
    owner's ``NOT_INITIALIZED`` error naming the attribute before ``init()``.  Typed, unlike a
    property lambda."""

    __slots__ = ("get", "name")

    def __init__(self, get: Callable[[Any, str], Any]) -> None:
        self.get = get
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, owner: None, owner_type: type) -> AfterInit[T]: ...
    @overload
    def __get__(self, owner: object, owner_type: type) -> T: ...
    def __get__(self, owner: object | None, owner_type: type) -> T | AfterInit[T]:
        if owner is None:
            return self
        return cast("T", self.get(owner, self.name))


_KEY_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str).encode
"""json.dumps(sort_keys=True, ensure_ascii=False, default=str) without a new encoder per call."""


def args_key(name: str, args: Any) -> str:
    """``name:sha1(arguments)``, the arguments as sorted JSON: what the duplicate guard, the
    outbox and the checks compare calls by."""
    raw = _KEY_JSON(args)
    return name + ":" + hashlib.sha1(raw.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class DuplicateCheckContext:
    """What a duplicate-call interceptor (the ``duplicate_interceptor`` option) is asked about:
    this call, and how many times in a row the same call (tool + arguments) came, this one
    included."""

    name: str
    args: dict[str, Any]
    key: str
    """``name:sha1(arguments)`` (the seed's ``currentHash``)."""
    count: int
    iteration: int
    round_id: str
    session_id: str
    last_key: str | None = None
    """The key of the call checked before this one in the turn (the seed's ``lastHash``), None
    for the turn's first call."""
    threshold: int = 3
    """The threshold in force: the interceptor's own ``threshold``, else the
    ``duplicate_call_threshold`` option (the seed's ``ctx.threshold``)."""
    batch: tuple[tuple[str, str], ...] = ()
    """Every call of the model response this call came in, as ``(name, arguments JSON)``, in
    order (the seed's ``check(toolCalls, ctx)`` sees the batch): a semantic-duplicate rule can
    compare this call with its neighbours."""


class DuplicateCallInterceptor:
    """Same tool + same arguments ``threshold`` times in a row -> ``warn``; more -> ``block``.

    Replace it per Agent (``agent.duplicate_interceptor = MyInterceptor()``) with any object
    having ``check(name, args) -> "ok" | "warn" | "block"`` and ``reset()``.
    """

    def __init__(self, threshold: int = 3) -> None:
        self.threshold = threshold
        self._last: str | None = None
        self._count = 0

    name = "default"

    def check(
        self, name: str | DuplicateCheckContext, args: Any = None
    ) -> Literal["ok", "warn", "block"]:
        """``check(name, args)`` counts the calls itself; ``check(ctx)`` — the
        ``duplicate_interceptor`` option's contract — decides from the context's count."""
        if isinstance(name, DuplicateCheckContext):
            return self._verdict(name.count)
        return self.check_key(args_key(name, args))

    def check_key(self, key: str) -> Literal["ok", "warn", "block"]:
        """``check(name, args)`` for a call whose :func:`args_key` is known already."""
        if key == self._last:
            self._count += 1
        else:
            self._last, self._count = key, 1
        return self._verdict(self._count)

    def _verdict(self, count: int) -> Literal["ok", "warn", "block"]:
        if count < self.threshold:
            return "ok"
        return "warn" if count == self.threshold else "block"

    def reset(self) -> None:
        self._last, self._count = None, 0

    def to_dict(self) -> dict[str, Any]:
        return {"last": self._last, "count": self._count}

    def load(self, data: dict[str, Any]) -> None:
        self._last, self._count = data.get("last"), int(data.get("count", 0))


@dataclass
class OutboxEntry:
    """One executed tool call in the :class:`Outbox`: its arguments' key, its result, and how
    safe it is to run again."""

    tool_call_id: str
    name: str
    key: str
    ok: bool
    content: str
    summary: str
    error_code: str | None
    at: float
    idempotency: str = "non-idempotent"


class Outbox:
    """Executed tool calls of a session, so a resumed turn never repeats non-idempotent work and
    a check may ``Skip`` with the previous result.  Past ``limit`` entries the oldest
    idempotent ones go first; a non-idempotent record is dropped only when nothing else is
    left to drop."""

    def __init__(self, limit: int = 500) -> None:
        self._by_id: dict[str, OutboxEntry] = {}
        self._by_key: dict[str, OutboxEntry] = {}
        self._limit = limit

    def record(
        self,
        tool_call_id: str,
        name: str,
        args: Any,
        ok: bool,
        content: str,
        summary: str,
        error_code: str | None,
        idempotency: str = "non-idempotent",
        *,
        key: str | None = None,
    ) -> None:
        """``key``: the call's :func:`args_key` when the caller has it already."""
        entry = OutboxEntry(
            tool_call_id,
            name,
            key if key is not None else args_key(name, args),
            ok,
            content,
            summary,
            error_code,
            time.time(),
            idempotency,
        )
        self._by_id[tool_call_id] = entry
        self._by_key[entry.key] = entry
        if len(self._by_id) > self._limit:
            victim = next(
                (k for k, e in self._by_id.items() if e.idempotency != "non-idempotent"),
                next(iter(self._by_id)),
            )
            old = self._by_id.pop(victim)
            if self._by_key.get(old.key) is old:
                del self._by_key[old.key]

    def by_id(
        self,
        tool_call_id: str,
        name: str | None = None,
        args: Any = None,
        *,
        key: str | None = None,
    ) -> OutboxEntry | None:
        """The recorded execution of this call id, if the same tool and arguments ran (``key``:
        their :func:`args_key`, when the caller has it already)."""
        entry = self._by_id.get(tool_call_id)
        if entry is None or name is None:
            return entry
        return entry if entry.key == (key if key is not None else args_key(name, args)) else None

    def previous(self, name: str, args: Any, *, key: str | None = None) -> OutboxEntry | None:
        """The last recorded execution of the same tool and arguments (``key``: their
        :func:`args_key`, when the caller has it already)."""
        if not self._by_key:
            return None
        return self._by_key.get(key if key is not None else args_key(name, args))

    def to_list(self) -> list[dict[str, Any]]:
        return [vars(e).copy() for e in self._by_id.values()]

    def load(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            entry = OutboxEntry(**item)
            self._by_id[entry.tool_call_id] = entry
            self._by_key[entry.key] = entry


def _bigrams(text: str) -> set[str]:
    t = "".join(text.lower().split())
    return {t[i : i + 2] for i in range(len(t) - 1)} or ({t} if t else set())


def goal_similarity(a: str, b: str) -> float:
    """Jaccard similarity of character bigrams (works for Chinese and English)."""
    x, y = _bigrams(a), _bigrams(b)
    if not x or not y:
        return 0.0
    return len(x & y) / len(x | y)


@dataclass(frozen=True, slots=True)
class StatusTransition:
    """What a state change did: ``from_`` -> ``to`` (unchanged when not ``allowed``)."""

    from_: str
    to: str
    reason: str
    allowed: bool = True


@dataclass
class SessionState:
    """The session state machine: ``idle`` / ``running`` / ``paused`` / ``error``.

    An error keeps its cause and returns to running only once marked recovered; pause timeouts
    count from ``paused_at``, not from the heartbeat.  Each change returns a
    :class:`StatusTransition`.  Goals belong to the session: :meth:`reset` on a session switch.
    """

    status: Literal["idle", "running", "paused", "error"] = "idle"
    error: str | None = None
    error_at: float | None = None
    recovered: bool = True
    paused_at: float | None = None
    heartbeat_at: float = field(default_factory=time.time)
    main_goal: str | None = None
    current_goal: str | None = None
    goal_change_seq: int = 0
    session_id: str | None = None
    drift_threshold: float = 0.08
    on_drift: Callable[[str, str, float], None] | None = None

    def _move(
        self, to: Literal["idle", "running", "paused", "error"], reason: str
    ) -> StatusTransition:
        before = self.status
        self.status = to
        self.heartbeat_at = time.time()
        return StatusTransition(before, to, reason)

    def start(self) -> StatusTransition:
        """Into ``running``; raises ``BUSY`` while an unrecovered error stands."""
        if self.status == "error" and not self.recovered:
            raise MemoraError(
                ErrorCode.BUSY,
                f"the session is in error ({self.error}); call agent.mark_recovered() before continuing",
            )
        self.paused_at = None
        return self._move("running", "turn started")

    def beat(self) -> None:
        self.heartbeat_at = time.time()

    def pause(self, reason: str = "waiting for the host") -> StatusTransition:
        if self.status != "running":
            return StatusTransition(self.status, self.status, reason, allowed=False)
        self.paused_at = time.time()
        return self._move("paused", reason)

    def fail(self, cause: str, *, recovered: bool = False) -> StatusTransition:
        """Into ``error``, keeping ``cause``.  ``recovered=True`` for a failure outside the
        session (a provider error): visible as ``error``, but the next turn may start."""
        self.error = cause
        self.error_at = time.time()
        self.recovered = recovered
        self.paused_at = None
        return self._move("error", cause)

    def mark_recovered(self) -> StatusTransition:
        self.recovered = True
        if self.status != "error":
            return StatusTransition(self.status, self.status, "not in error", allowed=False)
        return self._move("idle", "marked recovered")

    def finish(self, reason: str = "turn ended") -> StatusTransition:
        if self.status == "error" and not self.recovered:
            return StatusTransition(self.status, self.status, reason, allowed=False)
        self.paused_at = None
        return self._move("idle", reason)

    def pause_expired(self, timeout: float, now: float | None = None) -> bool:
        """True when paused for longer than ``timeout`` seconds (counted from ``paused_at``)."""
        if self.status != "paused" or self.paused_at is None:
            return False
        return (now if now is not None else time.time()) - self.paused_at > timeout

    def reset(self, session_id: str | None, main_goal: str | None = None) -> None:
        """Another session: its own goals (the first request of the session is the main goal)."""
        self.session_id = session_id
        self.main_goal = main_goal.strip()[:500] if main_goal and main_goal.strip() else None
        self.current_goal = self.main_goal
        self.goal_change_seq = 0

    def set_goal(self, text: str) -> None:
        goal = text.strip()[:500]
        if not goal:
            return
        if self.main_goal is None:
            self.main_goal = goal
        if goal != self.current_goal:
            self.goal_change_seq += 1
        self.current_goal = goal
        if goal != self.main_goal:
            sim = goal_similarity(self.main_goal, goal)
            if sim < self.drift_threshold and self.on_drift is not None:
                self.on_drift(self.main_goal, goal, sim)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "status": self.status,
            "error": self.error,
            "error_at": self.error_at,
            "recovered": self.recovered,
            "paused_at": self.paused_at,
            "heartbeat_at": self.heartbeat_at,
            "main_goal": self.main_goal,
            "current_goal": self.current_goal,
            "goal_change_seq": self.goal_change_seq,
        }
