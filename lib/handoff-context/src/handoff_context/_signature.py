"""The signature layer shared by both forms (profile §2, §3, §4).

Both forms sign with raw signatures: ES256 as 64-byte ``r||s`` and Ed25519 as 64 bytes, so
one function checks either once the codec has produced the signing input. The arithmetic is
joserfc's algorithm models over cryptography; the profile's own rules (exact sizes, scalar
range, which key may be used) are checked here around them.
"""

from __future__ import annotations

from typing import Any

from joserfc.jws import JWSRegistry

from handoff_context._model import Element
from handoff_context._trust import TrustedKey, TrustStore
from handoff_context.errors import CheckFailed, Reason

# P-256 group order (SEC 2): ES256 needs 1 <= r, s < n (profile §2).
_P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551

# JOSE algorithm name -> the key type it needs. "EdDSA" and "Ed25519" are the same
# algorithm here: RFC 9864 renamed it and this profile has only the Ed25519 curve.
KTY_FOR_ALG = {"ES256": "EC", "Ed25519": "OKP", "EdDSA": "OKP"}
SUPPORTED_ALGS = frozenset(KTY_FOR_ALG)

# joserfc's "EdDSA" model warns about its deprecation on use; the Ed25519 model is the
# same math without the warning, so both names use it.
_MODELS = {
    "ES256": JWSRegistry.algorithms["ES256"],
    "Ed25519": JWSRegistry.algorithms["Ed25519"],
    "EdDSA": JWSRegistry.algorithms["Ed25519"],
}


def verify_raw(alg: str, key: Any, signing_input: bytes, signature: bytes) -> bool:
    """True when ``signature`` over ``signing_input`` verifies under ``key`` with ``alg``.

    Returns False (never raises) for a signature of the wrong size or out-of-range scalars.
    Raises KeyError only for an algorithm outside SUPPORTED_ALGS (a programming error: the
    codecs refuse those while parsing).
    """
    model = _MODELS[alg]
    if len(signature) != 64:
        return False
    if alg == "ES256":
        r = int.from_bytes(signature[:32], "big")
        s = int.from_bytes(signature[32:], "big")
        if not (1 <= r < _P256_N and 1 <= s < _P256_N):
            return False
    return bool(model.verify(signing_input, signature, key))


def sign_raw(alg: str, private_key: Any, signing_input: bytes) -> bytes:
    """Sign with a joserfc private key: raw ``r||s`` for ES256, 64 bytes for Ed25519."""
    return bytes(_MODELS[alg].sign(signing_input, private_key))


def verify_element(element: Element, trust: TrustStore, *, skew: int = 0) -> TrustedKey:
    """Check the element's signature with the keys configured for its ``iss`` (profile §4, §6.1).

    Only keys valid at the element's ``iat`` (within ``skew``: a key gone from its source, or
    revoked) may speak for it, so a rotation never turns old evidence into ``untrusted-key``
    and a revoked key signs nothing new. Returns the key that verified. Raises CheckFailed
    with ``untrusted-key`` when the issuer has no configured key or the key that verifies was
    not valid at ``iat``, or ``bad-signature`` when it has keys but none fits and verifies.
    """
    iss = element.payload.iss
    keys = trust.keys_for(iss)
    if not keys:
        raise CheckFailed(Reason.UNTRUSTED_KEY, f"no key is configured for issuer {iss!r}")
    alg = element.header.alg
    kid = element.header.kid
    if kid is not None:
        chosen = [k for k in keys if k.kid == kid]
        if not chosen:
            raise CheckFailed(
                Reason.BAD_SIGNATURE, f"kid {kid!r} names none of the keys of {iss!r}"
            )
        if chosen[0].kty != KTY_FOR_ALG[alg]:
            raise CheckFailed(
                Reason.BAD_SIGNATURE, f"alg {alg} does not fit key {kid!r} ({chosen[0].kty})"
            )
    else:
        chosen = [k for k in keys if k.kty == KTY_FOR_ALG[alg]]
        if not chosen:
            raise CheckFailed(Reason.BAD_SIGNATURE, f"{iss!r} has no key that fits alg {alg}")
    iat = element.payload.iat
    valid = [k for k in chosen if k.invalid_at(iat, skew) is None]
    for key in valid:
        if verify_raw(alg, key.key, element.signing_input, element.signature):
            return key
    # A key that verifies but was not valid at iat says more than "bad signature": the
    # signer holds a withdrawn or revoked key (one more verify, on the failure path only).
    for key in chosen:
        why = key.invalid_at(iat, skew)
        if why is not None and verify_raw(alg, key.key, element.signing_input, element.signature):
            raise CheckFailed(Reason.UNTRUSTED_KEY, f"{why}; {iss!r} no longer speaks with it")
    which = f"key {kid!r}" if kid is not None else f"any of the {len(chosen)} keys"
    raise CheckFailed(
        Reason.BAD_SIGNATURE, f"the {alg} signature does not verify with {which} of {iss!r}"
    )
