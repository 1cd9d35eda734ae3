"""The tool: an MCP Streamable HTTP server with one tool, ``build``."""

from __future__ import annotations

from common import SERVICE, TOKEN, TOOL, TRUST, key, serve
from handoff_context import Agent, Signer, TrustStore
from handoff_context.mcp import HandoffMiddleware
from handoff_context.reporter import Reporter
from mcp.server.mcpserver import MCPServer

reporter = Reporter(SERVICE, TOKEN, receiver=TOOL)  # handoff
agent = Agent(Signer.load(key("tool")), TrustStore.load(TRUST), reporter=reporter)  # handoff
server = MCPServer("builder", middleware=[HandoffMiddleware(agent)])  # handoff


@server.tool()
def build(target: str) -> str:
    return f"built {target}"


if __name__ == "__main__":
    serve(server.streamable_http_app(), "tool")
