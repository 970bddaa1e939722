from __future__ import annotations

import inspect
import re
from pathlib import Path

import pluggy
import pytest

from memora import hookimpl, hookspecs
from memora.checks import (
    Allow,
    Ask,
    CheckContext,
    Deny,
    Rewrite,
    Skip,
    ToolCallInfo,
)
from memora.errors import NotAvailableError, PluginConflictError, PluginError
from memora.plugins import KINDS, create_plugin_manager
from tests.conftest import REPO, make_dist

HOOK_NAMES = sorted(
    name
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
    if hasattr(fn, "memora_spec")
)


def test_every_hook_is_documented() -> None:
    doc = (REPO / "docs" / "plugin_hooks.md").read_text(encoding="utf-8")
    assert len(HOOK_NAMES) >= 10
    for name in HOOK_NAMES:
        fn = getattr(hookspecs, name)
        params = ", ".join(inspect.signature(fn).parameters)
        assert f"## {name}({params})" in doc, f"hook {name}({params}) is not in plugin_hooks.md"
        assert fn.__doc__ and "Called" in fn.__doc__, f"hookspec {name} lacks a 'when called' doc"


def test_every_register_hook_has_a_kind() -> None:
    # register_commands is the command line's (it gets a click group, not a `register`)
    registries = {h for h in HOOK_NAMES if h.startswith("register_")} - {"register_commands"}
    assert registries == set(KINDS.values())


def test_builtins_registered_like_plugins() -> None:
    plugins = create_plugin_manager(load_entrypoints=False)
    infos = plugins.plugin_infos()
    assert any(i.builtin and i.distribution == "memora-kernel" for i in infos)
    assert all(i.builtin for i in infos)
    assert plugins.plugin_infos(include_builtin=False) == []


def test_workspace_plugin_is_discovered() -> None:
    """memora-plugin-fetch is installed by the workspace sync, nothing by hand."""
    plugins = create_plugin_manager()
    info = {i.name: i for i in plugins.plugin_infos()}
    assert "fetch" in info
    assert info["fetch"].distribution == "memora-plugin-fetch"
    assert info["fetch"].hooks == ("register_web_fetch",)
    assert "fetch" in plugins.names("web_fetch")


BROKEN = "raise ImportError('the broken plugin cannot import its dependency')\n"
GOOD = (
    "from memora import hookimpl\n"
    "@hookimpl\n"
    "def register_web_search(register):\n"
    "    register('fake-search', lambda options: options)\n"
)


def test_broken_plugin_is_recorded_and_rest_works(fake_site: Path) -> None:
    make_dist(
        fake_site, "memora-broken", {"broken": "memora_broken_mod"}, {"memora_broken_mod": BROKEN}
    )
    make_dist(fake_site, "memora-good", {"good": "memora_good_mod"}, {"memora_good_mod": GOOD})
    plugins = create_plugin_manager()
    failures = {f.name: f for f in plugins.failures}
    assert "broken" in failures
    assert failures["broken"].distribution == "memora-broken"
    assert "cannot import its dependency" in failures["broken"].error
    assert "fake-search" in plugins.names("web_search")
    assert plugins.create("web_search", "fake-search", {"k": 1}) == {"k": 1}


