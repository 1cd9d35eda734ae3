"""The API's request and response bodies, named by role (``HopPublic``, ``FlagUpdate``).

They document the wire format in the OpenAPI document, and the read routes build them from
the store's listings (``from_listing``). Digests are 43 characters of base64url (profile §1.3);
times are NumericDate seconds.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from handoff_context import (
    MAX_SAFE_INT,
    HopState,
    Outcome,
    RefOutcome,
    Result,
    Variant,
    digest_text,
)
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator
from sqlmodel import SQLModel

from app.envelope.flags import FlagKind
from app.ingest.cases import CaseDetail
from app.store.cases import CaseSummary
from app.store.models import ActionRow, ElementRow
from app.store.queries import (
    AgentSummary,
    DialogSummary,
    FlagAction,
    FlagListing,
    FlagStatus,
    HopListing,
    TreeNode,
)
from app.web.params import storable

Digest = str  # 43 characters of base64url


# --- verdicts (profile §11) -----------------------------------------------------------------


class CheckPublic(SQLModel):
    check: str
    result: Result
    reason: str | None = None
    detail: str | None = None


class ChainElementPublic(SQLModel):
    index: int
    digest: Digest | None
    iss: str | None
    aud: str | None
    hop: str | None
    result: Result
    reason: str | None = None


class ChainPublic(SQLModel):
    carried: bool
    length: int
    partial: bool
    elements: list[ChainElementPublic]


class RefPublic(SQLModel):
    index: int
    kind: str
    outcome: RefOutcome
    detail: str | None = None


class EquivocationPublic(SQLModel):
    first: Digest
    variant: Variant


class VerdictPublic(SQLModel):
    """One element's verdict, exactly as ``verify --json`` prints it (profile §11). Offers
    carry ``chain`` and ``refs``; statuses carry ``offer`` (the offer's digest) instead."""

    source: str
    element: Literal["offer", "status"] | None
    form: Literal["jws", "cose"] | None
    digest: Digest | None
    iss: str | None
    aud: str | None
    hop: str | None
    outcome: Outcome
    reason: str | None
    detail: str | None
    checks: list[CheckPublic]
    chain: ChainPublic | None = None
    refs: list[RefPublic] | None = None
    offer: Digest | None = None
    equivocation: EquivocationPublic | None


class VerifyCounts(SQLModel):
    accept: int
    reject: int
    duplicate: int
    pending: int
    verdicts: int
    skipped: int = Field(
        description="items with nothing to read: no signed handoff (and, on ingest, no "
        "envelope, acceptance, rejection or case event)"
    )


class IngestCounts(VerifyCounts):
    errors: int = Field(description="items that could not be stored (see errors)")
    stored: int = Field(description="elements stored for the first time")
    envelopes: int = Field(0, description="envelope items read (docs/envelopes.md)")
    envelope_errors: int = Field(0, description="envelope items with errors (see envelope_errors)")
    redelivered: int = Field(
        0,
        description="capture records whose observation id (their `id`) was stored already: a "
        "reporter's retry, neither stored nor judged again, never counted as a duplicate",
    )


class ItemErrorPublic(SQLModel):
    """An item that could not be stored (a database error, or writers busy); nothing of it
    was kept: send it again."""

    source: str
    detail: str


_OMITTED = Field(
    0,
    description="verdicts not listed: past 1,000 verdicts or 1 MiB of them only those that are "
    "not `accept` are listed, within the same bounds (`counts` covers every verdict; "
    "`Accept: application/x-ndjson` streams them all)",
)


class VerifyResponse(SQLModel):
    verdicts: list[VerdictPublic]
    verdicts_omitted: int = _OMITTED
    counts: VerifyCounts


class EnvelopeErrorPublic(SQLModel):
    """An envelope item that failed (schema, envelope count, version drift, a malformed
    acceptance or case event: stored as evidence, never applied to a ledger), or one the
    database could not store (``not_stored``: send it again)."""

    source: str
    detail: str
    not_stored: bool = False


class IngestResponse(SQLModel):
    verdicts: list[VerdictPublic] = Field(
        description="verdicts of items stored (or refused, with their verdict, and stored as "
        "evidence), in input order"
    )
    verdicts_omitted: int = _OMITTED
    counts: IngestCounts
    errors: list[ItemErrorPublic] = Field(description="items not stored (at most 1,000 listed)")
    envelope_errors: list[EnvelopeErrorPublic] = []
    stored: bool = Field(
        True,
        description="every item was stored or refused (HTTP 200); false with HTTP 503: send "
        "what `errors` and `not_stored_from` name again",
    )
    not_stored_from: str | None = Field(
        None,
        description="the capture record from which on nothing was stored: the database could "
        "not be written (an outage, a full disk, read-only) and the request stopped there",
    )


# --- hops and dialogs -------------------------------------------------------------------


class HopPublic(SQLModel):
    """A hop (profile §8), keyed by (iss, hop); ``offer`` is its offer's digest."""

    offer: Digest
    iss: str
    aud: str
    hop: str
    dialog: str
    task: str | None
    state: HopState
    a2a_state: str | None
    flags: list[FlagKind] = Field(description="kinds of the hop's unresolved flags")
    iat: int
    exp: int
    accepted_at: int | None
    terminal_at: int | None

    @classmethod
    def from_listing(cls, listing: HopListing) -> HopPublic:
        return cls.model_validate(_hop_fields(listing))


def _hop_fields(listing: HopListing) -> dict[str, object]:
    h = listing.hop
    return {
        **listing.to_json(),
        "iat": h.iat,
        "exp": h.exp,
        "accepted_at": h.accepted_at,
        "terminal_at": h.terminal_at,
    }


class HopPage(SQLModel):
    hops: list[HopPublic]
    next: str | None = Field(description="cursor of the next page; null on the last page")


class ElementPublic(SQLModel):
    """A stored element of a hop; ``GET /api/v1/elements/{digest}`` has its octets."""

    digest: Digest
    type: Literal["offer", "status"]
    form: Literal["jws", "cose"]
    iss: str
    aud: str
    state: str | None = Field(description="a status's state; null for an offer")
    iat: int
    first_seen: int

    @classmethod
    def from_row(cls, row: ElementRow) -> ElementPublic:
        return cls(
            digest=digest_text(row.digest),
            type=row.type,  # type: ignore[arg-type]
            form=row.form,  # type: ignore[arg-type]
            iss=row.iss,
            aud=row.aud,
            state=row.state,
            iat=row.iat,
            first_seen=row.first_seen,
        )


class DialogPublic(SQLModel):
    dialog: str
    hops: int
    first_iat: int
    last_iat: int

    @classmethod
    def from_summary(cls, summary: DialogSummary) -> DialogPublic:
        return cls(
            dialog=summary.dialog,
            hops=summary.hops,
            first_iat=summary.first_iat,
            last_iat=summary.last_iat,
        )


class DialogPage(SQLModel):
    dialogs: list[DialogPublic]
    next: str | None


class DialogNode(HopPublic):
    """A hop in its dialog's tree: ``parent`` is the offer its offer names as ``prev``
    (profile §7), null for none; ``children`` are the offers of the hops below it."""

    parent: Digest | None
    children: list[Digest]


class DialogTree(SQLModel):
    dialog: str
    roots: list[Digest] = Field(
        description="offers of the hops whose parent is not in this dialog's hops"
    )
    nodes: list[DialogNode]

    @classmethod
    def from_nodes(cls, dialog: str, nodes: list[TreeNode]) -> DialogTree:
        offers = {n.hop.hop.offer for n in nodes}
        children: dict[bytes, list[str]] = {}
        for n in nodes:
            if n.parent is not None and n.parent in offers:
                children.setdefault(n.parent, []).append(digest_text(n.hop.hop.offer))
        public = [
            DialogNode.model_validate(
                {
                    **_hop_fields(n.hop),
                    "parent": None if n.parent is None else digest_text(n.parent),
                    "children": children.get(n.hop.hop.offer, []),
                }
            )
            for n in nodes
        ]
        roots = [
            digest_text(n.hop.hop.offer)
            for n in nodes
            if n.parent is None or n.parent not in offers
        ]
        return cls(dialog=dialog, roots=roots, nodes=public)


class AgentPublic(SQLModel):
    agent: str
    issued: int = Field(description="hops it delegated (offer iss)")
    received: int = Field(description="hops delegated to it (offer aud)")
    trusted: bool = Field(description="the trust configuration lists keys for it")

    @classmethod
    def from_summary(cls, summary: AgentSummary, *, trusted: bool) -> AgentPublic:
        return cls(
            agent=summary.agent,
            issued=summary.issued,
            received=summary.received,
            trusted=trusted,
        )


class AgentList(SQLModel):
    agents: list[AgentPublic]


# --- flags ------------------------------------------------------------------------------


class FlagPublic(SQLModel):
    """A condition that needs a person (profile §8 flags). ``evidence`` are element digests;
    ``status`` is as of now (a snooze that has run out reads ``open``)."""

    id: int
    kind: FlagKind
    variant: str | None
    severity: str
    status: FlagStatus
    iss: str
    hop: str
    offer: Digest | None
    evidence: list[Digest]
    opened_at: int
    detail: str
    assignee: str | None
    snoozed_until: int | None
    note: str | None
    updated_at: int
    case_id: str | None = Field(
        default=None, description="the envelope case of a case flag (then iss is the agent)"
    )

    @classmethod
    def from_listing(cls, listing: FlagListing) -> FlagPublic:
        return cls.model_validate(_flag_fields(listing))


def _flag_fields(listing: FlagListing) -> dict[str, object]:
    f = listing.flag
    return {
        **listing.to_json(),
        "detail": f.detail,
        "assignee": f.assignee,
        "snoozed_until": f.snoozed_until,
        "note": f.note,
        "updated_at": f.updated_at,
    }


class ActionPublic(SQLModel):
    """One audit log entry: who (``token:NAME`` for API tokens) did what, when, and why."""

    id: int
    actor: str
    at: int
    action: FlagAction
    note: str | None

    @classmethod
    def from_row(cls, row: ActionRow) -> ActionPublic:
        assert row.id is not None
        return cls(
            id=row.id,
            actor=row.actor,
            at=row.at,
            action=FlagAction(row.action),
            note=row.note,
        )


class FlagDetail(FlagPublic):
    actions: list[ActionPublic] = Field(description="the audit log, oldest first")

    @classmethod
    def from_parts(cls, listing: FlagListing, actions: list[ActionRow]) -> FlagDetail:
        return cls.model_validate(
            {**_flag_fields(listing), "actions": [ActionPublic.from_row(a) for a in actions]}
        )


class FlagPage(SQLModel):
    flags: list[FlagPublic]
    next: str | None


class HopDetail(HopPublic):
    elements: list[ElementPublic] = Field(description="the hop's offers and statuses")
    flag_details: list[FlagPublic] = Field(description="every flag of the hop, resolved too")


class FlagUpdate(BaseModel):
    """One operator action on a flag, recorded in its audit log with who and when.

    ``acknowledge``, ``resolve`` (needs a ``note``), ``reopen``, ``assign`` (``assignee``;
    null unassigns), ``snooze`` (needs ``snoozed_until`` in the future), ``note`` (replaces
    the note). A ``note`` given with any action replaces the flag's note too."""

    action: FlagAction
    note: str | None = Field(default=None, min_length=1, max_length=4000)
    assignee: str | None = Field(default=None, min_length=1, max_length=200)
    # Strict: JSON's false is not the time 0 (Schemathesis sent it; pydantic's lax mode
    # took it as 0).
    snoozed_until: StrictInt | None = Field(default=None, ge=0, le=MAX_SAFE_INT)

    # The conditions of ``_needs``, said in the document too (JSON Schema 2020-12 if/then,
    # which OpenAPI 3.1 takes), so a client or a schema-driven tester knows them.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "allOf": [
                {
                    "if": {"properties": {"action": {"enum": ["resolve", "note"]}},
                           "required": ["action"]},
                    "then": {"required": ["note"], "properties": {"note": {"type": "string"}}},
                },
                {
                    "if": {"properties": {"action": {"const": "snooze"}}, "required": ["action"]},
                    "then": {"required": ["snoozed_until"],
                             "properties": {"snoozed_until": {"type": "integer"}}},
                },
            ]
        },
    )  # fmt: skip

    _storable = field_validator("note", "assignee")(storable)

    @model_validator(mode="after")
    def _needs(self) -> FlagUpdate:
        if self.action is FlagAction.RESOLVE and not self.note:
            raise ValueError("resolve needs a note saying why")
        if self.action is FlagAction.NOTE and not self.note:
            raise ValueError("note needs a note")
        if self.action is FlagAction.SNOOZE and self.snoozed_until is None:
            raise ValueError("snooze needs snoozed_until")
        return self


