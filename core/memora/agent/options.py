"""Agent construction options, validated by pydantic (SPEC §2)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..checks import ApprovalMode
from ..errors import InvalidConfigError
from ..memory.ranking import DEFAULT_SESSION_WEIGHT, PASSAGE_WEIGHT
from ..memory.types import check_scope
from ..memory.vectors import DEFAULT_SEMANTIC_WEIGHT
from ..messages import Messages

__all__ = ["SESSION_OPTIONS", "AgentOptions", "TeamConfig", "check_session_options"]

SESSION_OPTIONS = frozenset({"session_id", "active_role_pack", "approvals", "memory_scope"})
"""The options an Agent made from a shared runtime may set for itself."""


def check_session_options(given: Collection[str], also: str | None = None) -> None:
    """``INVALID_CONFIG`` for an option of ``given`` (or ``also``) that an Agent of a shared
    runtime may not set for itself: a project setting, shared by the runtime's sessions."""
    unknown = sorted(set(given) - SESSION_OPTIONS)
    wrong = unknown[0] if unknown else also
    if wrong is not None:
        raise InvalidConfigError(
            f"{wrong} is a project setting, shared by the runtime's sessions; an Agent of a "
            f"runtime may set: {', '.join(sorted(SESSION_OPTIONS))}",
            context={"key": wrong},
        )


class TeamConfig(BaseModel):
    """A team of role packs: the ``leader`` (the chair of its meetings) and its ``members``."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    leader: str = Field(min_length=1)
    members: list[str] = Field(min_length=1)
    name: str | None = None
    """Defaults to the leader's name."""

    @model_validator(mode="after")
    def _members(self) -> TeamConfig:
        if len(set(self.members)) != len(self.members):
            raise ValueError(f"team {self.label!r}: a member is listed twice")
        if self.leader in self.members:
            raise ValueError(f"team {self.label!r}: the leader {self.leader!r} is also a member")
        return self

    @property
    def label(self) -> str:
        return self.name or self.leader


