"""The tables, named by role. Signed elements are the source of truth; the rest is either an
observation (append-only), memory the checks rest on (profile §6.4), or derived and re-derivable
from the elements (verdicts, hops, flags).

Digests are the 32 raw octets; times are NumericDate seconds (BIGINT: up to 2^53). The
Alembic migrations in ``alembic/versions`` create exactly these tables; a test compares them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Text,
)
from sqlmodel import Field, SQLModel


class Octets(LargeBinary):
    """Binary columns, bound as the bytes they are. Both drivers take ``bytes`` as a BLOB /
    bytea; LargeBinary's bind processor wraps every value in ``dbapi.Binary`` first (a
    ``memoryview`` on sqlite3), which was the costliest Python of a batch's writes: ~68,000
    calls for 3,000 elements, 7 % of ingest's CPU (BENCHMARKS.md #13)."""

    def bind_processor(self, dialect: Any) -> None:
        return None


Digest = Octets(32)
# Row ids: BIGINT on PostgreSQL; on SQLite only INTEGER PRIMARY KEY autoincrements.
RowId = BigInteger().with_variant(Integer(), "sqlite")


def _digest(**kw: Any) -> Any:
    return Field(sa_type=Digest, **kw)


def _time(**kw: Any) -> Any:
    return Field(sa_type=BigInteger, **kw)


def _exact() -> Any:
    return Field(default=None, sa_type=Double)


def _observation_key() -> Any:
    return Field(default=None, sa_type=String(160), unique=True)


def _id() -> Any:
    return Field(default=None, sa_column=Column(RowId, primary_key=True, autoincrement=True))


def _ref(target: str, **kw: Any) -> Any:
    return Field(sa_column=Column(RowId, ForeignKey(target), nullable=False, **kw))


class ElementRow(SQLModel, table=True):
    """One signed element, keyed by its handoff digest, octets exactly as received.

    Append-only: a row is written once, by the first ingest that parses the element, and
    nothing later modifies it (``first_seen`` included). Rows exist for every element that
    parsed, verified or not, so a rejected element stays available as evidence.
    """

    __tablename__ = "element"
    __table_args__ = (
        Index("ix_element_hop", "hop_iss", "hop"),
        Index("ix_element_offer", "offer"),
    )

    digest: bytes = _digest(primary_key=True)
    form: str = Field(sa_type=String(8))  # jws | cose
    type: str = Field(sa_type=String(8))  # offer | status
    octets: bytes = Field(sa_type=Octets)
    iss: str = Field(sa_type=Text)
    aud: str = Field(sa_type=Text)
    hop: str = Field(sa_type=String(64))
    # The issuer of the hop this element belongs to: an offer's iss; for a status the
    # offer's iss by profile §1.2's swap (aud, or iss for canceled). Groups rejected elements.
    hop_iss: str = Field(sa_type=Text)
    dialog: str | None = Field(default=None, sa_type=Text, index=True)
    task: str | None = Field(default=None, sa_type=Text, index=True)
    iat: int = _time()
    exp: int | None = _time(default=None)
    offer: bytes | None = _digest(default=None)  # a status's offer digest
    state: str | None = Field(default=None, sa_type=String(16))  # a status's state
    reason: str | None = Field(default=None, sa_type=Text)  # a status's reason
    ref_count: int = 0
    # SHA-256 of the signed header and payload: equal for signature-only equivocation.
    content: bytes = _digest()
    first_seen: int = _time()


class LinkRow(SQLModel, table=True):
    """A chain link: the offer names ``prev`` (profile §7), so dialogs form trees across
    bundles. ``prev`` need not be stored (yet): a partial chain still links upward."""

    __tablename__ = "link"

    offer: bytes = Field(sa_column=Column(Digest, ForeignKey("element.digest"), primary_key=True))
    prev: bytes = _digest(index=True)
    dialog: str = Field(sa_type=Text, index=True)


