"""Docs that run: every code block in README.md and docs/*.md is tried as written.

- ``python``: run as a script in a fresh folder (a README.md in it, its own MEMORA_HOME), offline;
  a block whose first line is a comment saying ``not run:`` (why) is only compiled, and one
  saying ``a fragment`` is compiled as the body of an ``async`` function (it continues the
  example before it, with ``agent`` in scope).
- ``bash`` / ``console``: every ``memora`` command in it is parsed by the real command line
  (an unknown command, option or choice fails), and a role pack it names must exist; a block
  whose first line says ``synopsis`` shows usage forms and is not parsed.
- ``json``: parsed (memora's configs allow comments) and, when it is a config, validated.
- ``toml``: parsed.

The marker is the block's own first line, so a reader sees why a block is not run.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.path.name}:{self.line}"

    @property
    def marker(self) -> str:
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        return first.lstrip("#/ ").strip().lower() if first.lstrip().startswith(("#", "//")) else ""


def _blocks() -> list[Block]:
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            out.append(Block(path, text[: m.start()].count("\n") + 1, m.group(1), m.group(2)))
    return out


BLOCKS = _blocks()


def _by(*langs: str) -> list[Block]:
    return [b for b in BLOCKS if b.lang in langs]


def test_there_are_docs_to_test() -> None:
    assert len(_by("python")) >= 10 and len(_by("bash", "console")) >= 5


@pytest.mark.parametrize("block", _by("python"), ids=lambda b: b.id)
def test_python_blocks_run(block: Block, tmp_path: Path) -> None:
    if block.marker.startswith("a fragment"):
        body = textwrap.indent(block.code, "    ")
        ast.parse(f"async def _example(agent):\n{body}", filename=block.id)
        return
    if block.marker.startswith("not run"):
        assert "not run:" in block.marker and len(block.marker) > len("not run: ") + 8, (
            f"{block.id}: say why it is not run"
        )
        compile(block.code, block.id, "exec")
        return
    (tmp_path / "README.md").write_text(
        "# A project\nA small command-line notes app.\n", encoding="utf-8"
    )
    script = tmp_path / "example.py"
    script.write_text(block.code, encoding="utf-8")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MEMORA_", "OPENAI_")) and k not in ("HTTP_PROXY", "HTTPS_PROXY")
    }
    env.update(
        {"MEMORA_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO / "tests" / "docs_support")}
    )
    r = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, (
        f"{block.id} failed as written:\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}"
    )
    if "hookimpl" in block.code:
        # a plugin: it must also work when an Agent uses it (a check whose body fails denies
        # every call: the old Audit example refused them all)
        r = subprocess.run(
            [sys.executable, "-c", USE_PLUGIN, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        assert r.returncode == 0, f"{block.id} as a plugin:\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}"


USE_PLUGIN = """
import asyncio, importlib.util, inspect, sys
from pathlib import Path
from memora import Agent
from memora.testing import ScriptedProvider, text, tool_call

spec = importlib.util.spec_from_file_location("example", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)

def is_impl(obj):
    return hasattr(obj, "memora_impl")

plugins = []
if any(is_impl(v) for v in vars(module).values()):
    plugins.append(module)
for value in vars(module).values():
    if inspect.isclass(value) and value.__module__ == "example":
        if any(is_impl(v) for v in vars(value).values()):
            plugins.append(value())
assert plugins, "no hook implementation found"

async def main():
    provider = ScriptedProvider([tool_call(("read_file", {"path": "README.md"})), text("ok")])
    async with Agent(project_path=".", data_dir=".memora/data", provider=provider,
                     plugins=plugins, load_entrypoints=False) as agent:
        chunks = [c async for c in agent.chat("read the README")]
    results = [c for c in chunks if c.type == "tool_result"]
    assert chunks[-1].type == "done", chunks[-1]
    assert results and results[0].ok, results[0].summary

asyncio.run(main())
"""


def _memora_commands(code: str) -> list[list[str]]:
    commands = []
    for raw in code.splitlines():
        line = raw.split(" #", 1)[0].strip()
        line = line.removeprefix("$ ").strip()
        for prefix in ("uv run ", ".venv/bin/", "~/memora-env/bin/"):
            line = line.removeprefix(prefix)
        if not line.startswith("memora "):
            continue
        commands.append(shlex.split(line)[1:])
    return commands


@pytest.mark.parametrize("block", _by("bash", "console"), ids=lambda b: b.id)
def test_shell_blocks_parse(block: Block) -> None:
    import click

    from memora.cli.main import cli

    if block.marker.startswith("synopsis"):
        return  # usage forms ([--option VALUE]), said so on the block's first line
    packs = {p.name for p in (REPO / "role_packs").iterdir() if p.is_dir()}
    for args in _memora_commands(block.code):
        try:
            cmd_ctx = cli.make_context("memora", list(args), resilient_parsing=False)
            sub: click.Context | None = cmd_ctx
            while sub is not None and isinstance(sub.command, click.Group):
                # click 8.2 keeps the subcommand's name apart ("protected"); 9.0 in args
                tokens = [*getattr(sub, "_protected_args", []), *sub.args]
                name, command, rest = sub.command.resolve_command(sub, tokens)
                assert command is not None, f"{block.id}: no command {name!r}"
                sub = command.make_context(name or "", rest, parent=sub)
        except click.exceptions.Exit:
            continue  # --help, --version
        except click.ClickException as exc:
            pytest.fail(f"{block.id}: `memora {shlex.join(args)}`: {exc.format_message()}")
        if "--role-pack" in args:
            name = args[args.index("--role-pack") + 1]
            if "--role-pack-dir" not in args:
                assert name in packs | {"assistant", "memora-default"}, (
                    f"{block.id}: role pack {name!r} is not one of the examples {sorted(packs)}"
                )


@pytest.mark.parametrize("block", _by("json"), ids=lambda b: b.id)
def test_json_blocks_parse(block: Block) -> None:
    from memora.config import MemoraConfig, strip_json_comments

    data = json.loads(strip_json_comments(block.code))
    if isinstance(data, dict) and set(data) & {"providers", "active_provider", "storage"}:
        MemoraConfig.model_validate(data)


@pytest.mark.parametrize("block", _by("toml"), ids=lambda b: b.id)
def test_toml_blocks_parse(block: Block) -> None:
    tomllib.loads(block.code)


def test_the_plugin_in_plugins_md_is_the_one_the_suite_installs() -> None:
    """docs/plugins.md shows tests/thirdparty/memora-plugin-acme as it is (the outside-the-repo
    test builds, installs and uses that plugin): what the page claims it provides, it does."""
    text = (REPO / "docs" / "plugins.md").read_text(encoding="utf-8")
    start = text.index("`memora_plugin_acme/__init__.py`")
    shown = FENCE.search(text, start)
    assert shown is not None
    source = (
        REPO / "tests" / "thirdparty" / "memora-plugin-acme" / "memora_plugin_acme" / "__init__.py"
    ).read_text(encoding="utf-8")
    assert shown.group(2) == source.split('"""', 2)[2].lstrip("\n")
