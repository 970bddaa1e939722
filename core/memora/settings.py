"""Settings: one resolution of configuration, used by the Agent and by every command.

Sources, highest precedence first:

1. **explicit** — Agent keyword arguments, or command-line flags;
2. **environment** — ``MEMORA_STORAGE``, ``MEMORA_PROVIDER`` (the name of a configured provider),
   ``MEMORA_BACKGROUND_PROVIDER``;
3. **project** — ``<project>/.memora/config.json``;
4. **user** — ``<user config dir>/config.json``: the Agent's ``config_dir``, else
   ``$MEMORA_HOME``, else ``$XDG_CONFIG_HOME/memora`` (``~/.config/memora``);
5. **defaults**.

Scalars (``storage``, ``active_provider``, ``background_provider``) are taken whole from the
highest source that sets them.  ``providers`` merge by provider name, ``plugins`` by plugin name
and then key, ``options`` by key.  :attr:`Settings.origins` says where each value came from
(``memora config show`` prints it, like ``git config --show-origin``).

**Trust flows one way.**  A project's config is a cloned repository's content, so it may only set
what is on the allow-list: the scalars in :data:`PROJECT_KEYS`, ``options`` in
:data:`CONFIG_OPTIONS`, a provider entry's ``type``, and the plugin options that the plugin
registered under that name declares safe for a project (:func:`project_settable`), each with its
rule (any value, at most the user's value, one of some values).  Keys that choose where data or
secrets go (:data:`USER_SIDE_KEYS`) are refused outright.  Anything else the project names — an
MCP server's ``command``, a sandbox that runs as the host user, a plugin option nobody declared
safe — is a *request*: it stays off until the user allows exactly that content for that project
(:class:`memora.security.trust.TrustStore`; ``memora trust``, or the question a terminal asks).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from .checks import stricter
from .config import MemoraConfig, ProviderConfig, format_config_error, read_config_file
from .errors import ErrorCode, MemoraError
from .security.state import user_config_dir
from .security.trust import (
    ANY,
    AtMost,
    OneOf,
    ProjectRule,
    Rules,
    TrustRequest,
    TrustStore,
    factory_rules,
    project_settable,
    request_digest,
)

if TYPE_CHECKING:
    from .plugins import Plugins

log = logging.getLogger("memora")

__all__ = [
    "ANY",
    "CONFIG_OPTIONS",
    "ENVIRONMENT",
    "PROJECT_KEYS",
    "USER_SIDE_KEYS",
    "AtMost",
    "OneOf",
    "ProjectRule",
    "Settings",
    "TrustRequest",
    "factory_rules",
    "project_settable",
    "resolve_settings",
    "user_config_dir",
]

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
        "semantic_weight",
    }
)
"""Agent options a config file may set under ``"options"``.  Options that widen what the agent
may do (``permission``, ``allowed_paths``, ``confirm_writes``...) are set in code only."""

USER_SIDE_KEYS: frozenset[str] = frozenset(
    {
        "base_url",
        "api_key_env",
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

_SCALARS = (
    "active_provider",
    "background_provider",
    "storage",
    "session_store",
    "project_lock",
    "approvals",
)

PROJECT_KEYS: frozenset[str] = frozenset(_SCALARS) - {"approvals"}
"""Top-level keys a project's config may set on its own: each picks, by name, something the user
installed or configured (a provider entry, a storage backend, a session store, a lock).  It may
also set ``approvals``, but only to a mode at least as strict as the user's."""


