"""The element model (profile §1): offers, statuses, refs and the signed element around them.

Objects here are frozen and validated on construction; the only way in from octets is a
codec (``jws.parse`` / ``cose.parse``), which builds these from a decoded payload map.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from handoff_context._encoding import DIGEST_OCTETS, MAX_SAFE_INT, digest_text, parse_digest_text
from handoff_context._frozen import quick_init
from handoff_context.errors import MalformedError, Reason


class Form(StrEnum):
    JWS = "jws"
    COSE = "cose"


def form_of(octets: bytes) -> Form:
    """The form of element octets: compact JWS always opens with the base64url of '{"'
    ("eyJ"); anything else is taken for COSE (a CBOR tag), which its parser then judges."""
    return Form.JWS if octets[:3] == b"eyJ" else Form.COSE


# Enum members read on every element, as module constants the library's modules import:
# Python 3.11 reads ``Enum.X`` through the enum metaclass's ``__getattr__`` hook (~900
# instructions a read; a plain name, a tenth of that).
_JWS, _COSE = Form.JWS, Form.COSE


class ElementType(StrEnum):
    OFFER = "offer"
    STATUS = "status"


class StatusState(StrEnum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def from_delegator(self) -> bool:
        """Who signs a status in this state (profile §1.2): the delegate answers every state
        except ``canceled``, which the delegator signs. The one place this rule is written;
        ``status_parties`` and ``hop_owner`` follow from it."""
        return self is _CANCELED


_CANCELED = StatusState.CANCELED  # read once (see _JWS)


def is_expired(exp: int, *, now: int, skew: int) -> bool:
    """Profile §6.3: an offer with ``exp`` is expired at ``now`` when ``now > exp + skew``; at
    ``exp + skew`` itself it is still fresh. The freshness check and the hop state
    ``expired`` (profile §8) both judge by this."""
    return now > exp + skew


def status_parties(state: StatusState, *, delegator: str, delegate: str) -> tuple[str, str]:
    """The (iss, aud) a status in ``state`` must carry for the offer delegator -> delegate
    (profile §1.2)."""
    return (delegator, delegate) if state.from_delegator else (delegate, delegator)


class RefKind(StrEnum):
    DIGEST = "digest"
    SALTED_DIGEST = "salted-digest"
    SCITT_RECEIPT = "scitt-receipt"
    LEARNLOG_HEAD = "learnlog-head"


HOP_RE = re.compile(r"^[A-Za-z0-9_-]{22,64}\Z")  # \Z: $ would also match before a final \n
# RFC 3986 scheme followed by a colon: what "an absolute URI" needs at the least.
_ABSOLUTE_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:[\x21-\x7e]+\Z")
MAX_IDENTIFIER = 2048
MAX_KID = 128
REASON_CODES = frozenset(r.value for r in Reason if r is not Reason.MALFORMED)


def check_identifier(value: object, *, what: str, limit: int = MAX_IDENTIFIER) -> str:
    """Profile §1.2 [profile]: 1..limit printable ASCII characters, nothing that can hide."""
    if not isinstance(value, str):
        raise MalformedError(f"{what} must be a string")
    if not 1 <= len(value) <= limit:
        raise MalformedError(f"{what} must be 1 to {limit} characters")
    # U+0021 to U+007E: ASCII that is printable (U+0020 to U+007E) and not a space. Three C
    # checks, a third cheaper than a regular expression (~5 identifiers an element);
    # tests/test_properties.py holds them to the pattern ``[\x21-\x7e]+``.
    if not (value.isascii() and value.isprintable()) or " " in value:
        raise MalformedError(f"{what} must be printable ASCII without spaces or control characters")
    return value


def is_absolute_uri(value: str) -> bool:
    return bool(_ABSOLUTE_URI.match(value))


def _check_detail(value: object) -> str:
    if not isinstance(value, str):
        raise MalformedError("detail must be a string")
    if "\x00" in value:
        raise MalformedError("detail must not contain NUL")
    if not value.isascii() and not _encodes(value):
        raise MalformedError("detail must not contain lone surrogates")
    return value


def _encodes(text: str) -> bool:
    """Whether UTF-8 can encode ``text``: exactly when it holds no surrogate code point
    (U+D800 to U+DFFF). ASCII text holds none, so callers ask only of other text: a C check
    instead of a Python step per character (tests/test_properties.py pins the two)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_int(value: object, *, what: str, low: int = 0, high: int = MAX_SAFE_INT) -> int:
    # bool is a subclass of int in Python; the profile refuses true/false as integers.
    if type(value) is not int:
        raise MalformedError(f"{what} must be an integer")
    if not low <= value <= high:
        raise MalformedError(f"{what} must be between {low} and {high}")
    return value


