"""The key tables of memora's configuration: which settings exist, which the environment sets,
and which a project's config may set on its own.  Plain data: the file reader, the resolution and
the trust rules read them; nothing here imports the rest of memora."""

from __future__ import annotations

__all__ = ["CONFIG_OPTIONS", "ENVIRONMENT", "PROJECT_KEYS", "SCALARS", "USER_SIDE_KEYS"]

ENVIRONMENT: dict[str, str] = {
    "MEMORA_STORAGE": "storage",
    "MEMORA_PROVIDER": "active_provider",
    "MEMORA_BACKGROUND_PROVIDER": "background_provider",
}
"""Environment variables that set a setting, and the setting they set."""

CONFIG_OPTIONS: frozenset[str] = frozenset(
    {
        "active_role_pack",
        "archive_mode",
        "disabled_skills",
        "duplicate_call_threshold",
        "enable_context_summary",
        "file_consistency_check",
        "llm_stall_timeout",
        "max_context_tokens",
        "max_iterations",
        "max_tokens",
        "resident_tools",
        "retry_attempts",
        "retry_base_delay",
        "summary_verbatim_tokens",
        "passage_weight",
        "semantic_weight",
        "session_weight",
    }
)
"""Agent options a config file may set under ``"options"``.  Options that widen what the agent
may do (``permission``, ``allowed_paths``, ``confirm_writes``...) are set in code only."""

USER_SIDE_KEYS: frozenset[str] = frozenset(
    {
        "base_url",
        "api_key_env",
        "api_key_name",
        "headers",
        "dsn",
        "allow_private",
        "allow",
        "proxy",
        "network",
        "namespace",
    }
)
"""Provider and plugin options that choose where secrets go (an endpoint, the variable a key is
read from, extra headers, a database address and the ``namespace`` whose data it reads, a
proxy) or widen a guard (``network`` of the code sandbox).  A project's config is
untrusted input — a cloned repository — so these come from the user's side only: the user
config, ``MEMORA_*`` variables, Agent options or command-line flags."""

SCALARS: tuple[str, ...] = (
    "active_provider",
    "background_provider",
    "storage",
    "session_store",
    "project_lock",
    "approvals",
    "turn_executor",
)

PROJECT_KEYS: frozenset[str] = frozenset(SCALARS) - {"approvals", "turn_executor"}
"""Top-level keys a project's config may set on its own: each picks, by name, something the user
installed or configured (a provider entry, a storage backend, a session store, a lock).  It may
also set ``approvals``, but only to a mode at least as strict as the user's."""