@dataclass(frozen=True)
class Settings:
    """The effective configuration and where each value came from."""

    config: MemoraConfig
    origins: dict[str, str] = field(default_factory=dict)
    """Dotted key (``storage``, ``providers.local``, ``plugins.fetch.timeout``,
    ``options.max_tokens``) -> its source: ``default``, ``user config PATH``, ``project config
    PATH``, ``environment NAME`` or the label of the explicit source."""
    files: tuple[Path, ...] = ()
    """The config files that were read, lowest precedence first."""
    user_dir: Path | None = None
    trust: TrustRequest | None = None
    """What the project's config asks for beyond its allow-list (None: nothing)."""
    trusted: bool = False
    """Whether :attr:`trust`'s requests were applied (the user or the host allowed them)."""
    shadowed: dict[str, list[str]] = field(default_factory=dict)
    """Dotted key -> the origins whose value it replaced (a project's ``providers.openai``
    hiding the user's whole entry, an environment variable over a file...), oldest first."""

    @property
    def requests(self) -> dict[str, Any]:
        """Dotted key -> value of every project request (applied or not)."""
        return dict(self.trust.requests) if self.trust else {}

    @property
    def ignored(self) -> dict[str, Any]:
        """The project requests that were *not* applied."""
        return {} if self.trusted else self.requests

    @property
    def storage(self) -> str:
        return self.config.storage

    def origin(self, key: str) -> str:
        return self.origins.get(key, "default")

    def plugin_options(self, name: str) -> dict[str, Any]:
        """``plugins[name]``: the options passed to the factory registered under ``name``."""
        return dict(self.config.plugins.get(name, {}))

    def provider(self, name: str | None = None) -> tuple[str, dict[str, Any]] | None:
        """``(plugin type, options)`` of the configured provider ``name`` (default: the active
        one), with ``plugins[type]`` under the entry's own options; None when none is set."""
        name = name or self.config.active_provider
        if not name:
            return None
        entry = self.config.providers.get(name)
        if entry is None:
            raise MemoraError(
                ErrorCode.INVALID_CONFIG,
                f"provider {name!r} (from {self.origin('active_provider')}) is not configured; "
                f"configured: {', '.join(self.config.providers) or 'none'}",
                context={"provider": name},
            )
        return entry.type, {**self.plugin_options(entry.type), **entry.options()}

    def state_store(self, option: str, storage: Any, available: list[str], fallback: str) -> str:
        """The session store (``option="session_store"``) or project lock
        (``"project_lock"``) to use: the config's key, else the one registered under the
        storage backend's name (``available``), else ``fallback``."""
        configured = getattr(self.config, option)
        if configured:
            return str(configured)
        if isinstance(storage, str) and storage in available:
            return storage
        return fallback

    def shown_origin(self, key: str) -> str:
        """:meth:`origin`, with what it shadows: ``project config … (shadows user config …)``."""
        hidden = self.shadowed.get(key)
        origin = self.origin(key)
        return f"{origin} (shadows {'; '.join(hidden)})" if hidden else origin

    def rows(self) -> list[tuple[str, Any, str]]:
        """``(key, value, origin)`` for every effective setting, for display; an origin that
        replaced another source's value says so."""
        out: list[tuple[str, Any, str]] = [
            (key, getattr(self.config, key), self.shown_origin(key)) for key in _SCALARS
        ]
        for name, entry in sorted(self.config.providers.items()):
            key = f"providers.{name}"
            out.append((key, entry.model_dump(), self.shown_origin(key)))
        if self.config.embedder is not None:
            out.append(
                ("embedder", self.config.embedder.model_dump(), self.shown_origin("embedder"))
            )
        for name, options in sorted(self.config.plugins.items()):
            for opt, value in sorted(options.items()):
                key = f"plugins.{name}.{opt}"
                out.append((key, value, self.shown_origin(key)))
        for opt, value in sorted(self.config.options.items()):
            key = f"options.{opt}"
            out.append((key, value, self.shown_origin(key)))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": self.config.model_dump(),
            "origins": {key: self.origin(key) for key, _, _ in self.rows()},
            "shadowed": self.shadowed,
            "files": [str(p) for p in self.files],
            "user_config_dir": str(self.user_dir) if self.user_dir else None,
            "project_requests": {
                "requests": self.requests,
                "applied": self.trusted,
                "digest": self.trust.digest if self.trust else None,
            },
        }


