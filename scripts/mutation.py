"""A small mutation tester: how much of a module's behaviour do its tests pin down?

``python scripts/mutation.py [MODULE ...] [--jobs N] [--list-survivors]`` (``make mutation``).
For each module it enumerates mutants from the module's AST — the operators of issue #31:
comparison swaps, ``and``/``or`` and ``True``/``False`` swaps, ``any``/``all``, a dropped
``not``, an integer constant ±1, ``return X`` → ``return None``, a statement deleted (``raise``
→ nothing, ``os.close(fd)`` → nothing), an ``os.O_*`` flag dropped from a ``|`` chain — and runs
the module's tests against each one: a child forked from a parent that imported pytest and
the heavy libraries once, with a copy of the package first on ``sys.path`` and ``PYTHONPATH``
holding the mutant (the working tree is never touched; subprocesses the tests start import the
copy too).  A mutant is *killed* when the tests fail, *survives* when they pass; a *timeout*
(three times the unmutated run) counts as killed.

Score = killed / mutants tried.  Survivors that cannot change behaviour (equivalent mutants) are
listed in docs/mutation.md with the reason, and shown by ``--list-survivors``.

Why not mutmut or cosmic-ray: both want to own the package layout (mutmut 3 copies the project
into ``mutants/`` and rewrites imports with a trampoline; the kernel is ``core/memora`` inside a
uv workspace whose plugins import it by name), so a runner of ~350 lines that mutates a copy on
``sys.path`` is simpler to trust.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "core" / "memora"
PLUGIN_SERVER = "plugins/memora-plugin-server/memora_plugin_server/"

# module (relative to core/memora; PLUGIN_MODULES below: a plugin's, relative to the repository)
# -> the tests that speak for it
MODULES: dict[str, list[str]] = {
    # the fast tests that speak for each module, the most specific first (``-x``: a killed mutant
    # stops at the first failure); the slow CLI-in-a-subprocess files are left to make test
    "security/paths.py": [
        "tests/tools/test_path_guard.py",
        "tests/memory/test_planted_links.py",
        "tests/core/test_properties.py",
        "tests/tools/test_tools.py",
    ],
    "settings/resolve.py": [
        "tests/core/test_settings.py",
        "tests/core/test_settings_layers.py",
        "tests/core/test_config.py",
        "tests/core/test_project_trust.py",
    ],
    "memory/sessions.py": [
        "tests/memory/test_session_logs.py",
        "tests/memory/test_sessions_lock.py",
        "tests/memory/test_planted_links.py",
        "tests/memory/test_private_files.py",
        "tests/agent/test_turn_machine.py",
    ],
    "security/trust.py": [
        "tests/core/test_trust_store.py",
        "tests/core/test_project_trust.py",
        "tests/core/test_settings_layers.py",
        "tests/core/test_config.py",
    ],
    "memory/sqlite_store.py": [
        "tests/memory/test_sqlite_edges.py",
        "tests/memory/test_conformance.py",
        "tests/memory/test_reliability.py",
        "tests/memory/test_planted_links.py",
        "tests/memory/test_private_files.py",
        "tests/memory/test_vectors.py",
        "tests/memory/test_edit_forget.py",
        "tests/memory/test_session_context.py",
    ],
    "checks.py": [
        "tests/core/test_checks.py",
        "tests/core/test_approvals.py::test_what_each_mode_does",
        "tests/core/test_plugins.py",
        "tests/core/test_plugin_isolation.py",
        "tests/agent/test_loop_gates.py",
    ],
}

PLUGIN_MODULES: dict[str, list[str]] = {
    # plugins' modules, by their path in the repository: the plugin's package is copied next to
    # the kernel's in each slot and mutated there
    PLUGIN_SERVER + "guard.py": [
        "tests/plugins/server/test_guard_units.py",
        "tests/plugins/server/test_auth.py",
        "tests/plugins/server/test_a2a.py",
        "tests/plugins/server/test_hardening.py",
        "tests/plugins/server/test_scopes.py",
        "tests/plugins/server/test_rate_shared.py::test_two_apps_on_one_rate_file_are_one_allowance",
    ],
    PLUGIN_SERVER + "config.py": [
        "tests/plugins/server/test_server_config.py",
        "tests/plugins/server/test_guard_units.py",
        "tests/plugins/server/test_auth.py",
        "tests/plugins/server/test_scopes.py",
    ],
}

ALL_MODULES: dict[str, list[str]] = {**MODULES, **PLUGIN_MODULES}

_CMP_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}


@dataclasses.dataclass(frozen=True, slots=True)
class Mutant:
    index: int
    """Which mutation point, in AST walk order."""
    line: int
    what: str


@dataclasses.dataclass(slots=True)
class Outcome:
    mutant: Mutant
    status: str  # killed / survived / timeout / error
    seconds: float


def _is_docstring(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _is_all(node: ast.Assign) -> bool:
    return any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)


def _is_type_alias(node: ast.Assign) -> bool:
    return (
        isinstance(node.value, (ast.Subscript, ast.BinOp))
        and all(isinstance(t, ast.Name) and t.id[:1].isupper() for t in node.targets)
        and "Literal[" in ast.unparse(node.value)
    )


def _inert(tree: ast.Module) -> set[int]:
    """Nodes whose mutants cannot change behaviour by construction, left out: ``__all__``,
    type aliases (with ``from __future__ import annotations`` only annotations read them), the
    ``slots=`` flag of a dataclass, and the default of ``getattr(os, "O_...", 0)`` (used only where
    the flag does not exist)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and (_is_all(node) or _is_type_alias(node)):
            skip.add(id(node))
        elif isinstance(node, ast.keyword) and node.arg == "slots":
            skip.update(id(n) for n in ast.walk(node.value))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) == 3
        ):
            skip.update(id(n) for n in ast.walk(node.args[2]))
    return skip


