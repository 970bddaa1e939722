"""``memora serve`` and ``memora serve-tokens``."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Literal

import click

from memora.cli.approvals import approval_options
from memora.cli.common import (
    agent_arguments,
    config_dir_option,
    find_project_root,
    provider_options,
)
from memora.cli.run_cmd import choose_provider
from memora.settings import user_config_dir

from .config import (
    MAX_OPEN_SESSIONS,
    add_token,
    describe,
    load_server_settings,
    revoke_token,
    settings_path,
)
from .listen import balances_connections, reserve
from .process import owning_process

logger = logging.getLogger("memora.server")


@click.command("serve")
@click.option(
    "--project",
    "projects",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="A project folder to serve (repeat for several; named after the folder in URLs). "
    "Default: the project of the working folder.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Worker processes (uvicorn's); with more than one they share the projects: one turn "
    "per session across all of them, pauses and turn events in <data dir>/server/.",
)
@click.option(
    "--idle-seconds",
    default=300.0,
    show_default=True,
    type=click.FloatRange(1.0),
    help="Close a session's Agent after this long without a request (never mid-turn or paused).",
)
@click.option(
    "--max-open-sessions",
    default=MAX_OPEN_SESSIONS,
    show_default=True,
    type=click.IntRange(1),
    help="Per worker, keep at most this many sessions' Agents open between requests; opening "
    "one more closes the least recently used idle ones (they reopen from the store).",
)
@click.option(
    "--no-tool-isolation",
    is_flag=True,
    help="Let the tools' commands and snippets see memora's data and your config folder. Only "
    "for a server one person uses on a machine that cannot hide them (no user namespaces).",
)
@provider_options
@approval_options
@config_dir_option
def serve_cmd(
    projects: tuple[Path, ...],
    host: str,
    port: int,
    workers: int,
    idle_seconds: float,
    max_open_sessions: int,
    no_tool_isolation: bool,
    provider: str | None,
    base_url: str | None,
    model: str | None,
    approvals: str | None,
    config_dir: Path | None,
) -> None:
    """Serve projects over HTTP: a REST + server-sent-events API (OpenAPI at /openapi.json).
    Tokens come from the user's server.json (memora serve-tokens add NAME); with none, only
    this machine may call."""
    import inspect

    import uvicorn

    from .guard import is_loopback
    from .protocol import DeadlineH11Protocol

    user_dir = user_config_dir(config_dir)
    settings = load_server_settings(user_dir)
    folders = list(projects) or [find_project_root(Path.cwd())]
    for folder in folders:
        if not folder.is_dir():
            raise click.BadParameter(f"{folder} is not a folder", param_hint="--project")
    if not settings.tokens and not is_loopback(host):
        click.echo(
            f"warning: no token is configured ({settings_path(user_dir)}): the server listens on "
            f"{host} but answers only this machine; add one with `memora serve-tokens add NAME`",
            err=True,
        )
    spec = {
        "projects": [str(f.resolve()) for f in folders],
        "approvals": approvals,
        "idle_seconds": idle_seconds,
        "max_open_sessions": max_open_sessions,
        "config_dir": str(config_dir) if config_dir is not None else None,
        # --provider / --base-url (or MEMORA_BASE_URL) / --model, as `memora run` takes them:
        # the user's choice, over every project's config
        "agent": agent_arguments(**_chosen(provider, base_url, model)),
        # every session's tools find memora's data and the user's keys and tokens empty (the
        # Hub's default); off only by this choice at start
        "isolate_tools": not no_tool_isolation,
        "shared": True if workers > 1 else None,  # None: shared on PostgreSQL storage
        # the workers draw on one rate-limit allowance, kept in a file named by the port
        "rate_file": str(user_dir / f"serve-{port}.rate") if workers > 1 else None,
        # started with tokens: a worker uvicorn restarts (a crash, SIGHUP) after the last one
        # was revoked must come up closed, as the running ones are — never open
        "secured": bool(settings.tokens),
    }
    # open every project once before serving: a bad config, a missing provider or a project
    # locked by `memora chat` is one clear line and exit 1, not a server failing its start-up
    asyncio.run(_check(spec))
    where = ", ".join(str(f) for f in folders)
    click.echo(f"memora serving {where} on http://{host}:{port} ({workers} worker(s))", err=True)
    if workers == 1:
        app = _app_from(spec, settings)
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level="info",
            proxy_headers=False,
            http=DeadlineH11Protocol,  # a slow request head is closed, not held open
        )
        return
    # each worker process builds its own app from the same spec (uvicorn imports the factory)
    os.environ[SPEC_ENV] = json.dumps(spec)
    options: dict[str, Any] = {
        "factory": True,
        "host": host,
        "port": port,
        "workers": workers,
        "log_level": "info",
        "proxy_headers": False,
        "http": DeadlineH11Protocol,
    }
    if "timeout_worker_healthcheck" in inspect.signature(uvicorn.Config).parameters:
        # a worker restarted (SIGHUP, a crash) opens every project before it is ready: on a busy
        # machine that takes longer than uvicorn's 5 s, and uvicorn then keeps the old worker
        # and gives up the restart
        options["timeout_worker_healthcheck"] = WORKER_READY_SECONDS
    if not balances_connections():
        uvicorn.run(f"{__name__}:worker_app", **options)
        return
    _run_workers(uvicorn.Config(f"{__name__}:worker_app", **options))


def _run_workers(config: Any) -> None:
    """uvicorn's worker supervisor, each worker listening on its own ``SO_REUSEPORT`` socket
    (:mod:`.listen`: the kernel spreads the connections over the workers)."""
    import inspect

    import uvicorn
    from uvicorn.supervisors import Multiprocess

    try:
        sock = reserve(config.host, config.port, config.backlog)
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}"
        ) from exc
    with sock:
        try:
            supervisor: Any = Multiprocess  # its signature differs across uvicorn's versions
            if "target" in inspect.signature(Multiprocess).parameters:  # older: given the target
                supervisor(config, target=uvicorn.Server(config).run, sockets=[sock]).run()
            else:
                supervisor(config, sockets=[sock]).run()
        except KeyboardInterrupt:
            pass


WORKER_READY_SECONDS = 60
"""How long a worker uvicorn (re)starts may take to be ready, and to answer its health check."""

SPEC_ENV = "MEMORA_SERVE_SPEC"
"""How ``memora serve --workers N`` hands its options to the worker processes."""


def _chosen(provider: str | None, base_url: str | None, model: str | None) -> dict[str, Any]:
    name, options = choose_provider(provider, base_url, model)
    return {"provider": name, "provider_options": options}


def _runtime_options(spec: dict[str, Any]) -> dict[str, Any]:
    """Each project's runtime options from the spec: the user folder and the chosen provider."""
    options: dict[str, Any] = dict(spec.get("agent") or {})
    if spec.get("config_dir"):
        options["config_dir"] = Path(spec["config_dir"])
    options["isolate_tools"] = bool(spec.get("isolate_tools", True))
    return options


