"""What the running service holds: the settings, one engine, the trust store (reloaded when
its file changes, refreshed from its sources and synced with the shared key history,
``check_trust``), the clock and the sweep. Built in the app's lifespan
(``Service.start``) and reached by routes through ``ServiceDep``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request
from handoff_context import ObjectIndex, TrustStore, Verdict
from handoff_context.sources import Revocation, TrustConfig, TrustSources
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from app.errors import HandoffTraceError
from app.ingest.build import build_pipeline, verify_options
from app.ingest.cases import KnownItems
from app.ingest.pipeline import Pipeline
from app.ingest.rejudge import Rejudged, RejudgeFailed, judged_under_other_trust, rejudge
from app.ingest.sweep import sweep
from app.ingest.verifying import Report, VerifyOptions, load_objects, verify_inputs
from app.log.errors import LogKeyError
from app.log.keys import load_signer
from app.log.runner import EvidenceLog
from app.settings import Settings
from app.store import db
from app.store.derive import anything_due
from app.trust import TrustFileError, load_config, open_trust
from app.web.errors import ApiError

log = logging.getLogger("handoff_trace.web")
Clock = Callable[[], int]


def wall_clock() -> int:
    return int(time.time())


class ServiceConfigError(HandoffTraceError):
    """The service cannot start: ``str(exc)`` is one line saying what to fix."""

    reason = "service-config"


def load_trust(settings: Settings) -> TrustConfig:
    """The trust configuration the service verifies with (a trust file, with or without
    sources). Fails closed: no file, an unreadable or unsafe one (``TrustStore.load``'s
    checks) is a ServiceConfigError, never an empty store that would reject, or worse
    accept, everything. Fetches nothing."""
    if settings.trust_file is None:
        raise ServiceConfigError(
            "no trust file: set HANDOFF_TRACE_TRUST_FILE or pass --trust FILE "
            "(the service refuses to verify against nothing)"
        )
    try:
        return load_config(settings.trust_file)
    except TrustFileError as exc:
        raise ServiceConfigError(str(exc)) from exc


def load_objects_dir(settings: Settings) -> ObjectIndex:
    """The objects held for reference checks (``HANDOFF_TRACE_OBJECTS_DIR``), read once at
    start-up; none without the setting. An unreadable directory stops the service."""
    if settings.objects_dir is None:
        return ObjectIndex()
    try:
        return load_objects(settings.objects_dir)
    except OSError as exc:
        raise ServiceConfigError(
            f"cannot read HANDOFF_TRACE_OBJECTS_DIR {settings.objects_dir}: {exc.strerror}"
        ) from exc


@dataclass
class Service:
    settings: Settings
    engine: Engine
    # The keys requests are judged with: an immutable snapshot of ``sources``, swapped when
    # a refresh, another instance or a revocation changes them.
    trust: TrustStore
    sources: TrustSources
    clock: Clock = wall_clock
    objects: ObjectIndex = field(default_factory=ObjectIndex)
    # The evidence log (app/log), when HANDOFF_TRACE_LOG_KEY_FILE names its key.
    evidence: EvidenceLog | None = None
    # The stored envelope items this process has read, for the case ledgers of every
    # request: each request would otherwise read and decode again every item of the cases
    # it adds to (a third of a small request's ingest CPU; BENCHMARKS.md, "HTTP ingest").
    known: KnownItems = field(default_factory=KnownItems, repr=False)
    _last_sweep: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Held while a sweep writes: one sweep at a time per process.
    _sweeping: threading.Lock = field(default_factory=threading.Lock)
    # Sweeps under way, read phase included: ``close`` waits for them, because a connection
    # checked out while the engine is disposed is never closed (it goes back to the old
    # pool), and its garbage collection later warns in whatever code runs then.
    _idle: threading.Condition = field(default_factory=threading.Condition)
    _busy: int = 0
    _closed: bool = False

    # What the trust file looked like when it was last read (``check_trust``), and the lock
    # that makes the watcher and a SIGHUP check one at a time.
    _trust_stat: tuple[int, int, int] | None = None
    _reloading: threading.Lock = field(default_factory=threading.Lock)
    # A re-judgement that failed (old fingerprint, new trust store), tried again on the
    # next check.
    _pending: tuple[str, TrustStore] | None = None

    @classmethod
    def start(cls, settings: Settings, *, clock: Clock = wall_clock) -> Service:
        """Load the trust store, connect and bring the schema to head.

        Raises ServiceConfigError with one clear line for anything that stops it."""
        config = load_trust(settings)
        objects = load_objects_dir(settings)
        try:
            signer = None if settings.log_key_file is None else load_signer(settings.log_key_file)
        except LogKeyError as exc:
            raise ServiceConfigError(str(exc)) from exc
        url = settings.store_url()
        try:
            engine = db.make_engine(url, pool_size=settings.db_pool_size)
        except db.UnsupportedDatabase as exc:
            raise ServiceConfigError(str(exc)) from exc
        try:
            db.ensure_schema(engine)
        except SQLAlchemyError as exc:
            engine.dispose()
            first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
            shown = db.shown_url(url)
            raise ServiceConfigError(f"cannot use the database {shown}: {first}") from exc
        stat = _stat(settings.trust_file)
        try:
            sources = open_trust(config, engine=engine, clock=clock)
        except SQLAlchemyError as exc:
            engine.dispose()
            raise ServiceConfigError(f"cannot read the key history: {exc}") from exc
        service = cls(
            settings=settings,
            engine=engine,
            trust=sources.snapshot,
            sources=sources,
            clock=clock,
            objects=objects,
        )
        service._trust_stat = stat
        if signer is not None:
            service.evidence = EvidenceLog(
                engine,
                signer,
                seconds=settings.log_seconds,
                check_seconds=settings.log_check_seconds,
                clock=clock,
            )
        return service

    def check_trust(self, *, force: bool = False) -> Rejudged | None:
        """Read the trust file again when it changed (or when ``force``d, on SIGHUP); else
        fetch the sources that are due and take in what other instances recorded in the
        key history. New keys are used from the next request on, and the store is judged
        again under them (``app.ingest.rejudge``: by this instance, unless another one
        claimed it). A file that no longer loads is logged and the current store kept:
        refusing everything, or accepting with a half-written file, would be worse than the
        old keys; a source that fails keeps its last good keys the same way."""
        with self._in_use() as open_, self._reloading:
            return self._check_trust(force=force) if open_ else None

    def rejudge_if_stale(self) -> Rejudged | None:
        """At start: judge the store again when it holds trust-dependent rejections made
        under another trust store and was never judged under this one."""
        with self._in_use() as open_, self._reloading:
            if not open_:
                return None
            old = judged_under_other_trust(self.engine, trust=self.trust.fingerprint)
            return None if old is None else self._rejudge(old, self.trust)

    def _check_trust(self, *, force: bool) -> Rejudged | None:
        stat = _stat(self.settings.trust_file)
        if force or stat != self._trust_stat:
            try:
                config = load_trust(self.settings)
            except ServiceConfigError as exc:
                log.error(
                    "the trust file changed but cannot be used (%s); keeping the old one", exc
                )
                return None
            self._trust_stat = stat
            self.sources = open_trust(config, engine=self.engine, clock=self.clock)
            why = "trust file reloaded"
        else:
            self.sources.refresh()
            self.sources.sync()
            why = "trust keys changed"
        if self.sources.fingerprint != self.trust.fingerprint:
            old, self.trust = self.trust, self.sources.snapshot
            log.info(
                "%s: fingerprint %s -> %s",
                why,
                old.fingerprint[:12],
                self.trust.fingerprint[:12],
                extra={"trust": self.trust.fingerprint, "previous": old.fingerprint},
            )
            return self._rejudge(old.fingerprint, self.trust)
        if self._pending is not None and self._pending[1] is self.trust:
            return self._rejudge(*self._pending)
        return None

    def revoke(
        self,
        *,
        at: int,
        thumbprint: str | None,
        kid: str | None,
        reason: str,
        actor: str,
    ) -> Revocation:
        """Revoke a key from ``at`` on, for every instance (the revocation is stored with the
        key history). New elements under it are ``untrusted-key`` at once; the store is
        judged again by the next trust check, which flags stored elements signed after
        ``at``. Raises ValueError when no key is named."""
        with self._reloading:
            revocation = self.sources.revoke(
                at=at, thumbprint=thumbprint, kid=kid, reason=reason, by=actor
            )
            if self.sources.fingerprint != self.trust.fingerprint:
                old, self.trust = self.trust, self.sources.snapshot
                self._pending = (old.fingerprint, self.trust)
        return revocation

    def _rejudge(self, old: str, trust: TrustStore) -> Rejudged | None:
        try:
            done = self._rejudge_now(old, trust)
        except RejudgeFailed:
            self._pending = (old, trust)
            return None
        self._pending = None
        return done

    def _rejudge_now(self, old: str, trust: TrustStore) -> Rejudged | None:
        at = self.clock()
        return rejudge(
            self.engine,
            lambda engine: build_pipeline(
                self.settings,
                engine,
                trust,
                options=verify_options(self.settings, at=at),
                objects=self.objects,
            ),
            old=old,
            new=trust.fingerprint,
            now=at,
        )

    def close(self) -> None:
        """Wait for the sweeps under way, then close every connection."""
        with self._idle:
            self._closed = True
            self._idle.wait_for(lambda: self._busy == 0)
        self.engine.dispose()

    @contextmanager
    def _in_use(self) -> Iterator[bool]:
        """Counts work that holds connections outside a request; yields False once the
        service is closing (the work is then skipped)."""
        with self._idle:
            if self._closed:
                yield False
                return
            self._busy += 1
        try:
            yield True
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    @contextmanager
    def reading(self) -> Iterator[Session]:
        """A read-only transaction (no write lock on SQLite, one snapshot on PostgreSQL)."""
        with db.transaction(db.read_only(self.engine)) as session:
            yield session

    def pipeline(self, options: VerifyOptions) -> Pipeline:
        return build_pipeline(
            self.settings,
            self.engine,
            self.trust,
            options=options,
            objects=self.objects,
            known=self.known,
        )

    def verify(
        self,
        inputs: list[tuple[str, bytes]],
        options: VerifyOptions,
        *,
        content_type: str | None,
        trust: TrustStore | None = None,
        on_verdict: Callable[[Verdict], None] | None = None,
    ) -> Report:
        """Verify without storing, with the same trust and objects as ``pipeline``: every
        entry point judges with the same inputs (``/verify``, ``/ingest``, the upload page).
        ``trust``: the caller's own keys instead (the upload page's verify-only mode)."""
        return verify_inputs(
            inputs,
            trust=self.trust if trust is None else trust,
            options=options,
            objects=self.objects,
            content_type=content_type,
            on_verdict=on_verdict,
        )

    def sweep(self, *, force: bool = False) -> int:
        """Apply the clock to time-based states and flags (profile §8). Queries call it before
        they read; at most once per clock second per process unless ``force``d (the
        background task), since ingests derive their hops at their own clock anyway.

        A read-only check comes first, so a query takes the write lock only when the clock
        changes something. A query's sweep does not queue for the lock either: when another
        sweep or an ingest holds it (SQLite), the query reads without sweeping, and what it
        shows is at most ``sweep_seconds`` behind the clock (the background sweep waits)."""
        with self._in_use() as open_:
            return self._sweep(force=force) if open_ else 0

    def _sweep(self, *, force: bool) -> int:
        now = self.clock()
        with self._lock:
            if not force and self._last_sweep == now:
                return 0
        with self.reading() as session:
            due = anything_due(session, now)
        if due:
            try:
                done = self._sweep_now(now, wait=force)
            except db.WriterBusy:
                return 0
        else:
            done = 0
        with self._lock:
            self._last_sweep = now
        return done

    def _sweep_now(self, now: int, *, wait: bool) -> int:
        if not self._sweeping.acquire(blocking=wait):
            raise db.WriterBusy
        try:
            return db.run(
                self.engine,
                lambda session: sweep(
                    session,
                    now=now,
                    timing=self.settings.timing,
                    cases=self.settings.envelope.rules,
                ),
                wait=wait,
            )
        finally:
            self._sweeping.release()

    def ready(self) -> None:
        """Raises when the database does not answer or cannot be written (``db.probe``)."""
        db.probe(self.engine, now=self.clock())


def _stat(path: Path | None) -> tuple[int, int, int] | None:
    """What tells a changed file: its inode (a file replaced by rename), size and mtime."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def get_service(request: Request) -> Service:
    service: Service | None = getattr(request.app.state, "service", None)
    if service is None:
        raise ApiError(503, "the service is starting or stopping", code="not-ready")
    return service


async def current_service(request: Request) -> Service:
    """``get_service`` as a dependency. Async, though it awaits nothing: FastAPI runs a
    plain ``def`` dependency in a worker thread, and while a worker's ingests run, the
    event loop waits for the GIL at each such hop (up to a switch interval each way), for
    every request of every route (BENCHMARKS.md, "HTTP ingest")."""
    return get_service(request)


ServiceDep = Annotated[Service, Depends(current_service)]