KEEP_INERT = False
"""``--keep-inert``: mutate the inert nodes too (to compare with a run that did)."""


def _points(tree: ast.Module) -> Iterator[tuple[ast.AST, str, str]]:
    """Every mutation point: (node, operator, description)."""
    inert = set() if KEEP_INERT else _inert(tree)
    for node in ast.walk(tree):
        if id(node) in inert:
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _CMP_SWAP:
                    yield node, f"cmp{i}", f"{type(op).__name__} -> {_CMP_SWAP[type(op)].__name__}"
        elif isinstance(node, ast.BoolOp):
            yield node, "boolop", "and <-> or"
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node, "not", "drop `not`"
        elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
            yield node, "bool", f"{node.value} -> {not node.value}"
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, int)
            and not isinstance(node.value, bool)
        ):
            yield node, "int+1", f"{node.value} -> {node.value + 1}"
            yield node, "int-1", f"{node.value} -> {node.value - 1}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("any", "all"):
                yield (
                    node,
                    "anyall",
                    f"{node.func.id} -> {'all' if node.func.id == 'any' else 'any'}",
                )
        elif isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                yield node, "return", "return X -> return None"
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            for side in ("left", "right"):
                operand = getattr(node, side)
                if isinstance(operand, ast.Attribute) and operand.attr.startswith("O_"):
                    yield node, f"flag-{side}", f"drop os.{operand.attr}"
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            for i, stmt in enumerate(stmts):
                if not isinstance(stmt, ast.stmt) or _is_docstring(stmt):
                    continue
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue
                if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass)) or id(stmt) in inert:
                    continue
                yield node, f"del:{field}:{i}", f"delete `{ast.unparse(stmt).splitlines()[0][:60]}`"


def mutants(source: str) -> list[Mutant]:
    tree = ast.parse(source)
    return [
        Mutant(i, getattr(node, "lineno", 0), what)
        for i, (node, _op, what) in enumerate(_points(tree))
    ]


def mutate(source: str, index: int) -> str:
    """The source with mutation point ``index`` applied."""
    tree = ast.parse(source)
    for i, (node, op, _what) in enumerate(_points(tree)):
        if i != index:
            continue
        if op.startswith("cmp"):
            k = int(op[3:])
            assert isinstance(node, ast.Compare)
            node.ops[k] = _CMP_SWAP[type(node.ops[k])]()
        elif op == "boolop":
            assert isinstance(node, ast.BoolOp)
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        elif op == "not":
            assert isinstance(node, ast.UnaryOp)
            _replace(tree, node, node.operand)
        elif op == "bool":
            assert isinstance(node, ast.Constant)
            node.value = not node.value
        elif op in ("int+1", "int-1"):
            assert isinstance(node, ast.Constant)
            node.value = node.value + (1 if op == "int+1" else -1)
        elif op == "anyall":
            assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            node.func.id = "all" if node.func.id == "any" else "any"
        elif op == "return":
            assert isinstance(node, ast.Return)
            node.value = ast.Constant(None)
        elif op.startswith("flag-"):
            assert isinstance(node, ast.BinOp)
            keep = node.right if op == "flag-left" else node.left
            _replace(tree, node, keep)
        elif op.startswith("del:"):
            _, field, pos = op.split(":")
            stmts = getattr(node, field)
            stmts[int(pos)] = ast.copy_location(ast.Pass(), stmts[int(pos)])
        ast.fix_missing_locations(tree)
        return ast.unparse(tree)
    raise IndexError(index)


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, copy.copy(new))
                return
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is old:
                        value[i] = copy.copy(new)
                        return


PRELOAD = (
    "pytest",
    "_pytest.python",
    "pydantic",
    "pydantic_core",
    "httpx2",
    "click",
    "rich.console",
    "pluggy",
    "hypothesis",
    "sqlite3",
    "asyncio",
    "starlette.applications",
    "uvicorn",
)
"""Imported once by the parent: each mutant's child is forked with them in memory, and imports
only memora (from its mutated copy) and the tests."""


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    assert not any(m == "memora" or m.startswith("memora") for m in sys.modules), (
        "memora and its plugins must not be imported before forking"
    )