def _refuse_user_side_keys(config: MemoraConfig, path: Path, user_dir: Path) -> None:
    found = [
        f"providers.{name}.{key}"
        for name, entry in config.providers.items()
        for key in entry.options()
        if key in USER_SIDE_KEYS
    ] + [
        f"plugins.{name}.{key}"
        for name, options in config.plugins.items()
        for key in options
        if key in USER_SIDE_KEYS
    ]
    if config.embedder is not None:
        found += [f"embedder.{key}" for key in config.embedder.options() if key in USER_SIDE_KEYS]
    if found:
        raise MemoraError(
            ErrorCode.INVALID_CONFIG,
            f"{path}: {found[0]} cannot be set in a project's config: a cloned project could "
            "send your keys to a host of its choosing. Set it in your user config "
            f"({user_dir / 'config.json'}), with a MEMORA_* variable, an Agent option or a "
            "command-line flag"
            + (
                " (the embedder, and where it sends memory text, is yours to choose)"
                if found[0].startswith("embedder.")
                else "; the project may then pick that provider by name"
            ),
            context={"path": str(path), "keys": found},
        )


def _read_layer(path: Path, project_of: Path | None = None) -> dict[str, Any] | None:
    """One config file as the dict it sets (validated), or None when it does not exist.
    ``project_of`` (the user config folder) marks a project's file: user-side keys refused."""
    if not path.exists():
        return None
    if not path.is_file():
        raise MemoraError(
            ErrorCode.INVALID_CONFIG, f"{path} is not a file", context={"path": str(path)}
        )
    config = read_config_file(path)
    if project_of is not None:
        _refuse_user_side_keys(config, path, project_of)
    unknown = sorted(set(config.options) - CONFIG_OPTIONS)
    if unknown:
        raise MemoraError(
            ErrorCode.INVALID_CONFIG,
            f"{path}: options.{unknown[0]} cannot be set in a config file; allowed: "
            + ", ".join(sorted(CONFIG_OPTIONS)),
            context={"path": str(path), "key": unknown[0]},
        )
    return config.model_dump(exclude_unset=True)


RuleLookup = Callable[[str, str | None], Rules]
"""``lookup(name, kind)``: the project rules declared by the factory registered as ``name``
(of ``kind``; of any kind when None)."""


def _plugin_lookup(plugins: Plugins | None) -> RuleLookup:
    """Rules from ``plugins`` (the Agent's own manager), else from the installed plugins,
    discovered on first use (only a project that sets plugin options pays for it)."""

    def lookup(name: str, kind: str | None) -> Rules:
        return (plugins or _installed_plugins()).project_rules(name, kind)

    return lookup


_INSTALLED: dict[tuple[str | None, tuple[str, ...]], Plugins] = {}


def _installed_plugins() -> Plugins:
    """The installed plugins, discovered once per process (and per ``MEMORA_LOAD_PLUGINS`` and
    ``sys.path``): a command resolves its settings several times, and each discovery costs a
    few hundred milliseconds.  Only their declared project rules are read from it."""
    import sys

    key = (os.environ.get("MEMORA_LOAD_PLUGINS"), tuple(sys.path))
    if key not in _INSTALLED:
        from .plugins import create_plugin_manager

        _INSTALLED[key] = create_plugin_manager()
    return _INSTALLED[key]


def _keep(
    options: Mapping[str, Any],
    rules: Rules,
    mine: Mapping[str, Any],
    prefix: str,
    requests: dict[str, Any],
) -> dict[str, Any]:
    """The ``options`` their rules allow (compared with the user's side, ``mine``); the rest go
    to ``requests`` under ``prefix.key``."""
    kept: dict[str, Any] = {}
    for key, value in options.items():
        rule = rules.get(key)
        if rule is not None and rule.allows(value, mine.get(key)):
            kept[key] = value
        else:
            requests[f"{prefix}.{key}"] = value
    return kept


def _provider_entry(
    name: str,
    entry: Mapping[str, Any],
    lower: Mapping[str, Any],
    lookup: RuleLookup,
    requests: dict[str, Any],
) -> dict[str, Any]:
    """A project's provider entry as allowed: its ``type`` and the options its plugin declares
    safe (each compared with the user's entry of that name, else the plugin's options)."""
    kind = entry.get("type")
    if not isinstance(kind, str):
        rules: Rules = {}
        defaults: Mapping[str, Any] = {}
    else:
        rules = lookup(kind, "provider")
        defaults = (lower.get("plugins") or {}).get(kind) or {}
    mine = {**defaults, **((lower.get("providers") or {}).get(name) or {})}
    body = {k: v for k, v in entry.items() if k != "type"}
    return {"type": kind, **_keep(body, rules, mine, f"providers.{name}", requests)}


