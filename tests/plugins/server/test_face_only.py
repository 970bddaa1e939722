"""The server needs only the face (#70 item 4): `memora serve` is a host, and a host imports
what `memora` exports — never `memora.agent`, `memora.memory` or `memora.role_pack`, whose
insides may change.  The vocabulary leaves it uses (chunks, errors, atomic writes, the CLI's
options) may stay.  Every import counts: at module level, inside functions, under
``TYPE_CHECKING``."""

from __future__ import annotations

import ast
from pathlib import Path

import memora_plugin_server

FORBIDDEN = ("memora.agent", "memora.memory", "memora.role_pack")


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def test_the_server_imports_only_the_face() -> None:
    package = Path(memora_plugin_server.__file__).parent
    wrong = [
        f"{path.name}:{line} imports {name}"
        for path in sorted(package.rglob("*.py"))
        for line, name in _imports(path)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    ]
    assert wrong == [], "\n".join(wrong)
