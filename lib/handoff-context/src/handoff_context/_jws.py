"""The JSON form: JWS Compact Serialization, strict (profile §2).

``parse`` turns the octets into an unverified Element; the signature is checked later by
``signature.verify_element`` against the trust store. Everything a JOSE library would let
through that this profile forbids (duplicate members, ``b64``, ``crit``, a BOM, padding,
a JSON Serialization, keys carried in the header) is refused here, before any library call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from handoff_context._encoding import (
    MAX_ELEMENT_OCTETS,
    b64url_decode,
    b64url_encode,
    handoff_digest,
    strict_json_loads,
)
from handoff_context._model import (
    _JWS,
    MAX_KID,
    Element,
    ElementType,
    Header,
    check_identifier,
    read_payload,
    try_read_payload,
)
from handoff_context._signature import SUPPORTED_ALGS, sign_raw
from handoff_context.errors import EmbeddedKeyError, MalformedError

OFFER_TYP = "handoff-offer+jws"
STATUS_TYP = "handoff-status+jws"
TYP_FOR_TYPE = {ElementType.OFFER: OFFER_TYP, ElementType.STATUS: STATUS_TYP}

ALLOWED_HEADER = frozenset({"alg", "typ", "kid"})
# A key in the message says nothing about who signed (profile §2): named as untrusted-key.
KEY_CARRYING_HEADER = frozenset({"jwk", "jku", "x5u", "x5c"})


def _refuse_embedded_keys(header: Mapping[str, Any], payload_raw: bytes) -> None:
    carried = sorted(KEY_CARRYING_HEADER & set(header))
    if carried:
        try:
            payload = try_read_payload(strict_json_loads(payload_raw, what="payload"), form=_JWS)
        except MalformedError:
            payload = None
        raise EmbeddedKeyError(
            f"header carries {', '.join(carried)}: a key inside the message shows nothing "
            "about who signed; keys come only from the trust configuration",
            payload,
        )


def _check_header(header: Mapping[str, Any]) -> Header:
    extra = sorted(set(header) - ALLOWED_HEADER)
    if extra:
        raise MalformedError(f"header member(s) not allowed: {', '.join(extra)}")
    alg = header.get("alg")
    if not isinstance(alg, str):
        raise MalformedError("header alg is required")
    if alg.lower() == "none":
        raise MalformedError("alg none is refused: every element must be signed")
    if alg not in SUPPORTED_ALGS:
        raise MalformedError(f"alg {alg!r} is not allowed (ES256, Ed25519, EdDSA only)")
    typ = header.get("typ")
    if typ not in (OFFER_TYP, STATUS_TYP):
        raise MalformedError(f"header typ must be {OFFER_TYP!r} or {STATUS_TYP!r}")
    kid = header.get("kid")
    if kid is not None:
        kid = check_identifier(kid, what="kid", limit=MAX_KID)
    return Header(alg=alg, kid=kid, content_type=typ)


# Headers that passed every check, by their base64url text (canonical, so one text per
# header): a run meets a few, one per signing key. Bounded, so hostile input cannot grow it.
_KNOWN_HEADERS: dict[str, tuple[dict[str, Any], Header]] = {}
_KNOWN_HEADERS_LIMIT = 256


def parse(octets: bytes) -> Element:
    """Parse compact JWS octets into an unverified Element.

    Raises MalformedError, or CheckFailed(untrusted-key) for a header that carries a key.
    """
    if len(octets) > MAX_ELEMENT_OCTETS:
        raise MalformedError(f"element is larger than {MAX_ELEMENT_OCTETS} octets")
    try:
        text = octets.decode("ascii")
    except UnicodeDecodeError as exc:
        raise MalformedError("compact JWS must be ASCII") from exc
    if "{" in text and text.lstrip().startswith("{"):  # base64url has no "{": no copy
        raise MalformedError("JWS JSON Serialization is not allowed; use the compact form")
    parts = text.split(".")
    if len(parts) != 3:
        raise MalformedError(f"compact JWS has {len(parts)} parts, not 3")
    header_b64, payload_b64, sig_b64 = parts
    known = _KNOWN_HEADERS.get(header_b64)
    if known is not None:
        # The same signer sends the same header octets every time; one that passed every
        # check below passes them again, and decoding it fails nothing that comes later.
        header_doc, header = dict(known[0]), known[1]
        payload_raw = b64url_decode(payload_b64, what="payload")
        signature = b64url_decode(sig_b64, what="signature")
    else:
        header_raw = b64url_decode(header_b64, what="header")
        payload_raw = b64url_decode(payload_b64, what="payload")
        signature = b64url_decode(sig_b64, what="signature")
        header_doc = strict_json_loads(header_raw, what="header")
        if not isinstance(header_doc, dict):
            raise MalformedError("header must be a JSON object")
        _refuse_embedded_keys(header_doc, payload_raw)
        header = _check_header(header_doc)
        if len(_KNOWN_HEADERS) < _KNOWN_HEADERS_LIMIT:
            _KNOWN_HEADERS[header_b64] = (dict(header_doc), header)
    payload_doc = strict_json_loads(payload_raw, what="payload")
    if not isinstance(payload_doc, dict):
        raise MalformedError("payload must be a JSON object")
    payload = read_payload(payload_doc, form=_JWS)
    if TYP_FOR_TYPE[payload.type] != header.content_type:
        raise MalformedError(f"header typ {header.content_type!r} does not match a {payload.type}")
    signing_input = f"{header_b64}.{payload_b64}".encode("ascii")
    # Positional, in Element's order (a class called with keywords gets them as a dict,
    # built and unpacked again: ~4,000 instructions for these ten, for every element).
    return Element(
        _JWS,
        bytes(octets),
        handoff_digest(octets),
        header,
        payload,
        signing_input,
        signature,
        signing_input,  # signed_content: what the signature covers, the same octets
        header_doc,
        payload_doc,
    )


def sign(payload: Mapping[str, Any], *, key: Any, alg: str, kid: str | None = None) -> bytes:
    """Serialize and sign ``payload`` (JSON form: digests as base64url text).

    ``key`` is a joserfc private key. Returns the compact JWS octets.
    """
    header: dict[str, str] = {"alg": alg, "typ": TYP_FOR_TYPE[ElementType(payload["type"])]}
    if kid is not None:
        header["kid"] = kid
    header_b64 = b64url_encode(json.dumps(header, separators=(",", ":")).encode())
    payload_b64 = b64url_encode(
        json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    )
    signing_input = f"{header_b64}.{payload_b64}".encode("ascii")
    signature = sign_raw(alg, key, signing_input)
    return signing_input + b"." + b64url_encode(signature).encode("ascii")


def signature_facts(octets: bytes) -> tuple[str, int, str, str | None, bytes, bytes] | None:
    """What the signature check reads from a compact JWS (``iss``, ``iat``, ``alg``,
    ``kid``, the signing input and the signature), read without the strict checks of
    ``parse``; None when that cannot be done (a header not met before, a part that does
    not decode, members of the wrong type).

    Only for verifying signatures ahead of ``parse`` (``verify --jobs``'s helper): where
    ``parse`` accepts the octets, these are the facts it reads, since strict JSON decodes
    to the same values; where it refuses them, no signature check is asked for, so a
    verified signature remembered for them is never used.
    """
    try:
        header_b64, payload_b64, sig_b64 = octets.decode("ascii").split(".")
    except (UnicodeDecodeError, ValueError):
        return None
    known = _KNOWN_HEADERS.get(header_b64)
    if known is None:
        return None
    try:
        payload = json.loads(b64url_decode(payload_b64, what="payload"))
        signature = b64url_decode(sig_b64, what="signature")
    except (MalformedError, ValueError, RecursionError):
        return None
    if not isinstance(payload, dict):
        return None
    iss, iat = payload.get("iss"), payload.get("iat")
    if not isinstance(iss, str) or type(iat) is not int:
        return None
    header = known[1]
    signing_input = f"{header_b64}.{payload_b64}".encode("ascii")
    return iss, iat, header.alg, header.kid, signing_input, signature