def _split_project_layer(
    layer: Mapping[str, Any], lower: Mapping[str, Any], lookup: RuleLookup
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(allowed, requests)``: the part of a project's layer on the allow-list (same shape as
    ``layer``) and the rest as dotted key -> value.  ``lower`` is what the user's side set."""
    allowed: dict[str, Any] = {k: v for k, v in layer.items() if k in PROJECT_KEYS}
    requests: dict[str, Any] = {}
    if layer.get("approvals") is not None:
        # compared with the user's mode, or with "ask" (the command line's default) when the
        # user sets none: a project may not loosen what a person at a terminal gets
        mine = layer["approvals"]
        if stricter(mine, lower.get("approvals") or "ask") == mine:
            allowed["approvals"] = mine
        else:
            requests["approvals"] = mine
    if "options" in layer:  # already checked against CONFIG_OPTIONS
        allowed["options"] = dict(layer["options"])
    if layer.get("embedder") is not None:
        # semantic recall sends the memories' text to the embedder: the user's choice
        requests["embedder"] = layer["embedder"]
    lower_plugins = lower.get("plugins") or {}
    for name, entry in (layer.get("providers") or {}).items():
        allowed.setdefault("providers", {})[name] = _provider_entry(
            name, entry, lower, lookup, requests
        )
    for name, options in (layer.get("plugins") or {}).items():
        kept = _keep(
            options, lookup(name, None), lower_plugins.get(name) or {}, f"plugins.{name}", requests
        )
        if kept:
            allowed.setdefault("plugins", {})[name] = kept
    return allowed, requests


TrustAnswer = bool | Callable[[TrustRequest], bool | None] | None
"""How :func:`resolve_settings` treats a project's requests: True applies them (the host trusts
the project), False never does, None asks the user's remembered answer, and a callable is asked
when nothing is remembered (its True/False is remembered; None means "not now")."""


_WARNED: set[tuple[Path, str]] = set()


def _decide(request: TrustRequest, user_dir: Path, trust: TrustAnswer) -> bool:
    if isinstance(trust, bool):
        return trust
    store = TrustStore(user_dir)
    decision = store.decision(request.project, request.digest)
    if decision is None and callable(trust):
        answer = trust(request)
        if answer is not None:
            store.record(request.project, request.digest, bool(answer))
            decision = bool(answer)
    return bool(decision)


def read_project_layer(
    project: Path,
    user_dir: Path,
    lower: Mapping[str, Any] | None = None,
    *,
    plugins: Plugins | None = None,
    trust: TrustAnswer = None,
    warn: bool = True,
) -> tuple[dict[str, Any] | None, TrustRequest | None, bool]:
    """``(layer, request, trusted)``: what ``<project>/.memora/config.json`` may set — its
    allow-listed part, plus its requests when ``trust`` (or the user's remembered answer) allows
    them — or None when the file does not exist.  ``lower``: what the user's side set (the
    ``AtMost`` rules compare with it).  The one guard every reader of a project's config goes
    through (:func:`resolve_settings`, :func:`memora.load_config`)."""
    path = project / ".memora" / "config.json"
    layer = _read_layer(path, user_dir)
    if layer is None:
        return None, None, False
    allowed, requests = _split_project_layer(layer, lower or {}, _plugin_lookup(plugins))
    if not requests:
        return allowed, None, False
    request = TrustRequest(Path(os.path.abspath(project)), path, requests, request_digest(requests))
    trusted = _decide(request, user_dir, trust)
    if warn and not trusted and (path, request.digest) not in _WARNED:
        _WARNED.add((path, request.digest))  # once per process, not per resolution
        log.warning(
            "%s asks for %s, which a project's config cannot set on its own; left "
            "off (allow it with `memora trust allow --project %s`, or set it in your "
            "user config)",
            path,
            ", ".join(sorted(requests)),
            request.project,
        )
    return (layer if trusted else allowed), request, trusted


class _Origins(dict[str, str]):
    """Dotted key -> origin; remembers, per key, the origins a later source replaced."""

    def __init__(self) -> None:
        super().__init__()
        self.shadowed: dict[str, list[str]] = {}

    def set(self, key: str, origin: str) -> None:
        before = self.get(key)
        if before is not None and before != origin:
            self.shadowed.setdefault(key, []).append(before)
        self[key] = origin


