"""What a project's config layer becomes: the approval mode it may only tighten, the parts it may
set, what it asks for, and the one warning a left-off request gets."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from memora import hookimpl
from memora.plugins import create_plugin_manager
from memora.settings import ANY, project_settable, resolve_settings


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")


@pytest.mark.parametrize(
    ("user", "project", "applied", "asked"),
    [
        (None, "read-only", "read-only", False),  # stricter than the CLI's "ask": fine
        (None, "ask", "ask", False),
        (None, "full-auto", None, True),  # looser than "ask": only with the user's word
        ("auto-edit", "ask", "ask", False),
        ("ask", "auto-edit", "ask", True),
        ("full-auto", "auto-edit", "auto-edit", False),
    ],
)
def test_a_project_may_only_tighten_the_approval_mode(
    dirs: tuple[Path, Path], user: str | None, project: str, applied: str | None, asked: bool
) -> None:
    project_dir, user_dir = dirs
    if user is not None:
        _write(user_dir / "config.json", {"approvals": user})
    _write(project_dir / ".memora" / "config.json", {"approvals": project})
    settings = resolve_settings(project_dir, config_dir=user_dir, warn=False)
    assert settings.config.approvals == (applied if applied is not None else user)
    assert ("approvals" in settings.requests) == asked
    if asked:
        trusted = resolve_settings(project_dir, config_dir=user_dir, trust=True, warn=False)
        assert trusted.config.approvals == project and trusted.trusted


def test_the_parts_a_project_may_set_arrive_whole(dirs: tuple[Path, Path]) -> None:
    class Demo:
        @hookimpl
        def register_tools(self, register: Any) -> None:
            return None

        @hookimpl
        def register_web_fetch(self, register: Any) -> None:
            register("demo", project_settable(lambda options: options, depth=ANY))

    plugins = create_plugin_manager(load_entrypoints=False, extra=[Demo()])
    project, user = dirs
    _write(user / "config.json", {"providers": {"p": {"type": "openai", "model": "mine"}}})
    _write(
        project / ".memora" / "config.json",
        {
            "active_provider": "p",
            "storage": "json",
            "options": {"max_tokens": 5, "archive_mode": "manual"},
            "plugins": {"demo": {"depth": 3, "other": 1}},
        },
    )
    settings = resolve_settings(project, config_dir=user, plugins=plugins, warn=False)
    assert settings.config.active_provider == "p" and settings.storage == "json"
    assert settings.config.options == {"max_tokens": 5, "archive_mode": "manual"}
    assert settings.plugin_options("demo") == {"depth": 3}  # `other` is a request
    assert settings.requests == {"plugins.demo.other": 1}
    assert settings.ignored == {"plugins.demo.other": 1}
    assert settings.config.providers["p"].options() == {"model": "mine"}  # the user's entry
    doc = settings.to_json()
    assert doc["project_requests"]["requests"] == {"plugins.demo.other": 1}
    assert doc["project_requests"]["applied"] is False and doc["project_requests"]["digest"]


def test_a_left_off_request_is_warned_about_once(
    dirs: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    project, user = dirs
    _write(project / ".memora" / "config.json", {"plugins": {"mcp": {"servers": {"x": {}}}}})
    with caplog.at_level(logging.WARNING, logger="memora"):
        resolve_settings(project, config_dir=user)
        resolve_settings(project, config_dir=user)
    said = [r.getMessage() for r in caplog.records if "asks for" in r.getMessage()]
    assert len(said) == 1 and "plugins.mcp.servers" in said[0] and "memora trust allow" in said[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memora"):
        resolve_settings(project, config_dir=user, warn=False)
    assert not [r for r in caplog.records if "asks for" in r.getMessage()]


def test_each_origin_remembers_what_it_replaced(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    project, user = dirs
    _write(user / "config.json", {"storage": "sqlite", "plugins": {"fetch": {"timeout": 5}}})
    _write(project / ".memora" / "config.json", {"storage": "json"})
    monkeypatch.setenv("MEMORA_STORAGE", "memory")
    settings = resolve_settings(project, config_dir=user, warn=False)
    assert settings.storage == "memory"
    assert settings.shadowed["storage"] == [
        f"user config {user / 'config.json'}",
        f"project config {project / '.memora' / 'config.json'}",
    ]
    assert "plugins.fetch.timeout" not in settings.shadowed
    assert settings.shown_origin("plugins.fetch.timeout") == f"user config {user / 'config.json'}"
    monkeypatch.delenv("MEMORA_STORAGE")
    assert resolve_settings(None, config_dir=user).shadowed == {}  # one source: nothing hidden


def test_trust_is_only_what_was_given(dirs: tuple[Path, Path]) -> None:
    import dataclasses

    from memora.config import MemoraConfig
    from memora.settings import Settings

    project, user = dirs
    assert not resolve_settings(None, config_dir=user).trusted
    assert not resolve_settings(project, config_dir=user).trusted  # no project file at all
    bare = Settings(MemoraConfig())
    assert not bare.trusted and bare.requests == {} and bare.ignored == {}
    assert bare.provider() is None  # no active provider: none, not an error
    with pytest.raises(dataclasses.FrozenInstanceError):
        bare.trusted = True  # type: ignore[misc]


def test_the_first_bad_option_is_the_one_named(dirs: tuple[Path, Path]) -> None:
    from memora.errors import MemoraError

    project, user = dirs
    _write(user / "config.json", {"options": {"zeta": 1, "alpha": 2}})
    with pytest.raises(MemoraError) as info:
        resolve_settings(project, config_dir=user)
    assert "options.alpha" in str(info.value) and info.value.context["key"] == "alpha"


async def test_a_bad_option_value_names_the_first_field(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    from memora.agent.options import AgentOptions
    from memora.agent.resolved import agent_settings
    from memora.errors import MemoraError

    project, user = dirs
    _write(user / "config.json", {"options": {"max_tokens": "many", "max_iterations": "lots"}})
    opts = AgentOptions(project_path=project, data_dir=tmp_path / "d", config_dir=user)
    with pytest.raises(MemoraError) as info:
        agent_settings(opts)
    assert "options.max_tokens" in str(info.value)


def test_the_hosts_options_win_over_the_files(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    from memora.agent.options import AgentOptions
    from memora.agent.resolved import agent_settings

    project, user = dirs
    _write(user / "config.json", {"approvals": "full-auto", "session_store": "jsonl"})
    base = {"project_path": project, "data_dir": tmp_path / "d", "config_dir": user}
    plain = agent_settings(AgentOptions(**base))
    assert plain.approvals == "full-auto"
    assert plain.state_store("session_store", [], "jsonl") == "jsonl"
    host = agent_settings(AgentOptions(**base, approvals="ask", session_store="memory"))
    assert host.approvals == "ask"
    assert host.state_store("session_store", [], "jsonl") == "memory"
    none = agent_settings(AgentOptions(**base, approvals=None))
    assert none.approvals is None  # the host said "no mode" explicitly


def test_load_config_warns_about_a_left_off_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from memora.config import load_config

    project = tmp_path / "warned"
    _write(project / ".memora" / "config.json", {"plugins": {"mcp": {"servers": {"q": {}}}}})
    with caplog.at_level(logging.WARNING, logger="memora"):
        config = load_config(project)
    assert "mcp" not in config.plugins
    assert any("plugins.mcp.servers" in r.getMessage() for r in caplog.records)
