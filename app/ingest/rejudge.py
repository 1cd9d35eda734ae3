"""Judging the store again when the trust file changes (issue 15, item 4).

When an instance loads a trust store it has not judged under before, the elements refused
``untrusted-key`` or ``bad-signature`` may now verify (a key was rolled out), and elements
that verified may now be refused (a key was withdrawn). The store is judged again with
``rederive``'s machinery (``app.ingest.rederive``): every receipt replayed through the one
pipeline under the new trust in a scratch store, and the derived state replaced, so the
result is what ingesting everything under the new trust gives. Signed octets and refused
octets are never touched: an element now refused stays stored as evidence.

Before the replacement, every open ``rejected-element`` flag for those two reasons gets an
audit entry naming the change of trust; so a flag that no longer holds afterwards is
resolved with that entry and "the condition no longer holds" in its audit log, rather than
deleted without a trace, and one that still holds keeps the note.

An instance that starts with a trust file the store was never judged under, while the
store holds such rejections made under another one, judges it again too (a restart after
a key rollout). Instances share one store, so one of them does the work: the first to
claim the trust store's fingerprint in ``trust_rejudge``; the others find the claim and
only swap their trust store. A re-judgement that fails gives its claim up, so the next
check tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from app.errors import HandoffTraceError
from app.ingest.pipeline import Pipeline
from app.ingest.rederive import rederive
from app.store import trust_epochs
from app.store.derived import ReplaceError
from app.store.transfer import TransferError

log = logging.getLogger("handoff_trace.trust")
# The rejections a change of trust can turn around (profile §4).
TRUST_REASONS = ("untrusted-key", "bad-signature")


class RejudgeFailed(HandoffTraceError):
    """The store could not be judged again now (a database error, or receipts that arrived
    during the replay); the caller tries again later."""

    reason = "rejudge-failed"


@dataclass(frozen=True)
class Rejudged:
    trust: str
    judged: int  # receipts replayed under the new trust
    closed: int  # rejected-element flags resolved because they no longer hold


def judged_under_other_trust(engine: Engine, *, trust: str) -> str | None:
    """The fingerprint of an earlier trust store that refused a stored element for a reason
    a change of keys can turn around, when the store was never judged under ``trust`` (an
    instance restarted with a new file); None otherwise."""
    return trust_epochs.judged_under_other_trust(engine, trust=trust, reasons=TRUST_REASONS)


def rejudge(
    engine: Engine,
    pipeline_for: Callable[[Engine], Pipeline],
    *,
    old: str,
    new: str,
    now: int,
    scratch_dir: Path | None = None,
) -> Rejudged | None:
    """Judge the store again under the trust store ``pipeline_for`` builds (fingerprint
    ``new``), unless another instance claimed it first (None). Raises RejudgeFailed when
    it could not (logged; the claim is given up, so a later try can have it)."""
    if not trust_epochs.claim(engine, trust=new, now=now):
        return None
    note = f"the trust file changed (fingerprint {old[:12]} -> {new[:12]}): judged again"
    try:
        noted = trust_epochs.note_flags(engine, reasons=TRUST_REASONS, note=note, now=now)
        done = rederive(engine, pipeline_for, now=now, dry_run=False, scratch_dir=scratch_dir)
        closed = trust_epochs.resolved_among(engine, noted)
    except (SQLAlchemyError, TransferError, ReplaceError, OSError) as exc:
        # ReplaceError: receipts arrived while the replay ran; the next check tries again.
        log.error("judging the store again under trust %s failed: %s", new[:12], exc)
        trust_epochs.give_up(engine, trust=new)
        raise RejudgeFailed(str(exc)) from exc
    result = Rejudged(trust=new, judged=done.replayed.receipts, closed=closed)
    trust_epochs.record(engine, trust=new, judged=result.judged, closed=result.closed)
    log.info(
        "judged %d receipts again under trust %s; %d flags closed",
        result.judged,
        new[:12],
        result.closed,
        extra={"trust": new, "judged": result.judged, "closed": result.closed},
    )
    return result