async def _check(spec: dict[str, Any]) -> None:
    from .app import project_names
    from .hub import Hub

    options = _runtime_options(spec)
    hub = Hub(
        project_names([Path(p) for p in spec["projects"]]),
        runtime_options=options,
        shared=spec.get("shared"),
    )
    try:
        await hub.start()
    finally:
        await hub.close()


def _app_from(spec: dict[str, Any], settings: Any = None) -> Any:
    from .app import create_app

    options = _runtime_options(spec)
    user_dir = user_config_dir(options.get("config_dir"))
    if settings is None:
        settings = load_server_settings(user_dir)
    # the process is the server's own: its garbage collector is settled after start-up
    return owning_process(
        create_app(
            [Path(p) for p in spec["projects"]],
            settings=settings,
            settings_dir=user_dir,  # serve-tokens add/revoke apply to the running server
            approvals=spec.get("approvals") or "ask",
            idle_seconds=float(spec.get("idle_seconds", 300.0)),
            max_open_sessions=int(spec.get("max_open_sessions", MAX_OPEN_SESSIONS)),
            shared=spec.get("shared"),
            rate_file=Path(spec["rate_file"]) if spec.get("rate_file") else None,
            secured=bool(spec.get("secured")),
            **options,
        )
    )


def worker_app() -> Any:
    """The app of one worker of ``memora serve --workers N``."""
    raw = os.environ.get(SPEC_ENV)
    if not raw:
        raise click.ClickException(f"{SPEC_ENV} is not set: start workers with memora serve")
    return _app_from(json.loads(raw))


