"""One owner per lifetime: no module reaches into another object's private attributes.

Read from the source: ``x._name`` (and ``getattr(x, "_name")``, ``setattr``) where ``x`` is not
``self``/``cls`` and ``_name`` is not an attribute the same module gives its own objects
(``self._name = ...``, a method, a slot, a class attribute); and ``from .module import _name``,
a private name of another module.  Reaching into a private of an
object made elsewhere couples two lifetimes; the owner grows a public name instead (the Agent's
session parts are :class:`memora.agent.machinery.SessionMachinery`'s public state).  The
namedtuple API (``_replace``, ``_asdict``...) and ``os._exit`` are public despite the underscore.
"""

from __future__ import annotations

import ast
from pathlib import Path

import memora

ROOT = Path(memora.__file__).parent
PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
PUBLIC = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults", "_exit"})


def _own_names(tree: ast.Module) -> set[str]:
    """The private names a module gives its own objects and scopes."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            names.update(
                c.value
                for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            )
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC


def _memoras(node: ast.ImportFrom) -> bool:
    """An import from memora's own modules (relative, ``memora`` or a memora plugin)."""
    module = node.module or ""
    return node.level > 0 or module.split(".")[0].startswith("memora")


def _owner_is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def reaches(path: Path) -> list[str]:
    """The private reaches of one module, as ``file:line: expression``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _own_names(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        target: tuple[ast.expr, str] | None = None
        if isinstance(node, ast.Attribute) and _private(node.attr):
            target = (node.value, node.attr)
        elif isinstance(node, ast.ImportFrom) and _memoras(node):
            found.extend(
                (node.lineno, f"{path}:{node.lineno}: from {node.module} import {a.name}")
                for a in node.names
                if _private(a.name)
            )
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            target = (node.args[0], node.args[1].value)
        if target is None or _owner_is_self(target[0]) or target[1] in own:
            continue
        line = target[0].lineno
        found.append((line, f"{path}:{line}: {ast.unparse(node)}"))
    return [text for _, text in sorted(found)]


def _all(root: Path) -> list[str]:
    return [r for f in sorted(root.rglob("*.py")) for r in reaches(f)]


def test_the_checker_sees_a_reach() -> None:
    """The analysis itself: an attribute, a getattr and a setattr on another object count;
    the module's own objects and ``self`` do not."""
    source = (
        "class A:\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "    def same(self, other):\n"
        "        return other._mine\n"
        "def f(agent, client):\n"
        "    agent._live.turn = None\n"
        "    getattr(client, '_transport')\n"
        "    setattr(client, '_pool', 1)\n"
        "from .keywords import _scan, stem\n"
    )
    path = Path(__file__).with_name("_reach_sample.py")
    try:
        path.write_text(source, encoding="utf-8")
        found = reaches(path)
    finally:
        path.unlink()
    assert [f.split(": ", 1)[1] for f in found] == [
        "agent._live",
        "getattr(client, '_transport')",
        "setattr(client, '_pool', 1)",
        "from keywords import _scan",
    ]


def test_core_reaches_into_no_other_objects_privates() -> None:
    """The kernel: 0 (``agent/`` had 74 when its machinery was functions of the Agent)."""
    assert _all(ROOT) == []


def test_the_plugins_reach_into_no_other_objects_privates() -> None:
    assert _all(PLUGINS) == []
