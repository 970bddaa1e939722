"""The Agent's settings: the host's options over the resolved configuration, in one precedence.

:func:`agent_settings` is the one place where an option the host set, the environment, the
project's and the user's config files and the defaults meet; the project runtime, the server and
the CLI ask it (through :class:`~memora.agent.runtime.ProjectRuntime`) instead of deciding again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..errors import ErrorCode, MemoraError
from ..settings import Settings, resolve_settings
from ..settings.resolve import KEY_BINDINGS, other_endpoint
from .options import AgentOptions

if TYPE_CHECKING:
    from ..plugins import Plugins

__all__ = ["AgentSettings", "agent_settings"]


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

    def turn_executor(self) -> Any:
        """The turn executor: the host's option, else the (user's) config's key, else None."""
        host = self._host("turn_executor")
        return host if host is not None else self.settings.config.turn_executor

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
        if entry is None or (host is not None and host != entry.type):
            return host, options
        mine = entry.options()
        if KEY_BINDINGS & set(mine) and other_endpoint(mine, options.get("base_url")):
            # as for a provider: the entry's key stays with the entry's endpoint
            return entry.type, options
        return entry.type, {**mine, **options}

    def provider_spec(self, key: str) -> tuple[Any, dict[str, Any]]:
        """The chat (``provider``) or ``background_provider``: ``(name or object, options)``.
        See :meth:`provider_choice`."""
        spec, options, _ = self.provider_choice(key)
        return spec, options

    def provider_choice(self, key: str) -> tuple[Any, dict[str, Any], str]:
        """The chat (``provider``) or ``background_provider``: ``(plugin type or object,
        options, how it was chosen in words)``.  A host's option wins, then the configured
        entry (``active_provider`` / ``background_provider``); the chat provider defaults to
        the embedded ``llamacpp``.  A name the host gives is a provider of the config first
        (``memora providers add fast …``: its type, endpoint, model and key), else a plugin type.

        A provider of the config is bound to its endpoint: its key goes there only.  When the
        host's options name another ``base_url`` (``memora run --provider fast --base-url …``,
        or ``MEMORA_BASE_URL``), the entry is not used at all — its plugin type runs with the
        host's options alone, the key from where that type takes one by default (the
        environment) — so a key bound to one endpoint never reaches another."""
        chat = key == "provider"
        extra = dict(self.options.provider_options) if chat else {}
        host = self._host(key)
        if isinstance(host, str):
            return self._named(host, extra, by="host option")
        if host is not None:
            return host, extra, f"the host's provider object ({type(host).__name__})"
        config = self.settings.config
        name = config.active_provider if chat else config.background_provider
        if name:
            if name not in config.providers:
                self.settings.provider(name)  # INVALID_CONFIG naming where the name came from
            return self._named(
                name,
                extra,
                by=self.settings.origin("active_provider" if chat else "background_provider"),
            )
        if chat:
            return "llamacpp", extra, "the embedded model (llamacpp: no provider is configured)"
        return None, {}, "the chat provider"

    def _named(
        self, name: str, extra: dict[str, Any], *, by: str
    ) -> tuple[Any, dict[str, Any], str]:
        """The provider ``name``: the config's entry of that name, else the plugin type."""
        entry = self.settings.config.providers.get(name)
        if entry is None:
            return name, extra, f"the {name} plugin ({by})"
        kind, options = self.settings.provider(name) or (entry.type, {})
        endpoint = options.get("base_url")
        asked = other_endpoint(options, extra.get("base_url"))
        if asked is not None:
            return (
                kind,
                extra,
                f"the {kind} plugin at {asked} (not your provider {name!r}, whose key goes to "
                f"{endpoint or 'its default endpoint'} only)",
            )
        where = f" at {endpoint}" if endpoint else ""
        return kind, {**options, **extra}, f"your provider {name!r} ({kind}{where}; {by})"


def agent_settings(
    options: Any, *, plugins: Plugins | None = None, warn: bool = True
) -> AgentSettings:
    """Resolve the settings for an Agent's ``options`` (:class:`~memora.agent.AgentOptions`):
    the files, the environment and the host's options, in one precedence.  A bad value in the
    config's ``options`` raises ``INVALID_CONFIG`` naming the key and its source."""
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
