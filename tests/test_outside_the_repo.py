"""memora as a user gets it: wheels built, installed with plain pip into a fresh virtualenv.

The kernel and the pure-Python plugins are built as wheels, next to a third-party plugin kept in
``tests/thirdparty/memora-plugin-acme`` (a storage backend, a pre-execution check, a tool and a
web search, written from docs/plugins.md).  Everything below runs in the new environment, through
its own ``memora`` command and its own Python: nothing from this workspace is on its path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.core.conftest import endpoint  # noqa: F401  (a fixture shared with tests/core)

pytestmark = pytest.mark.slow

ACME = REPO / "tests" / "thirdparty" / "memora-plugin-acme"
SOURCES = [
    REPO,
    REPO / "plugins" / "memora-plugin-openai",
    REPO / "plugins" / "memora-plugin-fetch",
]


def _uv() -> str:
    for candidate in (
        os.environ.get("UV"),
        shutil.which("uv"),
        str(REPO / ".tools" / "bin" / "uv"),
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail("uv is needed to build the wheels; `make test` installs it")


@dataclass
class Env:
    root: Path
    wheels: dict[str, Path]
    home: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def run(
        self, *args: str, cwd: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(self.home),
            "MEMORA_HOME": str(self.home / "memora"),
            "XDG_CACHE_HOME": str(self.home / "cache"),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PYTHONNOUSERSITE": "1",
        }
        if "PIP_CACHE_DIR" in os.environ:
            env["PIP_CACHE_DIR"] = os.environ["PIP_CACHE_DIR"]
        else:  # share pip's download cache with the user, so a second run downloads nothing
            env["PIP_CACHE_DIR"] = str(Path.home() / ".cache" / "pip")
        proc = subprocess.run(
            list(args),
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=900,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def memora(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.bin / "memora"), *args, check=check)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    base = tmp_path_factory.mktemp("outside")
    wheelhouse = base / "wheels"
    uv = _uv()
    for source in [*SOURCES, ACME]:
        subprocess.run(
            [uv, "build", "--wheel", "--quiet", "--out-dir", str(wheelhouse), str(source)],
            check=True,
            capture_output=True,
            timeout=600,
        )
    wheels = {p.name.split("-")[0]: p for p in wheelhouse.glob("*.whl")}
    assert set(wheels) == {
        "memora_kernel",
        "memora_plugin_openai",
        "memora_plugin_fetch",
        "memora_plugin_acme",
    }, wheels
    python = getattr(sys, "_base_executable", sys.executable)
    root = base / "venv"
    subprocess.run([python, "-m", "venv", str(root)], check=True, timeout=300)
    home = base / "home"
    home.mkdir()
    e = Env(root, wheels, home)
    e.run(
        str(e.bin / "pip"),
        "install",
        "--quiet",
        f"{wheels['memora_kernel']}[testing]",
        str(wheels["memora_plugin_openai"]),
        str(wheels["memora_plugin_fetch"]),
    )
    yield e


HOST = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    from memora import Agent
    from memora.testing import ScriptedProvider, text, tool_call

    project, config = Path(sys.argv[1]), Path(sys.argv[2])

    async def main():
        provider = ScriptedProvider([
            tool_call(
                ("acme_shout", {"words": "hello"}),
                ("web_search", {"query": "memora"}),
                ("write_file", {"path": "secret-plan.txt", "content": "x"}),
            ),
            text("All done."),
            text("TYPE: decision\\nThe user asked acme to shout hello and search for memora."),
        ])
        async with Agent(
            project_path=project, data_dir=project / ".memora" / "data", provider=provider,
            config_dir=config, active_role_pack="searcher", summary_verbatim_tokens=0,
        ) as agent:
            chunks = [c async for c in agent.chat("Shout, search, then write the plan")]
            sent = sorted(s.name for s in provider.requests[0].tools)
            results = {
                c.name: {"ok": c.ok, "blocked": c.blocked, "summary": c.summary}
                for c in chunks if c.type == "tool_result"
            }
            owner = agent.tools.owner("acme_shout")
            storage = agent.settings.storage
        print(json.dumps({"last": chunks[-1].type, "sent": sent, "results": results,
                          "owner": owner, "storage": storage}))

    asyncio.run(main())
    """
)

CONFORMANCE = textwrap.dedent(
    """
    from pathlib import Path

    from memora.testing.storage_conformance import StorageConformance
    from memora_plugin_acme import AcmeStorage


    class TestAcme(StorageConformance):
        persistent = True

        async def open_storage(self, path: Path) -> AcmeStorage:
            return AcmeStorage(path / "acme.jsonl")
    """
)