class ObservationRow(SQLModel, table=True):
    """One receipt of an element (profile §10): who received it, when, in which carrier.

    Append-only; the same octets ingested again add a row (a retransmission). An element
    carried in an accepted bundle's chain is observed too, with ``via`` naming the offer
    that carried it.
    """

    __tablename__ = "observation"

    id: int | None = _id()
    digest: bytes = Field(
        sa_column=Column(Digest, ForeignKey("element.digest"), index=True, nullable=False)
    )
    received_at: int = _time()  # the time the checks were judged at (profile §10)
    # The receive time as observed, with its fraction (None: not given, or stored before
    # fractions were kept); ``received_at`` is it floored.
    received_exact: float | None = _exact()
    received_by: str | None = Field(default=None, sa_type=Text)
    source: str = Field(sa_type=Text)
    carrier: str | None = Field(default=None, sa_type=String(16))
    role: str | None = Field(default=None, sa_type=String(32))
    dialog: str | None = Field(default=None, sa_type=Text)
    task_id: str | None = Field(default=None, sa_type=Text, index=True)
    task_state: str | None = Field(default=None, sa_type=String(64))
    via: bytes | None = _digest(default=None)
    ingested_at: int = _time()
    # The sender's observation id (a capture record's ``id``, made unique per object): a
    # shipper's retry of a stored observation is not stored again.
    observation_key: str | None = _observation_key()


class HostStateRow(SQLModel, table=True):
    """One captured A2A task state (profile §8: the host keeps its own task state beside the
    hop's), from any Task or status update, with or without a handoff element. Hops read
    those of the tasks their observations name; the latest is the greatest
    (``received_exact``, ``seq``, ``id``): receive time, position in its stream, arrival.

    Append-only, like observations.
    """

    __tablename__ = "host_state"

    id: int | None = _id()
    task_id: str = Field(sa_type=Text, index=True)
    task_state: str = Field(sa_type=String(64))
    dialog: str | None = Field(default=None, sa_type=Text)
    received_at: int = _time()
    received_exact: float | None = _exact()
    seq: int = 0
    received_by: str | None = Field(default=None, sa_type=Text)
    source: str = Field(sa_type=Text)
    carrier: str | None = Field(default=None, sa_type=String(16))
    # True when it rode with an element: an import re-creates it from that observation, so
    # only the others are exported (app.store.transfer).
    element: bool = False
    ingested_at: int = _time()
    observation_key: str | None = _observation_key()


class VerdictRow(SQLModel, table=True):
    """The profile §11 verdict of one observation, and its judgement ignoring replay.

    ``outcome``..``equivocation_*`` are what was reported (order-dependent by nature:
    duplicate, equivocation, pending). ``remembered``/``valid``/``fault`` judge the same
    observation against an empty replay memory, so they depend on the set of stored
    elements only, never on ingest order; hop states and flags are derived from them.
    A pending status, or an offer whose earlier chain elements arrive later, is judged
    again and its row updated.
    """

    __tablename__ = "verdict"

    id: int | None = _id()
    observation_id: int = _ref("observation.id", unique=True)
    digest: bytes = _digest(index=True)
    element: str = Field(sa_type=String(8))
    outcome: str = Field(sa_type=String(16), index=True)
    reason: str | None = Field(default=None, sa_type=Text)
    detail: str | None = Field(default=None, sa_type=Text)
    checks: list[dict[str, Any]] = Field(sa_type=JSON)
    chain: dict[str, Any] | None = Field(default=None, sa_type=JSON)
    equivocation_first: bytes | None = _digest(default=None)
    equivocation_variant: str | None = Field(default=None, sa_type=String(16))
    trust: str = Field(sa_type=String(64))  # fingerprint of the trust store judged under
    # Profile §6.4: passed checks 1-3 (signature, audience, freshness), so the replay memory
    # holds it; only such offers count for a hop and for equivocation.
    remembered: bool = False
    valid: bool = False  # every check passed, replay aside
    fault: str | None = Field(default=None, sa_type=Text)  # the reason when not valid
    judged_at: int = _time()


class RefOutcomeRow(SQLModel, table=True):
    """One ref's outcome in a verdict (profile §5)."""

    __tablename__ = "ref_outcome"

    verdict_id: int = _ref("verdict.id", primary_key=True)
    index: int = Field(primary_key=True)
    kind: str = Field(sa_type=Text)
    outcome: str = Field(sa_type=String(16))
    detail: str | None = Field(default=None, sa_type=Text)


