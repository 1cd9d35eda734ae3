"""What a deployment reads as an envelope and the rules its cases are judged by
(``HANDOFF_TRACE_ENVELOPE_TYPES``, ``..._ACCEPT_WINDOW``, ``..._TRANSCRIPT_BYTES``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.envelope.extract import DEFAULT_TYPES
from app.envelope.ledger import CaseRules


@dataclass(frozen=True)
class EnvelopeConfig:
    types: frozenset[str] = DEFAULT_TYPES  # accepted envelope media types, lower case
    rules: CaseRules = field(default_factory=CaseRules)
