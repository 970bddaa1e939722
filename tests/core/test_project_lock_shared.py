"""The project lock taken shared (a service's workers): shared holders coexist, an exclusive
holder excludes them and they exclude it, in separate processes; a config cannot make a lock
shared (only the host's option can)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memora import ProjectRuntime
from memora.errors import ProjectLockedError
from memora.security.lock import ProjectLock
from memora.testing import ScriptedProvider

HOLD = textwrap.dedent(
    """
    import sys, time
    from memora.security.lock import ProjectLock
    lock = ProjectLock(sys.argv[1], shared=sys.argv[2] == "shared")
    lock.acquire()
    print("held", flush=True)
    sys.stdin.read()
    """
)


def _holder(project: Path, mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(project), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_shared_holders_coexist_and_exclude_an_exclusive_one(tmp_path: Path) -> None:
    one = _holder(tmp_path, "shared")
    two = _holder(tmp_path, "shared")
    try:
        with pytest.raises(ProjectLockedError, match="shared by the workers of a service"):
            ProjectLock(tmp_path).acquire()
    finally:
        for proc in (one, two):
            proc.kill()
            proc.wait()
    exclusive = _holder(tmp_path, "exclusive")
    try:
        with pytest.raises(ProjectLockedError, match="close that Agent first"):
            ProjectLock(tmp_path, shared=True).acquire()
    finally:
        exclusive.kill()
        exclusive.wait()
    lock = ProjectLock(tmp_path, shared=True)
    lock.acquire()  # a killed holder's lock went with it
    lock.release()


async def test_the_runtime_option_and_not_the_config_makes_it_shared(tmp_path: Path) -> None:
    project = tmp_path / "p"
    (project / ".memora").mkdir(parents=True)
    user = tmp_path / "user"
    user.mkdir()
    # a user config asking for "shared" would undo the lock for every command: ignored
    (user / "config.json").write_text(json.dumps({"plugins": {"file": {"shared": True}}}))
    common = {
        "project_path": project,
        "data_dir": project / ".memora" / "data",
        "config_dir": user,
        "provider": ScriptedProvider([]),
    }
    async with ProjectRuntime(**common, load_entrypoints=False, project_lock_shared=True):
        async with ProjectRuntime(**common, load_entrypoints=False, project_lock_shared=True):
            pass  # two workers of a service
        with pytest.raises(ProjectLockedError):
            await ProjectRuntime(**common, load_entrypoints=False).open()
    async with ProjectRuntime(**common, load_entrypoints=False):
        with pytest.raises(ProjectLockedError):
            await ProjectRuntime(**common, load_entrypoints=False).open()
