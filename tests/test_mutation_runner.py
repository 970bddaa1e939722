"""scripts/mutation.py makes the mutants issue #31 names, each one compiling, each one different."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _runner():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("mutation", REPO / "scripts" / "mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation"] = module
    spec.loader.exec_module(module)
    return module


SOURCE = '''
import os

def f(fd, roots, path):
    """doc"""
    flags = os.O_RDONLY | os.O_NOFOLLOW
    if path == "x" and not roots:
        raise ValueError("no")
    os.close(fd)
    return any(r in path for r in roots) or 3 > 2
'''


def test_every_operator_appears_and_every_mutant_compiles_and_differs() -> None:
    m = _runner()
    found = m.mutants(SOURCE)
    kinds = " | ".join(x.what for x in found)
    for expected in (
        "Eq -> NotEq",
        "and <-> or",
        "drop `not`",
        "any -> all",
        "return X -> return None",
        "drop os.O_NOFOLLOW",
        "delete `raise ValueError('no')`",
        "delete `os.close(fd)`",
        "3 -> 4",
        "Gt -> LtE",
    ):
        assert expected in kinds, expected
    assert "doc" not in kinds  # the docstring is not a statement to delete
    mutated = {m.mutate(SOURCE, x.index) for x in found}
    assert len(mutated) == len(found)
    for text in mutated:
        compile(text, "mutant", "exec")
    assert "os.close" not in m.mutate(SOURCE, next(x.index for x in found if "os.close" in x.what))


def test_the_modules_and_their_tests_exist() -> None:
    m = _runner()
    for module, tests in m.MODULES.items():
        assert (m.PACKAGE / module).is_file(), module
        for t in tests:
            assert (REPO / t.split("::")[0]).exists(), t


def test_inert_nodes_are_not_mutated() -> None:
    m = _runner()
    source = (
        "from dataclasses import dataclass\nimport os\n__all__ = ['A']\n"
        "Kind = Literal['a', 'b']\nFLAG = getattr(os, 'O_NOFOLLOW', 0)\n"
        "@dataclass(frozen=True, slots=True)\nclass A:\n    x: int = 1\n"
    )
    found = " | ".join(x.what for x in m.mutants(source))
    assert "__all__" not in found and "Literal" not in found
    assert found.count("True -> False") == 1  # frozen, not slots
    assert "0 -> 1" not in found and "1 -> 2" in found


def test_plugin_modules_are_mutated_in_a_copy_of_their_package() -> None:
    m = _runner()
    key = m.PLUGIN_SERVER + "guard.py"
    assert key in m.PLUGIN_MODULES and key in m.ALL_MODULES
    assert m._source(key) == REPO / key
    slot = m._slot(key)
    try:
        assert (slot / "memora" / "agent").is_dir()  # the kernel the plugin imports, copied too
        target = m._target(slot, key)
        assert target == slot / "memora_plugin_server" / "guard.py"
        assert target.read_text() == (REPO / key).read_text()
        assert m._target(slot, "checks.py") == slot / "memora" / "checks.py"
    finally:
        shutil.rmtree(slot)
    # every module and every test file the runner names exists
    for module, tests in m.PLUGIN_MODULES.items():
        assert m._source(module).is_file(), module
        for test in tests:
            assert (REPO / test.split("::")[0]).is_file(), test
