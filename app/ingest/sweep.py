"""The sweep: apply the clock to the stored hops and envelope cases (profile §8; the
acceptance window of docs/envelopes.md), so that deadlines that passed show without any new
input. Every entry point sweeps through here with the deployment's case rules."""

from __future__ import annotations

from handoff_context import Timing
from sqlmodel import Session

from app.envelope.ledger import CaseRules
from app.ingest.cases import sweep_cases
from app.ingest.derive import sweep_hops


def sweep(session: Session, *, now: int, timing: Timing, cases: CaseRules) -> int:
    """Re-derive every hop whose answer changes by ``now`` and every envelope case whose
    acceptance window ran out (``cases``: the deployment's case rules); how many of both.
    Run it in its own transaction (``app.store.db.run``); it waits for the locks."""
    swept = sweep_cases(session, now=now, rules=cases)
    return swept + sweep_hops(session, now=now, timing=timing)
