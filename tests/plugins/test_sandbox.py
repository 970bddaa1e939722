"""memora-plugin-sandbox against hostile snippets: each test is something a model (or a prompt
injection) could try, run for real in a subprocess."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memora.errors import PluginError, ToolError, ToolErrorCode
from memora.plugins import create_plugin_manager

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

from memora_plugin_sandbox import SubprocessSandbox  # noqa: E402

MODES = ["auto", "host"] if os.geteuid() == 0 else ["auto"]


@pytest.fixture(params=MODES)
def sandbox(request: pytest.FixtureRequest) -> SubprocessSandbox:
    return SubprocessSandbox(user=request.param, memory_mb=256, max_output=20_000)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state != b"Z"
    except OSError:
        return False


async def test_runs_python_and_shell_and_reports_isolation(sandbox: SubprocessSandbox) -> None:
    r = await sandbox.execute("print(6 * 7)")
    assert r.exit_code == 0 and r.stdout.strip() == "42"
    assert r.isolation and "limits" in r.isolation
    r = await sandbox.execute("echo 中文 $((6 * 7))", language="shell")
    assert r.exit_code == 0 and r.stdout.strip() == "中文 42"
    with pytest.raises(ToolError) as info:
        await sandbox.execute("puts 1", language="ruby")
    assert info.value.code == ToolErrorCode.NOT_AVAILABLE


async def test_secrets_in_the_environment_do_not_reach_the_snippet(
    sandbox: SubprocessSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-very-secret")
    monkeypatch.setenv("HARMLESS", "visible-to-memora-only")
    r = await sandbox.execute(
        "import os\nprint(os.environ)\n"
        "print(open(f'/proc/{os.getppid()}/environ', 'rb').read() if os.path.exists("
        "f'/proc/{os.getppid()}/environ') else '')"
    )
    assert "very-secret" not in r.stdout + r.stderr
    assert "HARMLESS" not in r.stdout


async def test_the_network_is_unreachable(sandbox: SubprocessSandbox) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    accepted: list[object] = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    try:
        r = await sandbox.execute(
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
            "print('connected')"
        )
        assert "connected" not in r.stdout and r.exit_code != 0
        assert "no network" in (r.isolation or "")
        await asyncio.sleep(0.2)
        assert accepted == []
    finally:
        server.close()


async def test_sleeping_past_the_timeout_is_killed(sandbox: SubprocessSandbox) -> None:
    started = time.monotonic()
    r = await sandbox.execute("import time\nprint('start', flush=True)\ntime.sleep(60)", timeout=1)
    assert r.timed_out and "start" in r.stdout
    assert time.monotonic() - started < 8


async def test_a_fork_bomb_is_contained_and_cleaned_up(sandbox: SubprocessSandbox) -> None:
    started = time.monotonic()
    r = await sandbox.execute(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        timeout=2,
    )
    assert r.timed_out or r.exit_code != 0
    assert time.monotonic() - started < 20
    await asyncio.sleep(0.2)
    # nothing of it is left running: no process of the machine runs our bomb's script
    leftovers = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if b"memora-sandbox-" in cmd and alive(int(entry)):
                leftovers.append(entry)
    assert leftovers == []


async def test_a_daemon_that_escapes_its_session_is_killed(sandbox: SubprocessSandbox) -> None:
    r = await sandbox.execute(
        "import os, sys, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.setsid()\n"
        "    if os.fork():\n"
        "        os._exit(0)\n"
        "    print(os.getpid(), flush=True)\n"
        "    time.sleep(120)\n"
        "    sys.exit(0)\n"
        "time.sleep(0.5)\n",
        timeout=10,
    )
    pid = int(r.stdout.split()[0])
    await asyncio.sleep(0.3)
    assert not alive(pid)


async def test_a_memory_hog_fails_inside_its_limit(sandbox: SubprocessSandbox) -> None:
    r = await sandbox.execute("x = bytearray(2 * 1024 ** 3)\nprint('allocated')", timeout=10)
    assert r.exit_code != 0 and "allocated" not in r.stdout
    assert "MemoryError" in r.stderr


async def test_infinite_output_is_capped_and_stopped(sandbox: SubprocessSandbox) -> None:
    started = time.monotonic()
    r = await sandbox.execute("while True:\n    print('y' * 1000)", timeout=20)
    assert r.truncated and len(r.stdout) <= 20_000
    assert time.monotonic() - started < 10  # stopped at the cap, not at the timeout


async def test_a_huge_file_is_refused_by_the_file_size_limit() -> None:
    sandbox = SubprocessSandbox(file_size_mb=1)
    r = await sandbox.execute(
        "import os\nwith open('big', 'wb') as f:\n    f.write(b'x' * (5 * 1024 * 1024))\nprint('wrote')",
        timeout=10,
    )
    assert r.exit_code != 0 and "wrote" not in r.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="dedicated uids need root")
async def test_a_dedicated_uid_cannot_read_the_hosts_files(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret", encoding="utf-8")
    secret.chmod(0o600)
    r = await SubprocessSandbox(user="dedicated").execute(f"print(open({str(secret)!r}).read())")
    assert "host secret" not in r.stdout and "PermissionError" in r.stderr
    assert "dedicated uid" in (r.isolation or "")


def test_options_are_checked() -> None:
    plugins = create_plugin_manager()
    with pytest.raises(PluginError, match="unknown sandbox option"):
        plugins.create("code_executor", "sandbox", {"memroy_mb": 1})
    with pytest.raises(PluginError, match="secret-named"):
        plugins.create("code_executor", "sandbox", {"env": {"API_TOKEN": "x"}})
    with pytest.raises(PluginError, match='"off" or "on"'):
        plugins.create("code_executor", "sandbox", {"network": "maybe"})


@pytest.fixture
def no_netns(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import memora_plugin_sandbox.sandbox as module

    monkeypatch.setattr(module, "_probe_network_isolation", lambda flags: False)
    yield


async def test_require_isolation_refuses_where_the_network_cannot_be_cut(no_netns: None) -> None:
    sandbox = SubprocessSandbox(require_isolation=True)
    with pytest.raises(ToolError) as info:
        await sandbox.execute("print(1)")
    assert info.value.code == ToolErrorCode.NOT_AVAILABLE
    r = await SubprocessSandbox().execute("print(1)")  # without it: runs, and says so
    assert r.stdout.strip() == "1" and "network NOT isolated" in (r.isolation or "")


def _unix_server(folder: Path) -> tuple[socket.socket, Path]:
    """A listening Unix socket anyone may connect to, as a local database's is."""
    path = folder / "db.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    os.chmod(folder, 0o755)
    os.chmod(path, 0o777)
    return server, path


