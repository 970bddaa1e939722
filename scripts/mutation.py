"""A small mutation tester: how much of a module's behaviour do its tests pin down?

``python scripts/mutation.py [MODULE ...] [--jobs N] [--list-survivors]`` (``make mutation``).
For each module it enumerates mutants from the module's AST — the operators of issue #31:
comparison swaps, ``and``/``or`` and ``True``/``False`` swaps, ``any``/``all``, a dropped
``not``, an integer constant ±1, ``return X`` → ``return None``, a statement deleted (``raise``
→ nothing, ``os.close(fd)`` → nothing), an ``os.O_*`` flag dropped from a ``|`` chain — and runs
the module's tests against each one, in a copy of the package put first on ``PYTHONPATH`` (the
working tree is never touched; subprocesses the tests start import the copy too).  A mutant is
*killed* when the tests fail, *survives* when they pass, *timeout* counts as killed.

Score = killed / mutants tried.  Survivors that cannot change behaviour (equivalent mutants) are
listed in docs/mutation.md with the reason, and shown by ``--list-survivors``.

Why not mutmut or cosmic-ray: both want to own the package layout (mutmut 3 copies the project
into ``mutants/`` and rewrites imports with a trampoline; the kernel is ``core/memora`` inside a
uv workspace whose plugins import it by name), so a runner of ~300 lines that mutates a copy on
``PYTHONPATH`` is simpler to trust.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import copy
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "core" / "memora"

# module (relative to core/memora) -> the tests that speak for it
MODULES: dict[str, list[str]] = {
    "security/paths.py": [
        "tests/tools",
        "tests/memory/test_planted_links.py",
        "tests/memory/test_private_files.py",
        "tests/core/test_properties.py",
    ],
    "settings.py": [
        "tests/core/test_settings.py",
        "tests/core/test_project_trust.py",
        "tests/core/test_config.py",
        "tests/core/test_cli_plugins_config.py",
        "tests/core/test_approvals.py",
    ],
    "memory/sessions.py": [
        "tests/memory/test_session_logs.py",
        "tests/memory/test_sessions_lock.py",
        "tests/memory/test_planted_links.py",
        "tests/memory/test_private_files.py",
        "tests/memory/test_reliability.py",
        "tests/agent/test_turn_machine.py",
    ],
    "checks.py": [
        "tests/core/test_checks.py",
        "tests/core/test_approvals.py",
        "tests/core/test_plugins.py",
        "tests/core/test_plugin_isolation.py",
        "tests/agent/test_loop_gates.py",
    ],
}

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


def _is_docstring(node: ast.AST, parent: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _points(tree: ast.Module) -> Iterator[tuple[ast.AST, str, str]]:
    """Every mutation point: (node, operator, description)."""
    for node in ast.walk(tree):
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
                yield node, "anyall", f"{node.func.id} -> {'all' if node.func.id == 'any' else 'any'}"
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
                if not isinstance(stmt, ast.stmt) or _is_docstring(stmt, node):
                    continue
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue
                if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass)):
                    continue
                yield node, f"del:{field}:{i}", f"delete `{ast.unparse(stmt).splitlines()[0][:60]}`"


def mutants(source: str) -> list[Mutant]:
    tree = ast.parse(source)
    out = []
    for i, (node, _op, what) in enumerate(_points(tree)):
        line = getattr(node, "lineno", 0)
        if what.startswith("delete"):
            out.append(Mutant(i, line, what))
        else:
            out.append(Mutant(i, line, what))
    return out


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


def _run_tests(workdir: Path, tests: list[str], timeout: float) -> tuple[str, float]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(workdir) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
            cwd=REPO,
            env=env,
            capture_output=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - started
    took = time.monotonic() - started
    if proc.returncode == 0:
        return "survived", took
    if proc.returncode in (1, 3):  # tests failed (1), or an internal error while collecting (3)
        return "killed", took
    return "error", took


class Worker:
    """A private copy of the package to mutate, one per parallel job."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="memora-mutation-"))
        shutil.copytree(PACKAGE, self.root / "memora", ignore=shutil.ignore_patterns("__pycache__"))

    def run(self, module: str, source: str, mutant: Mutant, timeout: float) -> Outcome:
        target = self.root / "memora" / module
        try:
            target.write_text(mutate(source, mutant.index), encoding="utf-8")
            status, took = _run_tests(self.root, MODULES[module], timeout)
        finally:
            target.write_text(source, encoding="utf-8")
        return Outcome(mutant, status, took)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def score(module: str, jobs: int) -> list[Outcome]:
    source = (PACKAGE / module).read_text(encoding="utf-8")
    found = mutants(source)
    baseline_worker = Worker()
    try:
        status, took = _run_tests(baseline_worker.root, MODULES[module], timeout=1800)
    finally:
        baseline_worker.close()
    if status != "survived":
        raise SystemExit(f"{module}: the tests fail without any mutation ({status}); fix them first")
    timeout = max(30.0, took * 3)
    print(f"{module}: {len(found)} mutants; tests take {took:.1f} s unmutated", flush=True)
    workers = [Worker() for _ in range(jobs)]
    free = list(workers)
    outcomes: list[Outcome] = []
    try:
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            pending: dict[concurrent.futures.Future[Outcome], Worker] = {}
            queue = list(found)
            while queue or pending:
                while queue and free:
                    worker = free.pop()
                    fut = pool.submit(worker.run, module, source, queue.pop(0), timeout)
                    pending[fut] = worker
                done, _ = concurrent.futures.wait(
                    pending, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for fut in done:
                    free.append(pending.pop(fut))
                    outcomes.append(fut.result())
    finally:
        for worker in workers:
            worker.close()
    outcomes.sort(key=lambda o: o.mutant.index)
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="modules under core/memora (default: all)")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2)))
    parser.add_argument("--list-survivors", action="store_true")
    args = parser.parse_args()
    chosen = args.modules or list(MODULES)
    rows = []
    for module in chosen:
        if module not in MODULES:
            raise SystemExit(f"unknown module {module!r}; known: {', '.join(MODULES)}")
        outcomes = score(module, args.jobs)
        killed = sum(o.status in ("killed", "timeout") for o in outcomes)
        errors = [o for o in outcomes if o.status == "error"]
        total = len(outcomes)
        rows.append((module, killed, total))
        print(f"{module}: {killed}/{total} killed = {100 * killed / max(total, 1):.0f}%", flush=True)
        survivors = [o for o in outcomes if o.status == "survived"]
        if args.list_survivors:
            for o in survivors + errors:
                print(f"  {o.status:8} line {o.mutant.line:4}  {o.mutant.what}")
    print("\nmodule                      score")
    for module, killed, total in rows:
        print(f"{module:26}  {100 * killed / max(total, 1):5.1f}%  ({killed}/{total})")


if __name__ == "__main__":
    main()