def _merge(
    merged: dict[str, Any], origins: _Origins, layer: Mapping[str, Any], origin: str
) -> None:
    for key in _SCALARS:
        if layer.get(key) is not None:
            merged[key] = layer[key]
            origins.set(key, origin)
    for name, entry in (layer.get("providers") or {}).items():
        merged.setdefault("providers", {})[name] = dict(entry)
        origins.set(f"providers.{name}", origin)
    if layer.get("embedder") is not None:
        merged["embedder"] = layer["embedder"]
        origins.set("embedder", origin)
    for name, options in (layer.get("plugins") or {}).items():
        target = merged.setdefault("plugins", {}).setdefault(name, {})
        for opt, value in options.items():
            target[opt] = value
            origins.set(f"plugins.{name}.{opt}", origin)
    for opt, value in (layer.get("options") or {}).items():
        merged.setdefault("options", {})[opt] = value
        origins.set(f"options.{opt}", origin)


def resolve_settings(
    project: str | Path | None = None,
    *,
    config_dir: str | Path | None = None,
    explicit: Mapping[str, Any] | None = None,
    explicit_label: str = "argument",
    environ: Mapping[str, str] | None = None,
    plugins: Plugins | None = None,
    trust: TrustAnswer = None,
    warn: bool = True,
) -> Settings:
    """Resolve the effective settings for ``project`` (a folder, or None for user-level only).

    ``explicit`` holds values in the config file's shape (``{"storage": "json"}``) that win over
    every file and the environment.  Malformed files raise ``INVALID_CONFIG`` naming the file and
    the field; an ``active_provider`` that no source configures is an error naming its source.

    The project's layer is split by the allow-list (rules declared by the factories in
    ``plugins``, else in the installed plugins); what is off the list is applied only as
    ``trust`` says (see :data:`TrustAnswer`) and is listed in :attr:`Settings.trust`; a warning
    on the ``memora`` logger names what was left off (once per process; ``warn=False``: none).
    """
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = {}
    origins = _Origins()
    files: list[Path] = []
    user_dir = user_config_dir(config_dir)
    layers: list[tuple[Path, str]] = [(user_dir / "config.json", "user config")]
    if project is not None:
        layers.append((Path(project) / ".memora" / "config.json", "project config"))
    request: TrustRequest | None = None
    trusted = False
    for path, label in layers:
        if label == "project config" and project is not None:
            layer, request, trusted = read_project_layer(
                Path(project), user_dir, merged, plugins=plugins, trust=trust, warn=warn
            )
        else:
            layer = _read_layer(path)
        if layer is None:
            continue
        files.append(path)
        _merge(merged, origins, layer, f"{label} {path}")
    for var, key in ENVIRONMENT.items():
        value = env.get(var, "").strip()
        if value:
            _merge(merged, origins, {key: value}, f"environment {var}")
    if explicit:
        _merge(merged, origins, explicit, explicit_label)
    try:
        config = MemoraConfig.model_validate(
            {
                **merged,
                "providers": {
                    k: ProviderConfig.model_validate(v)
                    for k, v in (merged.get("providers") or {}).items()
                },
            }
        )
    except ValidationError as exc:  # only an explicit value can still be wrong here
        raise MemoraError(
            ErrorCode.INVALID_CONFIG, format_config_error(exc, explicit_label)
        ) from exc
    for key in ("active_provider", "background_provider"):
        name = getattr(config, key)
        if name and name not in config.providers:
            raise MemoraError(
                ErrorCode.INVALID_CONFIG,
                f"{key} {name!r} (from {origins.get(key, 'default')}) is not one of the "
                f"configured providers ({', '.join(config.providers) or 'none configured'})",
                context={"key": key, "value": name},
            )
    return Settings(
        config, dict(origins), tuple(files), user_dir, request, trusted, dict(origins.shadowed)
    )


