"""Prior-context reference checks (profile §5).

An object is found by the digest of its content, so a ``verified`` outcome always means
the SHA-256 was computed over octets we hold and matched. A ``mismatch`` needs to know
which object a ref meant without its digest: the ref's ``name`` (or the last segment of its
``uri``) naming an available object whose digest differs. No location is ever fetched.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from handoff_context._model import Ref, RefKind
from handoff_context._verdict import RefOutcome, RefReport
from handoff_context.errors import Reason


class RefPolicy(StrEnum):
    NONE = "none"  # report every ref as not-checked
    CHECK_AVAILABLE = "check-available"  # check what we hold; a mismatch rejects
    REQUIRE = "require"  # every ref must verify; anything short of that rejects


@dataclass(frozen=True, slots=True)
class AvailableObject:
    name: str
    content: bytes
    salt: bytes | None = None


@dataclass
class ObjectIndex:
    """Objects available for ref checks, indexed by plain and salted digest."""

    by_digest: dict[bytes, AvailableObject] = field(default_factory=dict)
    by_salted: dict[bytes, AvailableObject] = field(default_factory=dict)
    by_name: dict[str, AvailableObject] = field(default_factory=dict)

    @classmethod
    def of(cls, objects: Iterable[AvailableObject]) -> ObjectIndex:
        index = cls()
        for obj in objects:
            index.add(obj)
        return index

    def add(self, obj: AvailableObject) -> None:
        self.by_digest[hashlib.sha256(obj.content).digest()] = obj
        if obj.salt is not None:
            self.by_salted[hashlib.sha256(obj.salt + obj.content).digest()] = obj
        self.by_name[obj.name] = obj

    def named(self, ref: Ref) -> AvailableObject | None:
        for label in (ref.name, ref.uri.rstrip("/").rsplit("/", 1)[-1] if ref.uri else None):
            if label and label in self.by_name:
                return self.by_name[label]
        return None


def check_ref(ref: Ref, index: int, objects: ObjectIndex) -> RefReport:
    """Check one ref against the available objects (profile §5)."""
    kind = ref.known_kind
    if kind is None:
        return RefReport(
            index,
            ref.kind,
            RefOutcome.NOT_CHECKED,
            "kind named by URI is not known to this receiver",
        )
    if kind is RefKind.SALTED_DIGEST:
        if ref.digest in objects.by_salted:
            return RefReport(index, ref.kind, RefOutcome.VERIFIED)
        named = objects.named(ref)
        if named is None:
            return RefReport(index, ref.kind, RefOutcome.UNVERIFIABLE, "object not available")
        if named.salt is None:
            return RefReport(
                index, ref.kind, RefOutcome.UNVERIFIABLE, f"salt for {named.name!r} not available"
            )
        return RefReport(
            index,
            ref.kind,
            RefOutcome.MISMATCH,
            f"SHA-256(salt || {named.name!r}) differs from the ref's digest",
        )
    # digest, scitt-receipt and learnlog-head all name the SHA-256 of the object's octets.
    if ref.digest in objects.by_digest:
        return RefReport(index, ref.kind, RefOutcome.VERIFIED)
    named = objects.named(ref)
    if named is None:
        return RefReport(index, ref.kind, RefOutcome.UNVERIFIABLE, "object not available")
    return RefReport(
        index,
        ref.kind,
        RefOutcome.MISMATCH,
        f"SHA-256 of {named.name!r} differs from the ref's digest",
    )


def check_refs(
    refs: tuple[Ref, ...], policy: RefPolicy, objects: ObjectIndex
) -> tuple[list[RefReport], Reason | None, str | None]:
    """Check refs as far as ``policy`` asks. Returns the reports and, on failure, the
    reason and detail of the first failing ref."""
    if policy is RefPolicy.NONE:
        return (
            [RefReport(i, r.kind, RefOutcome.NOT_CHECKED) for i, r in enumerate(refs)],
            None,
            None,
        )
    reports = [check_ref(r, i, objects) for i, r in enumerate(refs)]
    for rep in reports:
        if rep.outcome is RefOutcome.MISMATCH:
            return reports, Reason.REF_MISMATCH, f"refs[{rep.index}]: {rep.detail}"
    if policy is RefPolicy.REQUIRE:
        for rep in reports:
            if rep.outcome is not RefOutcome.VERIFIED:
                return reports, Reason.UNVERIFIABLE_REF, f"refs[{rep.index}]: {rep.detail}"
    return reports, None, None
