"""One broken plugin costs only itself; clashes follow one rule; hooks go through pluggy."""

from __future__ import annotations

import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from memora import hookimpl
from memora.checks import Allow, CheckContext, Deny, ToolCallInfo
from memora.errors import PluginConflictError, PluginError
from memora.plugins import INSTALL_HINTS, create_plugin_manager
from tests.conftest import REPO, make_dist

GOOD = (
    "from memora import hookimpl\n"
    "@hookimpl\n"
    "def register_web_search(register):\n"
    "    register('fake-search', lambda options: ('good', options))\n"
)
EXPLODING = (
    "from memora import hookimpl\n"
    "@hookimpl\n"
    "def register_storage(register):\n"
    "    register('half-done', lambda options: None)\n"
    "    raise RuntimeError('kaboom in register_storage')\n"
    "@hookimpl\n"
    "def register_tools(register):\n"
    "    pass\n"
)
MISSPELT = (
    "from memora import hookimpl\n"
    "@hookimpl\n"
    "def register_provders(register):\n"
    "    register('typo', lambda options: None)\n"
)
WRONG_ARGS = (
    "from memora import hookimpl\n@hookimpl\ndef register_tools(register, extra):\n    pass\n"
)


def _install_broken_set(site: Path) -> None:
    make_dist(site, "memora-exploding", {"exploding": "m_exploding"}, {"m_exploding": EXPLODING})
    make_dist(site, "memora-misspelt", {"misspelt": "m_misspelt"}, {"m_misspelt": MISSPELT})
    make_dist(site, "memora-wrongargs", {"wrongargs": "m_wrongargs"}, {"m_wrongargs": WRONG_ARGS})
    make_dist(site, "memora-good", {"good": "m_good"}, {"m_good": GOOD})


def test_each_broken_installed_plugin_loses_only_itself(fake_site: Path) -> None:
    _install_broken_set(fake_site)
    plugins = create_plugin_manager()
    failures = {f.name: f for f in plugins.failures}
    assert set(failures) == {"exploding", "misspelt", "wrongargs"}
    assert failures["exploding"].distribution == "memora-exploding"
    assert failures["exploding"].stage == "hook"
    assert "kaboom in register_storage" in failures["exploding"].error
    assert failures["misspelt"].stage == "register"
    assert "register_provders" in failures["misspelt"].error
    assert "did you mean 'register_providers'" in failures["misspelt"].error
    assert failures["wrongargs"].distribution == "memora-wrongargs"
    # what the exploding plugin registered before raising is gone with it
    assert "half-done" not in plugins.names("storage")
    assert "typo" not in plugins.names("provider")
    names = {i.name for i in plugins.plugin_infos(include_builtin=False)}
    assert "exploding" not in names and "good" in names
    # the rest works: built-ins and the good plugin
    assert plugins.create("web_search", "fake-search", {"k": 1}) == ("good", {"k": 1})
    assert {"sqlite", "json", "memory"} <= set(plugins.names("storage"))


