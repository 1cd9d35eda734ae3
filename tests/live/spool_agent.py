"""An agent under uvicorn for the shutdown test (tests/live/test_shutdown.py): every
message posted to it is an observation for its reporter, made with no shutdown code at all
(the reporter closes itself on SIGTERM; the spool comes from HANDOFF_REPORTER_SPOOL)."""

from __future__ import annotations

import json
import os

from handoff_context.reporter import Reporter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

reporter = Reporter(
    os.environ["SPOOL_AGENT_SERVICE"],
    os.environ["SPOOL_AGENT_TOKEN"],
    receiver="spiffe://b.example/agent/planner",
    interval=0.05,
    max_backoff=0.5,
    exit_timeout=1.0,
)


async def observe(request: Request) -> Response:
    reporter.observe_received(json.loads(await request.body()))
    return Response(status_code=204)


app = Starlette(routes=[Route("/observe", observe, methods=["POST"])])
