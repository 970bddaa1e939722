"""A fresh-eyed hostile review of #68 item 2 (one user's tools never see another user's data):
the reaper's ``--hide`` attacked from inside, by a command that tries to take the hiding off.

Found: when memora runs as root (a container's default), the command ran as root of its own
user namespace with every capability, and the empty folder over memora's data was a mount of
that namespace — ``umount`` took it off and ``cat`` read alice's session log.  The reaper now
empties the capability bounding set before the command starts.  When memora is not root here,
the test runs it as root of a user namespace of its own (``unshare --map-root-user``), which is
what a root memora looks like to the kernel, so the door is tried either way."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces"),
    pytest.mark.skipif(shutil.which("umount") is None, reason="util-linux is missing"),
]

SECRET = "otter-2718-kestrel"

ATTACK = """
umount {hidden} 2>&1; echo umount=$?
umount -l {hidden} 2>&1; echo lazy=$?
mkdir -p {scratch}/root && mount --bind / {scratch}/root 2>&1; echo bind=$?
cat {scratch}/root{hidden}/log.jsonl 2>&1
unshare --user --map-root-user --mount sh -c 'umount {hidden}; cat {hidden}/log.jsonl' 2>&1
cat /proc/{outside}/root{hidden}/log.jsonl 2>&1
cat /proc/{outside}/environ 2>&1
cat {hidden}/log.jsonl 2>&1; echo end
"""


def _as_root() -> list[str]:
    """How to start memora as root: as it is, or as root of a user namespace of its own."""
    if os.geteuid() == 0:
        return []
    if shutil.which("unshare") is None:
        pytest.skip("util-linux's unshare is missing")
    return ["unshare", "--user", "--map-root-user"]


def test_a_command_cannot_take_the_hiding_off_even_as_root(tmp_path: Path) -> None:
    hidden = tmp_path / "data"
    hidden.mkdir()
    (hidden / "log.jsonl").write_text(f'{{"said": "{SECRET}"}}\n')
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # a process of memora's user outside the command's namespaces, holding a secret in its
    # environment: what a worker supervisor or the user's own shell is to the command
    outside = subprocess.Popen(["sleep", "60"], env={"SECRET_TOO": SECRET})
    try:
        attack = ATTACK.format(hidden=hidden, scratch=scratch, outside=outside.pid)
        program = textwrap.dedent(
            f"""
            import asyncio
            from pathlib import Path
            from memora.tools.process import run_process

            async def main():
                done = await run_process({attack!r}, cwd=Path({str(tmp_path)!r}), timeout=60,
                                         hide=[Path({str(hidden)!r})])
                print(done.output)

            asyncio.run(main())
            """
        )
        ran = subprocess.run(
            [*_as_root(), sys.executable, "-c", program],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        outside.kill()
        outside.wait()
    said = ran.stdout + ran.stderr
    assert said.rstrip().endswith("end"), said  # the command ran to its end
    assert SECRET not in said, said
    assert "umount=0" not in said and "lazy=0" not in said and "bind=0" not in said, said
    assert (hidden / "log.jsonl").read_text().count(SECRET) == 1  # untouched outside