@pytest.mark.parametrize("module", ["EXPLODING", "MISSPELT", "WRONG_ARGS"])
def test_strict_mode_raises_for_each_failure(
    fake_site: Path, monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    make_dist(fake_site, "memora-bad", {"bad": "m_bad"}, {"m_bad": globals()[module]})
    monkeypatch.setenv("MEMORA_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="'bad'"):
        create_plugin_manager()


def test_installed_name_clash_first_entry_point_keeps_it(fake_site: Path) -> None:
    make_dist(
        fake_site, "memora-twin", {"twin": "m_twin"}, {"m_twin": GOOD.replace("good", "twin")}
    )
    make_dist(fake_site, "memora-good", {"good": "m_good"}, {"m_good": GOOD})
    plugins = create_plugin_manager()
    assert plugins.failures == []
    # entry points register in name order: 'good' < 'twin'
    assert plugins.create("web_search", "fake-search")[0] == "good"
    (clash,) = plugins.clashes
    assert (clash.kind, clash.name, clash.kept, clash.dropped) == (
        "web_search",
        "fake-search",
        "good",
        "twin",
    )
    infos = {i.name: i for i in plugins.plugin_infos()}
    assert infos["good"].registers == {"web_search": ("fake-search",)}
    assert infos["twin"].registers == {}


def test_host_plugin_overrides_builtin_and_installed(fake_site: Path) -> None:
    make_dist(fake_site, "memora-good", {"good": "m_good"}, {"m_good": GOOD})

    class MyStorage:
        @hookimpl
        def register_storage(self, register: Any) -> None:
            register("sqlite", lambda options: "mine")

        @hookimpl
        def register_web_search(self, register: Any) -> None:
            register("fake-search", lambda options: "host")

    plugins = create_plugin_manager(extra=[MyStorage()])
    assert plugins.create("storage", "sqlite") == "mine"
    assert plugins.create("web_search", "fake-search") == "host"
    kept = {(c.name, c.kept, c.dropped) for c in plugins.clashes}
    assert ("sqlite", "MyStorage", "memora.default_plugins.storage") in kept
    assert ("fake-search", "MyStorage", "good") in kept
    assert all("overrides" in c.reason for c in plugins.clashes)


def test_two_host_plugins_with_one_name_raise() -> None:
    class A:
        @hookimpl
        def register_providers(self, register: Any) -> None:
            register("p", lambda options: "A")

    with pytest.raises(PluginConflictError, match="'A'.*'A#2'"):
        create_plugin_manager(load_entrypoints=False, extra=[A(), A()])


def test_host_plugins_have_readable_names() -> None:
    class AuditCheck:
        @hookimpl
        def pre_execution_check(self, call: Any, context: Any) -> Any:
            return Deny("audited")

    plugins = create_plugin_manager(load_entrypoints=False, extra=[AuditCheck(), AuditCheck()])
    names = {i.name for i in plugins.plugin_infos(include_builtin=False)}
    assert names == {"AuditCheck", "AuditCheck#2"}
    outcome = plugins.pre_execution_check(
        ToolCallInfo("c1", "read_file", {}), CheckContext(project_path=Path("/p"))
    )
    assert outcome.plugin in {"AuditCheck", "AuditCheck#2"}


def test_misspelt_host_hook_names_the_plugin_not_a_repr() -> None:
    class Typo:
        @hookimpl
        def pre_execution_chek(self, call: Any, context: Any) -> None:
            return None

    with pytest.raises(PluginError) as info:
        create_plugin_manager(load_entrypoints=False, extra=[Typo()])
    msg = str(info.value)
    assert "'Typo'" in msg and "did you mean 'pre_execution_check'" in msg
    assert "object at 0x" not in msg


class Wrappers:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    @hookimpl(wrapper=True)
    def pre_execution_check(self, call: Any, context: Any) -> Generator[None, Any, Any]:
        answers = yield
        self.seen.append(list(answers))
        if call.name == "run_command":
            return [*answers, Deny("the wrapper says no")]
        return answers

    @hookimpl(hookwrapper=True)
    def register_tools(self, register: Any) -> Generator[None, Any, None]:
        self.seen.append("tools-wrapped")
        yield


class FirstCheck:
    @hookimpl(tryfirst=True)
    def pre_execution_check(self, call: Any, context: Any) -> Any:
        return Allow()


def test_wrappers_and_ordering_go_through_pluggy() -> None:
    wrappers = Wrappers()
    plugins = create_plugin_manager(load_entrypoints=False, extra=[wrappers, FirstCheck()])
    assert "tools-wrapped" in wrappers.seen
    ctx = CheckContext(project_path=Path("/p"))
    outcome = plugins.pre_execution_check(ToolCallInfo("c", "read_file", {}), ctx)
    assert outcome.decision == Allow()
    # tryfirst: FirstCheck's answer comes before the built-in trylast one
    assert wrappers.seen[-1][0] == Allow()
    outcome = plugins.pre_execution_check(ToolCallInfo("c", "run_command", {}), ctx)
    assert outcome.decision == Deny("the wrapper says no")
    assert outcome.plugin == "Wrappers"


def test_install_hints_name_only_distributions_in_this_repository() -> None:
    shipped = {p.name for p in (REPO / "plugins").iterdir() if (p / "pyproject.toml").is_file()}
    named = {
        m.group(0) for hint in INSTALL_HINTS.values() for m in re.finditer(r"memora-[\w-]+", hint)
    }
    assert named and named <= shipped, named - shipped
