"""The signature layer shared by both forms (profile §2, §3, §4).

Both forms sign with raw signatures: ES256 as 64-byte ``r||s`` and Ed25519 as 64 bytes, so
one function checks either once the codec has produced the signing input. Verifying calls
``cryptography`` directly; signing uses joserfc's algorithm models over it, imported only
when something signs (a receiver that only checks never loads joserfc). The profile's own
rules (exact sizes, scalar range, which key may be used) are checked here around them.
"""

from __future__ import annotations

from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from handoff_context._model import Element
from handoff_context._trust import TrustedKey, TrustStore
from handoff_context.errors import CheckFailed, Reason

# P-256 group order (SEC 2): ES256 needs 1 <= r, s < n (profile §2).
_P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551

# JOSE algorithm name -> the key type it needs. "EdDSA" and "Ed25519" are the same
# algorithm here: RFC 9864 renamed it and this profile has only the Ed25519 curve.
KTY_FOR_ALG = {"ES256": "EC", "Ed25519": "OKP", "EdDSA": "OKP"}
SUPPORTED_ALGS = frozenset(KTY_FOR_ALG)

# The joserfc model that signs for each algorithm. Its "EdDSA" model warns about its
# deprecation on use; the Ed25519 model is the same math without the warning, so both names
# use it (signing only: see verify_raw).
_MODELS = {"ES256": "ES256", "Ed25519": "Ed25519", "EdDSA": "Ed25519"}

# One ECDSA-with-SHA-256 parameter object for every ES256 verify (it holds no state).
_ECDSA_SHA256 = ec.ECDSA(hashes.SHA256())
# joserfc key -> its ``cryptography`` public key and the algorithm family it verifies
# ("EC" for P-256, "OKP" for Ed25519, "" for neither), taken once per key object: the key
# is held too, so its id is not reused while the entry lives. Bounded.
_OP_KEYS: dict[int, tuple[Any, Any, str]] = {}
_OP_KEYS_LIMIT = 4096


def _op_key(key: Any) -> tuple[Any, str]:
    if isinstance(key, ec.EllipticCurvePublicKey | Ed25519PublicKey):
        return key, _kind(key)  # a trusted key's own (TrustedKey.public)
    known = _OP_KEYS.get(id(key))
    if known is not None and known[0] is key:
        return known[1], known[2]
    op_key = key.get_op_key("verify")  # joserfc refuses a key whose key_ops exclude it
    kind = _kind(op_key)
    if len(_OP_KEYS) >= _OP_KEYS_LIMIT:
        _OP_KEYS.clear()
    _OP_KEYS[id(key)] = (key, op_key, kind)
    return op_key, kind


def _kind(op_key: Any) -> str:
    if isinstance(op_key, ec.EllipticCurvePublicKey) and isinstance(op_key.curve, ec.SECP256R1):
        return "EC"
    return "OKP" if isinstance(op_key, Ed25519PublicKey) else ""


def verify_raw(alg: str, key: Any, signing_input: bytes, signature: bytes) -> bool:
    """True when ``signature`` over ``signing_input`` verifies under ``key`` with ``alg``.

    ``key`` is a ``cryptography`` public key or a joserfc public key. Returns False (never
    raises) for a signature of the wrong size, out-of-range scalars, or a key that does not
    fit ``alg`` (ES256 needs P-256).
    Raises KeyError only for an algorithm outside SUPPORTED_ALGS (a programming error: the
    codecs refuse those while parsing).

    ``cryptography`` is called directly, as joserfc's models do, without what they redo on
    every call (the key's operation check, a new ECDSA object): this is the hot path.
    """
    kty = KTY_FOR_ALG[alg]
    if len(signature) != 64:
        return False
    op_key, kind = _op_key(key)
    if kind != kty:
        return False
    try:
        if kty == "EC":
            r = int.from_bytes(signature[:32], "big")
            s = int.from_bytes(signature[32:], "big")
            if not (1 <= r < _P256_N and 1 <= s < _P256_N):
                return False
            op_key.verify(encode_dss_signature(r, s), signing_input, _ECDSA_SHA256)
        else:
            op_key.verify(signature, signing_input)
    except InvalidSignature:
        return False
    return True


def sign_raw(alg: str, private_key: Any, signing_input: bytes) -> bytes:
    """Sign with a joserfc private key: raw ``r||s`` for ES256, 64 bytes for Ed25519."""
    model = _MODELS[alg]
    from joserfc.jws import JWSRegistry

    return bytes(JWSRegistry.algorithms[model].sign(signing_input, private_key))


def verify_element(element: Element, trust: TrustStore, *, skew: int = 0) -> TrustedKey:
    """Check the element's signature with the keys configured for its ``iss`` (profile §4, §6.1).

    Only keys valid at the element's ``iat`` (within ``skew``: a key gone from its source, or
    revoked) may speak for it, so a rotation never turns old evidence into ``untrusted-key``
    and a revoked key signs nothing new. Returns the key that verified. Raises CheckFailed
    with ``untrusted-key`` when the issuer has no configured key or the key that verifies was
    not valid at ``iat``, or ``bad-signature`` when it has keys but none fits and verifies.
    """
    return verify_signed(
        trust,
        iss=element.payload.iss,
        iat=element.payload.iat,
        alg=element.header.alg,
        kid=element.header.kid,
        signing_input=element.signing_input,
        signature=element.signature,
        skew=skew,
    )


def verify_signed(
    trust: TrustStore,
    *,
    iss: str,
    iat: int,
    alg: str,
    kid: str | None,
    signing_input: bytes,
    signature: bytes,
    skew: int = 0,
) -> TrustedKey:
    """``verify_element`` on the facts it reads from an element (its header's ``alg`` and
    ``kid``, its payload's ``iss`` and ``iat``, what was signed and the signature), for a
    caller that has them without a whole parsed Element. Raises CheckFailed as it does."""
    keys = trust.keys_for(iss)
    if not keys:
        raise CheckFailed(Reason.UNTRUSTED_KEY, f"no key is configured for issuer {iss!r}")
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
    valid = [k for k in chosen if k.invalid_at(iat, skew) is None]
    for key in valid:
        if verify_raw(alg, key.public, signing_input, signature):
            return key
    # A key that verifies but was not valid at iat says more than "bad signature": the
    # signer holds a withdrawn or revoked key (one more verify, on the failure path only).
    for key in chosen:
        why = key.invalid_at(iat, skew)
        if why is not None and verify_raw(alg, key.public, signing_input, signature):
            raise CheckFailed(Reason.UNTRUSTED_KEY, f"{why}; {iss!r} no longer speaks with it")
    which = f"key {kid!r}" if kid is not None else f"any of the {len(chosen)} keys"
    raise CheckFailed(
        Reason.BAD_SIGNATURE, f"the {alg} signature does not verify with {which} of {iss!r}"
    )