@dataclass(slots=True)
class AgentSettings:
    """The host's Agent options over the resolved :class:`Settings`: the one place their
    precedence is decided (an option the host set > the environment > the project > the user >
    the defaults).  Built by :func:`agent_settings`; read by the project runtime."""

    settings: Settings
    options: Any
    """The :class:`~memora.agent.AgentOptions` in force: the host's, with the config files'
    ``options`` filled in where the host set nothing."""
    explicit: frozenset[str]
    """The option names the host set."""

    @property
    def approvals(self) -> Any:
        """The approval mode: the host's, else the config's (a project only tightens it)."""
        if "approvals" in self.explicit:
            return self.options.approvals
        return self.settings.config.approvals

    def _host(self, name: str) -> Any:
        """The host's value for ``name``, or None when it set none."""
        return getattr(self.options, name) if name in self.explicit else None

    def storage(self) -> Any:
        """A storage backend name, or the host's storage object."""
        host = self._host("storage")
        return host if host is not None else self.settings.storage

    def state_store(self, option: str, available: list[str], fallback: str) -> Any:
        """The session store or project lock: the host's option, else the config's key, else
        the one a plugin registered under the storage backend's name, else ``fallback``."""
        host = self._host(option)
        if host is not None:
            return host
        return self.settings.state_store(option, self.storage(), available, fallback)

    def plugin_options(self, name: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Options for the factory registered as ``name``: config ``plugins[name]`` < Agent
        ``plugin_options[name]`` < ``extra``."""
        return {
            **self.settings.plugin_options(name),
            **self.options.plugin_options.get(name, {}),
            **(extra or {}),
        }

    def embedder_spec(self) -> tuple[Any, dict[str, Any]]:
        """``(name or object or None, options)`` of the embedder: the host's option, else the
        config's ``"embedder"`` entry; options from the entry under the host's
        ``embedder_options``."""
        host = self._host("embedder")
        entry = self.settings.config.embedder
        options = dict(self.options.embedder_options)
        if host is not None:
            if isinstance(host, str) and entry is not None and entry.type == host:
                options = {**entry.options(), **options}
            return host, options
        if entry is None:
            return None, options
        return entry.type, {**entry.options(), **options}

    def provider_spec(self, key: str) -> tuple[Any, dict[str, Any]]:
        """The chat (``provider``) or ``background_provider``: ``(name or object, options)``.
        A host's option wins, then the configured entry (``active_provider`` /
        ``background_provider``); the chat provider defaults to the embedded ``llamacpp``."""
        chat = key == "provider"
        extra = dict(self.options.provider_options) if chat else {}
        host = self._host(key)
        if host is not None:
            return host, extra
        config = self.settings.config
        name = config.active_provider if chat else config.background_provider
        entry = self.settings.provider(name) if name else None
        if entry is not None:
            return entry[0], {**entry[1], **extra}
        return ("llamacpp", extra) if chat else (None, {})


def agent_settings(
    options: Any, *, plugins: Plugins | None = None, warn: bool = True
) -> AgentSettings:
    """Resolve the settings for an Agent's ``options`` (:class:`~memora.agent.AgentOptions`):
    the files, the environment and the host's options, in one precedence.  A bad value in the
    config's ``options`` raises ``INVALID_CONFIG`` naming the key and its source."""
    from .agent.options import AgentOptions

    explicit = frozenset(options.model_fields_set)
    host_storage = options.storage if "storage" in explicit else None
    settings = resolve_settings(
        options.project_path,
        config_dir=options.config_dir,
        explicit={"storage": host_storage} if isinstance(host_storage, str) else None,
        explicit_label="Agent option",
        plugins=plugins,
        trust=options.project_trust,
        warn=warn,
    )
    updates = {k: v for k, v in settings.config.options.items() if k not in explicit}
    if updates:
        current = {name: getattr(options, name) for name in explicit}
        try:
            options = AgentOptions.model_validate(
                {
                    "project_path": options.project_path,
                    "data_dir": options.data_dir,
                    **current,
                    **updates,
                }
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            key = str(first["loc"][0]) if first["loc"] else "?"
            raise MemoraError(
                ErrorCode.INVALID_CONFIG,
                f"options.{key} (from {settings.origin('options.' + key)}): {first['msg']}",
                context={"key": f"options.{key}"},
            ) from exc
    return AgentSettings(settings, options, explicit)
