"""memora-plugin-acme: written from docs/plugins.md, as a third-party author would.

* storage ``acme``: memories in one JSON-lines file, rewritten atomically;
* a pre-execution check that refuses writes to files named ``secret*``;
* a tool ``acme_shout``;
* a web search ``acme-search`` (canned results: it never touches the network).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from memora import Deny, hookimpl, tool
from memora.memory import InMemoryStorage, MemoryRecord
from memora.security.trust import ANY, project_settable
from memora.services import SearchHit


class AcmeStorage(InMemoryStorage):
    """The kernel's in-memory index, persisted to a JSON-lines file after every change."""

    def __init__(self, file: Path) -> None:
        super().__init__()
        self.file = file
        if file.exists():
            for line in file.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    self._put(MemoryRecord.from_dict(json.loads(line)))

    async def _persist(self) -> None:
        self.file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.file.parent, prefix=".acme-")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            for record in self._records.values():
                out.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.file)


def _storage(options: dict[str, Any]) -> AcmeStorage:
    name = str(options.get("file_name", "acme.jsonl"))
    if Path(name).name != name or name in ("", ".", ".."):
        raise ValueError(f"acme file_name must be a plain file name, not {name!r}")
    return AcmeStorage(Path(options["path"]) / name)


class AcmeSearch:
    def __init__(self, options: dict[str, Any]) -> None:
        self.prefix = options.get("prefix", "acme")

    async def search(self, query: str, *, max_results: int = 5) -> list[SearchHit]:
        return [
            SearchHit(f"{self.prefix} result {i} for {query}", f"https://acme.invalid/{i}", "…")
            for i in range(1, min(max_results, 2) + 1)
        ]


@tool(idempotency="read-only")
async def acme_shout(ctx: Any, words: str) -> str:
    """Return the words in capitals."""
    return words.upper() + "!"


@hookimpl
def register_storage(register: Any) -> None:
    # a project's config may pick the file name (a plain name inside the data folder)
    register("acme", project_settable(_storage, file_name=ANY))


@hookimpl
def register_web_search(register: Any) -> None:
    register("acme-search", AcmeSearch)


@hookimpl
def register_tools(register: Any) -> None:
    register(acme_shout)


@hookimpl
def pre_execution_check(call: Any, context: Any) -> Any:
    path = str(call.args.get("path", ""))
    if call.writes and Path(path).name.startswith("secret"):
        return Deny("acme policy: files named secret* are never written")
    return None