def _check_digest(value: object, *, what: str, form: Form) -> bytes:
    if form is _JWS:
        return parse_digest_text(value, what=what)
    if not isinstance(value, bytes) or len(value) != DIGEST_OCTETS:
        raise MalformedError(f"{what} must be a 32-byte byte string")
    return value


def _optional_text(payload: Mapping[str, Any], key: str) -> str | None:
    if key not in payload:
        return None
    return check_identifier(payload[key], what=key)


@dataclass(frozen=True, slots=True)
class Ref:
    """A prior-context reference (profile §5)."""

    kind: str
    digest: bytes
    name: str | None = None
    uri: str | None = None
    media_type: str | None = None

    @property
    def known_kind(self) -> RefKind | None:
        try:
            return RefKind(self.kind)
        except ValueError:
            return None

    @classmethod
    def from_mapping(cls, value: object, *, form: Form, index: int) -> Ref:
        what = f"refs[{index}]"
        if not isinstance(value, Mapping):
            raise MalformedError(f"{what} must be an object")
        kind = value.get("kind")
        if not isinstance(kind, str):
            raise MalformedError(f"{what}.kind must be a string")
        if kind not in RefKind.__members__.values() and not is_absolute_uri(kind):
            raise MalformedError(f"{what}.kind {kind!r} is neither a known kind nor a URI")
        if "digest" not in value:
            raise MalformedError(f"{what}.digest is required")
        digest = _check_digest(value["digest"], what=f"{what}.digest", form=form)
        name = value.get("name")
        if name is not None:
            name = _check_detail(name)
        uri = value.get("uri")
        if uri is not None:
            uri = check_identifier(uri, what=f"{what}.uri")
        media_type = value.get("media_type")
        if media_type is not None:
            media_type = check_identifier(media_type, what=f"{what}.media_type")
        return cls(kind=kind, digest=digest, name=name, uri=uri, media_type=media_type)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "digest": digest_text(self.digest)}
        for key in ("name", "uri", "media_type"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def _refs(payload: Mapping[str, Any], form: Form) -> tuple[Ref, ...]:
    if "refs" not in payload:
        return ()
    raw = payload["refs"]
    if not isinstance(raw, list):
        raise MalformedError("refs must be an array")
    return tuple(Ref.from_mapping(item, form=form, index=i) for i, item in enumerate(raw))


def _common(payload: Mapping[str, Any], expected_type: ElementType) -> None:
    if payload.get("v") != 1 or type(payload.get("v")) is not int:
        raise MalformedError("v must be the integer 1")
    # ``_value_``, the same string as ``.value`` without the property's descriptor call
    # (half a microsecond, for every element parsed).
    if payload.get("type") != expected_type._value_:
        raise MalformedError(f"type must be {expected_type.value!r}")


# Read once (see ``_JWS``): every element parsed names its type.
_OFFER, _STATUS = ElementType.OFFER, ElementType.STATUS


def _hop(payload: Mapping[str, Any]) -> str:
    hop = payload.get("hop")
    if not isinstance(hop, str) or not HOP_RE.match(hop):
        raise MalformedError("hop must be 22 to 64 base64url characters")
    return hop


@quick_init
@dataclass(frozen=True, slots=True)
class Offer:
    """An offer payload (profile §1.1)."""

    hop: str
    dialog: str
    iss: str
    aud: str
    iat: int
    exp: int
    task: str | None = None
    obo: str | None = None
    grant: bytes | None = None
    prev: bytes | None = None
    refs: tuple[Ref, ...] = ()

    type: ElementType = field(default=ElementType.OFFER, init=False)

    def __post_init__(self) -> None:
        if not self.iat < self.exp:
            raise MalformedError("iat must be before exp")

    @property
    def hop_owner(self) -> str:
        """The delegator, whose (iss, hop) names the hop (profile §8): the offer's issuer."""
        return self.iss

    @classmethod
    def from_mapping(cls, payload: Mapping[str, Any], *, form: Form) -> Offer:
        """Validate a decoded payload map. Raises MalformedError."""
        _common(payload, _OFFER)
        for key in ("dialog", "iss", "aud", "iat", "exp"):
            if key not in payload:
                raise MalformedError(f"offer is missing {key}")
        grant = payload.get("grant")
        prev = payload.get("prev")
        # Positional, in the fields' order, which is also the order of the checks (a class
        # called with keywords gets them as a dict, built and unpacked again).
        return cls(
            _hop(payload),
            check_identifier(payload["dialog"], what="dialog"),
            check_identifier(payload["iss"], what="iss"),
            check_identifier(payload["aud"], what="aud"),
            _check_int(payload["iat"], what="iat"),
            _check_int(payload["exp"], what="exp"),
            _optional_text(payload, "task"),
            _optional_text(payload, "obo"),
            None if grant is None else _check_digest(grant, what="grant", form=form),
            None if prev is None else _check_digest(prev, what="prev", form=form),
            _refs(payload, form),
        )


@quick_init
@dataclass(frozen=True, slots=True)
class Status:
    """A status payload (profile §1.2)."""

    hop: str
    offer: bytes
    iss: str
    aud: str
    iat: int
    state: StatusState
    reason: str | None = None
    detail: str | None = None
    refs: tuple[Ref, ...] = ()

    type: ElementType = field(default=ElementType.STATUS, init=False)

    @property
    def dialog(self) -> None:
        """Statuses carry no dialog member; present so callers can treat both alike."""
        return None

    @property
    def hop_owner(self) -> str:
        """The delegator of the hop this status is about (profile §8's hop key is (delegator,
        hop)): its issuer for a ``canceled``, else its audience (profile §1.2)."""
        return self.iss if self.state.from_delegator else self.aud

    @classmethod
    def from_mapping(cls, payload: Mapping[str, Any], *, form: Form) -> Status:
        """Validate a decoded payload map. Raises MalformedError."""
        _common(payload, _STATUS)
        for key in ("offer", "iss", "aud", "iat", "state"):
            if key not in payload:
                raise MalformedError(f"status is missing {key}")
        state = _state_of(payload["state"])
        reason = payload.get("reason")
        if reason is not None:
            if not isinstance(reason, str) or not (
                reason in REASON_CODES or is_absolute_uri(reason)
            ):
                raise MalformedError("reason must be a profile §1.2 reason code or an absolute URI")
            if state not in (StatusState.REJECTED, StatusState.FAILED):
                raise MalformedError("reason is allowed only on rejected and failed")
        detail = payload.get("detail")
        # Positional, in the fields' order (as ``Offer.from_mapping``).
        return cls(
            _hop(payload),
            _check_digest(payload["offer"], what="offer", form=form),
            check_identifier(payload["iss"], what="iss"),
            check_identifier(payload["aud"], what="aud"),
            _check_int(payload["iat"], what="iat"),
            state,
            reason,
            None if detail is None else _check_detail(detail),
            _refs(payload, form),
        )


Payload = Offer | Status

# Each state by its text: ``StatusState(value)`` answers the same for every decoded value
# (text, or a value that is no state: a number, bytes, a list, a map), through the enum's
# call machinery, a microsecond a status; tests/test_properties.py pins the two.
_STATES: dict[str, StatusState] = {state.value: state for state in StatusState}


def _state_of(value: object) -> StatusState:
    """A status payload's state. Raises MalformedError."""
    state = _STATES.get(value) if isinstance(value, str) else None
    if state is None:
        raise MalformedError("state must be one of " + ", ".join(StatusState))
    return state


@dataclass(frozen=True, slots=True)
class Header:
    """The protected header members the profile allows (profile §2, §3)."""

    alg: str
    kid: str | None
    # JWS `typ` or COSE content type, already checked against the payload's type.
    content_type: str


@quick_init
@dataclass(frozen=True, slots=True)
class Element:
    """One signed element exactly as received, parsed but not yet verified.

    ``octets`` are the signed octets (compact JWS ASCII or tagged COSE_Sign1), never
    re-serialized. ``signing_input`` is what the signature covers; two elements with the same
    ``signed_content`` and different ``octets`` differ only in their signature
    (equivocation variant ``signature-only``, profile §6.4).
    """

    form: Form
    octets: bytes
    digest: bytes
    header: Header
    payload: Payload
    signing_input: bytes
    signature: bytes
    # Header and payload octets as signed (independent of the signature bytes).
    signed_content: bytes
    # The decoded protected header and payload, for display (never re-signed).
    raw_header: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    raw_payload: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def type(self) -> ElementType:
        return self.payload.type

    @property
    def digest_text(self) -> str:
        return digest_text(self.digest)

    @property
    def is_offer(self) -> bool:
        return isinstance(self.payload, Offer)


_STATUS_TYPE = ElementType.STATUS.value


def read_payload(doc: Mapping[str, Any], *, form: Form) -> Offer | Status:
    """Validate a decoded payload map as the element its ``type`` names. Raises
    MalformedError."""
    if doc.get("type") == _STATUS_TYPE:
        return Status.from_mapping(doc, form=form)
    return Offer.from_mapping(doc, form=form)


def try_read_payload(doc: object, *, form: Form) -> Offer | Status | None:
    """``read_payload`` for evidence only: None instead of an error."""
    if not isinstance(doc, Mapping):
        return None
    try:
        return read_payload(doc, form=form)
    except MalformedError:
        return None
