"""Signing for the demo, and the tampered elements its faults need.

Clean elements come from the signing toolkit (``handoff_context``) unchanged. The faults
need a few things the toolkit rightly does not offer: the ECDSA (r, n - s) twin of a
signature, a signature with one character changed, and a JWS whose header carries its own
key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import cbor2
from handoff_context import Form, Signer, b64url_decode, b64url_encode, public_jwk
from handoff_context._jws import OFFER_TYP
from handoff_context._signature import sign_raw

from app.demo.agents import P256_N

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _cose_parts(octets: bytes) -> tuple[int, list[Any]]:
    tag = cbor2.loads(octets)
    return tag.tag, list(tag.value)


def high_s_twin(octets: bytes, form: Form) -> bytes:
    """The same header and payload with the ES256 signature (r, n - s): equally valid, and
    made without the key, as a relay could (profile §6.4 signature-only equivocation)."""

    def twin(signature: bytes) -> bytes:
        r, s = signature[:32], int.from_bytes(signature[32:], "big")
        return r + (P256_N - s).to_bytes(32, "big")

    if form is Form.JWS:
        signed, _, sig = octets.rpartition(b".")
        flipped = twin(b64url_decode(sig.decode("ascii"), what="signature"))
        return signed + b"." + b64url_encode(flipped).encode("ascii")
    tag, (protected, unprotected, payload, signature) = _cose_parts(octets)
    return cbor2.dumps(cbor2.CBORTag(tag, [protected, unprotected, payload, twin(signature)]))


def corrupt_signature(octets: bytes, form: Form) -> bytes:
    """One signature octet changed in transit: still well-formed, no longer verifying."""
    if form is Form.JWS:
        signed, _, sig = octets.rpartition(b".")
        # Character 10 encodes six whole bits of the first scalar (r, or R for Ed25519), so
        # the result stays canonical base64url of 64 octets.
        chars = list(sig.decode("ascii"))
        chars[10] = _B64[(_B64.index(chars[10]) + 1) % 64]
        return signed + b"." + "".join(chars).encode("ascii")
    tag, (protected, unprotected, payload, signature) = _cose_parts(octets)
    changed = bytes([signature[0] ^ 0x01]) + signature[1:]
    return cbor2.dumps(cbor2.CBORTag(tag, [protected, unprotected, payload, changed]))


def _json_form(value: Any) -> Any:
    if isinstance(value, bytes):
        return b64url_encode(value)
    if isinstance(value, Mapping):
        return {k: _json_form(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_form(v) for v in value]
    return value


def embedded_key_offer(payload: Mapping[str, Any], signer: Signer) -> bytes:
    """A compact JWS offer whose protected header carries the signer's own public key
    (``jwk``): what profile §2 rejects as untrusted-key, whoever the key belongs to."""
    header = {
        "alg": signer.alg,
        "typ": OFFER_TYP,
        "kid": signer.kid,
        "jwk": public_jwk(signer.key),
    }
    head = b64url_encode(json.dumps(header, separators=(",", ":")).encode())
    body = b64url_encode(json.dumps(_json_form(payload), separators=(",", ":")).encode())
    signing_input = f"{head}.{body}".encode("ascii")
    signature = sign_raw(signer.alg, signer.key, signing_input)
    return signing_input + b"." + b64url_encode(signature).encode("ascii")