class HopRow(SQLModel, table=True):
    """A hop (profile §8), keyed by (iss, hop) of its offer; re-derived, never authoritative.

    ``offer`` is the hop's offer by the canonical rule (see ``app.store.derive``);
    ``deadline`` is when the derived answer changes with no new element (the sweep's
    index); ``derived_at`` the clock it was derived at; ``change`` its last change in the
    OTLP exporter's change sequence (docs/otlp.md, "Export").
    """

    __tablename__ = "hop"
    # The reads of a large store (alembic 0006, bench/query_scale.py): lists in (iat, iss,
    # hop) order, by state or agent, and search by hop id, task id and dialog prefix.
    __table_args__ = (
        Index("ix_hop_iat_key", "iat", "iss", "hop"),
        Index("ix_hop_state_iat", "state", "iat", "iss", "hop"),
        Index("ix_hop_aud", "aud"),
        Index("ix_hop_hop", "hop"),
        Index("ix_hop_task", "task"),
        Index("ix_hop_dialog_prefix", "dialog", postgresql_ops={"dialog": "text_pattern_ops"}),
    )

    iss: str = Field(sa_type=Text, primary_key=True)
    hop: str = Field(sa_type=String(64), primary_key=True)
    offer: bytes = _digest(index=True)
    aud: str = Field(sa_type=Text)
    dialog: str = Field(sa_type=Text, index=True)
    task: str | None = Field(default=None, sa_type=Text)
    iat: int = _time()
    exp: int = _time()
    state: str = Field(sa_type=String(16))
    a2a_state: str | None = Field(default=None, sa_type=String(32))
    accepted_at: int | None = _time(default=None)
    terminal_at: int | None = _time(default=None)
    deadline: int | None = _time(default=None, index=True)
    derived_at: int = _time(index=True)
    # The hop's place in the change sequence the OTLP exporter walks (app/store/otlp.py,
    # ``stamp_changes``): set whenever the hop is derived, in the same transaction.
    change: int | None = _time(default=None, index=True)


class FlagRow(SQLModel, table=True):
    """A condition that needs a person (profile §8 flags), flagged once per ``key``.

    Derived columns (severity, evidence, offer, opened_at, detail) follow the stored facts;
    the workflow columns (status, assignee, snoozed_until, note) belong to operators and are
    changed only through ``app.store.queries.act_on_flag``, which writes the audit log.
    """

    __tablename__ = "flag"
    __table_args__ = (
        Index("ix_flag_hop", "iss", "hop"),
        # The triage queue's order (alembic 0006).
        Index("ix_flag_opened", "opened_at", "id"),
    )

    id: int | None = _id()
    key: str = Field(sa_type=String(64), unique=True)  # SHA-256 hex of the condition
    kind: str = Field(sa_type=String(32), index=True)
    variant: str | None = Field(default=None, sa_type=Text)
    severity: str = Field(sa_type=String(16))
    status: str = Field(default="open", sa_type=String(16), index=True)
    assignee: str | None = Field(default=None, sa_type=Text)
    snoozed_until: int | None = _time(default=None)
    note: str | None = Field(default=None, sa_type=Text)
    evidence: list[str] = Field(sa_type=JSON)  # digests, base64url (profile §1.3)
    iss: str = Field(sa_type=Text)
    hop: str = Field(sa_type=String(64))
    offer: bytes | None = _digest(default=None)
    opened_at: int = _time()
    detail: str = Field(default="", sa_type=Text)
    updated_at: int = _time()
    # Flags of envelope cases (docs/envelopes.md) name their case; ``iss`` is then the
    # agent at fault and ``hop`` the handoff id (truncated), so they join the same queue.
    case_id: str | None = Field(default=None, sa_type=Text, index=True)


