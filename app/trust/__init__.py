"""Trust sources in the service (issue 21): the trust configuration opened against the
store's shared key history, and the audit log of what the sources did.

One place builds the trust store from a trust file for every entry point that has a store
(``serve``, ``ingest``, ``rederive``, ``import``), so each of them judges with the same key
history: a key gone from its source still verifies what it signed while it was published,
in the service, in ``rederive`` and on every instance.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from handoff_context.errors import TrustConfigError
from handoff_context.sources import TrustConfig, TrustEvent, TrustSources
from sqlalchemy import Engine

from app.errors import HandoffTraceError
from app.store import key_history

log = logging.getLogger("handoff_trace.trust")


class TrustFileError(HandoffTraceError):
    """The trust file cannot be used: ``str(exc)`` says what to fix."""

    reason = "trust-config"


def load_config(path: Path | str) -> TrustConfig:
    """Read and check a trust file (the current format, or one with sources). Raises
    TrustFileError; fetches nothing."""
    try:
        return TrustConfig.load(path)
    except TrustConfigError as exc:
        raise TrustFileError(str(exc)) from exc


@dataclass
class AuditLog:
    """Writes the sources' events to the trust audit log: each key set a source answers
    with when it differs from the one before, each change between reachable and not, and
    every revocation. (Every instance fetches at every hint; writing each unchanged answer
    would bury the changes.)"""

    engine: Engine
    _last: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = field(default_factory=dict)

    def __call__(self, event: TrustEvent) -> None:
        state = (event.kind, event.keys)
        if event.kind != "revoked" and self._last.get(event.source) == state:
            return
        self._last[event.source] = state
        try:
            key_history.record_event(
                self.engine,
                at=event.at,
                kind=event.kind,
                source=event.source,
                detail=event.detail,
                keys=event.keys,
            )
        except Exception:  # the audit log must not stop the refresher; the log line stays
            log.exception("cannot write the trust audit log")


def open_trust(
    config: TrustConfig, *, engine: Engine, clock: Callable[[], int], fetch: bool = True
) -> TrustSources:
    """The trust store for ``config`` over the store's key history; with ``fetch``, every
    source fetched once now (a source that fails keeps the history's keys, and says so)."""
    sources = TrustSources(
        config,
        history=key_history.KeyHistory(engine, clock=clock),
        clock=clock,
        on_event=AuditLog(engine),
    )
    if fetch and config.sources:
        sources.refresh(force=True)
    return sources