# --- envelope cases (docs/envelopes.md) --------------------------------------------------


class CasePublic(SQLModel):
    """A case: its owner and epoch by the ownership ledger (null before anything
    establishes one), handoffs seen, open flags, and the time of its latest item."""

    case_id: str
    owner: str | None
    epoch: int | None
    handoffs: int
    open_flags: int
    last_at: int

    @classmethod
    def from_summary(cls, summary: CaseSummary) -> CasePublic:
        return cls.model_validate(dataclasses.asdict(summary))


class CasePage(SQLModel):
    cases: list[CasePublic]
    next_offset: int | None = Field(description="pass as offset for the next page")


class EpochPublic(SQLModel):
    epoch: int
    owner: str
    start: int
    end: int | None = Field(description="null while current")
    handoff_id: str | None = Field(description="the handoff whose acceptance began it")


class CaseEventPublic(SQLModel):
    at: int
    kind: str = Field(description="handoff, accepted, rejected, write, handed-off, act, invalid")
    agent: str | None
    epoch: int | None
    handoff_id: str | None
    outcome: str | None = Field(description="write/act: applied or rejected")
    detail: str | None
    source: str


class FactPublic(SQLModel):
    key: str
    value: Any
    source: str | None
    verified: bool


class ReferencePublic(SQLModel):
    url: str
    media_type: str | None
    filename: str | None
    sha256: str | None
    size: int | None
    outcome: str = Field(description="verified, mismatch, unverifiable, missing-hash, expired")
    detail: str | None