def test_installed_by_name_configured_by_file(env: Env, tmp_path: Path) -> None:
    # installing a plugin through memora itself, like `llm install`
    r = env.memora("install", str(env.wheels["memora_plugin_acme"]))
    assert r.returncode == 0
    # it says what the plugin adds and that a capability tool needs the pack's capability
    assert (
        "acme: web_search acme-search — the tool web_search appears only for role packs that "
        "declare the capability 'web:search'"
    ) in r.stdout, r.stdout
    doc = json.loads(env.memora("plugins", "--json").stdout)
    plugins = {p["name"]: p for p in doc["plugins"]}
    assert doc["failures"] == []
    assert plugins["acme"]["distribution"] == "memora-plugin-acme"
    assert plugins["acme"]["provides"] == {
        "storage": ["acme"],
        "tool": ["acme_shout"],
        "web_search": ["acme-search"],
    }
    assert "pre_execution_check" in plugins["acme"]["hooks"]
    assert {"openai", "fetch"} <= set(plugins)
    assert env.memora("plugins", "--check").returncode == 0

    # a project that selects the plugin's storage by file
    project = tmp_path / "project"
    (project / ".memora").mkdir(parents=True)
    (project / ".memora" / "config.json").write_text(
        json.dumps({"storage": "acme", "plugins": {"acme": {"file_name": "team.jsonl"}}})
    )
    config = tmp_path / "config"
    pack = config / "role-packs" / "searcher"
    pack.mkdir(parents=True)
    (pack / "manifest.json").write_text(
        json.dumps(
            {
                "name": "searcher",
                "formatVersion": "1.0.0",
                "capabilities": [{"capability": "web:search"}],
            }
        )
    )
    shown = json.loads(env.memora("config", "show", "--project", str(project), "--json").stdout)
    assert shown["settings"]["storage"] == "acme"
    assert shown["origins"]["storage"].startswith("project config ")
    assert shown["origins"]["plugins.acme.file_name"].startswith("project config ")

    host = tmp_path / "host.py"
    host.write_text(HOST, encoding="utf-8")
    out = json.loads(env.run(str(env.bin / "python"), str(host), str(project), str(config)).stdout)
    assert out["last"] == "done" and out["storage"] == "acme" and out["owner"] == "acme"
    assert {"acme_shout", "web_search"} <= set(out["sent"])  # capability map exposed the search
    assert out["results"]["acme_shout"]["ok"]
    assert (
        out["results"]["web_search"]["ok"]
        and "2 results" in out["results"]["web_search"]["summary"]
    )
    blocked = out["results"]["write_file"]
    assert blocked["blocked"] and "acme policy" in blocked["summary"]
    assert not (project / "secret-plan.txt").exists()

    # the round summary went to the configured backend, and the CLI reads it from there
    stored = project / ".memora" / "data" / "team.jsonl"
    lines = [json.loads(x) for x in stored.read_text(encoding="utf-8").splitlines()]
    assert any("shout hello" in x["content"] for x in lines)
    stats = json.loads(env.memora("memory", "stats", "--project", str(project), "--json").stdout)
    assert stats["total"] == len(lines)
    found = env.memora("memory", "search", "shout", "--project", str(project), "--json").stdout
    assert json.loads(found)["results"]

    # a backend author runs the conformance suite with no pytest configuration at all
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_acme_conformance.py").write_text(CONFORMANCE, encoding="utf-8")
    r = env.run(str(env.bin / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=suite)
    assert " passed" in r.stdout and "error" not in r.stdout.lower(), r.stdout

    # uninstalling removes it cleanly; what needed it says so in one line
    env.memora("uninstall", "-y", "memora-plugin-acme")
    doc = json.loads(env.memora("plugins", "--json").stdout)
    assert "acme" not in {p["name"] for p in doc["plugins"]} and doc["failures"] == []
    r = env.memora("memory", "stats", "--project", str(project), check=False)
    assert r.returncode == 1 and "no storage named 'acme'" in r.stderr
    assert "Traceback" not in r.stderr
    assert (
        env.memora("memory", "stats", "--project", str(project), "--storage", "json").returncode
        == 0
    )


def test_python_dash_m_and_version(env: Env) -> None:
    r = env.run(str(env.bin / "python"), "-m", "memora", "--version")
    assert "memora" in r.stdout
    assert env.run(
        str(env.bin / "python"), "-c", "import memora, sys; print(memora.__file__)"
    ).stdout.startswith(str(env.root))


FETCH_HTML = textwrap.dedent(
    """
    import asyncio, json, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    PAGE = (
        "<html><head><title>Long-term memory</title></head><body><nav>menu</nav>"
        "<article><h1>Long-term memory</h1>"
        + "<p>memora keeps a summary of every round so that later turns can recall it. </p>" * 8
        + "</article><footer>footer</footer></body></html>"
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()

    async def main():
        from memora_plugin_fetch import HttpFetcher

        fetcher = HttpFetcher(allow=["127.0.0.0/8"])
        try:
            result = await fetcher.fetch(f"http://127.0.0.1:{httpd.server_address[1]}/a")
        finally:
            await fetcher.aclose()
        print(json.dumps({"title": result.title, "text": result.text}))

    asyncio.run(main())
    """
)


def test_fetch_extracts_an_html_page_as_installed_by_plain_pip(env: Env, tmp_path: Path) -> None:
    """trafilatura → justext → lxml.html.clean, a project of its own: pip 23.2 (Python 3.11's
    venv) did not install it through the extras, and the first HTML page failed."""
    script = tmp_path / "fetch_html.py"
    script.write_text(FETCH_HTML, encoding="utf-8")
    out = json.loads(env.run(str(env.bin / "python"), str(script)).stdout)
    assert "recall" in out["text"] and "menu" not in out["text"]
    pip = env.run(str(env.bin / "pip"), "--version").stdout
    assert pip.startswith("pip ")  # the venv's own pip did the installing


def test_providers_keys_and_models_from_the_wheels(
    env: Env,
    endpoint: tuple[str, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    """#41 item 1 as a user of the wheels does it: an endpoint, its key and its model by
    command, then `memora run` with no file written by hand, sending the stored key."""
    url, seen = endpoint
    project = tmp_path / "shop"
    project.mkdir()
    env.memora("providers", "add", "local", "--base-url", url, "--model", "qwen-7b")
    secret = "sk-from-the-wheels"
    env.run(
        "bash", "-c", f"printf '%s\\n' {secret} | {env.bin / 'memora'} keys set local", cwd=project
    )
    models = json.loads(env.memora("models", "--json").stdout)
    assert models["models"] == ["llama-3-8b", "qwen-7b"]
    ran = env.run(str(env.bin / "memora"), "run", "hello", cwd=project)
    assert "hello from the endpoint" in ran.stdout
    assert seen.auth[-1] == f"Bearer {secret}"
    assert secret not in env.memora("providers", "list").stdout
