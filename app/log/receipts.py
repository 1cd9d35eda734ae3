"""RFC 9942 COSE receipts of inclusion in the evidence log (the RFC 9162 SHA-256 tree).

A receipt is a tagged COSE_Sign1 signed with the log key:

- protected header: ``{1: -19 (Ed25519, RFC 9864), 4: kid, 395: 1 (RFC9162_SHA256)}``;
  ``kid`` is the 4-octet hash of the log's verifier key (``app.log.note``);
- unprotected header: ``{396: {-1: [bstr .cbor [tree_size, leaf_index, [hash, ...]]]}}``;
- payload: detached (nil). The signature is over the Sig_structure whose payload is the
  tree's root, which the verifier computes from the leaf and the inclusion path (RFC 9942
  s5.3), so a receipt that verifies carries the root of the checkpoint of that size.

Receipts are read with the project's own strict COSE decoder (``handoff_context._cose``),
the same that reads signed elements.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import cbor2
from handoff_context._cose import _decode_one, decode_sign1, sig_structure
from handoff_context._signature import verify_raw
from handoff_context.errors import MalformedError
from joserfc.jwk import OKPKey

from app.log.errors import FormatError, ProofError, SignatureError
from app.log.merkle import root_from_inclusion
from app.log.note import Signer, Verifier

ALG_ED25519 = -19
ALG_EDDSA = -8
KID = 4
VDS = 395
VDP = 396
RFC9162_SHA256 = 1
INCLUSION = -1
_MAX_PATH = 64


@dataclass(frozen=True, slots=True)
class Receipt:
    size: int
    index: int
    root: bytes


def make_receipt(
    signer: Signer, *, size: int, index: int, path: list[bytes] | tuple[bytes, ...], root: bytes
) -> bytes:
    protected = cbor2.dumps({1: ALG_ED25519, KID: signer.verifier.hash, VDS: RFC9162_SHA256})
    proof = cbor2.dumps([size, index, list(path)])
    signature = signer.sign_raw(sig_structure(protected, root))
    body = [protected, {VDP: {INCLUSION: [proof]}}, None, signature]
    return bytes(cbor2.dumps(cbor2.CBORTag(18, body)))


def verify_receipt(octets: bytes, leaf_hash: bytes, verifier: Verifier) -> Receipt:
    """Check a receipt of ``leaf_hash``'s inclusion, signed by ``verifier``'s key; returns the
    tree size, leaf index and root it proves. Only the root is signed (RFC 9942): compare it
    with a verified checkpoint's, since the size and index are the receipt's claims. Raises
    FormatError or SignatureError (any inclusion proof it carries must verify)."""
    try:
        sign1 = decode_sign1(octets, detached=True)
    except MalformedError as exc:
        raise FormatError(f"receipt: {exc}") from None
    header = sign1.protected_map
    if header.get(1) not in (ALG_ED25519, ALG_EDDSA):
        raise FormatError("receipt: the algorithm must be Ed25519")
    if header.get(VDS) != RFC9162_SHA256:
        raise FormatError("receipt: the verifiable data structure must be RFC9162_SHA256")
    if KID in header and header[KID] != verifier.hash:
        raise SignatureError("receipt: signed by another key (kid)")
    proofs = _inclusion_proofs(sign1.unprotected)
    key = OKPKey.import_key({"kty": "OKP", "crv": "Ed25519", "x": _b64u(verifier.public)})
    found: Receipt | None = None
    for encoded in proofs:
        size, index, path = _read_proof(encoded)
        try:
            root = root_from_inclusion(index, size, leaf_hash, path)
        except ProofError as exc:
            raise SignatureError(f"receipt: {exc}") from None
        if not verify_raw("Ed25519", key, sig_structure(sign1.protected, root), sign1.signature):
            raise SignatureError("receipt: the signature does not verify for that leaf")
        found = Receipt(size, index, root)
    if found is None:  # unreachable: _inclusion_proofs refuses an empty list
        raise FormatError("receipt: no inclusion proof")
    return found


def _inclusion_proofs(unprotected: dict[Any, Any]) -> list[bytes]:
    vdp = unprotected.get(VDP)
    if not isinstance(vdp, dict) or not isinstance(vdp.get(INCLUSION), list):
        raise FormatError("receipt: no inclusion proof (396 / -1)")
    proofs = vdp[INCLUSION]
    if not proofs or not all(isinstance(p, bytes) for p in proofs):
        raise FormatError("receipt: the inclusion proofs must be byte strings")
    return proofs


def _read_proof(encoded: bytes) -> tuple[int, int, list[bytes]]:
    try:
        value = _decode_one(encoded, what="inclusion proof", tags=False, text_keys=False)
    except MalformedError as exc:
        raise FormatError(f"receipt: {exc}") from None
    if not (isinstance(value, list) and len(value) == 3):
        raise FormatError("receipt: an inclusion proof is [tree_size, leaf_index, path]")
    size, index, path = value
    if not (isinstance(size, int) and isinstance(index, int) and isinstance(path, list)):
        raise FormatError("receipt: an inclusion proof is [tree_size, leaf_index, path]")
    if isinstance(size, bool) or isinstance(index, bool) or len(path) > _MAX_PATH:
        raise FormatError("receipt: malformed inclusion proof")
    if not all(isinstance(h, bytes) and len(h) == 32 for h in path):
        raise FormatError("receipt: the path holds 32-octet hashes")
    return size, index, path


def _b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
