"""The verdict report (profile §11): what a careful receiver decided about one element, and why.

The same JSON shape is printed by ``verify --json`` and answered by the HTTP API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from handoff_context._encoding import digest_text
from handoff_context._frozen import quick_init
from handoff_context._model import StatusState
from handoff_context.errors import Reason


class Outcome(StrEnum):
    ACCEPT = "accept"
    REJECT = "reject"
    DUPLICATE = "duplicate"
    PENDING = "pending"


class Result(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    NOT_CHECKED = "not-checked"
    NOT_RUN = "not-run"


# Read on every element (see ``_model._JWS``).
_PASS, _NOT_CHECKED = Result.PASS, Result.NOT_CHECKED
_ACCEPT = Outcome.ACCEPT


class RefOutcome(StrEnum):
    VERIFIED = "verified"
    MISMATCH = "mismatch"
    UNVERIFIABLE = "unverifiable"
    NOT_CHECKED = "not-checked"


class Variant(StrEnum):
    CONTENT = "content"
    SIGNATURE_ONLY = "signature-only"


OFFER_CHECKS = ("signature", "audience", "freshness", "replay", "dialog", "chain", "refs")
STATUS_CHECKS = ("signature", "offer", "parties")


@dataclass(slots=True)
class CheckResult:
    check: str
    result: Result
    reason: Reason | None = None
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"check": self.check, "result": self.result.value}
        if self.reason is not None:
            out["reason"] = self.reason.value
        if self.detail is not None:
            out["detail"] = self.detail
        return out


@quick_init
@dataclass(frozen=True, slots=True)
class ChainElementReport:
    index: int
    digest: bytes | None
    iss: str | None
    aud: str | None
    result: Result
    reason: Reason | None = None
    hop: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "digest": None if self.digest is None else digest_text(self.digest),
            "iss": self.iss,
            "aud": self.aud,
            "hop": self.hop,
            "result": self.result.value,
        }
        if self.reason is not None:
            out["reason"] = self.reason.value
        return out


@dataclass(slots=True)
class ChainReport:
    carried: bool
    length: int
    partial: bool
    elements: list[ChainElementReport] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "carried": self.carried,
            "length": self.length,
            "partial": self.partial,
            "elements": [e.to_json() for e in self.elements],
        }


@dataclass(frozen=True, slots=True)
class RefReport:
    index: int
    kind: str
    outcome: RefOutcome
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "kind": self.kind,
            "outcome": self.outcome.value,
        }
        if self.detail is not None:
            out["detail"] = self.detail
        return out


@dataclass(frozen=True, slots=True)
class Equivocation:
    first: bytes
    variant: Variant

    def to_json(self) -> dict[str, Any]:
        return {"first": digest_text(self.first), "variant": self.variant.value}


@dataclass(slots=True)
class Verdict:
    """One element's verdict. ``reason`` is set exactly when ``outcome`` is reject."""

    source: str
    element: str | None  # "offer", "status" or None (nothing could be read)
    form: str | None = None
    digest: bytes | None = None
    iss: str | None = None
    aud: str | None = None
    hop: str | None = None
    outcome: Outcome = Outcome.REJECT
    reason: Reason | None = None
    detail: str | None = None
    checks: list[CheckResult] = field(default_factory=list)
    chain: ChainReport | None = None
    refs: list[RefReport] = field(default_factory=list)
    equivocation: Equivocation | None = None
    # Not part of profile §11's shape, kept for the store and the table output.
    dialog: str | None = None
    offer: bytes | None = None  # a status's offer digest
    # A status verdict's state, once the status could be read (None for offers).
    state: StatusState | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source,
            "element": self.element,
            "form": self.form,
            "digest": None if self.digest is None else digest_text(self.digest),
            "iss": self.iss,
            "aud": self.aud,
            "hop": self.hop,
            "outcome": self.outcome.value,
            "reason": None if self.reason is None else self.reason.value,
            "detail": self.detail,
            "checks": [c.to_json() for c in self.checks],
        }
        if self.element != "status":
            out["chain"] = None if self.chain is None else self.chain.to_json()
            out["refs"] = [r.to_json() for r in self.refs]
        else:
            out["offer"] = None if self.offer is None else digest_text(self.offer)
        out["equivocation"] = None if self.equivocation is None else self.equivocation.to_json()
        return out