class EnvelopeItemRow(SQLModel, table=True):
    """One envelope item as captured (docs/envelopes.md): a handoff message, an acceptance,
    a rejection, a case event, or a message that failed (schema, count, version drift).

    Append-only evidence: ``octets`` are the payload as received (the capture item's JSON
    text, or its CBOR encoding), kept for invalid items too; ``digest`` is their SHA-256,
    the evidence a flag names. The other columns are what extraction read from it, so the
    ledger can be derived again without parsing; ``key`` makes a repeated ingest of the
    same receipt a no-op.
    """

    __tablename__ = "envelope_item"
    __table_args__ = (Index("ix_envelope_item_case", "case_id", "at"),)

    key: str = Field(sa_type=String(64), primary_key=True)  # SHA-256 hex of the receipt
    digest: bytes = _digest(index=True)
    octets: bytes = Field(sa_type=Octets)
    format: str = Field(sa_type=String(8))  # json | cbor
    source: str = Field(sa_type=Text)
    kind: str = Field(sa_type=String(16))  # handoff | accepted | rejected | event | invalid
    case_id: str | None = Field(default=None, sa_type=Text)
    handoff_id: str | None = Field(default=None, sa_type=Text, index=True)
    agent: str | None = Field(default=None, sa_type=Text)  # sender / event agent
    to_agent: str | None = Field(default=None, sa_type=Text)  # received_by of a handoff
    epoch: int | None = _time(default=None)
    at: int = _time()  # received_at, or a case event's own time
    received_by: str | None = Field(default=None, sa_type=Text)
    media_type: str | None = Field(default=None, sa_type=Text)
    message_id: str | None = Field(default=None, sa_type=Text)
    context_id: str | None = Field(default=None, sa_type=Text, index=True)
    task_id: str | None = Field(default=None, sa_type=Text)
    action: str | None = Field(default=None, sa_type=String(16))  # case event action
    outcome: str | None = Field(default=None, sa_type=String(16))  # case event outcome
    detail: str | None = Field(default=None, sa_type=Text)  # reason / event detail
    envelope: dict[str, Any] | None = Field(default=None, sa_type=JSON)  # the data part
    errors: list[str] = Field(sa_type=JSON)  # schema / count / event errors
    drift: list[str] = Field(sa_type=JSON)  # handoff-like media types not accepted
    references: list[dict[str, Any]] = Field(sa_type=JSON)  # url parts and their outcomes
    text_bytes: int = 0  # UTF-8 octets of inline text parts
    ingested_at: int = _time()


class CaseRow(SQLModel, table=True):
    """A case's ledger as last derived (``app.envelope.ledger``): re-derivable, never
    authoritative. ``deadline`` is when the derived flags change with no new item (a
    handoff's acceptance window runs out), the sweep's index, as for hops."""

    __tablename__ = "envelope_case"

    case_id: str = Field(sa_type=Text, primary_key=True)
    owner: str | None = Field(default=None, sa_type=Text)
    epoch: int | None = _time(default=None)
    handoffs: int = 0
    last_at: int = _time()
    deadline: int | None = _time(default=None, index=True)
    derived_at: int = _time(index=True)


class ActionRow(SQLModel, table=True):
    """The audit log: who did what to which flag, when, and why."""

    __tablename__ = "action"

    id: int | None = _id()
    flag_id: int = _ref("flag.id", index=True)
    actor: str = Field(sa_type=Text)
    at: int = _time()
    action: str = Field(sa_type=String(32))
    note: str | None = Field(default=None, sa_type=Text)
    # A snooze's until time (alembic 0010), so the log says how long, not only that.
    until: int | None = _time(default=None)
    # Whom an ``assign`` gave the flag to (alembic 0015); NULL when it unassigned.
    assignee: str | None = Field(default=None, sa_type=Text)


class CommentRow(SQLModel, table=True):
    """A comment on a flag (alembic 0010): the thread people keep while they work on it,
    apart from the audit log of what they did."""

    __tablename__ = "flag_comment"

    id: int | None = _id()
    flag_id: int = _ref("flag.id", index=True)
    author: str = Field(sa_type=Text)
    at: int = _time()
    body: str = Field(sa_type=Text)


class NotifyCursorRow(SQLModel, table=True):
    """How far the notifier has read (alembic 0010): the last flag id and the last audit
    entry id it considered, so each new flag and each reopen is announced once."""

    __tablename__ = "notify_cursor"

    name: str = Field(sa_type=String(32), primary_key=True)
    value: int = Field(sa_type=BigInteger)


