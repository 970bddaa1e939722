"""Settings: one resolution of configuration, used by the Agent, the server and every command.

The package, bottom up: :mod:`~memora.settings.keys` (the key tables), :mod:`~memora.settings.files`
(the config file reader), :mod:`~memora.settings.resolve` (the precedence), and this module, the
public face (:func:`load_config`, :func:`create_provider_from_config`).  The Agent's own options
over these settings are :mod:`memora.agent.resolved`; the trust rules live in
:mod:`memora.security.trust`.

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

import os
from pathlib import Path
from typing import Any

from ..errors import ErrorCode, MemoraError
from ..security.state import user_config_dir
from ..security.trust import (
    ANY,
    AtMost,
    OneOf,
    ProjectRule,
    TrustRequest,
    factory_rules,
    project_settable,
)
from .files import (
    EmbedderConfig,
    MemoraConfig,
    ProviderConfig,
    check_secrets,
    format_config_error,
    read_config_file,
    strip_json_comments,
)
from .keys import CONFIG_OPTIONS, ENVIRONMENT, PROJECT_KEYS, USER_SIDE_KEYS
from .resolve import (
    Settings,
    TrustAnswer,
    other_endpoint,
    read_project_layer,
    resolve_settings,
)

__all__ = [
    "ANY",
    "CONFIG_OPTIONS",
    "ENVIRONMENT",
    "PROJECT_KEYS",
    "USER_SIDE_KEYS",
    "AtMost",
    "EmbedderConfig",
    "MemoraConfig",
    "OneOf",
    "ProjectRule",
    "ProviderConfig",
    "Settings",
    "TrustAnswer",
    "TrustRequest",
    "check_secrets",
    "create_provider_from_config",
    "factory_rules",
    "format_config_error",
    "load_config",
    "project_settable",
    "read_config_file",
    "read_project_layer",
    "resolve_settings",
    "strip_json_comments",
    "user_config_dir",
]


def load_config(path: str | Path, *, plugins: Any = None) -> MemoraConfig:
    """Read ``path`` (a ``config.json`` file, or a project folder holding ``.memora/config.json``).

    A missing file gives the defaults; a malformed one raises ``INVALID_CONFIG`` naming the field.
    A project's file (a folder, or a ``.memora/config.json`` outside the user config folder) goes
    through the same guard as the Agent's settings: only what a project may set is returned, plus
    the requests the user allowed for that project (``memora trust``); a key that picks where
    requests go (``base_url``...) is refused with ``INVALID_CONFIG``.  ``plugins``: the plugin
    manager whose factories' declarations say what a project may set (default: the installed
    plugins).
    """
    p = Path(path)
    project = p if p.is_dir() else None
    if p.is_dir():
        p = p / ".memora" / "config.json"
    elif p.name == "config.json" and p.parent.name == ".memora":
        user_dir = user_config_dir()
        if os.path.abspath(p.parent) != os.path.abspath(user_dir):
            project = p.parent.parent
    if not p.exists():
        return MemoraConfig()
    if project is not None:
        layer, _, _ = read_project_layer(project, user_config_dir(), plugins=plugins)
        config = MemoraConfig.model_validate(layer or {})
    else:
        config = read_config_file(p)
    if config.active_provider and config.active_provider not in config.providers:
        raise MemoraError(
            ErrorCode.INVALID_CONFIG,
            f"{p}: active_provider {config.active_provider!r} is not one of the providers "
            f"({', '.join(config.providers) or 'none configured'})",
        )
    return config


def create_provider_from_config(name: str | None, config: MemoraConfig, plugins: Any = None) -> Any:
    """Create the provider called ``name`` (default: ``active_provider``) through its plugin."""
    from ..plugins import create_plugin_manager  # down a layer; only when no manager is given

    name = name or config.active_provider
    if not name:
        raise MemoraError(
            ErrorCode.INVALID_CONFIG, "no provider named and no active_provider in the config"
        )
    entry = config.providers.get(name)
    if entry is None:
        raise MemoraError(
            ErrorCode.NOT_FOUND,
            f"no provider {name!r} in the config; configured: {', '.join(config.providers) or 'none'}",
        )
    options = entry.options()
    elsewhere = other_endpoint(options, None)
    if elsewhere is not None:
        # its key is bound to its type's own endpoint; the type would take MEMORA_BASE_URL
        raise MemoraError(
            ErrorCode.INVALID_CONFIG,
            f"provider {name!r} names no base_url, so its key goes to its type's own endpoint "
            f"only, and MEMORA_BASE_URL names {elsewhere}: give the provider its base_url, or "
            "unset MEMORA_BASE_URL",
            context={"provider": name},
        )
    pm = plugins or create_plugin_manager()
    return pm.create("provider", entry.type, options)
