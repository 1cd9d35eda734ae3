"""What every example agent shares and that has nothing to do with handoffs: where things
are (the launcher, run.py, says it in environment variables), agent cards, serving."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import uvicorn
from a2a.server.request_handlers import RequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette

HOME = Path(os.environ.get("EXAMPLE_DIR", "var/example"))
KEYS = HOME / "keys"
TRUST = HOME / "trust.json"
SERVICE = os.environ.get("HANDOFF_TRACE_URL", "http://127.0.0.1:8000")
TOKEN = os.environ.get("HANDOFF_TRACE_TOKEN", "")

PLANNER = "spiffe://example.org/agent/planner"
CODER = "spiffe://example.org/agent/coder"
TOOL = "spiffe://example.org/tool/builder"
USER = "spiffe://example.org/agent/user"
AGENTS = {"planner": PLANNER, "coder": CODER, "tool": TOOL, "user": USER}


def key(name: str) -> Path:
    """Where agent ``name``'s key file is (run.py makes it)."""
    return KEYS / f"{name}.jwk"


def port(name: str) -> int:
    return int(os.environ[f"EXAMPLE_{name.upper()}_PORT"])


def url(name: str) -> str:
    return f"http://127.0.0.1:{port(name)}"


def card(name: str) -> AgentCard:
    return AgentCard(
        name=name,
        description=f"the example's {name}",
        version="1",
        default_input_modes=["text"],
        default_output_modes=["text"],
        capabilities=AgentCapabilities(streaming=True),
        skills=[AgentSkill(id="work", name="work", description="work", tags=["work"])],
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", url=url(name) + "/", protocol_version="1.0")
        ],
    )


def a2a_app(handler: RequestHandler, agent_card: AgentCard) -> Starlette:
    return Starlette(
        routes=[*create_agent_card_routes(agent_card), *create_jsonrpc_routes(handler, "/")]
    )


def serve(app: Any, name: str) -> None:
    uvicorn.run(app, host="127.0.0.1", port=port(name), log_level="warning")