class DeliveryRow(SQLModel, table=True):
    """One webhook call for one flag event (alembic 0010): the body as it is sent (a retry
    sends the same octets), and how its delivery went. No foreign key to the flag: the log
    outlives a flag whose condition cleared."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (Index("ix_webhook_delivery_due", "status", "next_at"),)

    id: int | None = _id()
    target: str = Field(sa_type=String(200))
    flag_id: int = Field(sa_type=BigInteger)
    event: str = Field(sa_type=String(16))  # opened | reopened
    severity: str = Field(sa_type=String(16))
    body: str = Field(sa_type=Text)
    status: str = Field(default="pending", sa_type=String(16))  # pending | delivered | failed
    attempts: int = 0
    created_at: int = _time()
    next_at: int = _time()
    delivered_at: int | None = _time(default=None)
    response: int | None = None  # the last HTTP status answered
    error: str | None = Field(default=None, sa_type=Text)


class ReplayRow(SQLModel, table=True):
    """The replay memory (profile §6.4): the first element remembered for each (iss, hop).

    Its primary key is what makes dedupe and equivocation detection correct with many
    workers: the first insert wins, every later one finds it.
    """

    __tablename__ = "replay"

    iss: str = Field(sa_type=Text, primary_key=True)
    hop: str = Field(sa_type=String(64), primary_key=True)
    digest: bytes = _digest()
    content: bytes = _digest()
    recorded_at: int = _time()


class SeenStatusRow(SQLModel, table=True):
    """Statuses already judged, so the same octets again are a retransmission."""

    __tablename__ = "seen_status"

    digest: bytes = _digest(primary_key=True)
    seen_at: int = _time()


class SignatureCacheRow(SQLModel, table=True):
    """Elements whose signature verified under a trust store (by its fingerprint): each
    element is verified once per trust configuration; a changed store verifies again."""

    __tablename__ = "signature_cache"

    digest: bytes = _digest(primary_key=True)
    trust: str = Field(sa_type=String(64), primary_key=True)
    verified_at: int = _time()


class TokenRow(SQLModel, table=True):
    """An API bearer token (``handoff-trace tokens create``). Only the SHA-256 of the token
    is kept: the token itself is shown once, when it is made. Revoked tokens stay, so the
    audit log's actors keep a name to point at; a name is never reused. A token made with
    ``--expires-in`` stops working at ``expires_at``; one without never expires."""

    __tablename__ = "api_token"

    id: int | None = _id()
    name: str = Field(sa_type=String(64), unique=True)
    role: str = Field(sa_type=String(16))  # ingest | read | operator | admin
    token_hash: str = Field(sa_type=String(64), unique=True)  # SHA-256 hex of the token
    created_at: int = _time()
    revoked_at: int | None = _time(default=None)
    expires_at: int | None = _time(default=None)


class UserRow(SQLModel, table=True):
    """A dashboard operator account (``handoff-trace users create``). The password is kept
    only as an argon2id hash (``app.store.users``); a disabled account cannot log in but
    stays, so the audit log's ``user:NAME`` actors keep a name to point at."""

    __tablename__ = "operator_user"
    # An account made by a login through an identity provider is that provider's person:
    # (``sso_issuer``, ``sso_subject``) is the OIDC ``iss`` and ``sub`` (alembic 0014), and
    # ``username`` is only a label for it. Local accounts have neither.
    __table_args__ = (Index("ix_operator_user_sso", "sso_issuer", "sso_subject", unique=True),)

    id: int | None = _id()
    username: str = Field(sa_type=String(64), unique=True)
    role: str = Field(sa_type=String(16))  # read | operator | admin
    password_hash: str = Field(sa_type=Text)
    created_at: int = _time()
    disabled_at: int | None = _time(default=None)
    sso_issuer: str | None = Field(default=None, sa_type=Text)
    sso_subject: str | None = Field(default=None, sa_type=Text)


class WebSessionRow(SQLModel, table=True):
    """A logged-in browser. Only the SHA-256 of the session cookie is stored; ``csrf`` is the
    token every state-changing request of that session must echo."""

    __tablename__ = "web_session"

    id: int | None = _id()
    token_hash: str = Field(sa_type=String(64), unique=True)
    user_id: int = _ref("operator_user.id", index=True)
    csrf: str = Field(sa_type=String(64))
    created_at: int = _time()
    expires_at: int = _time(index=True)


