"""Crash test: the service is killed (SIGKILL) while a reporter feeds it, then started
again on the same database. Everything the reporter held within its queue bound arrives,
and nothing is stored twice."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from handoff_context import handoff_object, make_offer
from handoff_context.reporter import Reporter
from sqlalchemy import func, select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.store.db import make_engine, transaction
from app.store.models import ObservationRow, VerdictRow

from .servers import serving, wait_until
from .service import service
from .system import CLIENT, PLANNER, TRUST


def send(n: int, dialog: str) -> dict[str, object]:
    offer = make_offer(CLIENT, aud=PLANNER.iss, dialog=dialog, iat=int(time.time()))
    message = {
        "messageId": f"m-{n}",
        "contextId": dialog,
        "role": "ROLE_USER",
        "parts": [{"text": "go"}],
        "metadata": {
            "https://quantumlearningmachines.com/a2a/ext/agent-handoff/v1": handoff_object(offer)
        },
    }
    return {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": message}}


def counts(db: str) -> tuple[int, int, dict[str, int]]:
    """Observations, distinct elements observed, and verdict outcomes in the store."""
    engine = make_engine(db)
    try:
        with transaction(engine) as session:
            observations = session.execute(select(func.count(ObservationRow.id))).scalar_one()
            digests = session.execute(
                select(func.count(func.distinct(ObservationRow.digest)))
            ).scalar_one()
            outcomes = session.execute(
                select(VerdictRow.outcome, func.count()).group_by(VerdictRow.outcome)
            ).all()
    finally:
        engine.dispose()
    return observations, digests, {o: int(n) for o, n in outcomes}


def test_a_killed_service_loses_nothing_the_reporter_held(tmp_path: Path) -> None:
    with service(tmp_path, TRUST) as svc:
        reporter = Reporter(
            svc.url,
            svc.token,
            receiver=PLANNER.iss,
            batch_size=10,
            interval=0.02,
            max_queue=1000,
            max_backoff=0.2,
        )
        try:
            for n in range(40):
                reporter.observe_received(send(n, f"d-{n}"))
            wait_until(lambda: reporter.stats.delivered >= 10, what="a first delivery")
            svc.kill()  # mid-run: some delivered, some in flight, some queued
            for n in range(40, 80):
                reporter.observe_received(send(n, f"d-{n}"))
            svc.start()
            assert reporter.flush(60), reporter.stats
        finally:
            reporter.close(10)
        stats = reporter.stats
        assert (stats.observed, stats.delivered, stats.dropped, stats.queued) == (80, 80, 0, 0)
    # Every one, once; a retried batch is never counted as a retransmission.
    assert counts(svc.db) == (80, 80, {"accept": 80})


def test_a_batch_whose_answer_was_lost_is_stored_once(tmp_path: Path) -> None:
    """The service stores a batch but its answer never reaches the reporter (a proxy that
    forwards the first post and then answers 502): the reporter sends it again, and the
    service stores each observation once, by its id."""
    with service(tmp_path, TRUST) as svc:
        posts: list[dict[str, object]] = []

        async def forward(request: Request) -> Response:
            body = await request.body()
            async with httpx.AsyncClient() as http:
                answer = await http.post(
                    svc.url + request.url.path, content=body, headers=dict(request.headers)
                )
            posts.append(answer.json()["counts"])
            return Response(status_code=502 if len(posts) == 1 else answer.status_code)

        proxy = Starlette(routes=[Route("/api/v1/ingest", forward, methods=["POST"])])
        with serving(proxy) as front:
            reporter = Reporter(front, svc.token, receiver=PLANNER.iss, interval=0.02)
            try:
                for message in [send(n, f"d-{n}") for n in range(5)]:
                    reporter.observe_received(message)
                assert reporter.flush(30)
            finally:
                reporter.close(10)
        assert reporter.stats.retries >= 1 and reporter.stats.delivered == 5
        # The second post starts with the first one's records again, all known by id.
        assert posts[1]["redelivered"] == posts[0]["stored"] >= 1
        assert sum(p["stored"] for p in posts) == 5  # type: ignore[misc]
    assert counts(svc.db) == (5, 5, {"accept": 5})
