"""A typed turn through memora-plugin-openai against a scripted OpenAI-compatible server on
127.0.0.1: the strict ``json_schema`` response format on the wire, a result that does not
validate sent back with pydantic's error (two requests), and a server that refuses the format
(asked again without it, never sent it again)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from memora import Agent
from memora_plugin_openai import OpenAIProvider

from .fault_server import FaultServer, sse_chunk, status_scenario, stream_scenario
from .test_openai_faults import server  # noqa: F401 - the scripted server fixture


class Ticket(BaseModel):
    title: str = Field(description="One line saying what is wrong")
    severity: int = Field(ge=1, le=4, description="1 is the most urgent")


def answer(text: str) -> list[bytes]:
    return [
        sse_chunk({"role": "assistant", "content": text}),
        sse_chunk(finish="stop"),
        sse_chunk(usage={"prompt_tokens": 30, "completion_tokens": 9}),
    ]


async def _agent(tmp_path: Path, server: FaultServer) -> Agent:  # noqa: F811
    project = tmp_path / "p"
    project.mkdir(exist_ok=True)
    config = tmp_path / "config"
    pack = config / "role-packs" / "plain"
    pack.mkdir(parents=True, exist_ok=True)
    (pack / "manifest.json").write_text(
        json.dumps(
            {
                "name": "plain",
                "formatVersion": "1.0.0",
                "strategy": {"act": {"toolMode": "block"}, "reflect": {"summary": "off"}},
            }
        ),
        encoding="utf-8",
    )
    provider = OpenAIProvider(model="m", base_url=server.url, stall_timeout=2.0)
    agent = Agent(
        project_path=project,
        data_dir=tmp_path / "data",
        provider=provider,
        config_dir=config,
        active_role_pack="plain",
        load_entrypoints=False,
        retry_base_delay=0.01,
    )
    return await agent.init()


async def test_the_schema_goes_on_the_wire_and_a_bad_result_comes_back(
    tmp_path: Path,
    server: FaultServer,  # noqa: F811
) -> None:
    server.script = [
        stream_scenario(answer('{"title": "login fails", "severity": 9}')),
        stream_scenario(answer('{"title": "login fails", "severity": 1}')),
    ]
    agent = await _agent(tmp_path, server)
    try:
        ticket = await agent.run("Users cannot log in", output_type=Ticket)
    finally:
        await agent.close()
    assert ticket == Ticket(title="login fails", severity=1)
    assert len(server.requests) == 2
    first, second = (r["body"] for r in server.requests)
    fmt = first["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "Ticket"
    assert fmt["json_schema"]["strict"] is True
    schema: dict[str, Any] = fmt["json_schema"]["schema"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["severity"]["description"] == "1 is the most urgent"
    retry = second["messages"][-1]
    assert retry["role"] == "user" and "severity" in retry["content"]
    assert "less than or equal to 4" in retry["content"]


async def test_a_server_that_refuses_the_format_is_asked_again_without_it(
    tmp_path: Path,
    server: FaultServer,  # noqa: F811
) -> None:
    refusal = b'{"error": {"message": "Unrecognized request argument: response_format"}}'
    server.script = [
        status_scenario(400, refusal),
        stream_scenario(answer('```json\n{"title": "disk full", "severity": 2}\n```')),
        stream_scenario(answer('{"title": "disk still full", "severity": 2}')),
    ]
    agent = await _agent(tmp_path, server)
    try:
        first = await agent.run("The disk is full", output_type=Ticket)
        again = await agent.run("And now?", output_type=Ticket)
    finally:
        await agent.close()
    assert first.severity == 2 and again.title == "disk still full"
    bodies = [r["body"] for r in server.requests]
    assert "response_format" in bodies[0]
    assert all("response_format" not in b for b in bodies[1:])  # remembered
    # the shape still reached the model, in the prompt
    assert "severity" in bodies[1]["messages"][0]["content"]
