from __future__ import annotations

import json
from pathlib import Path

import pytest

from memora import hookimpl
from memora.config import create_provider_from_config, load_config
from memora.errors import ErrorCode, MemoraError
from memora.plugins import create_plugin_manager
from memora.security.trust import ANY, project_settable


def _write(project: Path, data: object) -> None:
    (project / ".memora").mkdir(parents=True, exist_ok=True)
    (project / ".memora" / "config.json").write_text(json.dumps(data), encoding="utf-8")


def test_missing_config_gives_defaults(tmp_path: Path) -> None:
    config = load_config(tmp_path)
    assert config.active_provider is None and config.storage == "sqlite"


def test_config_with_providers(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "active_provider": "local",
            "providers": {
                "local": {"type": "echo", "greeting": "你好"},
                "remote": {"type": "echo", "greeting": "hi"},
            },
        },
    )

    class Echo:
        @hookimpl
        def register_providers(self, register):  # type: ignore[no-untyped-def]
            # a project's config may set `greeting` only because the factory declares it safe
            register(
                "echo",
                project_settable(lambda options: ("echo", dict(options)), greeting=ANY),
            )

    pm = create_plugin_manager(load_entrypoints=False, extra=[Echo()])
    config = load_config(tmp_path, plugins=pm)
    assert create_provider_from_config(None, config, pm) == ("echo", {"greeting": "你好"})
    assert create_provider_from_config("remote", config, pm) == ("echo", {"greeting": "hi"})
    with pytest.raises(MemoraError) as info:
        create_provider_from_config("ghost", config, pm)
    assert info.value.code == ErrorCode.NOT_FOUND


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"providers": {"x": {"type": "openai", "api_key": "sk-123"}}}, "environment"),
        ({"active_provider": "nope", "providers": {}}, "active_provider"),
        ({"providers": {"x": {"model": "m"}}}, "providers.x.type"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_config_names_the_field(tmp_path: Path, data: object, needle: str) -> None:
    _write(tmp_path, data)
    with pytest.raises(MemoraError) as info:
        load_config(tmp_path)
    assert info.value.code == ErrorCode.INVALID_CONFIG and needle in str(info.value)


def test_invalid_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{oops", encoding="utf-8")
    with pytest.raises(MemoraError, match="not valid JSON"):
        load_config(tmp_path / "config.json")


def test_a_project_config_cannot_point_a_provider_elsewhere(tmp_path: Path) -> None:
    """load_config + create_provider_from_config go through the Agent's guard: a cloned
    project's `base_url` is refused, an undeclared option is left off."""
    _write(
        tmp_path,
        {"active_provider": "x", "providers": {"x": {"type": "openai", "base_url": "http://evil"}}},
    )
    with pytest.raises(MemoraError) as info:
        load_config(tmp_path)
    assert info.value.code == ErrorCode.INVALID_CONFIG and "base_url" in str(info.value)
    with pytest.raises(MemoraError):
        load_config(tmp_path / ".memora" / "config.json")
    _write(
        tmp_path, {"active_provider": "x", "providers": {"x": {"type": "echo", "greeting": "hi"}}}
    )

    class Echo:
        @hookimpl
        def register_providers(self, register):  # type: ignore[no-untyped-def]
            register("echo", lambda options: ("echo", dict(options)))

    pm = create_plugin_manager(load_entrypoints=False, extra=[Echo()])
    config = load_config(tmp_path, plugins=pm)
    assert create_provider_from_config(None, config, pm) == ("echo", {})


def test_a_user_config_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps({"providers": {"x": {"type": "openai", "base_url": "http://127.0.0.1:1"}}}),
        encoding="utf-8",
    )
    assert load_config(path).providers["x"].options()["base_url"] == "http://127.0.0.1:1"