class AgentOptions(BaseModel):
    """Everything an :class:`~memora.agent.Agent` is built from.  Unknown options are errors."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, defer_build=True)

    project_path: Path
    data_dir: Path
    provider: Any = None
    """A Provider object, or a provider plugin name (``llamacpp``, ``openai``...).  Default: the
    config's ``active_provider``, else the embedded ``llamacpp`` model."""
    provider_options: dict[str, Any] = Field(default_factory=dict)
    background_provider: Any = None
    """Cheaper model for summaries and background work; defaults to ``provider``."""
    provider_router: dict[str, Any] | Callable[[str], Any] | None = None
    """Task type (``chat``, ``reasoning`` — the self-review —, ``summary``, ``background``) ->
    Provider object or name; or a callable ``(task) -> Provider | None`` asked first for every
    task (``None`` keeps the default)."""
    config_dir: Path | None = None
    project_trust: bool | Callable[[Any], bool | None] | None = None
    """What to do with settings a project's config asks for beyond its allow-list (an MCP
    server's command, a sandbox running as the host user, a plugin option no plugin declared safe
    for a project — see :mod:`memora.settings`): ``None`` applies them only when the user allowed
    this content for this project before (``memora trust allow``); ``True`` applies them (the host
    trusts the project); ``False`` never does; a callable ``(TrustRequest) -> bool | None`` is
    asked when nothing is remembered (True/False are remembered; None means "not now")."""
    role_pack_dirs: list[Path] = Field(default_factory=list)
    """Extra folders holding role packs (besides ``<config_dir>/role-packs``)."""
    active_role_pack: str | None = None
    role_pack_teams: list[TeamConfig] | None = None
    """Teams of role packs (a single ``{leader, members}`` is accepted too).  A plan item's
    ``member`` assembles that item's prompt when it belongs to the active pack's team;
    ``agent.meeting()`` lets members answer one question in turn and the leader sum up."""
    builtin_fallback_role: str | None = None
    strategy_override: dict[str, Any] | None = None
    max_context_tokens: int = Field(default=120_000, ge=1_000)
    max_tokens: int | None = Field(default=None, ge=1)
    max_iterations: int = Field(default=100, ge=1, le=1000)
    """The kernel's iteration cap (used when the role pack's stepBudget is 0)."""
    permission: Literal["owner", "guest"] = "owner"
    allowed_paths: list[Path] | None = None
    confirm_writes: bool = False
    confirm_scripts: bool = False
    approvals: ApprovalMode | None = None
    """Which tool calls need the user's word (see :data:`memora.checks.ApprovalMode`):
    ``read-only``, ``ask``, ``auto-edit`` or ``full-auto``.  ``None`` (the library default):
    the user config's ``approvals`` when it sets one (a project's config may make it stricter),
    else only ``confirm_writes``/``confirm_scripts`` ask — a host chooses explicitly.  The
    ``memora`` command defaults to ``ask``."""
    storage: Any = "sqlite"
    """A storage backend name (``sqlite``, ``json``, ``memory``...) or a MemoryStorage object."""
    storage_options: dict[str, Any] = Field(default_factory=dict)
    embedder: Any = None
    """Semantic recall: a registered embedder's name (``openai``, ``llamacpp``) or an object
    implementing :class:`memora.memory.vectors.Embedder`.  ``None``: the user config's
    ``"embedder"``, else none (keyword search only)."""
    embedder_options: dict[str, Any] = Field(default_factory=dict)
    """Options for a named embedder, over the config entry's (``model``, ``base_url``...)."""
    semantic_weight: float = Field(default=DEFAULT_SEMANTIC_WEIGHT, ge=0.0, le=1.0)
    """The vector ranking's share when keyword and vector search are fused (0: keywords
    only, 1: vectors only); see docs/memory.md for what each weight measured on LoCoMo."""
    session_weight: float = Field(default=DEFAULT_SESSION_WEIGHT, ge=0.0, le=4.0)
    """How much the session a memory came from counts when keyword search ranks it (0: each
    memory alone); see :mod:`memora.memory.ranking` and docs/memory.md for what it measured
    on LoCoMo."""
    passage_weight: float = Field(default=PASSAGE_WEIGHT, ge=0.0, le=4.0)
    """How much a memory's best-matching sentence counts next to the whole memory when keyword
    search ranks it (0: the whole memory only); see :func:`memora.memory.ranking.
    with_best_passage` and docs/memory.md for what it measured on LoCoMo."""
    session_store: Any = "jsonl"
    """A session store name or object.  Unless set here or in the config (``"session_store"``),
    the store named like the storage backend is used when one exists, else ``jsonl``."""
    project_lock: Any = None
    """A project lock name or object (``acquire``/``release``).  Default: the config's
    ``"project_lock"``, else the lock named like the storage backend, else ``file``."""
    project_lock_shared: bool = False
    """Take the project lock shared: several processes (a service's workers) serve the project
    at once and serialise turns per session themselves; an exclusive holder (``memora chat``)
    excludes them and they exclude it.  The lock gets the option ``shared``."""
    turn_executor: Any = None
    """Durable turns: a turn executor name (a ``register_turn_executors`` plugin: ``dbos``) or
    object (:class:`~memora.agent.durable.TurnExecutor`).  Default: the user's config's
    ``"turn_executor"``, else none — a turn runs in the Agent's own task and is kept whole
    when it ends (see docs/durability.md)."""
    many_sessions: bool = False
    """The runtime serves many conversations at once (a server: ``memora serve``): its stores
    favour many writers over one conversation's latency — the built-in ``sqlite`` memory store
    writes on its worker thread, sharing commits, rather than a lone write on the event loop
    (its ``write_inline`` plugin option, where the user set it, wins)."""
    round_store: Any = None
    """Rounds live in the session store; set only to use a different object for them."""
    session_id: str | None = None
    """Session to open (created when missing); default: the most recent one, or a new one."""
    memory_scope: str | None = None
    """Whose memory and sessions this Agent works in: a user, tenant or agent name (1-200
    characters).  A scoped Agent writes its rounds' memories into its scope and recalls its
    scope plus the project's unscoped memories, and opens and lists only its scope's sessions;
    ``None`` (the default): the project's unscoped memory and sessions only."""
    tracer: Any = None
    messages: Messages = Field(default_factory=Messages)
    enable_context_summary: bool = True
    archive_mode: Literal["full", "manual"] = "full"
    """full: write a round summary after every round; manual: only when the host calls
    ``agent.memory.write_round_summary``."""
    summary_verbatim_tokens: int = Field(default=100, ge=0)
    """A round whose transcript is at most this many tokens (estimated: a CJK character is one,
    other text four characters a token) is stored in memory as it was said, without the summary's
    model call — five short sentences would be no shorter.  0: summarise every round."""
    disabled_skills: list[str] = Field(default_factory=list)
    file_consistency_check: bool = False
    """Refuse write_file/edit_file on a file changed on disk since the model last read it.
    (The seed's ``fileConsistencyCheck`` host callback for role-pack edits is
    ``role_pack_edit_check``.)"""
    role_pack_edit_check: Callable[[str, str], bool] | None = None
    """Called after each role-pack edit (``agent.role_pack.update_rule`` ...) with
    ``("rule:N" | "skill:NAME", "exists" | "absent")``; ``False`` rolls the edit back."""
    pause_timeout: float | None = Field(default=None, gt=0)
    """Seconds a paused turn may wait (counted from when it paused); after that, answering or
    continuing it drops it with ``PAUSE_EXPIRED``.  ``None``: no limit."""
    pre_execution_check: Callable[..., Any] | None = None
    """A host check ``(call, context) -> decision | None`` run with the plugins' checks."""
    plugins: list[Any] = Field(default_factory=list)
    """Host plugin objects with ``@memora.hookimpl`` methods."""
    plugin_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    resident_tools: list[str] | None = None
    """Which built-in resident tools the model sees (files, project search, memory recall, the
    task table, skills, commands...).  ``None``: all of them; ``[]``: none — only the host's and
    plugins' tools, plus the privileged ones a role pack's capabilities enable.  Fewer tools
    make every request smaller."""
    web_search: Any = None
    web_fetch: Any = None
    code_executor: Any = None
    project_search: Any = None
    duplicate_call_threshold: int = Field(default=3, ge=2, le=1000)
    """Same tool + same arguments this many times in a row: a warning; more: blocked."""
    duplicate_interceptor: Any = None
    """Replaces the default duplicate-call rule: an object with
    ``check(ctx: DuplicateCheckContext) -> "ok" | "warn" | "block"`` (the context has the call,
    how many times in a row it came, the iteration, round and session), an optional ``name``
    and ``threshold`` (used in the warning text)."""
    llm_stall_timeout: float = Field(default=120.0, gt=0)
    retry_attempts: int = Field(default=4, ge=1, le=10)
    output_retries: int = Field(default=2, ge=0, le=20)
    """A typed turn (``output_type``): how many results that do not validate go back to the
    model with what was wrong before the turn ends with ``OUTPUT_INVALID``."""
    retry_base_delay: float = Field(default=0.5, ge=0)
    command_env_allow: list[str] = Field(default_factory=list)
    """Extra environment variables commands and scripts inherit, besides the allow-list of
    ``memora.tools.process.ENV_ALLOW`` (``NAME`` or ``PREFIX_*``; a variable named like a secret
    passes only when named exactly)."""
    command_env: dict[str, str] = Field(default_factory=dict)
    """Variables set for every command and script."""
    isolate_tools: bool | None = None
    """Hide memora's data folder and the user's config folder (keys, server tokens) from every
    process a tool starts — commands, scripts, ``run_code`` — by running it in a mount
    namespace where they are empty (Linux); refuse the tool where that cannot be done.  ``None``
    (the default): on for an Agent with a ``memory_scope`` (one of several people's), off
    otherwise; ``memora serve`` turns it on for every session.  The file tools refuse those
    folders whatever this says."""
    node_path: str = "node"
    load_entrypoints: bool = True

    @field_validator("role_pack_teams", mode="before")
    @classmethod
    def _teams(cls, value: Any) -> Any:
        if isinstance(value, (dict, TeamConfig)):
            return [value]
        return value

    @field_validator("role_pack_teams")
    @classmethod
    def _unique_teams(cls, value: list[TeamConfig] | None) -> list[TeamConfig] | None:
        if value:
            leaders = [t.leader for t in value]
            twice = sorted({x for x in leaders if leaders.count(x) > 1})
            if twice:
                raise ValueError(f"a role pack leads one team at most: {', '.join(twice)}")
        return value

    @field_validator("memory_scope")
    @classmethod
    def _scope(cls, value: str | None) -> str | None:
        return check_scope(value)

    @field_validator("messages", mode="before")
    @classmethod
    def _messages(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return Messages(**value)
        return value

    @model_validator(mode="after")
    def _check(self) -> AgentOptions:
        if self.strategy_override is not None:
            from ..role_pack.strategy import resolve_strategy

            _, issues = resolve_strategy(None, self.strategy_override)
            if issues:
                raise ValueError("; ".join(f"{i.path}: {i.message}" for i in issues))
        if self.role_pack_teams and self.active_role_pack is None:
            self.active_role_pack = self.role_pack_teams[0].leader
        return self