class RejectedOctetsRow(SQLModel, table=True):
    """Octets refused before they could become an element: a malformed element, one whose
    header carries a key (profile §2), or a carried object that is no handoff or status object.
    Kept as evidence, keyed by the SHA-256 of the octets (for an element, its handoff
    digest), so nothing a sender sent is lost and a ``rejected-element`` flag can name it.

    Append-only like ``ElementRow``. ``form`` is ``jws`` or ``cose`` for an element's octets,
    ``json`` or ``cbor`` for a carried object that did not parse (its canonical encoding).
    ``iss``..``hop_iss`` are read from the payload when it could be read: unauthenticated,
    they only say where to file the evidence.
    """

    __tablename__ = "rejected_octets"
    __table_args__ = (Index("ix_rejected_octets_hop", "hop_iss", "hop"),)

    digest: bytes = _digest(primary_key=True)
    form: str = Field(sa_type=String(8))  # jws | cose | json | cbor
    type: str | None = Field(default=None, sa_type=String(8))  # offer | status when known
    octets: bytes = Field(sa_type=Octets)
    iss: str | None = Field(default=None, sa_type=Text)
    aud: str | None = Field(default=None, sa_type=Text)
    hop: str | None = Field(default=None, sa_type=String(64))
    hop_iss: str | None = Field(default=None, sa_type=Text)
    first_seen: int = _time()


class RejectedObservationRow(SQLModel, table=True):
    """One receipt of refused octets, with its verdict (always ``reject``; ``reason`` is
    ``malformed`` or ``untrusted-key``). Append-only: a retransmission adds a row."""

    __tablename__ = "rejected_observation"

    id: int | None = _id()
    digest: bytes = Field(
        sa_column=Column(Digest, ForeignKey("rejected_octets.digest"), index=True, nullable=False)
    )
    received_at: int = _time()
    received_by: str | None = Field(default=None, sa_type=Text)
    source: str = Field(sa_type=Text)
    carrier: str | None = Field(default=None, sa_type=String(16))
    role: str | None = Field(default=None, sa_type=String(32))
    dialog: str | None = Field(default=None, sa_type=Text)
    task_id: str | None = Field(default=None, sa_type=Text)
    task_state: str | None = Field(default=None, sa_type=String(64))
    reason: str = Field(sa_type=Text)
    detail: str | None = Field(default=None, sa_type=Text)
    verdict: dict[str, Any] = Field(sa_type=JSON)  # the profile §11 verdict as reported
    ingested_at: int = _time()
    # The capture record's observation id (``Carried.key``): a shipper's retry of a refused
    # item is stored once, as for elements (``ObservationRow.observation_key``).
    observation_key: str | None = _observation_key()


class LoginLimitRow(SQLModel, table=True):
    """One login limit's state (alembic 0014, ``app.store.limits``): for a client address,
    the attempts ``count`` of the window that began at ``started_at``; for a user name from
    an address, the failures in a row (``count``) and when the next try may come
    (``next_at``). ``key`` is the SHA-256 of the scope and the name or address, never the
    text itself: people type passwords into the name field. One row per key, read and
    written under its lock before the password is checked, so concurrent attempts on any
    instance are counted one after the other."""

    __tablename__ = "login_limit"

    key: str = Field(sa_type=String(64), primary_key=True)
    count: int = 0
    started_at: int = _time()
    next_at: int = _time(index=True)


class UploadReportRow(SQLModel, table=True):
    """The JSON report of one upload, for its user to download from any instance until
    ``expires_at`` (``app.store.reports``)."""

    __tablename__ = "upload_report"

    key: str = Field(sa_type=String(64), primary_key=True)
    user_id: int = _ref("operator_user.id", index=True)
    body: bytes = Field(sa_type=Octets)
    created_at: int = _time()
    expires_at: int = _time(index=True)


class TrustRejudgeRow(SQLModel, table=True):
    """A trust store under which the elements refused ``untrusted-key`` or
    ``bad-signature`` were judged again (``app.ingest.rejudge``): the first instance to load
    it does the work, the others find this row and skip it."""

    __tablename__ = "trust_rejudge"

    trust: str = Field(sa_type=String(64), primary_key=True)
    started_at: int = _time()
    judged: int = Field(default=0, sa_type=BigInteger)
    closed: int = Field(default=0, sa_type=BigInteger)


