"""memora's own files are private: the conversations and memory of a project are readable by
its user alone (a sandboxed snippet or another local user must not read them)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from memora import Agent
from memora.testing import ScriptedProvider, text


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def common_umask() -> Iterator[None]:
    """The usual umask (022): under it, files created 0644 are readable by everyone."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.usefixtures("common_umask")
@pytest.mark.parametrize("storage", ["sqlite", "json"])
async def test_data_folders_are_0700_and_files_0600(tmp_path: Path, storage: str) -> None:
    project = tmp_path / "p"
    project.mkdir()
    provider = ScriptedProvider([text("hello"), text("TYPE: fact\nthe user said hello")])
    async with Agent(
        project_path=project,
        data_dir=project / ".memora" / "data",
        provider=provider,
        storage=storage,
        load_entrypoints=False,
    ) as agent:
        [c async for c in agent.chat("hi")]
        await agent.idle()
    data = project / ".memora" / "data"
    assert _mode(data) == 0o700
    files = [p for p in data.rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    folders = [p for p in data.rglob("*") if p.is_dir()]
    assert files, "the turn wrote nothing?"
    assert {str(p.relative_to(data)): _mode(p) for p in files} == {
        str(p.relative_to(data)): 0o600 for p in files
    }
    assert all(_mode(p) == 0o700 for p in folders), {str(p): oct(_mode(p)) for p in folders}
    names = {p.name for p in files}
    assert any(n.endswith(".jsonl") for n in names)  # a session log
    assert ("memory.db" in names) if storage == "sqlite" else ("memories.json" in names)


async def test_a_shared_data_folder_is_named_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    project = tmp_path / "p"
    data = project / ".memora" / "data"
    data.mkdir(parents=True)
    data.chmod(0o755)  # as an older memora left it
    async with Agent(
        project_path=project, data_dir=data, provider=ScriptedProvider([]), load_entrypoints=False
    ):
        pass
    warned = [r.getMessage() for r in caplog.records if "readable by other users" in r.getMessage()]
    assert warned and str(data) in warned[0] and "chmod -R go-rwx" in warned[0]
