"""The error hierarchy of the protocol core.

Every failure that can befall an element carries a machine ``reason`` (a profile §1.2 reason
code, or ``malformed`` for a local parse failure, profile §6) and a human ``detail``. Callers
branch on ``reason``; people read ``detail``.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """Rejection reasons: the profile §1.2 codes plus the local ``malformed`` (profile §6)."""

    BAD_SIGNATURE = "bad-signature"
    UNTRUSTED_KEY = "untrusted-key"
    WRONG_AUDIENCE = "wrong-audience"
    STALE = "stale"
    REPLAY = "replay"
    EQUIVOCATION = "equivocation"
    BROKEN_CHAIN = "broken-chain"
    CYCLE = "cycle"
    TOO_DEEP = "too-deep"
    UNVERIFIABLE_REF = "unverifiable-ref"
    REF_MISMATCH = "ref-mismatch"
    POLICY = "policy"
    # A local verdict only: never sent as a status reason (profile §6 [profile]).
    MALFORMED = "malformed"


class HandoffError(Exception):
    """Base of every error the protocol core raises about an element.

    ``reason`` is the machine code; ``detail`` is one sentence for people.
    """

    def __init__(self, reason: Reason, detail: str) -> None:
        detail = escaped(detail)
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


def escaped(detail: str) -> str:
    """``detail`` with every character that cannot be shown or stored as text written as a
    Python escape (``\\x00``, ``\\ud800``, ``\\u202e``). Details quote parts of hostile
    input (a header member's name); a NUL would fail in PostgreSQL, a lone surrogate in
    any UTF-8 encoder, and a bidi override would reorder what an operator reads."""
    if detail.isprintable():
        return detail
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in detail)


class MalformedError(HandoffError):
    """The octets are not a well-formed element of this profile (profile §1, §2, §3)."""

    def __init__(self, detail: str) -> None:
        super().__init__(Reason.MALFORMED, detail)


class CheckFailed(HandoffError):
    """A receiver check (profile §6, §7, §5) failed with ``reason``."""


class EmbeddedKeyError(CheckFailed):
    """The header carries a key (profile §2): ``untrusted-key``. ``payload`` is the element's
    payload when it could still be read, so the verdict can name the issuer and hop."""

    def __init__(self, detail: str, payload: object | None = None) -> None:
        super().__init__(Reason.UNTRUSTED_KEY, detail)
        self.payload = payload


class ChainWindowError(HandoffError):
    """``continue_handoff`` was asked to continue an offer that is no longer live at signing
    time (profile §7 timing): the next hop would reject the new offer as ``broken-chain``.
    ``received_exp`` is the continued offer's ``exp``; ``iat`` the refused signing time."""

    def __init__(self, detail: str, *, received_exp: int, iat: int) -> None:
        super().__init__(Reason.BROKEN_CHAIN, detail)
        self.received_exp = received_exp
        self.iat = iat


class ReplyError(HandoffError):
    """A reply helper (``make_status``) refused to sign a status that this library's own
    verifier would reject, or that the profile forbids (a ``rejected`` from a party that is
    not the offer's delegate, a reason on an ``accepted``, a status for ``equivocation``).
    Nothing was signed."""


class TrustConfigError(Exception):
    """The trust configuration is unusable (profile §4). A configuration error, not a verdict."""


class KeyFileError(ValueError):
    """A signing key file (or the environment variable holding one) cannot be used. The
    message names the file or variable, never the key."""