class WriteProbeRow(SQLModel, table=True):
    """One row per serving process, rewritten by each ``/readyz`` (``app.store.db.probe``):
    a real write, so an instance whose database cannot be written says it is not ready."""

    __tablename__ = "write_probe"

    name: str = Field(sa_type=String(160), primary_key=True)
    at: int = _time()


# --- the evidence log (app/log, docs/evidence-log.md; alembic 0013) ---------------------------


class LogLeafRow(SQLModel, table=True):
    """One leaf of the evidence log: the 44-octet leaf (``app.log.leaf``) of one stored
    element (``source`` 1) or of refused octets (``source`` 2), at its index. Append-only,
    written by the sequencer; each stored row has at most one leaf."""

    __tablename__ = "tlog_leaf"
    __table_args__ = (Index("ix_tlog_leaf_source_digest", "source", "digest", unique=True),)

    idx: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    source: int = Field(sa_type=SmallInteger)
    digest: bytes = _digest()
    leaf: bytes = Field(sa_type=Octets)
    sequenced_at: int = _time()


class LogNodeRow(SQLModel, table=True):
    """The hash of one complete subtree of the log's Merkle tree: ``level`` 0 are the leaf
    hashes; node (level, idx) covers leaves idx * 2**level up to (idx + 1) * 2**level. The
    tiles are read from these."""

    __tablename__ = "tlog_node"

    level: int = Field(sa_column=Column(SmallInteger, primary_key=True, autoincrement=False))
    idx: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    hash: bytes = _digest()


class LogStateRow(SQLModel, table=True):
    """The log's size and root: the one row every sequencer compares and swaps, so that one
    of several instances appends at a time and the others find they lost."""

    __tablename__ = "tlog_state"

    name: str = Field(sa_type=String(16), primary_key=True)
    size: int = Field(sa_type=BigInteger)
    root: bytes = _digest()
    updated_at: int = _time()


class LogCheckpointRow(SQLModel, table=True):
    """Every checkpoint the log published (a signed note, C2SP tlog-checkpoint), by size."""

    __tablename__ = "tlog_checkpoint"

    size: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    root: bytes = _digest()
    note: str = Field(sa_type=Text)
    published_at: int = _time()


class TrustKeyWindowRow(SQLModel, table=True):
    """Key history (issue 21): one stretch during which a trust source published a key,
    from the first fetch that showed it to the first that no longer did (``stopped_at``).
    Shared by every instance, so they all judge with the same history."""

    __tablename__ = "trust_key_window"

    source: str = Field(sa_type=String(200), primary_key=True)
    kid: str = Field(sa_type=String(128), primary_key=True)
    thumbprint: str = Field(sa_type=String(64), primary_key=True)
    generation: int = Field(sa_type=Integer, primary_key=True)
    jwk: str = Field(sa_type=Text)
    first_seen: int = _time()
    stopped_at: int | None = Field(default=None, sa_type=BigInteger)


class TrustRevocationRow(SQLModel, table=True):
    """A key revoked by an operator (``POST /api/v1/trust/revocations``): the key with this
    thumbprint, or every key with this kid, signs nothing after ``at``."""

    __tablename__ = "trust_revocation"
    __table_args__ = (Index("ux_trust_revocation", "thumbprint", "kid", "at", unique=True),)

    id: int | None = _id()
    thumbprint: str = Field(default="", sa_type=String(64))  # "" when named by kid
    kid: str = Field(default="", sa_type=String(128))  # "" when named by thumbprint
    at: int = _time()
    reason: str = Field(default="", sa_type=Text)
    actor: str = Field(sa_type=String(200))
    created_at: int = _time()


class TrustEventRow(SQLModel, table=True):
    """The trust audit log: every key set fetched, every refusal and outage of a source,
    every revocation, with when and by which instance's refresher."""

    __tablename__ = "trust_event"

    id: int | None = _id()
    at: int = _time(index=True)
    kind: str = Field(sa_type=String(20))
    source: str = Field(sa_type=String(200))
    detail: str = Field(sa_type=Text)
    keys: list[list[str]] = Field(default_factory=list, sa_type=JSON)