def test_strict_mode_reraises(fake_site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_dist(
        fake_site, "memora-broken", {"broken": "memora_broken_mod"}, {"memora_broken_mod": BROKEN}
    )
    monkeypatch.setenv("MEMORA_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="broken") as info:
        create_plugin_manager()
    assert info.value.context["plugin"] == "broken"


def test_load_plugins_restricts(fake_site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_dist(
        fake_site, "memora-broken", {"broken": "memora_broken_mod"}, {"memora_broken_mod": BROKEN}
    )
    make_dist(fake_site, "memora-good", {"good": "memora_good_mod"}, {"memora_good_mod": GOOD})
    monkeypatch.setenv("MEMORA_LOAD_PLUGINS", "good")
    plugins = create_plugin_manager()
    names = {i.name for i in plugins.plugin_infos(include_builtin=False)}
    assert names == {"good"}
    assert plugins.failures == []
    monkeypatch.setenv("MEMORA_LOAD_PLUGINS", "")
    plugins = create_plugin_manager()
    assert plugins.plugin_infos(include_builtin=False) == []
    assert plugins.plugin_infos()  # built-ins always load


def test_duplicate_names_fail_naming_both_under_strict(
    fake_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_dist(fake_site, "memora-good", {"good": "memora_good_mod"}, {"memora_good_mod": GOOD})
    make_dist(fake_site, "memora-twin", {"twin": "memora_twin_mod"}, {"memora_twin_mod": GOOD})
    monkeypatch.setenv("MEMORA_STRICT_PLUGINS", "1")
    with pytest.raises(PluginConflictError) as info:
        create_plugin_manager()
    msg = str(info.value)
    assert "'good'" in msg and "'twin'" in msg and "fake-search" in msg
    assert sorted(info.value.context["owners"]) == ["good", "twin"]


def test_runtime_register_conflict_leaves_manager_intact() -> None:
    class A:
        @hookimpl
        def register_providers(self, register):  # type: ignore[no-untyped-def]
            register("p", lambda options: "A")

    class B:
        @hookimpl
        def register_providers(self, register):  # type: ignore[no-untyped-def]
            register("p", lambda options: "B")

    plugins = create_plugin_manager(load_entrypoints=False, extra=[("a", A())])
    with pytest.raises(PluginConflictError, match="'a'.*'b'"):
        plugins.register(B(), "b")
    assert plugins.create("provider", "p") == "A"
    assert "b" not in {i.name for i in plugins.plugin_infos()}


def test_missing_name_lists_available() -> None:
    plugins = create_plugin_manager(load_entrypoints=False)
    with pytest.raises(NotAvailableError) as info:
        plugins.get("provider", "nonexistent")
    assert "nonexistent" in str(info.value)
    assert "available" in str(info.value)
    assert "pip install" in str(info.value)
    assert info.value.context["available"] == []


def test_plugin_raising_in_hook_is_named() -> None:
    class Exploding:
        @hookimpl
        def register_storage(self, register):  # type: ignore[no-untyped-def]
            raise RuntimeError("kaboom")

    with pytest.raises(PluginError, match="'exploder'.*register_storage.*kaboom") as info:
        create_plugin_manager(load_entrypoints=False, extra=[("exploder", Exploding())])
    assert info.value.context["plugin"] == "exploder"


def test_factory_raising_is_named() -> None:
    class Bad:
        @hookimpl
        def register_providers(self, register):  # type: ignore[no-untyped-def]
            register("bad", lambda options: 1 / 0)

    plugins = create_plugin_manager(load_entrypoints=False, extra=[("badplug", Bad())])
    with pytest.raises(PluginError, match="'badplug'.*ZeroDivisionError"):
        plugins.create("provider", "bad")


def test_misspelt_hookimpl_fails_at_startup() -> None:
    class Typo:
        @hookimpl
        def register_provders(self, register):  # type: ignore[no-untyped-def]
            pass

    with pytest.raises(PluginError, match="register_provders"):
        create_plugin_manager(load_entrypoints=False, extra=[("typo", Typo())])


def test_hookimpl_with_unknown_argument_fails() -> None:
    class WrongArgs:
        @hookimpl
        def register_tools(self, register, extra):  # type: ignore[no-untyped-def]
            pass

    with pytest.raises(PluginError):
        create_plugin_manager(load_entrypoints=False, extra=[("wrong", WrongArgs())])


def test_register_validates_names_and_factories() -> None:
    class NoName:
        @hookimpl
        def register_tools(self, register):  # type: ignore[no-untyped-def]
            register(object())

    with pytest.raises(PluginError, match="without a name"):
        create_plugin_manager(load_entrypoints=False, extra=[("n", NoName())])

    class NotCallable:
        @hookimpl
        def register_web_search(self, register):  # type: ignore[no-untyped-def]
            register("s", 42)

    with pytest.raises(PluginError, match="non-callable"):
        create_plugin_manager(load_entrypoints=False, extra=[("n", NotCallable())])


def _call(name: str = "write_file", writes: bool = True, runs_code: bool = False) -> ToolCallInfo:
    return ToolCallInfo("c1", name, {"path": "a.txt"}, writes=writes, runs_code=runs_code)


CTX = CheckContext(project_path=Path("/p"))


def _with_checks(*answers: object) -> object:
    extra = []
    for i, answer in enumerate(answers):

        class Check:
            def __init__(self, value: object) -> None:
                self.value = value

            @hookimpl
            def pre_execution_check(self, call, context):  # type: ignore[no-untyped-def]
                if isinstance(self.value, Exception):
                    raise self.value
                return self.value

        extra.append((f"check{i}", Check(answer)))
    return create_plugin_manager(load_entrypoints=False, extra=extra)


def test_check_default_allows() -> None:
    plugins = create_plugin_manager(load_entrypoints=False)
    assert plugins.pre_execution_check(_call(), CTX).decision == Allow()


def test_check_any_deny_wins_over_allow_and_ask() -> None:
    plugins = _with_checks(Allow(), Deny("no writes here"), Ask("sure?"), None)
    outcome = plugins.pre_execution_check(_call(), CTX)  # type: ignore[attr-defined]
    assert outcome.decision == Deny("no writes here")
    assert outcome.plugin == "check1"


def test_check_precedence_ask_skip_rewrite() -> None:
    p = _with_checks(Rewrite({"path": "b"}), Skip("cached"), Ask("confirm"))
    assert p.pre_execution_check(_call(), CTX).decision == Ask("confirm")  # type: ignore[attr-defined]
    p = _with_checks(Rewrite({"path": "b"}), Skip("cached"))
    assert p.pre_execution_check(_call(), CTX).decision == Skip("cached")  # type: ignore[attr-defined]
    p = _with_checks(Rewrite({"path": "b"}), None)
    out = p.pre_execution_check(_call(), CTX)  # type: ignore[attr-defined]
    assert out.decision == Rewrite({"path": "b"}) and out.plugin == "check0"


def test_conflicting_rewrites_deny_naming_both() -> None:
    p = _with_checks(Rewrite({"path": "b"}), Rewrite({"path": "c"}))
    out = p.pre_execution_check(_call(), CTX)  # type: ignore[attr-defined]
    assert isinstance(out.decision, Deny)
    assert "check0" in out.decision.reason and "check1" in out.decision.reason


def test_raising_check_fails_closed() -> None:
    p = _with_checks(RuntimeError("oops"))
    out = p.pre_execution_check(_call(), CTX)  # type: ignore[attr-defined]
    assert isinstance(out.decision, Deny) and "check0" in out.decision.reason


def test_confirm_writes_and_scripts_ask() -> None:
    plugins = create_plugin_manager(load_entrypoints=False)
    ctx = CheckContext(project_path=Path("/p"), confirm_writes=True)
    assert isinstance(plugins.pre_execution_check(_call(), ctx).decision, Ask)
    assert plugins.pre_execution_check(_call("read_file", writes=False), ctx).decision == Allow()
    ctx = CheckContext(project_path=Path("/p"), confirm_scripts=True)
    out = plugins.pre_execution_check(_call("run_command", writes=False, runs_code=True), ctx)
    assert isinstance(out.decision, Ask) and "confirm_scripts" in out.decision.reason


def test_each_manager_is_independent() -> None:
    class P:
        @hookimpl
        def register_providers(self, register):  # type: ignore[no-untyped-def]
            register("x", lambda options: "x")

    a = create_plugin_manager(load_entrypoints=False, extra=[P()])
    b = create_plugin_manager(load_entrypoints=False)
    assert a.names("provider") == ["x"]
    assert b.names("provider") == []
    assert isinstance(a.pm, pluggy.PluginManager) and a.pm is not b.pm


def test_hookspec_docstrings_mention_return() -> None:
    for name in HOOK_NAMES:
        doc = getattr(hookspecs, name).__doc__ or ""
        assert re.search(r"[Rr]eturn", doc), name


def test_installed_plugins_carry_their_distribution_and_version(
    fake_site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The distribution of each entry point is read from the metadata folders on sys.path;
    one installed in another shape (here a zip archive on sys.path) is looked up through
    importlib.metadata."""
    import zipfile

    make_dist(
        fake_site, "Memora-Good", {"good": "memora_good_mod"}, {"memora_good_mod": GOOD}, "2.3"
    )
    zipped = tmp_path / "zipped.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("memora_zip_mod.py", GOOD)
        archive.writestr(
            "memora_zip-1.5.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: memora-zip\nVersion: 1.5\n",
        )
        archive.writestr(
            "memora_zip-1.5.dist-info/entry_points.txt", "[memora]\nzip = memora_zip_mod\n"
        )
    monkeypatch.syspath_prepend(str(zipped))
    plugins = create_plugin_manager()
    infos = {i.name: i for i in plugins.plugin_infos()}
    assert (infos["good"].distribution, infos["good"].version) == ("Memora-Good", "2.3")
    assert (infos["zip"].distribution, infos["zip"].version) == ("memora-zip", "1.5")
    assert infos["fetch"].distribution == "memora-plugin-fetch"
