"""handoff-context: sign, carry and check Signed Handoff Context elements.

Everything an agent needs is importable from here; the names in ``__all__`` are the public
API (README.md lists them by task). Modules whose names start with an underscore are
private: they may change in any release. ``handoff_context.errors`` (the error hierarchy),
``handoff_context.conformance`` (the conformance kit), ``handoff_context.vectors`` (the
published vectors), ``handoff_context.reporter`` (reporting live to a handoff-trace service)
``handoff_context.taps`` (zero-code ASGI and httpx taps feeding a reporter),
``handoff_context.agent`` (an agent's handoff side, whatever SDK carries it) and the SDK
integrations ``handoff_context.a2a`` and ``handoff_context.mcp`` (extras ``[a2a]`` and
``[mcp]``; the core never imports them) are public modules too.
"""

import importlib
from typing import TYPE_CHECKING, Any

from handoff_context import carry
from handoff_context._encoding import (
    MAX_ELEMENT_OCTETS,
    MAX_SAFE_INT,
    b64url_decode,
    b64url_encode,
    digest_text,
    handoff_digest,
    parse_digest_text,
    strict_json_loads,
)
from handoff_context._flags import (
    CountingOffer,
    Rejection,
    canonical_order,
    equivocation_flag,
    rejection_flags,
)
from handoff_context._handoff import HandoffObject, StatusObject, parse_object
from handoff_context._lifecycle import (
    A2A_STATE,
    SEVERITY,
    DownstreamFact,
    Flag,
    FlagKind,
    HopState,
    HopView,
    HostObservation,
    OfferFact,
    Severity,
    StatusFact,
    Timing,
    derive_hop,
    hop_state_of_a2a,
)
from handoff_context._memory import (
    AnswerMemory,
    InMemoryState,
    OfferIndex,
    Remembered,
    ReplayMemory,
    SeenStatuses,
    SignatureCache,
    content_fingerprint,
)
from handoff_context._model import (
    Element,
    ElementType,
    Form,
    Header,
    Offer,
    Ref,
    RefKind,
    Status,
    StatusState,
    check_identifier,
    form_of,
    is_expired,
    status_parties,
)
from handoff_context._refs import AvailableObject, ObjectIndex, RefPolicy
from handoff_context._trust import TrustedKey, TrustStore
from handoff_context._verdict import (
    OFFER_CHECKS,
    STATUS_CHECKS,
    ChainElementReport,
    ChainReport,
    CheckResult,
    Equivocation,
    Outcome,
    RefOutcome,
    RefReport,
    Result,
    Variant,
    Verdict,
)
from handoff_context._verify import Context, Judged, Policy, Session, Verifier, parse_element
from handoff_context.carry import A2A_EXTENSION_URI, MCP_META_KEY, Carrier, Role
from handoff_context.errors import (
    ChainWindowError,
    CheckFailed,
    EmbeddedKeyError,
    HandoffError,
    KeyFileError,
    MalformedError,
    Reason,
    ReplyError,
    TrustConfigError,
)

if TYPE_CHECKING:
    from handoff_context._filestate import FileState
    from handoff_context._sign import (
        Signer,
        alg_for_key,
        continue_handoff,
        handoff_object,
        import_private_key,
        make_chain,
        make_offer,
        make_status,
        new_hop,
        new_key,
        offer_payload,
        public_jwk,
        sign_payload,
        status_object,
        status_payload,
        trust_document,
    )
    from handoff_context.agent import Agent, Delegation, Mode

# The signing and agent side, imported on first use (PEP 562): signing needs joserfc, and
# joserfc brings ``cryptography``'s X.509 layer, about 0.04 s of start-up (a quarter of
# ``handoff-trace verify``'s) that a process which only checks never uses.
_LAZY = {
    "FileState": "handoff_context._filestate",
    "Signer": "handoff_context._sign",
    "alg_for_key": "handoff_context._sign",
    "continue_handoff": "handoff_context._sign",
    "handoff_object": "handoff_context._sign",
    "import_private_key": "handoff_context._sign",
    "make_chain": "handoff_context._sign",
    "make_offer": "handoff_context._sign",
    "make_status": "handoff_context._sign",
    "new_hop": "handoff_context._sign",
    "new_key": "handoff_context._sign",
    "offer_payload": "handoff_context._sign",
    "public_jwk": "handoff_context._sign",
    "sign_payload": "handoff_context._sign",
    "status_object": "handoff_context._sign",
    "status_payload": "handoff_context._sign",
    "trust_document": "handoff_context._sign",
    "Agent": "handoff_context.agent",
    "Delegation": "handoff_context.agent",
    "Mode": "handoff_context.agent",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        if name == "agent":  # the public module, as when this package imported it eagerly
            return importlib.import_module("handoff_context.agent")
        raise AttributeError(f"module 'handoff_context' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"

__all__ = [
    "A2A_EXTENSION_URI",
    "A2A_STATE",
    "MAX_ELEMENT_OCTETS",
    "MAX_SAFE_INT",
    "MCP_META_KEY",
    "OFFER_CHECKS",
    "SEVERITY",
    "STATUS_CHECKS",
    "Agent",
    "AnswerMemory",
    "AvailableObject",
    "Carrier",
    "ChainElementReport",
    "ChainReport",
    "ChainWindowError",
    "CheckFailed",
    "CheckResult",
    "Context",
    "CountingOffer",
    "Delegation",
    "DownstreamFact",
    "Element",
    "ElementType",
    "EmbeddedKeyError",
    "Equivocation",
    "FileState",
    "Flag",
    "FlagKind",
    "Form",
    "HandoffError",
    "HandoffObject",
    "Header",
    "HopState",
    "HopView",
    "HostObservation",
    "InMemoryState",
    "Judged",
    "KeyFileError",
    "MalformedError",
    "Mode",
    "ObjectIndex",
    "Offer",
    "OfferFact",
    "OfferIndex",
    "Outcome",
    "Policy",
    "Reason",
    "Ref",
    "RefKind",
    "RefOutcome",
    "RefPolicy",
    "RefReport",
    "Rejection",
    "Remembered",
    "ReplayMemory",
    "ReplyError",
    "Result",
    "Role",
    "SeenStatuses",
    "Session",
    "Severity",
    "SignatureCache",
    "Signer",
    "Status",
    "StatusFact",
    "StatusObject",
    "StatusState",
    "Timing",
    "TrustConfigError",
    "TrustStore",
    "TrustedKey",
    "Variant",
    "Verdict",
    "Verifier",
    "__version__",
    "alg_for_key",
    "b64url_decode",
    "b64url_encode",
    "canonical_order",
    "carry",
    "check_identifier",
    "content_fingerprint",
    "continue_handoff",
    "derive_hop",
    "digest_text",
    "equivocation_flag",
    "form_of",
    "handoff_digest",
    "handoff_object",
    "hop_state_of_a2a",
    "import_private_key",
    "is_expired",
    "make_chain",
    "make_offer",
    "make_status",
    "new_hop",
    "new_key",
    "offer_payload",
    "parse_digest_text",
    "parse_element",
    "parse_object",
    "public_jwk",
    "rejection_flags",
    "sign_payload",
    "status_object",
    "status_parties",
    "status_payload",
    "strict_json_loads",
    "trust_document",
]
