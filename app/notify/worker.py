"""The notifier: a background task of the service (``app.web.app``) that, every
``HANDOFF_TRACE_WEBHOOK_SECONDS``, turns new and reopened flags into webhook deliveries and
sends what is due, retrying with doubling delays.

It reads flags after their ingest transaction committed and sends outside any transaction:
a target that is slow, down or wrong never holds up or rolls back a capture. Each call is
signed when the target has a secret: ``X-Handoff-Trace-Signature: t=TIME,v1=HEX``, where HEX
is HMAC-SHA256 with the secret over ``TIME.BODY`` (the receiver recomputes it, and refuses a
TIME too far from its clock, so a captured call cannot be replayed later).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Sequence

import httpx
from sqlalchemy import Engine
from sqlmodel import Session

from app import __version__
from app.notify.bodies import render_body
from app.notify.targets import Target
from app.store import db, notify
from app.store.models import DeliveryRow

log = logging.getLogger("handoff_trace.notify")
SIGNATURE = "X-Handoff-Trace-Signature"
TIMEOUT = 5.0


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


class Notifier:
    def __init__(
        self,
        engine: Engine,
        targets: Sequence[Target],
        *,
        clock: Callable[[], int] = lambda: int(time.time()),
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.engine = engine
        self.targets = {t.name: t for t in targets}
        self.clock = clock
        self.client = httpx.Client(
            timeout=TIMEOUT,
            transport=transport,
            follow_redirects=False,
            headers={"User-Agent": f"handoff-trace/{__version__}"},
        )

    def close(self) -> None:
        self.client.close()

    def collect(self) -> int:
        """Queue a delivery per target for every flag event since the last call."""
        now = self.clock()

        def work(session: Session) -> int:
            queued = 0
            for found in notify.new_events(session):
                for target in self.targets.values():
                    if target.wants(found.flag.severity):
                        body = render_body(target, found.event, found.flag, now=now)
                        notify.enqueue(
                            session,
                            target=target.name,
                            flag=found.flag,
                            event=found.event,
                            body=body,
                            now=now,
                        )
                        queued += 1
            return queued

        return db.run(self.engine, work)

    def deliver(self) -> int:
        """Send every delivery that is due; returns how many were delivered."""
        with db.transaction(self.engine) as session:
            pending = notify.due(session, now=self.clock())
        return sum(1 for row in pending if self._claim(row) and self._send(row))

    def _claim(self, row: DeliveryRow) -> bool:
        now = self.clock()
        # Long enough for one call to time out, so a claimed delivery is not sent twice.
        lease = int(TIMEOUT) * 2 + 1

        def take(session: Session) -> bool:
            return notify.claim(session, delivery_id=int(row.id or 0), now=now, lease=lease)

        return db.run(self.engine, take)

    def run_once(self) -> tuple[int, int]:
        return self.collect(), self.deliver()

    def _send(self, row: DeliveryRow) -> bool:
        target = self.targets.get(row.target)
        now = self.clock()
        response: int | None = None
        error: str | None = None
        if target is None:
            error = "the target is no longer configured"
        else:
            body = row.body.encode()
            headers = {"Content-Type": "application/json", "X-Handoff-Trace-Delivery": str(row.id)}
            if target.secret:
                headers[SIGNATURE] = signature(target.secret, now, body)
            try:
                answer = self.client.post(target.url, content=body, headers=headers)
                response = answer.status_code
                if not 200 <= response < 300:
                    error = f"HTTP {response}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {str(exc)[:200]}"
        delivered = error is None
        attempts = row.attempts + 1
        retry_at = None
        if not delivered and target is not None and attempts < target.max_attempts:
            retry_at = now + target.retry_seconds * 2 ** (attempts - 1)
        if error:
            log.warning(
                "webhook %s, flag %s: %s (attempt %d)", row.target, row.flag_id, error, attempts
            )

        def work(session: Session) -> None:
            notify.record_attempt(
                session,
                delivery_id=int(row.id or 0),
                now=now,
                response=response,
                error=error,
                delivered=delivered,
                retry_at=retry_at,
            )

        db.run(self.engine, work)
        return delivered
