"""What every command shares: the project/data/config options, settings and storage."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from ..plugins import Plugins
    from ..settings import Settings

F = TypeVar("F", bound=Callable[..., Any])

project_option = click.option(
    "--project",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("."),
    show_default=True,
    help="The project folder (its .memora/config.json is read).",
)
data_dir_option = click.option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The Agent's data directory.  Default: <project>/.memora/data",
)
config_dir_option = click.option(
    "--config-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The user config folder (default: $MEMORA_HOME, else ~/.config/memora).",
)
storage_option = click.option(
    "--storage",
    "--backend",
    "storage",
    default=None,
    help="Storage backend name (default: the configured one, else sqlite; see memora plugins).",
)


def location_options(fn: F) -> F:
    """--project, --data-dir and --config-dir."""
    return project_option(data_dir_option(config_dir_option(fn)))


def data_dir_for(project: Path, data_dir: Path | None) -> Path:
    return (data_dir or project / ".memora" / "data").resolve()


def settings_for(project: Path, config_dir: Path | None, *, storage: str | None = None) -> Settings:
    """The effective settings for a command: its flags > MEMORA_* > project > user config."""
    from ..settings import resolve_settings

    return resolve_settings(
        project,
        config_dir=config_dir,
        explicit={"storage": storage} if storage else None,
        explicit_label="command line",
    )


def plugin_manager() -> Plugins:
    from ..plugins import create_plugin_manager

    return create_plugin_manager()


def open_storage(settings: Settings, data_dir: Path, *, read_only: bool = False) -> Any:
    """The configured storage backend, opened through its plugin with ``plugins[name]``
    options."""
    name = settings.storage
    options: dict[str, Any] = {**settings.plugin_options(name), "path": data_dir}
    if read_only and name == "sqlite":
        options["read_only"] = True
    return plugin_manager().create("storage", name, options)


class StorageTarget:
    """Where a command works: the project, its data folder and its settings."""

    def __init__(
        self, project: Path, data_dir: Path | None, config_dir: Path | None, storage: str | None
    ) -> None:
        self.project = project.resolve()
        self.data_dir = data_dir_for(self.project, data_dir)
        self.config_dir = config_dir
        self.storage = storage

    def settings(self) -> Settings:
        return settings_for(self.project, self.config_dir, storage=self.storage)

    def open(self, *, read_only: bool = False) -> Any:
        """The memory storage selected by --storage, MEMORA_STORAGE or the config."""
        return open_storage(self.settings(), self.data_dir, read_only=read_only)

    def open_sessions(self) -> Any:
        """The session store (``jsonl``) of the data folder, through its plugin."""
        return plugin_manager().create("session_store", "jsonl", {"path": self.data_dir})


def _targeted(fn: Callable[..., Any], *, storage: bool) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(
        *args: Any,
        project: Path,
        data_dir: Path | None,
        config_dir: Path | None,
        storage: str | None = None,
        **kwargs: Any,
    ) -> Any:
        return fn(*args, where=StorageTarget(project, data_dir, config_dir, storage), **kwargs)

    wrapped = location_options(wrapper)
    return storage_option(wrapped) if storage else wrapped


def store_options(fn: F) -> F:
    """--project, --data-dir, --config-dir and --storage, handed to the command as ``where``."""
    return _targeted(fn, storage=True)  # type: ignore[return-value]


def session_options(fn: F) -> F:
    """--project, --data-dir and --config-dir, handed to the command as ``where``."""
    return _targeted(fn, storage=False)  # type: ignore[return-value]
