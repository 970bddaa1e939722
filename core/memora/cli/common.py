"""What every command shares: the project/data/config options, settings and storage."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import click

if TYPE_CHECKING:
    from ..plugins import Plugins
    from ..settings import Settings

F = TypeVar("F", bound=Callable[..., Any])


def find_project_root(start: Path) -> Path:
    """The project a command in ``start`` works on, found upwards as git finds ``.git``: the
    nearest folder holding a ``.memora/`` folder (not the user's own config folder), else the
    root of the enclosing git repository, else ``start`` itself — so a subfolder never gets a
    fresh ``.memora/`` of its own."""
    from ..security.state import user_config_dir

    start = start.resolve()
    user = user_config_dir().resolve()
    chain: list[Path] = []
    for folder in (start, *start.parents):
        if folder != start and _shared_scratch(folder):
            break  # a .memora in /tmp is nobody's project: never walk into a shared folder
        chain.append(folder)
    for folder in chain:
        candidate = folder / ".memora"
        if candidate.is_dir() and candidate.resolve() != user:
            return folder
    for folder in chain:
        if (folder / ".git").exists():
            return folder
    return start


def _shared_scratch(folder: Path) -> bool:
    """A world-writable folder with the sticky bit (``/tmp``, ``/var/tmp``): anyone may leave a
    ``.memora`` there."""
    import stat

    try:
        mode = folder.stat().st_mode
    except OSError:
        return False
    return bool(mode & stat.S_IWOTH and mode & stat.S_ISVTX)


def _project_or_found(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path:
    return value if value is not None else find_project_root(Path.cwd())


project_option = click.option(
    "--project",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    callback=_project_or_found,
    help="The project folder (its .memora/config.json is read).  Default: the nearest folder "
    "upwards holding .memora/, else the git repository's root, else the working folder.",
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


def safe(text: Any, *, newlines: bool = True) -> str:
    """Outside text (a model's, a tool's, a server's, a file's) made safe for Rich markup: no
    control sequence (:func:`memora.security.terminal.clean`) and no markup of its own."""
    from rich.markup import escape

    from ..security.terminal import clean

    return escape(clean(str(text), newlines=newlines))


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
        self,
        project: Path,
        data_dir: Path | None,
        config_dir: Path | None,
        storage: str | None,
        *,
        scope: str | None = None,
        all_scopes: bool = False,
    ) -> None:
        self.project = project.resolve()
        self.data_dir = data_dir_for(self.project, data_dir)
        self.config_dir = config_dir
        self.storage = storage
        self.scope = scope
        """``--scope``: whose memory and sessions (``None``: the project's unscoped)."""
        self.all_scopes = all_scopes
        """``--all-scopes``: every scope's (the project owner's view)."""

    def memory(self, store: Any) -> Any:
        """``store`` as this command's scope sees it (a :class:`MemoryManager` view), ranking
        searches with the config's ``session_weight`` and ``passage_weight`` as an Agent
        would."""
        from ..memory.manager import MemoryManager

        session_weight, passage_weight = self.ranking_weights()
        manager = MemoryManager(store, session_weight=session_weight, passage_weight=passage_weight)
        return manager.all_scopes() if self.all_scopes else manager.for_scope(self.scope)

    def ranking_weights(self) -> tuple[float, float]:
        """The config's ``options.session_weight`` and ``options.passage_weight`` (the defaults
        where unset), checked by the Agent option's own field (one rule for both)."""
        from pydantic import TypeAdapter, ValidationError

        from ..agent.options import AgentOptions
        from ..errors import InvalidConfigError

        options = self.settings().config.options
        weights: list[float] = []
        for key in ("session_weight", "passage_weight"):
            field = AgentOptions.model_fields[key]
            if key not in options:
                weights.append(float(field.default))
                continue
            try:
                weights.append(TypeAdapter(Annotated[float, field]).validate_python(options[key]))
            except ValidationError as exc:
                low = next(m.ge for m in field.metadata if hasattr(m, "ge"))
                high = next(m.le for m in field.metadata if hasattr(m, "le"))
                raise InvalidConfigError(
                    f"options.{key} is {options[key]!r}: {exc.errors()[0]['msg']}; a number "
                    f"from {low:g} to {high:g} is legal",
                    context={"key": f"options.{key}"},
                ) from None
        return weights[0], weights[1]

    def sees_session(self, info: Any) -> bool:
        """Whether the session ``info`` is this command's scope's."""
        return self.all_scopes or getattr(info, "scope", None) == self.scope

    def settings(self) -> Settings:
        return settings_for(self.project, self.config_dir, storage=self.storage)

    def open(self, *, read_only: bool = False) -> Any:
        """The memory storage selected by --storage, MEMORA_STORAGE or the config."""
        return open_storage(self.settings(), self.data_dir, read_only=read_only)

    def open_sessions(self) -> Any:
        """The session store the Agent would use: the config's ``session_store``, else the one
        named like the storage backend, else ``jsonl``."""
        settings = self.settings()
        plugins = plugin_manager()
        name = settings.state_store(
            "session_store", settings.storage, plugins.names("session_store"), "jsonl"
        )
        options = {**settings.plugin_options(name), "path": self.data_dir}
        return plugins.create("session_store", name, options)


def store_options(fn: F) -> F:
    """--project, --data-dir, --config-dir and --storage, handed to the command as ``where``."""

    @functools.wraps(fn)
    def wrapper(
        *args: Any,
        project: Path,
        data_dir: Path | None,
        config_dir: Path | None,
        storage: str | None = None,
        scope: str | None = None,
        all_scopes: bool = False,
        **kwargs: Any,
    ) -> Any:
        if scope is not None and all_scopes:
            raise click.UsageError("--scope and --all-scopes exclude each other")
        where = StorageTarget(
            project, data_dir, config_dir, storage, scope=scope, all_scopes=all_scopes
        )
        return fn(*args, where=where, **kwargs)

    return scope_options(storage_option(location_options(wrapper)))  # type: ignore[return-value]


def _check_scope_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    from ..errors import MemoraError
    from ..memory.types import check_scope

    try:
        return check_scope(value, "--scope")
    except MemoraError as exc:
        raise click.BadParameter(exc.message) from exc


def scope_option(fn: F) -> F:
    """--scope NAME: work as that user, tenant or agent (its memories and sessions, and the
    project's unscoped memories)."""
    return click.option(
        "--scope",
        default=None,
        envvar="MEMORA_SCOPE",
        callback=_check_scope_option,
        help="Whose memory and sessions: a user, tenant or agent name (env MEMORA_SCOPE). "
        "Default: the project's unscoped ones.",
    )(fn)


def scope_options(fn: F) -> F:
    """--scope NAME and --all-scopes."""
    return scope_option(
        click.option(
            "--all-scopes",
            is_flag=True,
            help="Every scope's memories and sessions (the project owner's view).",
        )(fn)
    )


SMALL_MODEL_NOTE = (
    "answering with the embedded model ({name}): a small offline model without tools, good for "
    "trying memora out, not for real work. To use a real one: memora run --base-url "
    "http://HOST/v1 --model NAME (the key from MEMORA_API_KEY), or a provider in your user "
    "config (docs/providers.md)"
)


def say_small_model(agent: Any) -> None:
    """Say once, plainly, on stderr, when the chat runs on the bundled small model."""
    provider = agent.router.chat
    if getattr(provider, "bundled", False):
        name = getattr(getattr(provider, "model_path", None), "stem", None) or provider.name
        click.echo(f"memora: note: {SMALL_MODEL_NOTE.format(name=name)}", err=True)


async def start_agent(agent: Any, role_pack: str | None) -> Any:
    """``await agent.init()``; a ``--role-pack`` that does not exist is an error naming the
    packs that do (the Agent itself would fall back to another pack)."""
    from ..errors import ErrorCode, MemoraError

    await agent.init()
    if role_pack is not None and agent.role_pack.active.name != role_pack:
        available = ", ".join(agent.role_pack.names())
        await agent.close()
        raise MemoraError(
            ErrorCode.NOT_FOUND,
            f"role pack {role_pack!r} does not exist; available: {available}",
            context={"role_pack": role_pack},
        )
    return agent


@contextlib.contextmanager
def progress(label: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr for long work (a spinner when ``total`` is unknown); nothing
    when stderr is not a terminal, so pipes and logs stay clean.  Yields ``advance(n)``."""
    if not sys.stderr.isatty():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import Progress

    from ..security.terminal import live_display

    with live_display(), Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def provider_options(fn: F) -> F:
    """--provider, --base-url and --model."""
    fn = click.option("--model", default=None, help="Model name (or GGUF path for llamacpp).")(fn)
    fn = click.option(
        "--base-url",
        default=None,
        help="OpenAI-compatible endpoint (implies --provider openai; default: $MEMORA_BASE_URL).",
    )(fn)
    return click.option(
        "--provider",
        default=None,
        help="Provider plugin name (default: the configured one, else llamacpp, the embedded model).",
    )(fn)


def role_pack_options(fn: F) -> F:
    """--role-pack and --role-pack-dir."""
    fn = click.option(
        "--role-pack-dir",
        "role_pack_dirs",
        multiple=True,
        type=click.Path(path_type=Path, file_okay=False),
        help="Extra folder of role packs (repeatable).",
    )(fn)
    return click.option("--role-pack", default=None, help="Active role pack name.")(fn)


def agent_arguments(
    *,
    provider: str | None = None,
    provider_options: dict[str, Any] | None = None,
    storage: str | None = None,
    role_pack: str | None = None,
) -> dict[str, Any]:
    """Agent keyword arguments for the flags that were given: an unset flag must not override
    the configuration (an explicit ``None`` would)."""
    explicit: dict[str, Any] = {}
    if provider is not None:
        explicit["provider"] = provider
    if provider_options:
        explicit["provider_options"] = provider_options
    if storage is not None:
        explicit["storage"] = storage
    if role_pack is not None:
        explicit["active_role_pack"] = role_pack
    return explicit
