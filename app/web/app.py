"""The service: ``create_app(settings)`` builds the FastAPI app.

Its lifespan loads the trust store once (failing closed), connects, brings the schema to
head, and runs the sweep (SPEC 8 time rules) every ``HANDOFF_TRACE_SWEEP_SECONDS``; queries
of hops and flags sweep too, so a lost outcome shows up without a new element. ``uvicorn``
builds the app with ``create_app_from_env`` (``handoff-trace serve`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator

import anyio.to_thread
from fastapi import FastAPI

from app import __version__
from app.notify.targets import TargetError, load_targets
from app.notify.worker import Notifier
from app.settings import Settings
from app.web import api, errors, pages
from app.web.guard import Guard
from app.web.service import Clock, Service, ServiceConfigError, wall_clock

log = logging.getLogger("handoff_trace.web")

DESCRIPTION = """\
Verify, store and triage signed handoff offers, chains and statuses between AI agents.

Every route but `/api/v1/healthz` and `/api/v1/readyz` needs `Authorization: Bearer TOKEN`
with a token from `handoff-trace tokens create --role ROLE --name NAME`: `ingest` may
POST /ingest and /verify; `read` may GET; `operator` may GET, POST /verify and PATCH flags;
`admin` may do everything. Errors are `{"error": {"code", "message"}}`.
"""


def create_app(settings: Settings, *, clock: Clock = wall_clock) -> FastAPI:
    """The app for ``settings``. ``clock`` is the store's clock (tests pin it)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        start = functools.partial(Service.start, settings, clock=clock)
        service = await anyio.to_thread.run_sync(start)
        try:
            targets = load_targets(settings.webhooks_file)
        except TargetError as exc:
            service.close()
            raise ServiceConfigError(str(exc)) from exc
        app.state.service = service
        tasks = [asyncio.create_task(_sweep_forever(service))]
        notifier = Notifier(service.engine, targets) if targets else None
        app.state.notifier = notifier
        if notifier is not None:
            # Before the first request: the notifier's cursors start here, so every flag
            # opened from now on is announced, and none from before.
            await anyio.to_thread.run_sync(notifier.collect)
            tasks.append(asyncio.create_task(_notify_forever(notifier, settings.webhook_seconds)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if notifier is not None:
                notifier.close()
            app.state.service = None
            service.close()

    app = FastAPI(
        title="handoff-trace",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_url="/api/v1/openapi.json",
        # The interactive docs page loads its assets from a CDN; the service serves
        # nothing from elsewhere, so only the OpenAPI document is offered.
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = None
    errors.install(app)
    app.include_router(api.router)
    pages.install(app)  # the dashboard: pages, login, static files (app/web/pages.py)
    app.add_middleware(Guard, max_body=settings.max_request_bytes)
    return app


def create_app_from_env() -> FastAPI:
    """The app configured from the environment (``uvicorn --factory`` entry point)."""
    return create_app(Settings.from_env())


async def _sweep_forever(service: Service) -> None:
    """Sweep now and every ``sweep_seconds``; a failing sweep is logged and tried again."""
    sweep = functools.partial(service.sweep, force=True)
    while True:
        try:
            swept = await anyio.to_thread.run_sync(sweep)
            if swept:
                log.info("sweep re-derived %d hops", swept)
        except Exception:
            log.exception("sweep failed; trying again in %d s", service.settings.sweep_seconds)
        await asyncio.sleep(service.settings.sweep_seconds)


async def _notify_forever(notifier: Notifier, seconds: int) -> None:
    """Queue and send webhook deliveries every ``seconds``; a failing round is logged and
    tried again (a delivery's own failure is its retry schedule, not an error here)."""
    while True:
        try:
            queued, sent = await anyio.to_thread.run_sync(notifier.run_once)
            if queued or sent:
                log.info("webhooks: %d queued, %d delivered", queued, sent)
        except Exception:
            log.exception("the notifier failed; trying again in %d s", seconds)
        await asyncio.sleep(seconds)
