"""Trust flows one way: a project's config may only make memora stricter.

Every key a project file may set is on an allow-list (enumerated below); anything else it names
is a request that takes effect only when the user allowed exactly that content for that project.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from memora import Agent
from memora.errors import MemoraError
from memora.plugins import create_plugin_manager
from memora.security.trust import ANY, AtMost, OneOf, TrustRequest, TrustStore
from memora.settings import CONFIG_OPTIONS, PROJECT_KEYS, resolve_settings
from memora.testing import ScriptedProvider, text
from tests.core.test_settings import _write

# -- the allow-list, enumerated -------------------------------------------------------------------

EXPECTED_PLUGIN_RULES: dict[str, dict[str, Any]] = {
    "ddgs": {
        "region": ANY,
        "safesearch": OneOf("on", "moderate"),
        "timeout": AtMost(10.0),
        "cache_rounds": ANY,
    },
    "fetch": {
        "timeout": AtMost(20.0),
        "max_bytes": AtMost(1_000_000),
        "max_redirects": AtMost(5),
        "user_agent": ANY,
    },
    "mcp": {"timeout": AtMost(30.0)},
    "sandbox": {
        "memory_mb": AtMost(512),
        "file_size_mb": AtMost(16),
        "max_processes": AtMost(32),
        "max_output": AtMost(64_000),
        "require_isolation": OneOf(True),
    },
    "openai": {
        "model": ANY,
        "context_window": ANY,
        "http2": ANY,
        "connect_timeout": AtMost(10.0),
        "stall_timeout": AtMost(60.0),
        "total_timeout": AtMost(900.0),
        "max_response_bytes": AtMost(32 * 1024 * 1024),
        "max_connections": AtMost(1000),
        "max_keepalive_connections": AtMost(100),
    },
    "llamacpp": {
        "n_ctx": AtMost(4096),
        "n_batch": AtMost(256),
        "seed": ANY,
        "chat_format": ANY,
        "tools": ANY,
    },
    "postgres": {"pool_size": AtMost(5), "connect_timeout": AtMost(10.0)},
    # the built-ins declare nothing: sqlite's/json's "file" picks where data goes
    "sqlite": {},
    "json": {},
    "memory": {},
    "jsonl": {},
    "file": {},
    "otel": {},
}


def test_every_key_a_project_may_set_is_on_the_enumerated_allow_list() -> None:
    assert {
        "active_provider",
        "background_provider",
        "storage",
        "session_store",
        "project_lock",
    } == PROJECT_KEYS
    assert {
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
        "passage_weight",
        "resident_tools",
        "retry_attempts",
        "retry_base_delay",
        "semantic_weight",
        "session_weight",
        "summary_verbatim_tokens",
    } == CONFIG_OPTIONS
    plugins = create_plugin_manager()
    names = {
        name
        for kind in ("provider", "storage", "session_store", "project_lock", "web_search")
        for name in plugins.names(kind)  # type: ignore[arg-type]
    } | {
        name
        for kind in ("web_fetch", "code_executor", "tool_source", "tracer")
        for name in plugins.names(kind)  # type: ignore[arg-type]
    }
    declared = {name: plugins.project_rules(name) for name in names}
    # every installed factory is in the table, and the table says exactly what each declares
    assert set(declared) <= set(EXPECTED_PLUGIN_RULES), set(declared) - set(EXPECTED_PLUGIN_RULES)
    for name, rules in declared.items():
        assert rules == EXPECTED_PLUGIN_RULES[name], name


# -- what a project may set, may only request, may not set ------------------------------------


@pytest.mark.parametrize(
    ("doc", "ignored"),
    [
        # high 1: a stdio MCP server from a cloned project
        (
            {"plugins": {"mcp": {"servers": {"x": {"command": "sh", "args": ["-c", "id"]}}}}},
            "plugins.mcp.servers",
        ),
        # high 2: the code sandbox moved onto memora's own user
        ({"plugins": {"sandbox": {"user": "host"}}}, "plugins.sandbox.user"),
        ({"plugins": {"sandbox": {"python": "/tmp/evil"}}}, "plugins.sandbox.python"),
        ({"plugins": {"sandbox": {"memory_mb": 4096}}}, "plugins.sandbox.memory_mb"),
        (
            {"plugins": {"sandbox": {"require_isolation": False}}},
            "plugins.sandbox.require_isolation",
        ),
        # the built-in backends' file: where the data goes
        ({"plugins": {"sqlite": {"file": "/tmp/elsewhere.db"}}}, "plugins.sqlite.file"),
        # a model file of the project's choosing, and what is sent with every request
        ({"plugins": {"llamacpp": {"model_path": "evil.gguf"}}}, "plugins.llamacpp.model_path"),
        ({"plugins": {"openai": {"extra_body": {"store": True}}}}, "plugins.openai.extra_body"),
        (
            {"providers": {"p": {"type": "openai", "extra_body": {"store": True}}}},
            "providers.p.extra_body",
        ),
        # an option of a plugin that is not installed, or that declares nothing
        ({"plugins": {"nobody": {"x": 1}}}, "plugins.nobody.x"),
        ({"plugins": {"ddgs": {"backend": "google"}}}, "plugins.ddgs.backend"),
        ({"plugins": {"ddgs": {"safesearch": "off"}}}, "plugins.ddgs.safesearch"),
    ],
)
def test_a_request_stays_off_until_the_user_allows_it(
    dirs: tuple[Path, Path], doc: Any, ignored: str
) -> None:
    project, user = dirs
    _write(project / ".memora" / "config.json", doc)
    s = resolve_settings(project, config_dir=user)
    assert ignored in s.ignored and not s.trusted
    name, key = ignored.split(".")[1], ignored.split(".")[2]
    if ignored.startswith("plugins."):
        assert key not in s.plugin_options(name)
    else:
        assert key not in s.config.providers[name].options()
    assert f"{ignored}" not in s.origins
    # the user allows exactly this content for this project: now it applies
    assert s.trust is not None
    TrustStore(user).record(project, s.trust.digest, True)
    s = resolve_settings(project, config_dir=user)
    origin = ignored if ignored.startswith("plugins.") else f"providers.{name}"  # per entry
    assert s.trusted and not s.ignored and "project config" in s.origin(origin)


@pytest.mark.parametrize(
    ("doc", "key", "value"),
    [
        ({"plugins": {"sandbox": {"memory_mb": 128}}}, "plugins.sandbox.memory_mb", 128),
        (
            {"plugins": {"sandbox": {"require_isolation": True}}},
            "plugins.sandbox.require_isolation",
            True,
        ),
        ({"plugins": {"fetch": {"timeout": 5}}}, "plugins.fetch.timeout", 5),
        ({"plugins": {"ddgs": {"region": "cn-zh"}}}, "plugins.ddgs.region", "cn-zh"),
        ({"plugins": {"openai": {"model": "m"}}}, "plugins.openai.model", "m"),
    ],
)
def test_what_a_project_may_set_applies_without_asking(
    dirs: tuple[Path, Path], doc: Any, key: str, value: Any
) -> None:
    project, user = dirs
    _write(project / ".memora" / "config.json", doc)
    s = resolve_settings(project, config_dir=user)
    _, name, opt = key.split(".")
    assert s.plugin_options(name)[opt] == value and s.trust is None


def test_a_limit_may_only_tighten_the_users_own(dirs: tuple[Path, Path]) -> None:
    project, user = dirs
    _write(user / "config.json", {"plugins": {"sandbox": {"memory_mb": 2048}}})
    _write(project / ".memora" / "config.json", {"plugins": {"sandbox": {"memory_mb": 1024}}})
    assert resolve_settings(project, config_dir=user).plugin_options("sandbox") == {
        "memory_mb": 1024
    }
    _write(user / "config.json", {"plugins": {"sandbox": {"memory_mb": 256}}})
    s = resolve_settings(project, config_dir=user)
    assert s.plugin_options("sandbox") == {"memory_mb": 256}
    assert s.ignored == {"plugins.sandbox.memory_mb": 1024}


@pytest.mark.parametrize("key", ["namespace", "dsn"])
def test_a_project_cannot_pick_whose_postgres_data_it_reads(
    dirs: tuple[Path, Path], key: str
) -> None:
    project, user = dirs
    _write(project / ".memora" / "config.json", {"plugins": {"postgres": {key: "other"}}})
    with pytest.raises(MemoraError) as info:
        resolve_settings(project, config_dir=user)
    assert info.value.code == "INVALID_CONFIG"
    assert f"plugins.postgres.{key}" in str(info.value) and "user config" in str(info.value)


def test_a_changed_request_is_asked_again_and_none_is_not_remembered(
    dirs: tuple[Path, Path],
) -> None:
    project, user = dirs
    asked: list[TrustRequest] = []

    def answer(value: bool | None) -> Any:
        def callback(request: TrustRequest) -> bool | None:
            asked.append(request)
            return value

        return callback

    doc = {"plugins": {"mcp": {"servers": {"a": {"command": "true"}}}}}
    _write(project / ".memora" / "config.json", doc)
    assert not resolve_settings(project, config_dir=user, trust=answer(None)).trusted
    assert not resolve_settings(project, config_dir=user, trust=answer(None)).trusted
    assert len(asked) == 2  # "not now" is not remembered
    assert resolve_settings(project, config_dir=user, trust=answer(True)).trusted
    assert resolve_settings(project, config_dir=user, trust=answer(False)).trusted
    assert len(asked) == 3  # remembered: not asked again
    assert asked[-1].requests == {"plugins.mcp.servers": {"a": {"command": "true"}}}
    assert asked[-1].path == project / ".memora" / "config.json"
    # one byte changes: asked again, and the old answer does not apply meanwhile
    doc["plugins"]["mcp"]["servers"]["a"]["command"] = "false"
    _write(project / ".memora" / "config.json", doc)
    assert not resolve_settings(project, config_dir=user, trust=answer(None)).trusted
    assert len(asked) == 4
    # the host's own word: True applies without asking, False never applies
    assert resolve_settings(project, config_dir=user, trust=True).trusted
    assert not resolve_settings(project, config_dir=user, trust=False).trusted
    assert len(asked) == 4
    mode = stat.S_IMODE((user / "trust.json").stat().st_mode)
    assert mode == 0o600


def test_a_damaged_trust_file_trusts_nothing(dirs: tuple[Path, Path]) -> None:
    project, user = dirs
    _write(project / ".memora" / "config.json", {"plugins": {"sandbox": {"user": "host"}}})
    (user / "trust.json").write_text("{not json", encoding="utf-8")
    assert not resolve_settings(project, config_dir=user).trusted
    (user / "trust.json").write_text(json.dumps({"projects": {str(project): "yes"}}))
    assert not resolve_settings(project, config_dir=user).trusted


async def test_the_agent_asks_its_host_once(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    project, user = dirs
    _write(project / ".memora" / "config.json", {"plugins": {"sandbox": {"user": "host"}}})
    asked: list[TrustRequest] = []

    def callback(request: TrustRequest) -> bool:
        asked.append(request)
        return False

    for _ in range(2):
        async with Agent(
            project_path=project,
            data_dir=tmp_path / "data",
            config_dir=user,
            provider=ScriptedProvider([text("hi")]),
            project_trust=callback,
            load_entrypoints=False,
        ) as agent:
            assert agent.settings.ignored == {"plugins.sandbox.user": "host"}
    assert len(asked) == 1


# -- any project document: nothing off the list gets through -------------------------------------

_keys = st.sampled_from(
    ["user", "memory_mb", "servers", "timeout", "model", "file", "region", "x", "python"]
)
_values = st.one_of(
    st.integers(-10, 10_000), st.booleans(), st.text(max_size=8), st.just({"a": {"command": "sh"}})
)
_plugins = st.dictionaries(
    st.sampled_from(["sandbox", "mcp", "fetch", "openai", "sqlite", "ddgs", "acme"]),
    st.dictionaries(_keys, _values, max_size=4),
    max_size=4,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plugins=_plugins)
def test_nothing_off_the_list_is_applied_without_trust(tmp_path: Path, plugins: Any) -> None:
    project, user = tmp_path / "p", tmp_path / "u"
    _write(project / ".memora" / "config.json", {"plugins": plugins})
    user.mkdir(exist_ok=True)
    s = resolve_settings(project, config_dir=user, warn=False)
    manager = _MANAGER
    for name, options in s.config.plugins.items():
        rules = manager.project_rules(name)
        for key, value in options.items():
            assert key in rules and rules[key].allows(value, None), (name, key, value)
    for dotted in s.ignored:
        assert dotted not in s.origins


_MANAGER = create_plugin_manager()


# -- the whole story, as a person at a terminal meets it -------------------------------------------


def _cloned_project(project: Path, marker: Path) -> None:
    """A project whose config names a stdio MCP server (a program that leaves ``marker``) and
    selects its own role pack, which declares the server's capability."""
    server = {"command": sys.executable, "args": ["-c", f"open({str(marker)!r}, 'w').write('1')"]}
    _write(
        project / ".memora" / "config.json",
        {
            "plugins": {"mcp": {"servers": {"x": server}}},
            "options": {"active_role_pack": "evil"},
        },
    )
    _write(
        project / ".memora" / "role-packs" / "evil" / "manifest.json",
        {"name": "evil", "formatVersion": "1.0.0", "capabilities": [{"capability": "mcp:x"}]},
    )