async def test_no_network_covers_unix_sockets(sandbox: SubprocessSandbox, tmp_path: Path) -> None:
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"memora-sock-{os.getpid()}-{id(tmp_path)}"
    folder.mkdir()
    server, path = _unix_server(folder)
    snippet = (
        "import socket\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"s.connect({str(path)!r})\n"
        "print('connected')\n"
    )
    try:
        r = await sandbox.execute(snippet, timeout=10)
        assert "connected" not in r.stdout and "Permission denied" in r.stderr, r
        assert "no Unix sockets" in (r.isolation or "")
        # the snippet's own plumbing still works (asyncio's self-pipe is a socketpair)
        r = await sandbox.execute("import asyncio\nasyncio.run(asyncio.sleep(0))\nprint('ok')")
        assert r.stdout.strip() == "ok", r.stderr
        # with the network on (the user's choice), the socket is reachable: the filter was it
        opened = SubprocessSandbox(user=sandbox_user(sandbox), network="on")
        r = await opened.execute(snippet, timeout=10)
        assert r.stdout.strip() == "connected", r.stderr
    finally:
        server.close()
        path.unlink()
        folder.rmdir()


def sandbox_user(sandbox: SubprocessSandbox) -> str:
    return "auto" if sandbox.dedicated or not sandbox.root else "host"


async def test_the_memory_limit_holds_for_the_whole_run(sandbox: SubprocessSandbox) -> None:
    """Six forked children of 100 MB each under a 256 MB limit: per process each fits; for the
    run as a whole they cannot all live."""
    r = await sandbox.execute(
        "import os, time\n"
        "kids = []\n"
        "for _ in range(6):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        b = bytearray(100 * 1024 * 1024)\n"
        "        for i in range(0, len(b), 4096): b[i] = 1\n"
        "        time.sleep(1.5)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "print(sum(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) == 0 for p in kids))\n",
        timeout=30,
    )
    if "per process" in (r.isolation or ""):
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"no memory cgroup could be created here: {r.isolation}")
        pytest.skip(f"no memory cgroup on this machine: {r.isolation}")
    assert "for the whole run (cgroup)" in (r.isolation or "")
    survivors = int(r.stdout.strip() or 0)
    assert survivors <= 2, (survivors, r.stderr)


HOST_WITH_A_KEY = """
import asyncio, json, os, sys
from memora_plugin_sandbox import SubprocessSandbox

SNIPPET = '''
import os
found = []
pid = os.getpid()
while pid > 1:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            if b"sk-the-users-key" in fh.read():
                found.append(pid)
    except OSError:
        pass
    with open(f"/proc/{pid}/stat") as fh:
        pid = int(fh.read().rsplit(")", 1)[1].split()[1])
print("FOUND" if found else "none")
'''

async def main():
    r = await SubprocessSandbox(user="host").execute(SNIPPET)
    print(json.dumps({"out": r.stdout.strip(), "err": r.stderr, "isolation": r.isolation}))

asyncio.run(main())
"""


def test_host_user_mode_cannot_read_memoras_api_key(tmp_path: Path) -> None:
    import json
    import subprocess

    script = tmp_path / "host.py"
    script.write_text(HOST_WITH_A_KEY, encoding="utf-8")
    r = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "OPENAI_API_KEY": "sk-the-users-key"},
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout.splitlines()[-1])
    assert doc["out"] == "none", doc


COUNT_FORKS = """
import os, time
n = 0
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(3)
        os._exit(0)
    n += 1
print("forked", n)
"""


async def test_max_processes_holds_and_the_isolation_says_how(sandbox: SubprocessSandbox) -> None:
    """#43: as root in host-user mode RLIMIT_NPROC binds nothing (200 forks went through where
    max_processes was 20, and the result said "20 processes"); a pids cgroup holds the whole run
    to it, and where none can be made the isolation line says processes are not bounded."""
    small = SubprocessSandbox(user=sandbox_mode(sandbox), memory_mb=256, max_processes=20)
    r = await small.execute(COUNT_FORKS, timeout=20)
    forked = int(r.stdout.split()[-1])
    line = r.isolation
    if "NOT bounded" in line:
        assert os.geteuid() == 0, line
    else:
        assert forked < 20, (forked, line)
        assert "20 processes" in line


def sandbox_mode(sandbox: SubprocessSandbox) -> str:
    return "host" if not sandbox.dedicated else "auto"
