"""The import graph of core/memora: no cycle and no import from a lower layer to a higher one.

Counted: every import, including those inside functions and the lazy ones (``lazy_module``,
the packages' ``name -> module`` re-export tables, the kernel's built-in plugin list); left out:
``TYPE_CHECKING`` blocks.  The layers are those of shared/ARCHITECTURE.md ("Layers"), top to
bottom; a module may import its own layer or any lower one.  A new module must be placed here,
so the next change cannot bring a cycle or an upward arrow back without this test saying so.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import memora

ROOT = Path(memora.__file__).parent

# (prefix, rank): the longest matching prefix decides; higher ranks sit above lower ones
LAYERS: tuple[tuple[str, int], ...] = (
    # hosts
    ("memora.cli", 100),
    ("memora.__main__", 100),
    # the face
    ("memora", 90),
    # agent/: runtime -> Agent facade -> its machinery -> the loop -> the turn's values
    ("memora.agent", 89),  # the package's lazy re-exports
    ("memora.agent.runtime", 88),
    ("memora.agent.agent", 87),
    ("memora.agent.machinery", 86),
    ("memora.agent.outcome", 84),
    ("memora.agent.session", 85),
    ("memora.agent.exposure", 85),
    ("memora.agent.prompts", 85),
    ("memora.agent.results", 85),
    ("memora.agent.project", 85),
    ("memora.agent.driver", 85),
    ("memora.agent.pause", 84),
    ("memora.agent.sync_verbs", 84),
    ("memora.agent.loop", 83),
    ("memora.agent.model_call", 82),
    ("memora.agent.durable", 82),
    ("memora.agent.tool_steps", 82),
    ("memora.agent.gates", 82),
    ("memora.agent.transitions", 81),
    ("memora.agent.record", 81),
    ("memora.agent.state", 80),
    ("memora.agent.resolved", 80),
    ("memora.agent.output", 79),
    ("memora.agent.options", 79),
    ("memora.agent.context_window", 79),
    ("memora.agent.serialize", 79),
    ("memora.agent.timing", 79),
    # settings: key tables, file reader, resolution, and the public face
    ("memora.settings", 72),
    ("memora.settings.resolve", 71),
    ("memora.settings.files", 70),
    ("memora.settings.keys", 69),
    ("memora.config", 72),
    # plugins and what they register
    ("memora.plugins", 60),
    ("memora.plugin_discovery", 60),
    ("memora.plugin_hooks", 60),
    ("memora.default_plugins", 59),
    # the fakes and suites for tests: above the kernel they fake (nothing in it imports them)
    ("memora.testing", 95),
    ("memora.tools", 58),
    # role packs and memory
    ("memora.role_pack", 50),
    ("memora.memory", 50),
    # security, providers, hook specifications, services, tracing
    ("memora.security", 40),
    ("memora.llm", 40),
    ("memora.hookspecs", 40),
    ("memora.services", 40),
    ("memora.tracing", 40),
    # leaves
    ("memora.errors", 10),
    ("memora.events", 10),
    ("memora.messages", 10),
    ("memora.chunks", 10),
    ("memora.capabilities", 10),
    ("memora.checks", 10),
    ("memora._lazy", 0),
    ("memora._version", 0),
)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _known(name: str) -> str | None:
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in MODULES else None


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names)
        return
    base = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    if node.level:
        parts = base.split(".")
        base = ".".join(parts[: len(parts) - (node.level - 1)])
        full = base + ("." + node.module if node.module else "")
    else:
        full = node.module or ""
    for alias in node.names:  # `from . import hookspecs` imports the module, not the package
        sub = f"{full}.{alias.name}"
        yield sub if sub in MODULES else full


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str) -> None:
        self.module = module
        self.found: set[tuple[str, int]] = set()

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def _add(self, name: str, line: int) -> None:
        if name.startswith("memora"):
            target = _known(name)
            if target is not None and target != self.module:
                self.found.add((target, line))

    def visit_Import(self, node: ast.Import) -> None:
        for name in _targets(self.module, node):
            self._add(name, node.lineno)

    visit_ImportFrom = visit_Import  # type: ignore[assignment]

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr == "getLogger":
            return  # a logger's name ("memora.agent") is not an import
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        # lazy imports name their module as a string: lazy_module("memora.checks"), the
        # packages' re-export tables, the built-in plugin list, "memora.cli.x:command"
        if isinstance(node.value, str) and node.value.startswith("memora."):
            name = node.value.split(":", 1)[0]
            if name in MODULES:
                self._add(name, node.lineno)


def _graph() -> dict[str, set[tuple[str, int]]]:
    graph: dict[str, set[tuple[str, int]]] = {}
    for module, path in MODULES.items():
        visitor = _Imports(module)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        graph[module] = visitor.found
    return graph


def _rank(module: str) -> int:
    best = max((p for p, _ in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return dict(LAYERS)[best]


def test_every_module_has_a_layer() -> None:
    assert "memora.agent.agent" in MODULES and "memora.settings.resolve" in MODULES
    for module in MODULES:
        _rank(module)  # raises ValueError (max of nothing) for a module of no layer


def test_no_import_goes_up_a_layer() -> None:
    upward = sorted(
        f"{module}:{line} imports {target} (layer {_rank(target)} over {_rank(module)})"
        for module, edges in _graph().items()
        for target, line in edges
        if _rank(target) > _rank(module)
    )
    assert upward == []


def test_the_import_graph_has_no_cycle() -> None:
    graph = {m: {t for t, _ in edges} for m, edges in _graph().items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, path)
        path.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert cycles == []


def test_the_checker_sees_function_level_and_lazy_imports() -> None:
    """The analysis itself: imports inside functions and lazy module strings are edges (a
    checker that missed them would pass a cycle held apart by a local import)."""
    graph = _graph()
    # a function-level import: the project's resources import the plugin manager in open()
    assert "memora.plugins" in {t for t, _ in graph["memora.agent.project"]}
    # another: the facade loads its session machinery in init()
    assert "memora.agent.machinery" in {t for t, _ in graph["memora.agent.agent"]}
    # a lazy one: the package re-exports its names from their modules on first use
    assert "memora.agent.runtime" in {t for t, _ in graph["memora.agent"]}
    # the built-in plugins are imported by name from plugins.py
    assert "memora.default_plugins.storage" in {t for t, _ in graph["memora.plugins"]}