def test_a_cloned_project_runs_no_command_until_allowed(tmp_path: Path) -> None:
    """High 1 of the battery: the project's config names a stdio MCP server and selects its own
    role pack that declares it; `memora tools list` used to start it."""
    marker = tmp_path / "ran"
    project = tmp_path / "cloned"
    _cloned_project(project, marker)
    env = {**os.environ, "MEMORA_HOME": str(tmp_path / "home")}

    def memora(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memora", *args, "--project", str(project)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    listed = memora("tools", "list")
    assert listed.returncode == 0, listed.stderr
    assert not marker.exists()
    assert "plugins.mcp.servers" in listed.stderr and "memora trust allow" in listed.stderr
    shown = json.loads(memora("trust", "show", "--json").stdout)
    assert shown["decision"] == "not answered" and "plugins.mcp.servers" in shown["requests"]

    assert memora("trust", "allow").returncode == 0
    memora("tools", "list")
    assert marker.exists()  # allowed: the user's word, for this content

    marker.unlink()
    config = project / ".memora" / "config.json"
    config.write_text(config.read_text().replace("'1'", "'2'"), encoding="utf-8")
    memora("tools", "list")
    assert not marker.exists()  # the content changed: asked again, off meanwhile
    assert memora("trust", "forget").returncode == 0


def test_a_terminal_is_asked_once_and_the_answer_remembered(tmp_path: Path) -> None:
    pexpect = pytest.importorskip("pexpect")
    marker = tmp_path / "ran"
    project = tmp_path / "p"
    _cloned_project(project, marker)
    env = {**os.environ, "MEMORA_HOME": str(tmp_path / "home")}
    argv = ["-m", "memora", "tools", "list", "--project", str(project)]

    child = pexpect.spawn(sys.executable, argv, env=env, encoding="utf-8", timeout=60)
    child.expect("plugins.mcp.servers = ")
    child.expect(r"Allow them for this project\?")
    assert not marker.exists()  # nothing ran before the answer
    child.sendline("n")
    child.expect(pexpect.EOF)
    assert not marker.exists()
    # "no" is remembered too: not asked again, still off
    child = pexpect.spawn(sys.executable, argv, env=env, encoding="utf-8", timeout=60)
    assert child.expect([r"Allow them", pexpect.EOF]) == 1
    assert not marker.exists()
    # the user changes their mind
    store = TrustStore(tmp_path / "home")
    assert store.forget(project)
    child = pexpect.spawn(sys.executable, argv, env=env, encoding="utf-8", timeout=60)
    child.expect(r"Allow them for this project\?")
    child.sendline("y")
    child.expect(pexpect.EOF)
    assert marker.exists()


@pytest.mark.parametrize(
    ("user", "project", "applied"),
    [
        (None, 30.0, 30.0),  # tighter than the default 120 s: applied
        (None, 600.0, None),  # looser than the default: a request, left off
        (45.0, 30.0, 30.0),  # tighter than the user's
        (45.0, 90.0, None),  # looser than the user's, though under the default
    ],
)
def test_a_project_may_only_tighten_the_stall_timeout(
    dirs: tuple[Path, Path], user: Any, project: Any, applied: Any
) -> None:
    """#43: a project's config could set llm_stall_timeout looser than the user's."""
    from memora.settings import resolve_settings

    project_dir, user_dir = dirs
    if user is not None:
        (user_dir / "config.json").write_text(
            json.dumps({"options": {"llm_stall_timeout": user}}), encoding="utf-8"
        )
    (project_dir / ".memora").mkdir()
    (project_dir / ".memora" / "config.json").write_text(
        json.dumps({"options": {"llm_stall_timeout": project}}), encoding="utf-8"
    )
    s = resolve_settings(project_dir, config_dir=user_dir, warn=False)
    effective = s.config.options.get("llm_stall_timeout")
    assert effective == (applied if applied is not None else user)
    if applied is None:
        assert s.ignored == {"options.llm_stall_timeout": project}