@click.group("serve-tokens")
def tokens_group() -> None:
    """Bearer tokens for `memora serve` (kept hashed in the user's server.json)."""


@tokens_group.command("add")
@click.argument("name")
@click.option(
    "--project",
    "projects",
    multiple=True,
    help="A project name the token may use (repeat; default: every project).",
)
@click.option("--read-only", is_flag=True, help="The token may read, not send or change anything.")
@click.option(
    "--scope",
    default=None,
    help="The user (memory scope) the token acts as (default: NAME).",
)
@click.option(
    "--no-scope",
    is_flag=True,
    help="The token acts in the project's unscoped memory and sessions (the owner's).",
)
@click.option(
    "--act-for-users",
    is_flag=True,
    help="The token may act for any user it names on a request (X-Memora-User): a backend "
    "serving many people.",
)
@config_dir_option
def add_cmd(
    name: str,
    projects: tuple[str, ...],
    read_only: bool,
    scope: str | None,
    no_scope: bool,
    act_for_users: bool,
    config_dir: Path | None,
) -> None:
    """Create a token: printed once on stdout, stored only as its hash.  It names its user: its
    requests remember and recall in memory scope NAME (--scope, --no-scope), and see only that
    user's sessions."""
    if scope is not None and no_scope:
        raise click.UsageError("--scope and --no-scope exclude each other")
    access: Literal["read", "full"] = "read" if read_only else "full"
    token, path = add_token(
        user_config_dir(config_dir),
        name,
        projects=list(projects),
        access=access,
        scope=None if no_scope else (scope or name),
        act_for_users=act_for_users,
    )
    who = "unscoped" if no_scope else f"scope {scope or name!r}"
    delegate = ", may act for users" if act_for_users else ""
    click.echo(
        f"token {name!r} ({access}, {who}{delegate}) stored hashed in {path}; it is shown only "
        "now:",
        err=True,
    )
    sys.stdout.write(token + "\n")


@tokens_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@config_dir_option
def list_cmd(as_json: bool, config_dir: Path | None) -> None:
    """The tokens: names, projects, access (never the tokens)."""
    rows = describe(load_server_settings(user_config_dir(config_dir)))
    if as_json:
        sys.stdout.write(json.dumps({"tokens": rows}, ensure_ascii=False) + "\n")
        return
    if not rows:
        click.echo("no tokens: `memora serve` answers only this machine")
    for row in rows:
        who = row["scope"] or "(unscoped)"
        if row["act_for_users"]:
            who += " +users"
        click.echo(f"{row['name']}\t{row['access']}\t{','.join(row['projects'])}\t{who}")


LAST_TOKEN = (
    "{name!r} is the last token: a running `memora serve` will then refuse every request, "
    "this machine's included, until a token is added (a server started with tokens never "
    "opens while it runs); restarted with no token it answers only this machine"
)


@tokens_group.command("revoke")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Revoke the last token without asking.")
@config_dir_option
def revoke_cmd(name: str, yes: bool, config_dir: Path | None) -> None:
    """Remove a token (a running server stops taking it within a second).  The last token
    asks first (or --yes): without tokens a running server refuses everyone."""
    folder = user_config_dir(config_dir)
    names = [t.name for t in load_server_settings(folder).tokens]
    if names == [name] and not yes:
        said = LAST_TOKEN.format(name=name)
        if not sys.stdin.isatty():
            raise click.UsageError(f"{said}. Pass --yes to revoke it.")
        click.confirm(f"{said}. Revoke it?", abort=True, err=True)
    if not revoke_token(folder, name):
        raise click.ClickException(f"no token named {name!r}")
    click.echo(f"token {name!r} revoked")
    if names == [name]:
        click.echo(
            "no token is left: running servers refuse every request until one is added",
            err=True,
        )
