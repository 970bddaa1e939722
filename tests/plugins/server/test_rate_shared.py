"""#43 item 3: the workers of one server draw on one rate-limit allowance.  Each worker kept its
own buckets, so ``--workers N`` was N allowances and a caller whose connections landed on
another worker started afresh.  The buckets now live in a file every worker maps
(``memora_plugin_server.ratelimit``)."""

from __future__ import annotations

import math
import os
import stat
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memora.testing import ScriptedProvider, text
from memora_plugin_server import create_app
from memora_plugin_server.config import ServerSettings
from memora_plugin_server.ratelimit import SLOTS, RateFile, SharedBuckets

from .conftest import project_dir, scripted

_TAKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from memora_plugin_server.ratelimit import RateFile, SharedBuckets

    path, per_minute, burst, tries, start = sys.argv[1:]
    buckets = SharedBuckets(RateFile(Path(path)), "requests", int(per_minute), burst=float(burst))
    while time.time() < float(start):  # both processes begin together
        pass
    began = time.monotonic()
    granted = sum(1 for _ in range(int(tries)) if buckets.take("alice") == 0.0)
    print(granted, time.monotonic() - began)
    """
)


def _takers(
    path: Path, per_minute: int, burst: float, tries: int, n: int
) -> list[tuple[int, float]]:
    start = str(time.time() + 1.0)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _TAKER,
                str(path),
                str(per_minute),
                str(burst),
                str(tries),
                start,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    out = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        granted, seconds = stdout.split()
        out.append((int(granted), float(seconds)))
    return out


def test_two_processes_at_once_share_one_bucket(tmp_path: Path) -> None:
    # a burst of 500 refilled at one a second; each process asks 400 times at the same moment:
    # one allowance grants ~500 in all (two would grant 800; a lost update, more than 500)
    runs = _takers(tmp_path / "rate", 60, 500, 400, 2)
    granted = sum(g for g, _ in runs)
    longest = max(s for _, s in runs)
    assert 500 <= granted <= 500 + math.ceil(longest) + 1, runs


def test_one_process_after_another_finds_the_bucket_spent(tmp_path: Path) -> None:
    path = tmp_path / "rate"
    first = _takers(path, 60, 10, 10, 1)
    second = _takers(path, 60, 10, 10, 1)
    assert first[0][0] == 10
    assert second[0][0] <= 3, second  # one a second refilled while the second started


def test_the_rate_file_is_private_and_not_a_link(tmp_path: Path) -> None:
    path = tmp_path / "rate"
    path.write_bytes(b"not a rate file")
    path.chmod(0o644)
    file = RateFile(path)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert SharedBuckets(file, "requests", 60).take("bob") == 0.0  # begun afresh
    finally:
        file.close()
    link = tmp_path / "link"
    link.symlink_to(path)
    with pytest.raises(OSError):
        RateFile(link)
    assert not (tmp_path / "folder").exists()
    RateFile(tmp_path / "folder" / "rate").close()  # its folder is made, private
    assert stat.S_IMODE((tmp_path / "folder").stat().st_mode) == 0o700


def test_a_slot_that_makes_no_sense_reads_as_a_full_bucket(tmp_path: Path) -> None:
    path = tmp_path / "rate"
    file = RateFile(path)
    buckets = SharedBuckets(file, "requests", 60)  # bursts of 10
    try:
        assert [buckets.take("carol") for _ in range(10)] == [0.0] * 10
        assert buckets.take("carol") > 0
        # a torn write: every level not a number, every time in the future
        data = bytearray(path.read_bytes())
        header = len(data) - SLOTS * 24
        for slot in range(SLOTS):
            at = header + slot * 24
            if data[at : at + 8] != bytes(8):
                data[at + 8 : at + 24] = struct.pack("<dd", float("nan"), 1e18)
        path.write_bytes(bytes(data))
        reread = SharedBuckets(RateFile(path), "requests", 60)
        assert reread.take("carol") == 0.0
    finally:
        file.close()


def test_many_callers_never_fill_the_file(tmp_path: Path) -> None:
    file = RateFile(tmp_path / "rate")
    buckets = SharedBuckets(file, "requests", 60)
    try:
        for n in range(3 * SLOTS):
            assert buckets.take(f"caller-{n}") == 0.0
        # a new caller still has its whole burst, and the last ones are still counted
        assert [buckets.take("newcomer") for _ in range(10)] == [0.0] * 10
        assert buckets.take("newcomer") > 0
        assert os.path.getsize(tmp_path / "rate") < 200_000
    finally:
        file.close()


async def test_two_apps_on_one_rate_file_are_one_allowance(tmp_path: Path) -> None:
    """What two workers do, through the public seam (``create_app(rate_file=)``): the second
    app refuses the caller the first one spent the allowance of."""
    project = project_dir(tmp_path)
    settings = ServerSettings(rate_limit_per_minute=60)
    rate = tmp_path / "serve.rate"

    def app() -> Any:
        opts = scripted(tmp_path, ScriptedProvider([], default=text("hi")))
        return create_app(project, settings=settings, shared=True, rate_file=rate, **opts)

    one, two = app(), app()

    def client(target: Any) -> httpx2.AsyncClient:
        transport = httpx2.ASGITransport(app=target, client=("127.0.0.1", 4242))
        return httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1")

    async with (
        one.router.lifespan_context(one),
        two.router.lifespan_context(two),
        client(one) as first,
        client(two) as second,
    ):
        assert [(await first.get("/v1/projects")).status_code for _ in range(10)] == [200] * 10
        refused = await second.get("/v1/projects")
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "RATE_LIMITED"
    # without a shared file each app counts alone (one process, as before)
    alone = create_app(
        project,
        settings=settings,
        **scripted(tmp_path, ScriptedProvider([], default=text("hi"))),
    )
    async with alone.router.lifespan_context(alone), client(alone) as third:
        assert (await third.get("/v1/projects")).status_code == 200
