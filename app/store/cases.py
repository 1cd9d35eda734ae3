"""Cases of envelope handoffs as the dashboard and the API read them (docs/envelopes.md).

``list_cases`` reads the derived ledger (``CaseRow``) and the open flag counts;
``case_detail`` derives the ownership timeline again from the stored envelope items with
the pure ``app.envelope.ledger.derive_ledger`` (cheap for one case, and never stale), and
reads the case's flags from the flag table, where ingest and the sweep keep them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session

from .models import FlagRow


@dataclass(frozen=True)
class CaseSummary:
    case_id: str
    owner: str | None  # current owner by the ledger, None when nothing establishes one
    epoch: int | None
    handoffs: int
    open_flags: int
    last_at: int


@dataclass(frozen=True)
class Epoch:
    """One band of the ownership timeline."""

    epoch: int
    owner: str
    start: int
    end: int | None  # None: still current
    handoff_id: str | None  # the handoff whose acceptance began it


@dataclass(frozen=True)
class CaseEvent:
    """One marker of the timeline, in time order."""

    at: int
    kind: str  # handoff | accepted | rejected | write | handed-off | act | invalid
    agent: str | None
    epoch: int | None
    handoff_id: str | None
    outcome: str | None  # write/act: applied | rejected; else None
    detail: str | None
    source: str


@dataclass(frozen=True)
class Fact:
    key: str
    value: object
    source: str | None
    verified: bool


@dataclass(frozen=True)
class Reference:
    url: str
    media_type: str | None
    filename: str | None
    sha256: str | None
    size: int | None
    outcome: str  # verified | mismatch | unverifiable | missing-hash | expired
    detail: str | None


@dataclass(frozen=True)
class Envelope:
    handoff_id: str
    case_id: str
    from_agent: str
    to_agent: str | None
    epoch: int
    received_at: int
    media_type: str
    errors: tuple[str, ...]  # schema errors; empty when valid
    goal: str | None
    done: tuple[str, ...]
    remaining: tuple[str, ...]
    facts: tuple[Fact, ...]
    open_questions: tuple[str, ...]
    constraints: dict[str, object]
    summary: str | None
    references: tuple[Reference, ...]
    response: str | None  # accepted | rejected | None
    response_detail: str | None


@dataclass(frozen=True)
class CaseDetail:
    case_id: str
    owner: str | None
    epoch: int | None
    epochs: tuple[Epoch, ...]
    events: tuple[CaseEvent, ...]
    envelopes: tuple[Envelope, ...]
    flags: tuple[FlagRow, ...]


def list_cases(
    session: Session,
    *,
    q: str | None = None,
    flagged: bool = False,
    limit: int = 100,
    offset: int = 0,
) -> list[CaseSummary]:
    """Cases by most recent activity first; ``q`` matches a substring of the case id;
    ``flagged`` keeps cases with an open flag."""
    raise NotImplementedError


def case_detail(session: Session, case_id: str) -> CaseDetail | None:
    """The case's ledger, timeline, envelopes and flags; None for an unknown case."""
    raise NotImplementedError
