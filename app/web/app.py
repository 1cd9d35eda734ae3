"""The service: ``create_app(settings)`` builds the FastAPI app.

Its lifespan loads the trust store once (failing closed), connects, brings the schema to
head, and runs the sweep (profile §8 time rules) every ``HANDOFF_TRACE_SWEEP_SECONDS``; queries
of hops and flags sweep too, so a lost outcome shows up without a new element. ``uvicorn``
builds the app with ``create_app_from_env`` (``handoff-trace serve`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
from collections.abc import AsyncIterator

import anyio.to_thread
from fastapi import FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app import __version__
from app.log.runner import log_forever
from app.notify.targets import TargetError, load_targets
from app.notify.worker import Notifier
from app.otlp.export import Exporter, Sender
from app.settings import Settings
from app.store import db
from app.web import api, errors, metrics, otlp, pages, tlog
from app.web.guard import Guard
from app.web.observe import Observe
from app.web.params import query_names
from app.web.service import Clock, Service, ServiceConfigError, wall_clock

# How often every instance looks at its trust file (a stat; the file is read when it changed).
TRUST_CHECK_SECONDS = 2.0
log = logging.getLogger("handoff_trace.web")

DESCRIPTION = """\
Verify, store and triage signed handoff offers, chains and statuses between AI agents.

Every route but `/api/v1/healthz` and `/api/v1/readyz` needs `Authorization: Bearer TOKEN`
with a token from `handoff-trace tokens create --role ROLE --name NAME`: `ingest` may
POST /ingest and /verify; `read` may GET; `operator` may GET, POST /verify and PATCH flags;
`admin` may do everything. Errors are `{"error": {"code", "message"}}`.
"""


def create_app(settings: Settings, *, clock: Clock = wall_clock, served: bool = False) -> FastAPI:
    """The app for ``settings``. ``clock`` is the store's clock (tests pin it). ``served``:
    the app of a ``serve`` worker process, which readies itself for traffic at start-up
    (``_ready_for_traffic``)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        start = functools.partial(Service.start, settings, clock=clock)
        service = await anyio.to_thread.run_sync(start)
        try:
            targets = load_targets(
                settings.webhooks_file, allow_private=settings.webhook_allow_private
            )
        except TargetError as exc:
            service.close()
            raise ServiceConfigError(str(exc)) from exc
        if served:
            await _ready_for_traffic(app)
        app.state.service = service
        hangup = _on_sighup()
        tasks = [
            asyncio.create_task(_sweep_forever(service)),
            asyncio.create_task(_watch_trust(service, hangup)),
        ]
        if service.evidence is not None:
            tasks.append(asyncio.create_task(log_forever(service.evidence)))
        notifier = (
            Notifier(service.engine, targets, allow_private=settings.webhook_allow_private)
            if targets
            else None
        )
        app.state.notifier = notifier
        if notifier is not None:
            # Before the first request: the notifier's cursors start here, so every flag
            # opened from now on is announced, and none from before.
            await anyio.to_thread.run_sync(notifier.collect)
            tasks.append(asyncio.create_task(_notify_forever(notifier, settings.webhook_seconds)))
        exporter = otlp_exporter(settings, service)
        app.state.otlp_exporter = exporter  # its metrics (app/web/metrics.py)
        if exporter is not None:
            tasks.append(asyncio.create_task(_export_forever(exporter, settings.otlp_seconds)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if notifier is not None:
                notifier.close()
            if exporter is not None:
                exporter.close()
            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            app.state.service = None
            service.close()
            if served:
                gc.unfreeze()  # an app served in a longer-lived process gives its heap back

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
    # prometheus_client's multiprocess mode (``serve --workers N`` sets the directory).
    app.state.metrics_multiprocess = bool(os.environ.get(metrics.MULTIPROC_ENV))
    db.observe_write_lock(metrics.count_write_lock)
    errors.install(app)
    app.include_router(api.router)
    app.include_router(otlp.router)  # POST /v1/traces (app/web/otlp.py)
    app.include_router(tlog.router)  # the evidence log (docs/evidence-log.md)
    app.include_router(tlog.pages)  # its evidence bundle download, for the dashboard
    pages.install(app)  # the dashboard: pages, login, static files (app/web/pages.py)
    app.add_middleware(Guard, max_body=settings.max_request_bytes)
    app.add_middleware(Observe)  # outside the guard: its 400s, 413s and 500s are counted too
    if settings.forwarded_allow_ips:
        # Outermost, so that the limits, the logs and the Secure cookie flag all see the
        # client's address and scheme as the trusted proxy gave them (and only then).
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=list(settings.forwarded_allow_ips))
    return app


def create_app_from_env() -> FastAPI:
    """The app configured from the environment (``uvicorn --factory`` entry point)."""
    return create_app(Settings.from_env(), served=True)


async def _ready_for_traffic(app: FastAPI) -> None:
    """What a ``serve`` worker does once before its first request.

    Which query parameters each route takes comes from the OpenAPI document
    (``app.web.params.query_names``), one to two seconds of one core to build: built here,
    off the event loop, no request of a fresh worker waits for it.

    Then every object made so far (modules, the app, the settings, the trust store) is moved
    out of the cyclic garbage collector's sight (``gc.freeze``, Python's advice for
    long-running servers). A full collection walks every tracked object while holding the
    GIL, and a large ``/verify`` or ``/ingest`` makes one every few hundred milliseconds: with
    the start-up heap in view each took up to half a second (8 MiB of one-byte items, load
    average 5), during which the event loop answered nothing, ``/healthz`` included. The
    frozen objects live as long as the process anyway."""
    app.state.query_names = await anyio.to_thread.run_sync(query_names, app)
    gc.collect()  # what start-up left as garbage goes now, not frozen forever
    gc.freeze()


def _on_sighup() -> asyncio.Event:
    """Set on SIGHUP, which asks for the trust file to be read again. Only the main thread's
    loop can take a signal (``serve``); in a test's app the event is set by hand."""
    hangup = asyncio.Event()
    with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, hangup.set)
    return hangup


