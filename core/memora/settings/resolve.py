"""Resolution: the user's file, the project's (through its trust guard), the environment and
the explicit values merged in one precedence, each value with its origin.

The sources, their precedence and the trust rules for a project's file are described once, in
:mod:`memora.settings`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..checks import stricter
from ..errors import ErrorCode, MemoraError
from ..security.state import user_config_dir
from ..security.trust import AtMost, ProjectRule, Rules, TrustRequest, TrustStore, request_digest
from .files import (
    MemoraConfig,
    ProviderConfig,
    format_config_error,
    read_layer,
)
from .keys import ENVIRONMENT, PROJECT_KEYS, SCALARS

if TYPE_CHECKING:
    from ..plugins import Plugins

log = logging.getLogger("memora")

OPTION_RULES: dict[str, ProjectRule] = {
    # a project may make the stall watch stricter (a shorter wait), never looser than the
    # user's (or the default 120 s): a looser one would let a hung model hold a turn longer
    "llm_stall_timeout": AtMost(120.0),
}
"""Options a project's ``options`` may set only within a rule (the others in CONFIG_OPTIONS
it may set freely)."""

__all__ = [
    "KEY_BINDINGS",
    "RuleLookup",
    "Settings",
    "TrustAnswer",
    "other_endpoint",
    "read_project_layer",
    "resolve_settings",
]

KEY_BINDINGS = frozenset({"api_key_name", "api_key_env", "headers"})
"""Options of a provider entry that bind a key (or an ``Authorization`` header) to it."""


def other_endpoint(entry: Mapping[str, Any], asked: str | None) -> str | None:
    """The endpoint other than ``entry``'s (a provider's options) that is asked for —
    ``asked``, a host's ``base_url`` — or None.  An entry with a key and no endpoint means its
    type's own (OpenAI's for openai), which the type would replace with ``MEMORA_BASE_URL``:
    that variable then names another endpoint, as ``--base-url`` would, and the entry's key
    must not follow it."""
    endpoint = entry.get("base_url")
    if asked is None and endpoint is None and KEY_BINDINGS & set(entry):
        asked = os.environ.get("MEMORA_BASE_URL") or None
    return asked if asked is not None and asked != endpoint else None


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
            (key, getattr(self.config, key), self.shown_origin(key)) for key in SCALARS
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
    key = (os.environ.get("MEMORA_LOAD_PLUGINS"), tuple(sys.path))
    if key not in _INSTALLED:
        from ..plugins import create_plugin_manager  # down a layer; loaded only when needed

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
        mine_options = lower.get("options") or {}
        for key, value in layer["options"].items():
            rule = OPTION_RULES.get(key)
            if rule is None or rule.allows(value, mine_options.get(key)):
                allowed.setdefault("options", {})[key] = value
            else:
                requests[f"options.{key}"] = value
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
    layer = read_layer(path, user_dir)
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
    for key in SCALARS:
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
            layer = read_layer(path)
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