class EnvelopePublic(SQLModel):
    handoff_id: str
    case_id: str
    from_agent: str
    to_agent: str | None
    epoch: int = Field(description="-1 when the envelope could not be read")
    received_at: int
    media_type: str
    errors: list[str] = Field(description="schema errors and version drift; empty when valid")
    goal: str | None
    done: list[str]
    remaining: list[str]
    facts: list[FactPublic]
    open_questions: list[str]
    constraints: dict[str, Any]
    summary: str | None
    references: list[ReferencePublic]
    response: str | None = Field(description="accepted, rejected, or null")
    response_detail: str | None


class CaseDetailPublic(SQLModel):
    case_id: str
    owner: str | None
    epoch: int | None
    epochs: list[EpochPublic]
    events: list[CaseEventPublic]
    envelopes: list[EnvelopePublic]
    flags: list[FlagPublic]

    @classmethod
    def from_detail(cls, detail: CaseDetail, flags: list[FlagListing]) -> CaseDetailPublic:
        return cls.model_validate(
            {
                "case_id": detail.case_id,
                "owner": detail.owner,
                "epoch": detail.epoch,
                "epochs": [dataclasses.asdict(e) for e in detail.epochs],
                "events": [dataclasses.asdict(e) for e in detail.events],
                "envelopes": [dataclasses.asdict(e) for e in detail.envelopes],
                "flags": [_flag_fields(f) for f in flags],
            }
        )


