"""The notifier: a background task of the service (``app.web.app``) that, every
``HANDOFF_TRACE_WEBHOOK_SECONDS``, turns new and reopened flags into webhook deliveries and
sends what is due, retrying with doubling delays.

It reads flags after their ingest transaction committed and sends outside any transaction:
a target that is slow, down or wrong never holds up or rolls back a capture. Each call is
signed when the target has a secret: ``X-Handoff-Trace-Signature: t=TIME,v1=HEX``, where HEX
is HMAC-SHA256 with the secret over ``TIME.BODY`` (the receiver recomputes it, and refuses a
TIME too far from its clock, so a captured call cannot be replayed later).

What a hostile or broken target cannot do (issue #25):

- **hold a delivery**: one call, from the name lookup to the last octet read, has
  ``DEADLINE`` seconds in all (``asyncio.timeout`` around it), however slowly the target
  trickles its answer;
- **fill the server's memory**: at most ``MAX_ANSWER`` octets of an answer are read, then
  the connection is closed (only the status is used);
- **be sent twice**: a delivery is claimed (``app.store.notify.claim``, one UPDATE that one
  instance wins) for ``LEASE`` seconds, longer than ``DEADLINE``, just before its call;
- **delay another target**: each target's deliveries are sent by a thread of their own, and
  a round of the background task starts a target's batch only when its previous one is
  over, never waiting for it;
- **reach the internal network**: the host is resolved at every call and, unless
  ``HANDOFF_TRACE_WEBHOOK_ALLOW_PRIVATE``, the call is refused when any of its addresses is
  loopback, link-local, private or unspecified; the call then goes to the address that was
  checked (with the target's ``Host`` and TLS server name), so a second lookup cannot
  answer differently;
- **see its own URL's secrets in a log**: errors name the target and the failure, never the
  URL (which may carry a credential in its user-info, path or query).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx
from sqlalchemy import Engine
from sqlmodel import Session

from app import __version__
from app.errors import HandoffTraceError
from app.notify.bodies import render_body
from app.notify.targets import Target, is_public, literal_address
from app.store import db, notify
from app.store.models import DeliveryRow

log = logging.getLogger("handoff_trace.notify")
SIGNATURE = "X-Handoff-Trace-Signature"
DEADLINE = 10.0  # seconds for one call, the name lookup to the last octet read
MAX_ANSWER = 64 * 1024  # octets of an answer read; the rest is never read
LEASE = 3 * int(DEADLINE)  # a claimed delivery is not due again for this long
BATCH = 20  # deliveries of one target taken per round
MAX_THREADS = 16


class DeliveryError(HandoffTraceError):
    """A call that did not get an answer; the message names no URL."""

    reason = "webhook-failed"


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
        allow_private: bool = False,
        deadline: float = DEADLINE,
    ) -> None:
        self.engine = engine
        self.targets = {t.name: t for t in targets}
        self.clock = clock
        self.allow_private = allow_private
        self.deadline = deadline
        self.lease = max(LEASE, 3 * int(deadline) + 1)
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, min(MAX_THREADS, len(self.targets))),
            thread_name_prefix="webhook",
        )
        self._running: dict[str, Future[int]] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        """Wait for the calls under way (each ends within its deadline), then stop."""
        self._pool.shutdown(wait=True, cancel_futures=True)

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

    def run_once(self) -> tuple[int, int]:
        """Queue, then send what is due and wait for it: (queued, delivered)."""
        return self.collect(), self.deliver(wait=True)

    def run_round(self) -> tuple[int, int]:
        """The background task's round: queue, and start what is due without waiting for
        it; the delivered count is that of the batches that ended since the last round."""
        return self.collect(), self.deliver(wait=False)

    def deliver(self, *, wait: bool = True) -> int:
        """Start each target's due deliveries on its own thread (a target whose previous
        batch is still running is left for the next round). With ``wait``, wait for the
        batches started here. Returns how many were delivered by the batches that ended."""
        now = self.clock()
        with db.transaction(db.read_only(self.engine)) as session:
            due = {name: notify.due(session, now=now, target=name, limit=BATCH)
                   for name in self.targets}  # fmt: skip
            orphans = notify.due(session, now=now, exclude=list(self.targets), limit=BATCH)
        delivered = self._deliver_batch(orphans) if orphans else 0
        started: list[tuple[str, Future[int]]] = []
        with self._lock:
            for name, future in list(self._running.items()):
                if future.done():
                    del self._running[name]
                    delivered += _result(future)
            for name, rows in due.items():
                if rows and name not in self._running:
                    future = self._pool.submit(self._deliver_batch, rows)
                    self._running[name] = future
                    started.append((name, future))
        if not wait:
            return delivered
        for name, future in started:
            delivered += _result(future)
            with self._lock:
                if self._running.get(name) is future:
                    del self._running[name]
        return delivered

    def _deliver_batch(self, rows: Sequence[DeliveryRow]) -> int:
        """One target's deliveries in order, each claimed just before its call."""
        return sum(1 for row in rows if self._claim(row) and self._send(row))

    def _claim(self, row: DeliveryRow) -> bool:
        now = self.clock()
        lease = self.lease

        def take(session: Session) -> bool:
            return notify.claim(session, delivery_id=int(row.id or 0), now=now, lease=lease)

        return db.run(self.engine, take)

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
                response = asyncio.run(self._post(target, body, headers))
                if not 200 <= response < 300:
                    error = f"HTTP {response}"
            except DeliveryError as exc:
                error = str(exc)
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

    async def _post(self, target: Target, body: bytes, headers: dict[str, str]) -> int:
        """POST ``body`` to the target within the deadline; the answer's status. Raises
        DeliveryError (no URL in its message)."""
        try:
            async with asyncio.timeout(self.deadline):
                url, host, extensions, auth = await self._pinned(target.url)
                async with (
                    httpx.AsyncClient(
                        timeout=self.deadline,
                        follow_redirects=False,
                        trust_env=False,
                        headers={"User-Agent": f"handoff-trace/{__version__}"},
                    ) as client,
                    client.stream(
                        "POST",
                        url,
                        content=body,
                        headers={**headers, "Host": host},
                        extensions=extensions,
                        auth=auth,
                    ) as answer,
                ):
                    read = 0
                    async for chunk in answer.aiter_raw():
                        read += len(chunk)
                        if read >= MAX_ANSWER:
                            break  # the rest is never read: the connection is closed
                    return answer.status_code
        except TimeoutError:
            raise DeliveryError(f"no answer within {self.deadline:g} s") from None
        except httpx.HTTPError as exc:
            raise DeliveryError(f"{type(exc).__name__} (the call failed)") from None
        except OSError as exc:
            raise DeliveryError(f"the host cannot be resolved ({exc.strerror})") from None

    async def _pinned(self, url: str) -> tuple[str, str, dict[str, Any], Any]:
        """The URL to call: the target's host resolved and each of its addresses checked,
        then the first address in place of the host (the ``Host`` header and the TLS
        server name keep the name). Raises DeliveryError, OSError."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        literal = literal_address(host)
        if literal is not None:
            addresses = [str(literal)]
        else:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
            addresses = [str(info[4][0]) for info in infos]
        if not addresses:
            raise DeliveryError("the host has no address")
        if not self.allow_private:
            for address in addresses:
                found = literal_address(address)
                if found is None or not is_public(found):
                    raise DeliveryError(
                        "the host has a loopback, link-local, private or unspecified address "
                        "(HANDOFF_TRACE_WEBHOOK_ALLOW_PRIVATE is off)"
                    )
        first = addresses[0]
        netloc = f"[{first}]:{port}" if ":" in first else f"{first}:{port}"
        shown_host = f"[{host}]" if ":" in host else host
        host_header = shown_host if parts.port is None else f"{shown_host}:{parts.port}"
        pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
        extensions: dict[str, Any] = {}
        if parts.scheme == "https" and literal is None:
            extensions["sni_hostname"] = host
        auth = None
        if parts.username is not None:
            auth = httpx.BasicAuth(unquote(parts.username), unquote(parts.password or ""))
        return pinned, host_header, extensions, auth


def _result(future: Future[int]) -> int:
    try:
        return future.result()
    except Exception:
        log.exception("a webhook batch failed; its deliveries are due again after the lease")
        return 0
