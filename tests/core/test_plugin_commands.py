"""Plugins add commands (`register_commands`); the CLI is built by one function."""

from __future__ import annotations

import logging
from typing import Any

import click
import pytest
from click.testing import CliRunner

from memora import hookimpl
from memora.cli.main import build_cli, cli
from memora.plugins import create_plugin_manager


class Hello:
    @hookimpl
    def register_commands(self, cli: Any) -> None:
        @cli.command("hello")
        @click.argument("name", default="world")
        def hello(name: str) -> None:
            """Say hello."""
            click.echo(f"你好, {name}")


class Broken:
    @hookimpl
    def register_commands(self, cli: Any) -> None:
        @cli.command("half")
        def half() -> None:
            """Registered before the failure."""

        raise RuntimeError("this plugin's registration is broken")


class Squatter:
    @hookimpl
    def register_commands(self, cli: Any) -> None:
        @cli.command("chat")
        def chat() -> None:
            click.echo("not the real chat")


def test_a_plugin_adds_a_command() -> None:
    group = build_cli(plugins=create_plugin_manager(load_entrypoints=False, extra=[Hello()]))
    result = CliRunner().invoke(group, ["hello", "memora"])
    assert result.exit_code == 0, result.output
    assert result.output == "你好, memora\n"
    assert "hello" in CliRunner().invoke(group, ["--help"]).output


def test_a_broken_or_squatting_plugin_costs_only_itself(caplog: pytest.LogCaptureFixture) -> None:
    manager = create_plugin_manager(
        load_entrypoints=False, extra=[("broken", Broken()), ("squat", Squatter()), Hello()]
    )
    group = build_cli(plugins=manager)
    with caplog.at_level(logging.WARNING, logger="memora"):
        names = group.list_commands(click.Context(group))
    assert "hello" in names and "half" not in names  # nothing of the broken plugin
    assert group.commands["chat"].callback is not None
    assert group.commands["chat"].callback.__module__ == "memora.cli.chat_cmd"  # not replaced
    assert any("broken" in r.getMessage() and "left out" in r.getMessage() for r in caplog.records)
    assert any("'chat' is taken" in r.getMessage() for r in caplog.records)
    assert [f.name for f in manager.failures] == ["broken"]


def test_kernel_commands_are_there_without_loading_plugins() -> None:
    group = build_cli(plugin_commands=False)
    assert {"chat", "run", "tools", "trust", "config", "plugins", "memory", "sessions"} <= set(
        group.commands
    )
    assert "mcp" not in group.commands  # the MCP plugin adds it


def test_the_public_cli_finds_the_mcp_plugins_command() -> None:
    pytest.importorskip("memora_plugin_mcp")
    result = CliRunner().invoke(cli, ["mcp", "serve", "--help"])
    assert result.exit_code == 0, result.output
    assert "read-only over MCP" in result.output


def test_a_missing_plugins_command_says_what_to_install() -> None:
    group = build_cli(plugins=create_plugin_manager(load_entrypoints=False))
    result = CliRunner().invoke(group, ["mcp", "serve"])
    assert result.exit_code == 2
    assert "memora install memora-plugin-mcp" in result.output


def test_the_command_list_comes_from_a_cache_until_something_is_installed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """`memora --help` lists plugin commands without importing a plugin once it has seen them;
    running one loads the plugins for real."""
    pytest.importorskip("memora_plugin_mcp")
    import memora.plugins

    monkeypatch.setenv("MEMORA_HOME", str(tmp_path / "home"))  # no cache yet
    made: list[int] = []
    real = memora.plugins.create_plugin_manager

    def counting(*args: Any, **kwargs: Any) -> Any:
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(memora.plugins, "create_plugin_manager", counting)
    first = CliRunner().invoke(build_cli(), ["--help"])
    assert first.exit_code == 0 and "mcp" in first.output and len(made) == 1
    second = CliRunner().invoke(build_cli(), ["--help"])
    assert second.exit_code == 0 and len(made) == 1  # from the cache
    assert "mcp" in second.output and "Model Context Protocol" in second.output
    kernel = CliRunner().invoke(build_cli(), ["trust", "--help"])
    assert kernel.exit_code == 0 and len(made) == 1  # a kernel command loads no plugin
    ran = CliRunner().invoke(build_cli(), ["mcp", "serve", "--help"])
    assert ran.exit_code == 0 and "read-only over MCP" in ran.output and len(made) == 2
