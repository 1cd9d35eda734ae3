"""The library README's example runs as written, with the real a2a-sdk: the receiver's check
accepts the offer and the sender's check accepts the signed ``accepted``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from handoff_context import Outcome

README = Path(__file__).resolve().parents[1] / "lib" / "handoff-context" / "README.md"


def example() -> str:
    text = README.read_text()
    section = text[text.index("## Example") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's example is a python code block"
    return match.group(1)


def test_the_example_signs_carries_checks_and_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    code = example()
    assert "from a2a.types" in code  # built with the real SDK, not by hand
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(code, str(README), "exec"), namespace)
    verdict, check = namespace["verdict"], namespace["check"]
    assert getattr(verdict, "outcome", None) is Outcome.ACCEPT
    assert getattr(check, "outcome", None) is Outcome.ACCEPT
    assert getattr(check, "element", None) == "status"
    assert capsys.readouterr().out == "accept accepted\n"


def _block(heading: str) -> str:
    text = README.read_text()
    section = text[text.index(heading) :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, f"{heading} holds a python code block"
    return match.group(1)


def test_the_keys_and_memory_block_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from handoff_context import FileState, Signer

    monkeypatch.chdir(tmp_path)
    saved = Signer.generate("spiffe://a.example/agent/planner").save(tmp_path / "k.jwk")
    monkeypatch.setenv("HANDOFF_SIGNING_KEY", str(saved))
    namespace: dict[str, object] = {"__name__": "readme_keys"}
    exec(compile(_block("## An agent's keys and memory"), str(README), "exec"), namespace)
    state = namespace["state"]
    assert isinstance(state, FileState)
    state.close()
    assert state.path.parent == Path(".handoff-state")
    assert "spiffe://a.example/agent/planner" in capsys.readouterr().out


def test_every_install_line_names_what_the_repository_builds() -> None:
    """Nothing is published under ``handoff-context``: each ``pip install`` line in the two
    READMEs installs a path of the checkout or a built wheel (issue 19 item 8)."""
    root = README.parents[2] / "README.md"
    lines = [
        line
        for path in (root, README)
        for line in path.read_text().splitlines()
        if re.match(r"\s*(\S*/)?pip install ", line)
    ]
    assert len(lines) >= 5
    for line in lines:
        target = line.split("pip install", 1)[1].split("#", 1)[0].strip().strip("'\"")
        assert target.startswith(("./", "dist/", "/")) or ".whl" in target, line


def _blocks(heading: str) -> list[str]:
    text = README.read_text()
    section = text[text.index(heading) :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_three_line_integrations_run_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README opens with three lines per SDK (issue 19): they build the real wrappers."""
    import json

    from a2a.client import ClientConfig, ClientFactory
    from a2a.server.tasks import InMemoryTaskStore
    from handoff_context import Agent, Signer, TrustStore, trust_document
    from handoff_context.a2a import HandoffClient, HandoffRequestHandler
    from handoff_context.mcp import HandoffMcpClient, HandoffMiddleware
    from mcp.client.client import Client as McpClient
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.mcpserver import MCPServer

    from tests.live.agents import Worker, card

    monkeypatch.chdir(tmp_path)
    signers = [Signer.generate(f"spiffe://x.example/agent/{n}") for n in ("coder", "tool")]
    for signer in signers:
        signer.save(tmp_path / "keys" / f"{signer.iss.rsplit('/', 1)[-1]}.jwk")
    (tmp_path / "trust.json").write_text(json.dumps(trust_document(signers)))
    a2a_block, mcp_block = _blocks("## Agents in three lines")
    assert len(a2a_block.strip().splitlines()) == len(mcp_block.strip().splitlines()) == 3
    common = {"Agent": Agent, "Signer": Signer, "TrustStore": TrustStore, "reporter": None}
    a2a_names = {
        **common,
        "HandoffRequestHandler": HandoffRequestHandler,
        "HandoffClient": HandoffClient,
        "CoderExecutor": Worker,
        "InMemoryTaskStore": InMemoryTaskStore,
        "card": card("http://coder/"),
        "ClientFactory": ClientFactory,
        "config": ClientConfig(),
        "PLANNER_ID": "spiffe://x.example/agent/planner",
    }
    exec(compile(a2a_block, str(README), "exec"), a2a_names)
    assert isinstance(a2a_names["handler"], HandoffRequestHandler)
    assert isinstance(a2a_names["planner"], HandoffClient)
    a2a_names["agent"].state.close()  # type: ignore[attr-defined]
    mcp_names = {
        **common,
        "MCPServer": MCPServer,
        "HandoffMiddleware": HandoffMiddleware,
        "HandoffMcpClient": HandoffMcpClient,
        "McpClient": McpClient,
        "transport": streamable_http_client("http://127.0.0.1:9/mcp"),
        "TOOL_ID": "spiffe://x.example/tool/builder",
    }
    exec(compile(mcp_block, str(README), "exec"), mcp_names)
    server = mcp_names["server"]
    assert any(isinstance(m, HandoffMiddleware) for m in server.middleware)  # type: ignore[attr-defined]
    assert isinstance(mcp_names["tool"], HandoffMcpClient)
    mcp_names["agent"].state.close()  # type: ignore[attr-defined]