# --- service ----------------------------------------------------------------------------


class Health(SQLModel):
    status: Literal["ok"]


class Readiness(SQLModel):
    status: Literal["ready"]
    database: Literal["ok"]
    trust: Literal["loaded"]
    trust_fingerprint: str  # SHA-256 of the trusted identifiers and keys, as /trust shows


class RevocationCreate(BaseModel):
    """Revoke a key (issue 21): the key with ``thumbprint`` (RFC 7638, as the trust page
    shows it), or every key with ``kid``, signs nothing issued after ``at`` (default: now).
    New elements under it are ``untrusted-key``; stored elements issued after ``at`` are
    flagged when the store is judged again."""

    thumbprint: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{43}$")
    kid: str | None = Field(default=None, pattern=r"^[\x21-\x7e]{1,128}$")
    at: StrictInt | None = Field(default=None, ge=0, le=MAX_SAFE_INT)
    reason: str = Field(default="", max_length=500)

    model_config = ConfigDict(extra="forbid")

    _storable = field_validator("reason")(storable)

    @model_validator(mode="after")
    def _names_a_key(self) -> RevocationCreate:
        if self.thumbprint is None and self.kid is None:
            raise ValueError("name the key by thumbprint or kid")
        return self


class RevocationPublic(BaseModel):
    thumbprint: str | None
    kid: str | None
    at: int
    reason: str
    by: str