async def _watch_trust(service: Service, hangup: asyncio.Event) -> None:
    """Judge the store again if it was judged under other keys (a restart after a key
    rollout); then check the trust file every ``TRUST_CHECK_SECONDS``, and at once on
    SIGHUP."""
    try:
        await anyio.to_thread.run_sync(service.rejudge_if_stale)
    except Exception:
        log.exception("judging the store again under the trust file failed")
    while True:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(hangup.wait(), TRUST_CHECK_SECONDS)
        forced = hangup.is_set()
        hangup.clear()
        try:
            await anyio.to_thread.run_sync(functools.partial(service.check_trust, force=forced))
        except Exception:
            log.exception("checking the trust file failed; trying again")


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
            queued, sent = await anyio.to_thread.run_sync(notifier.run_round)
            if queued or sent:
                log.info("webhooks: %d queued, %d delivered", queued, sent)
        except Exception:
            log.exception("the notifier failed; trying again in %d s", seconds)
        await asyncio.sleep(seconds)


def otlp_exporter(settings: Settings, service: Service) -> Exporter | None:
    """The background OTLP exporter (app/otlp/export.py), when an endpoint is set."""
    if settings.otlp_endpoint is None:
        return None
    sender = Sender(settings.otlp_endpoint, dict(settings.otlp_headers))
    return Exporter(service.engine, sender, clock=service.clock)


async def _export_forever(exporter: Exporter, seconds: int) -> None:
    """Export the hops that changed, every ``seconds``; the exporter retries a failing
    receiver on its own schedule, and an unexpected failure is logged and tried again."""
    while True:
        try:
            await anyio.to_thread.run_sync(exporter.run_once)
        except Exception:
            log.exception("the OTLP exporter failed; trying again in %d s", seconds)
        await asyncio.sleep(seconds)
