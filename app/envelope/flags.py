"""The envelope flag kinds and their severities (docs/envelopes.md): defined here only.

``app.envelope.ledger`` raises them. The service's flag table and triage queue hold them
beside the hop flags of signed handoffs, which the protocol library defines
(``handoff_context.FlagKind``, ``handoff_context.SEVERITY``); ``FlagKind`` below is the union
of both, in that order, so every kind filter of the API, the CLI and the triage queue knows
every kind, and ``SEVERITY`` gives any kind's severity.
"""

from __future__ import annotations

from enum import StrEnum

from handoff_context import SEVERITY as HOP_SEVERITY
from handoff_context import FlagKind as HopFlagKind
from handoff_context import Severity

__all__ = ["ENVELOPE_SEVERITY", "SEVERITY", "EnvelopeFlagKind", "FlagKind", "HopFlagKind"]


class EnvelopeFlagKind(StrEnum):
    TWO_OWNERS = "two-owners"
    RELEASE_BEFORE_ACCEPT = "release-before-accept"
    LOST_ACCEPTANCE = "lost-acceptance"
    NO_OWNER = "no-owner"
    STALE_EPOCH = "stale-epoch"
    EXPIRED_REFERENCE = "expired-reference"
    REFERENCE_MISMATCH = "reference-mismatch"
    MISSING_HASH = "missing-hash"
    VERSION_DRIFT = "version-drift"
    INVALID_ENVELOPE = "invalid-envelope"
    CONTEXT_ID_REUSE = "context-id-reuse"
    TRANSCRIPT_DUMP = "transcript-dump"
    UNSOURCED_FACT = "unsourced-fact"


# Two agents acting on one case is as bad as a signer contradicting itself; a case nobody
# may own, or owned on a stale epoch, needs someone soon; bad evidence or an unread envelope
# is worth a look; sloppy envelopes are low.
ENVELOPE_SEVERITY: dict[EnvelopeFlagKind, Severity] = {
    EnvelopeFlagKind.TWO_OWNERS: Severity.CRITICAL,
    EnvelopeFlagKind.RELEASE_BEFORE_ACCEPT: Severity.HIGH,
    EnvelopeFlagKind.LOST_ACCEPTANCE: Severity.HIGH,
    EnvelopeFlagKind.NO_OWNER: Severity.HIGH,
    EnvelopeFlagKind.STALE_EPOCH: Severity.HIGH,
    EnvelopeFlagKind.EXPIRED_REFERENCE: Severity.MEDIUM,
    EnvelopeFlagKind.REFERENCE_MISMATCH: Severity.MEDIUM,
    EnvelopeFlagKind.MISSING_HASH: Severity.MEDIUM,
    EnvelopeFlagKind.VERSION_DRIFT: Severity.MEDIUM,
    EnvelopeFlagKind.INVALID_ENVELOPE: Severity.MEDIUM,
    EnvelopeFlagKind.CONTEXT_ID_REUSE: Severity.MEDIUM,
    EnvelopeFlagKind.TRANSCRIPT_DUMP: Severity.LOW,
    EnvelopeFlagKind.UNSOURCED_FACT: Severity.LOW,
}

# Every kind of the flag table, built from the two definitions rather than listed again. A
# StrEnum member equals its value, so a hop flag's kind (the library's member) and the
# union's member of the same name compare and hash alike.
FlagKind = StrEnum(  # type: ignore[misc]  # members come from the two enums above
    "FlagKind",
    [(k.name, k.value) for k in (*HopFlagKind, *EnvelopeFlagKind)],
    module=__name__,
)
SEVERITY: dict[str, Severity] = {**HOP_SEVERITY, **ENVELOPE_SEVERITY}