def _child(workdir: Path, module: str, source: str, index: int | None, tests: list[str]) -> None:
    """In the forked child: put the mutant in place, run the tests, exit with pytest's code."""
    try:
        target = _target(workdir, module)
        target.write_text(source if index is None else mutate(source, index), encoding="utf-8")
        os.environ["PYTHONPATH"] = str(workdir) + os.pathsep + os.environ.get("PYTHONPATH", "")
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
        sys.dont_write_bytecode = True
        sys.path.insert(0, str(workdir))
        os.chdir(REPO)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        import pytest

        code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", *tests])
        os._exit(int(code))
    except BaseException:
        os._exit(99)


@dataclasses.dataclass(slots=True)
class _Running:
    pid: int
    mutant: Mutant | None
    started: float
    slot: Path


def _reap(running: dict[int, _Running], timeout: float) -> list[tuple[_Running, str]]:
    """Wait until at least one child ended (or timed out); their outcomes."""
    while True:
        done: list[tuple[_Running, str]] = []
        for pid, job in list(running.items()):
            got, status = os.waitpid(pid, os.WNOHANG)
            if got == 0:
                if time.monotonic() - job.started > timeout:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    done.append((job, "timeout"))
                    del running[pid]
                continue
            del running[pid]
            code = os.waitstatus_to_exitcode(status)
            if code == 0:
                done.append((job, "survived"))
            elif code in (1, 2, 3, 4):  # failed, interrupted (-x), internal error, usage
                done.append((job, "killed"))
            else:
                done.append((job, "error"))
        if done:
            return done
        time.sleep(0.02)


def _source(module: str) -> Path:
    """The file a module key names: under core/memora, or a plugin's (``plugins/...``)."""
    return REPO / module if module.startswith("plugins/") else PACKAGE / module


def _target(workdir: Path, module: str) -> Path:
    """Where the mutant goes in a slot: the copy of the kernel, or of the plugin's package."""
    if module.startswith("plugins/"):
        package = _source(module).parent
        return workdir / package.name / _source(module).relative_to(package)
    return workdir / "memora" / module


def _slot(module: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix="memora-mutation-"))
    shutil.copytree(PACKAGE, root / "memora", ignore=shutil.ignore_patterns("__pycache__"))
    if module.startswith("plugins/"):
        package = _source(module).parent
        shutil.copytree(package, root / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def score(module: str, jobs: int) -> list[Outcome]:
    source = _source(module).read_text(encoding="utf-8")
    found = mutants(source)
    # an older checkout lacks some; "file::test" names one test of a slow file
    tests = [t for t in ALL_MODULES[module] if (REPO / t.split("::")[0]).exists()]
    slots = [_slot(module) for _ in range(jobs)]
    try:
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(slots[0], module, source, None, tests)
        base = _reap({pid: _Running(pid, None, started, slots[0])}, 1800)[0][1]
        took = time.monotonic() - started
        if base != "survived":
            raise SystemExit(f"{module}: the tests fail without any mutation ({base}); fix them")
        timeout = max(20.0, took * 3)
        print(f"{module}: {len(found)} mutants; tests take {took:.1f} s unmutated", flush=True)
        outcomes: list[Outcome] = []
        queue = list(found)
        free = list(slots)
        running: dict[int, _Running] = {}
        while queue or running:
            while queue and free:
                mutant, slot = queue.pop(0), free.pop()
                pid = os.fork()
                if pid == 0:
                    _child(slot, module, source, mutant.index, tests)
                running[pid] = _Running(pid, mutant, time.monotonic(), slot)
            for job, status in _reap(running, timeout):
                free.append(job.slot)
                assert job.mutant is not None
                outcomes.append(Outcome(job.mutant, status, time.monotonic() - job.started))
    finally:
        for slot in slots:
            shutil.rmtree(slot, ignore_errors=True)
    outcomes.sort(key=lambda o: o.mutant.index)
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="modules under core/memora (default: all)")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2)))
    parser.add_argument("--list-survivors", action="store_true")
    parser.add_argument(
        "--keep-inert", action="store_true", help="also mutate __all__, type aliases, slots=..."
    )
    args = parser.parse_args()
    global KEEP_INERT
    KEEP_INERT = args.keep_inert
    _preload()
    chosen = args.modules or list(ALL_MODULES)
    rows = []
    for module in chosen:
        if module not in ALL_MODULES:
            raise SystemExit(f"unknown module {module!r}; known: {', '.join(ALL_MODULES)}")
        outcomes = score(module, args.jobs)
        killed = sum(o.status in ("killed", "timeout") for o in outcomes)
        errors = [o for o in outcomes if o.status == "error"]
        total = len(outcomes)
        rows.append((module, killed, total))
        print(
            f"{module}: {killed}/{total} killed = {100 * killed / max(total, 1):.0f}%", flush=True
        )
        survivors = [o for o in outcomes if o.status == "survived"]
        if args.list_survivors:
            for o in survivors + errors:
                print(f"  {o.status:8} line {o.mutant.line:4}  {o.mutant.what}")
    print("\nmodule                      score")
    for module, killed, total in rows:
        print(f"{module:26}  {100 * killed / max(total, 1):5.1f}%  ({killed}/{total})")


if __name__ == "__main__":
    main()
