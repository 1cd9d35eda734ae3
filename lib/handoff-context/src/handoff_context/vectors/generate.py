#!/usr/bin/env python3
"""Generate the project's own test vectors, deterministically (see README.md beside this file).

    python generate.py           # (re)write trust.json, valid/, invalid/, README.md here
    python generate.py --check   # regenerate into a temporary folder, compare every file
                                 # byte for byte, re-verify every stored vector

Nothing here is random: keys come from fixed seeds, times are constants, hop identifiers are
derived from each vector's name, Ed25519 is deterministic (RFC 8032) and ES256 uses
deterministic ECDSA (RFC 6979, cryptography's ``deterministic_signing``), so regenerating
gives the same octets. The elements are built here with cryptography and cbor2 directly, not
with the library's signing toolkit: the vectors check the implementation instead of mirroring
it. Only
the re-verification (``--check``, ``handoff_context.conformance``) uses the library.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import sys
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

HERE = Path(__file__).resolve().parent
SEED_PREFIX = "handoff-trace test vectors v1: "

# Every vector is judged at AT unless it says otherwise; offers are issued around T0.
T0 = 1_793_000_000
AT = T0 + 30
DIALOG = "dlg-vectors"
P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
ED25519_P = 2**255 - 19

OFFER_TYP, STATUS_TYP = "handoff-offer+jws", "handoff-status+jws"
OFFER_CT, STATUS_CT = "application/handoff-offer+cbor", "application/handoff-status+cbor"
COSE_ALG = {"ES256": -7, "EdDSA": -8, "Ed25519": -19}


# --- keys -------------------------------------------------------------------------------


def _seed(label: str) -> bytes:
    return hashlib.sha256((SEED_PREFIX + label).encode()).digest()


@dataclass(frozen=True)
class Key:
    """A signing key derived from a fixed seed: SHA-256("handoff-trace test vectors v1: "
    + kid) is the Ed25519 seed, or (reduced mod n-1, plus 1) the P-256 private scalar."""

    kid: str
    alg: str  # "ES256" or "Ed25519"
    private: Any

    @classmethod
    def ed25519(cls, kid: str) -> Key:
        return cls(kid, "Ed25519", ed25519.Ed25519PrivateKey.from_private_bytes(_seed(kid)))

    @classmethod
    def p256(cls, kid: str) -> Key:
        scalar = int.from_bytes(_seed(kid), "big") % (P256_N - 1) + 1
        return cls(kid, "ES256", ec.derive_private_key(scalar, ec.SECP256R1()))

    def sign(self, data: bytes) -> bytes:
        """Raw signature: r||s (32 + 32 octets) for ES256, 64 octets for Ed25519."""
        if self.alg == "ES256":
            der = self.private.sign(data, ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
            r, s = decode_dss_signature(der)
            return r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return bytes(self.private.sign(data))

    def jwk(self) -> dict[str, str]:
        """The public JWK for a trust file."""
        public = self.private.public_key()
        if self.alg == "ES256":
            numbers = public.public_numbers()
            return {
                "kty": "EC",
                "crv": "P-256",
                "kid": self.kid,
                "x": b64u(numbers.x.to_bytes(32, "big")),
                "y": b64u(numbers.y.to_bytes(32, "big")),
            }
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return {"kty": "OKP", "crv": "Ed25519", "kid": self.kid, "x": b64u(raw)}


@dataclass(frozen=True)
class Agent:
    iss: str
    key: Key


ASSISTANT = Agent("spiffe://a.example/agent/assistant", Key.ed25519("assistant-ed1"))
PLANNER = Agent("spiffe://a.example/agent/planner", Key.ed25519("planner-ed1"))
PLANNER_KEY2 = Key.ed25519("planner-ed2")
CODER = Agent("spiffe://b.example/agent/coder", Key.p256("coder-es1"))
TESTER = Agent("spiffe://c.example/agent/tester", Key.p256("tester-es1"))
WORKERS = [
    Agent(f"spiffe://d.example/agent/worker-{i:02d}", Key.ed25519(f"worker-{i:02d}-ed1"))
    for i in range(1, 17)
]
# Not in the trust file: the attacker.
MALLORY = Agent("spiffe://evil.example/agent/mallory", Key.ed25519("mallory-ed1"))


def trust_document() -> dict[str, Any]:
    """trust.json: every agent above except MALLORY (profile §4)."""
    entries: list[tuple[str, list[Key]]] = [
        (ASSISTANT.iss, [ASSISTANT.key]),
        (PLANNER.iss, [PLANNER.key, PLANNER_KEY2]),
        (CODER.iss, [CODER.key]),
        (TESTER.iss, [TESTER.key]),
        *((w.iss, [w.key]) for w in WORKERS),
    ]
    return {"issuers": [{"id": iss, "keys": [k.jwk() for k in keys]} for iss, keys in entries]}


# --- encodings --------------------------------------------------------------------------


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64u_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def digest(element: str | bytes) -> bytes:
    """The handoff digest: SHA-256 over the element's octets as sent (profile §1.3)."""
    return hashlib.sha256(element.encode("ascii") if isinstance(element, str) else element).digest()


def _jsonable(value: Any) -> Any:
    """Digests are bytes in the payload builders; the JSON form carries base64url text."""
    if isinstance(value, bytes):
        return b64u(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def json_octets(value: Any) -> bytes:
    return json.dumps(_jsonable(value), separators=(",", ":"), ensure_ascii=False).encode()


def raw_json(value: dict[str, Any], **replacements: str) -> bytes:
    """JSON octets with member values replaced by raw text (NaN, duplicates, ...).

    Each member named in ``replacements`` must hold the placeholder string "@NAME@".
    """
    text = json_octets(value).decode()
    for name, raw in replacements.items():
        marker = f'"@{name}@"'
        if text.count(marker) != 1:
            raise AssertionError(f"placeholder {marker} must occur exactly once")
        text = text.replace(marker, raw)
    return text.encode()


def typ_for(payload: dict[str, Any]) -> str:
    return STATUS_TYP if payload.get("type") == "status" else OFFER_TYP


def jws(
    payload: dict[str, Any] | bytes,
    key: Key,
    *,
    header: dict[str, Any] | bytes | None = None,
    **changes: Any,
) -> str:
    """Compact JWS signed by ``key``. ``changes`` edit the default header {alg, typ, kid}
    (None removes a member); ``header`` replaces it (a dict, or raw octets)."""
    if header is None:
        typ = typ_for(payload) if isinstance(payload, dict) else OFFER_TYP
        header = {"alg": key.alg, "typ": typ, "kid": key.kid}
        for name, value in changes.items():
            if value is None:
                header.pop(name, None)
            else:
                header[name] = value
    header_octets = header if isinstance(header, bytes) else json_octets(header)
    payload_octets = payload if isinstance(payload, bytes) else json_octets(payload)
    signing_input = f"{b64u(header_octets)}.{b64u(payload_octets)}"
    return f"{signing_input}.{b64u(key.sign(signing_input.encode()))}"


def with_signature(token: str, signature: bytes) -> str:
    head, payload, _ = token.split(".")
    return f"{head}.{payload}.{b64u(signature)}"


def es256_rs(token: str) -> tuple[int, int]:
    sig = b64u_decode(token.split(".")[2])
    return int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big")


def rs_bytes(r: int, s: int) -> bytes:
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def cose(
    payload: dict[str, Any] | bytes,
    key: Key,
    *,
    protected: dict[Any, Any] | None = None,
    unprotected: dict[Any, Any] | None = None,
    tag: int = 18,
) -> bytes:
    """A tagged COSE_Sign1 (RFC 9052) signed by ``key``; digests in ``payload`` stay bytes."""
    if protected is None:
        content_type = (
            STATUS_CT if isinstance(payload, dict) and payload["type"] == "status" else OFFER_CT
        )
        protected = {1: COSE_ALG[key.alg], 3: content_type, 4: key.kid.encode()}
    protected_octets = cbor2.dumps(protected)
    payload_octets = payload if isinstance(payload, bytes) else cbor2.dumps(payload, canonical=True)
    to_be_signed = cbor2.dumps(["Signature1", protected_octets, b"", payload_octets])
    signature = key.sign(to_be_signed)
    return cbor2.dumps(
        cbor2.CBORTag(tag, [protected_octets, unprotected or {}, payload_octets, signature])
    )


def cbor_map_with_pairs(pairs: Sequence[tuple[Any, Any]]) -> bytes:
    """A CBOR map written pair by pair, so that a key may repeat (cbor2 cannot do that)."""
    if len(pairs) >= 24:
        raise AssertionError("short map heads only")
    return bytes([0xA0 + len(pairs)]) + b"".join(cbor2.dumps(k) + cbor2.dumps(v) for k, v in pairs)


# --- payloads ---------------------------------------------------------------------------


def hop(name: str, index: int = 0) -> str:
    """128 bits derived from the vector's name: 22 base64url characters (profile §1.1)."""
    return b64u(hashlib.sha256(f"hop {name} {index}".encode()).digest()[:16])


def offer(
    iss: Agent | str,
    aud: Agent | str,
    *,
    name: str,
    index: int = 0,
    iat: int = T0,
    lifetime: int = 120,
    dialog: str = DIALOG,
    **extra: Any,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "v": 1,
        "type": "offer",
        "hop": hop(name, index),
        "dialog": dialog,
        "iss": iss.iss if isinstance(iss, Agent) else iss,
        "aud": aud.iss if isinstance(aud, Agent) else aud,
        "iat": iat,
        "exp": iat + lifetime,
    }
    payload.update(extra)
    return payload


def status(
    answered: dict[str, Any],
    answered_octets: str | bytes,
    state: str,
    *,
    iat: int = T0 + 10,
    **extra: Any,
) -> dict[str, Any]:
    """A status answering an offer, with the profile §1.2 iss/aud swap unless ``extra`` says."""
    delegator, delegate = answered["iss"], answered["aud"]
    iss, aud = (delegator, delegate) if state == "canceled" else (delegate, delegator)
    payload: dict[str, Any] = {
        "v": 1,
        "type": "status",
        "hop": answered["hop"],
        "offer": digest(answered_octets),
        "iss": iss,
        "aud": aud,
        "iat": iat,
        "state": state,
    }
    payload.update(extra)
    return payload


def chain(
    agents: Sequence[Agent],
    final_aud: Agent,
    *,
    name: str,
    iat: int = T0 - 10,
    step: int = 5,
    form: str = "jws",
    lifetime: int = 120,
) -> list[Any]:
    """A linked chain agents[0] -> agents[1] -> ... -> final_aud, oldest first."""
    out: list[Any] = []
    for i, agent in enumerate(agents):
        aud = agents[i + 1] if i + 1 < len(agents) else final_aud
        extra: dict[str, Any] = {"prev": digest(out[-1])} if out else {}
        payload = offer(
            agent, aud, name=name, index=i, iat=iat + i * step, lifetime=lifetime, **extra
        )
        out.append(jws(payload, agent.key) if form == "jws" else cose(payload, agent.key))
    return out


def handoff(current: str, chain_elements: Sequence[str] = ()) -> dict[str, Any]:
    obj: dict[str, Any] = {"offer": current}
    if chain_elements:
        obj["chain"] = list(chain_elements)
    return obj


def cbor_item(value: dict[str, Any]) -> str:
    """One CBOR capture item, stored in the vector as base64url."""
    return b64u(cbor2.dumps(value))


# --- vectors ----------------------------------------------------------------------------


def accept(**extra: Any) -> dict[str, Any]:
    return {"outcome": "accept", "reason": None, **extra}


def reject(reason: str, **extra: Any) -> dict[str, Any]:
    return {"outcome": "reject", "reason": reason, **extra}


def duplicate(**extra: Any) -> dict[str, Any]:
    return {"outcome": "duplicate", "reason": None, **extra}


def pending(**extra: Any) -> dict[str, Any]:
    return {"outcome": "pending", "reason": None, **extra}


@dataclass
class Vector:
    name: str
    rule: str
    description: str
    input: list[Any]
    expect: list[dict[str, Any]]
    receiver: str | None = CODER.iss
    at: int = AT
    dialog: str | None = DIALOG
    policy: dict[str, Any] = field(default_factory=dict)
    objects: list[dict[str, str]] = field(default_factory=list)
    input_format: str = "jsonl"
    trust: Any = "trust.json"
    expect_trust_error: str | None = None

    @property
    def valid(self) -> bool:
        return self.expect_trust_error is None and all(
            e["outcome"] != "reject" for e in self.expect
        )

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "rule": self.rule,
            "description": self.description,
            "trust": self.trust,
            "receiver": self.receiver,
            "at": self.at,
            "dialog": self.dialog,
            "policy": {
                "skew": 60,
                "max_lifetime": 300,
                "max_chain": 16,
                "ref_policy": "none",
                **self.policy,
            },
            "objects": self.objects,
            "input_format": self.input_format,
            "input": self.input,
            "expect": self.expect,
        }
        if self.expect_trust_error is not None:
            doc["expect_trust_error"] = self.expect_trust_error
        return doc


def base_offer(name: str, *, replace: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The ordinary offer planner -> coder; ``extra`` adds members, ``replace`` then replaces
    any member with any value."""
    payload = offer(PLANNER, CODER, name=name, **extra)
    payload.update(replace or {})
    return payload


def signed(name: str, **extra: Any) -> str:
    """The ordinary offer planner -> coder (Ed25519) for vector ``name``."""
    return jws(base_offer(name, **extra), PLANNER.key)


def es256_offer(name: str) -> tuple[dict[str, Any], str]:
    """coder -> tester, signed with ES256 (the receiver is then the tester)."""
    payload = offer(CODER, TESTER, name=name)
    return payload, jws(payload, CODER.key)


def one(
    name: str, rule: str, description: str, element: str, expect: dict[str, Any], **options: Any
) -> Vector:
    return Vector(name, rule, description, [handoff(element)], [expect], **options)


def header_vectors() -> list[Vector]:
    """Profile §2: what the protected header may and may not say."""
    vs: list[Vector] = []
    p = base_offer("alg-none")
    head = b64u(json_octets({"alg": "none", "typ": OFFER_TYP}))
    vs.append(
        one(
            "alg-none",
            "profile §2",
            "alg none with an empty signature: every element must be signed",
            f"{head}.{b64u(json_octets(p))}.",
            reject("malformed"),
        )
    )

    p = offer(CODER, TESTER, name="hmac-with-public-key")
    pem = CODER.key.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    head = b64u(json_octets({"alg": "HS256", "typ": OFFER_TYP, "kid": CODER.key.kid}))
    signing_input = f"{head}.{b64u(json_octets(p))}"
    mac = hmac.new(pem, signing_input.encode(), hashlib.sha256).digest()
    vs.append(
        one(
            "hmac-with-public-key",
            "profile §2",
            "HS256 keyed with the coder's public key "
            "(PEM): the classic algorithm-confusion forgery",
            f"{signing_input}.{b64u(mac)}",
            reject("malformed"),
            receiver=TESTER.iss,
        )
    )

    for name, member, value, what in (
        ("embedded-jwk", "jwk", MALLORY.key.jwk(), "the attacker's own public key as jwk"),
        ("jku", "jku", "https://evil.example/.well-known/jwks.json", "a jku URL (never fetched)"),
        ("x5u", "x5u", "https://evil.example/cert.pem", "an x5u URL (never fetched)"),
        (
            "x5c",
            "x5c",
            [base64.b64encode(_seed("fake certificate") * 4).decode()],
            "an x5c certificate chain",
        ),
    ):
        header: dict[str, Any] = {member: value}
        token = jws(base_offer(name), MALLORY.key, kid=PLANNER.key.kid, **header)
        vs.append(
            one(
                name,
                "profile §2",
                f"signed by the attacker, naming the planner as iss and "
                f"carrying {what}: a key in the message proves nothing",
                token,
                reject("untrusted-key"),
            )
        )

    for name, changes, what in (
        ("crit", {"crit": ["x-handoff-ext"], "x-handoff-ext": True}, "crit naming an extension"),
        (
            "b64-false",
            {"b64": False, "crit": ["b64"]},
            "b64 false with crit [b64] (RFC 7797 unencoded payload)",
        ),
        ("extra-header-member", {"cty": "json"}, "cty, a member outside alg/typ/kid"),
    ):
        vs.append(
            one(
                name,
                "profile §2",
                f"a correctly signed offer whose header carries {what}",
                jws(base_offer(name), PLANNER.key, **changes),
                reject("malformed"),
            )
        )

    p = base_offer("zip")
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    compressed = deflate.compress(json_octets(p)) + deflate.flush()
    vs.append(
        one(
            "zip",
            "profile §2",
            'zip "DEF" with a raw-DEFLATE payload',
            jws(
                compressed,
                PLANNER.key,
                header={"alg": "Ed25519", "typ": OFFER_TYP, "kid": PLANNER.key.kid, "zip": "DEF"},
            ),
            reject("malformed"),
        )
    )

    token = signed("json-serialization-general")
    h, pl, s = token.split(".")
    general = json.dumps(
        {"payload": pl, "signatures": [{"protected": h, "signature": s}]}, separators=(",", ":")
    )
    vs.append(
        one(
            "json-serialization-general",
            "profile §2",
            "a valid signature in the general JWS JSON Serialization instead of the compact form",
            general,
            reject("malformed"),
        )
    )
    token = signed("json-serialization-flattened")
    h, pl, s = token.split(".")
    flat = json.dumps({"payload": pl, "protected": h, "signature": s}, separators=(",", ":"))
    vs.append(
        one(
            "json-serialization-flattened",
            "profile §2",
            "a valid signature in the flattened JWS JSON Serialization",
            flat,
            reject("malformed"),
        )
    )

    token = signed("padding")
    vs.append(
        one(
            "padding",
            "profile §2",
            "the signature part with base64 '=' padding",
            token + "==",
            reject("malformed"),
        )
    )

    token = signed("plus-slash-base64")
    std = ".".join(
        base64.b64encode(b64u_decode(part)).rstrip(b"=").decode() for part in token.split(".")
    )
    if "+" not in std and "/" not in std:
        raise AssertionError("plus-slash-base64 needs a + or / in the standard encoding")
    vs.append(
        one(
            "plus-slash-base64",
            "profile §2",
            "all three parts in the standard base64 alphabet (+ and /) instead of base64url",
            std,
            reject("malformed"),
        )
    )

    token = signed("unused-bits")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(token[-1])
    if last & 0x0F:
        raise AssertionError("a 64-octet signature leaves 4 unused bits")
    tampered = token[:-1] + alphabet[last | 1]
    vs.append(
        one(
            "unused-bits",
            "profile §1.3, §2",
            "the signature's last base64url character with "
            "an unused bit set: it decodes to the same octets, so a lenient decoder would "
            "accept a second spelling (and a second handoff digest)",
            tampered,
            reject("malformed"),
        )
    )

    p = base_offer("bom-header")
    bom_header = b"\xef\xbb\xbf" + json_octets(
        {"alg": "Ed25519", "typ": OFFER_TYP, "kid": PLANNER.key.kid}
    )
    vs.append(
        one(
            "bom-header",
            "profile §2",
            "the protected header starts with a UTF-8 byte order mark; correctly signed",
            jws(p, PLANNER.key, header=bom_header),
            reject("malformed"),
        )
    )
    p = base_offer("utf16-payload")
    utf16 = json.dumps(_jsonable(p), separators=(",", ":")).encode("utf-16")
    vs.append(
        one(
            "utf16-payload",
            "profile §2",
            "the payload encoded as UTF-16 (with BOM); correctly signed",
            jws(utf16, PLANNER.key),
            reject("malformed"),
        )
    )

    dup_header = (
        b'{"alg":"Ed25519","typ":"'
        + OFFER_TYP.encode()
        + b'","kid":"'
        + PLANNER_KEY2.kid.encode()
        + b'","kid":"'
        + PLANNER.key.kid.encode()
        + b'"}'
    )
    vs.append(
        one(
            "duplicate-header-member",
            "profile §2",
            "kid twice in the header (planner-ed2, "
            "then planner-ed1): parsers disagree on which one wins",
            jws(base_offer("duplicate-header-member"), PLANNER.key, header=dup_header),
            reject("malformed"),
        )
    )
    p = base_offer("duplicate-payload-member", replace={"aud": "@AUD@"})
    dup_payload = raw_json(p, AUD=f'"{CODER.iss}","aud":"{MALLORY.iss}"')
    vs.append(
        one(
            "duplicate-payload-member",
            "profile §1.2, §2",
            "aud twice in the payload (coder, then mallory): parsers disagree on which one wins",
            jws(dup_payload, PLANNER.key),
            reject("malformed"),
        )
    )

    vs.append(
        one(
            "missing-typ",
            "profile §2",
            "a correctly signed offer without typ",
            jws(base_offer("missing-typ"), PLANNER.key, typ=None),
            reject("malformed"),
        )
    )
    vs.append(
        one(
            "typ-mismatch",
            "profile §2",
            "an offer payload under typ handoff-status+jws",
            jws(base_offer("typ-mismatch"), PLANNER.key, typ=STATUS_TYP),
            reject("malformed"),
        )
    )
    return vs


def signature_vectors() -> list[Vector]:
    """Profile §2 (ES256 signature form) and profile §4 (which key)."""
    vs: list[Vector] = []
    at_tester: dict[str, Any] = {"receiver": TESTER.iss}

    _, token = es256_offer("der-signature")
    r, s = es256_rs(token)
    vs.append(
        one(
            "der-signature",
            "profile §2",
            "a correct ES256 signature in ASN.1 DER instead of raw r||s",
            with_signature(token, encode_dss_signature(r, s)),
            reject("bad-signature"),
            **at_tester,
        )
    )
    for name, what in (
        ("r-zero", "r = 0"),
        ("s-zero", "s = 0"),
        ("r-equals-n", "r = n (the group order)"),
    ):
        _, token = es256_offer(name)
        r, s = es256_rs(token)
        sig = {
            "r-zero": rs_bytes(0, s),
            "s-zero": rs_bytes(r, 0),
            "r-equals-n": rs_bytes(P256_N, s),
        }[name]
        vs.append(
            one(
                name,
                "profile §2",
                f"an ES256 signature with {what}: outside 1 <= r, s < n",
                with_signature(token, sig),
                reject("bad-signature"),
                **at_tester,
            )
        )

    _, token = es256_offer("high-s-valid")
    r, s = es256_rs(token)
    high = rs_bytes(r, s if s > P256_N // 2 else P256_N - s)
    vs.append(
        one(
            "high-s-valid",
            "profile §2",
            "a high-S ES256 signature (s > n/2): valid, JWS has no low-S rule",
            with_signature(token, high),
            accept(),
            **at_tester,
        )
    )

    _, token = es256_offer("truncated-signature")
    sig = b64u_decode(token.split(".")[2])
    vs.append(
        one(
            "truncated-signature",
            "profile §2",
            "the ES256 signature without its last octet (63 octets)",
            with_signature(token, sig[:-1]),
            reject("bad-signature"),
            **at_tester,
        )
    )

    vs.append(
        one(
            "kid-unknown",
            "profile §4",
            "kid planner-ed9 names none of the planner's keys",
            jws(base_offer("kid-unknown"), PLANNER.key, kid="planner-ed9"),
            reject("bad-signature"),
        )
    )
    vs.append(
        one(
            "kid-other-key",
            "profile §4",
            "signed with planner-ed1 but kid names planner-ed2, the planner's other key",
            jws(base_offer("kid-other-key"), PLANNER.key, kid=PLANNER_KEY2.kid),
            reject("bad-signature"),
        )
    )
    vs.append(
        one(
            "alg-key-mismatch",
            "profile §4",
            "alg ES256 with kid naming the planner's Ed25519 "
            "key (the signature is a valid Ed25519 one)",
            jws(base_offer("alg-key-mismatch"), PLANNER.key, alg="ES256"),
            reject("bad-signature"),
        )
    )
    vs.append(
        one(
            "untrusted-issuer",
            "profile §4",
            "a well-formed offer from mallory, who is not in the trust file",
            jws(offer(MALLORY, CODER, name="untrusted-issuer"), MALLORY.key),
            reject("untrusted-key"),
        )
    )
    vs.append(
        one(
            "offer-ed25519",
            "profile §2",
            "an ordinary offer planner -> coder, alg Ed25519",
            signed("offer-ed25519"),
            accept(),
        )
    )
    vs.append(
        one(
            "offer-es256",
            "profile §2",
            "an ordinary offer coder -> tester, alg ES256",
            es256_offer("offer-es256")[1],
            accept(),
            **at_tester,
        )
    )
    vs.append(
        one(
            "offer-eddsa-alg",
            "profile §2",
            "alg EdDSA, the pre-RFC 9864 name of Ed25519",
            jws(base_offer("offer-eddsa-alg"), PLANNER.key, alg="EdDSA"),
            accept(),
        )
    )
    vs.append(
        one(
            "offer-without-kid",
            "profile §2, §4",
            "no kid, signed with the planner's second key: each of the issuer's keys is tried",
            jws(base_offer("offer-without-kid"), PLANNER_KEY2, kid=None),
            accept(),
        )
    )
    return vs


def payload_vectors() -> list[Vector]:
    """Profile §1.1, §1.2: members, types and identifiers."""
    vs: list[Vector] = []

    def bad(name: str, rule: str, description: str, element: str) -> None:
        vs.append(one(name, rule, description, element, reject("malformed")))

    bad(
        "nan",
        "profile §1.2",
        "iat is the JSON extension NaN",
        jws(base_offer("nan", replace={"iat": float("nan")}), PLANNER.key),
    )
    bad(
        "infinity",
        "profile §1.2",
        "exp is the JSON extension Infinity",
        jws(
            raw_json(base_offer("infinity", replace={"exp": "@EXP@"}), EXP="Infinity"), PLANNER.key
        ),
    )
    bad(
        "huge-number",
        "profile §1.1",
        "exp = 2^64, beyond 2^53",
        jws(base_offer("huge-number", replace={"exp": 2**64}), PLANNER.key),
    )
    bad(
        "float-iat",
        "profile §1.2",
        "iat written as 1793000000.0",
        jws(base_offer("float-iat", replace={"iat": float(T0)}), PLANNER.key),
    )
    bad(
        "bool-v",
        "profile §1.2",
        "v is true instead of 1",
        jws(base_offer("bool-v", replace={"v": True}), PLANNER.key),
    )
    bad(
        "string-iat",
        "profile §1.2",
        'iat is the string "1793000000"',
        jws(base_offer("string-iat", replace={"iat": str(T0)}), PLANNER.key),
    )
    deep: list[Any] = []
    for _ in range(39):
        deep = [deep]
    bad(
        "deep-nesting",
        "profile §1.2",
        "an unknown member nested 40 arrays deep (limit 32 levels)",
        jws(base_offer("deep-nesting", replace={"x-deep": deep}), PLANNER.key),
    )
    bad(
        "oversize-element",
        "profile §1.2",
        "an element over 64 KiB (an unknown member of 70000 characters)",
        jws(base_offer("oversize-element", replace={"x-pad": "A" * 70000}), PLANNER.key),
    )
    bad(
        "nul-in-identifier",
        "profile §1.2",
        "aud is the coder's identifier followed by NUL and more",
        jws(
            base_offer("nul-in-identifier", replace={"aud": CODER.iss + "\x00.evil.example"}),
            PLANNER.key,
        ),
    )
    bad(
        "bidi-in-identifier",
        "profile §1.2",
        "aud hides a RIGHT-TO-LEFT OVERRIDE (U+202E)",
        jws(
            base_offer(
                "bidi-in-identifier", replace={"aud": "spiffe://b.example/agent/\u202eredoc"}
            ),
            PLANNER.key,
        ),
    )
    bad(
        "newline-in-identifier",
        "profile §1.2",
        "aud is the coder's identifier followed by a newline (a pattern anchored with $ lets "
        "it through)",
        jws(base_offer("newline-in-identifier", replace={"aud": CODER.iss + "\n"}), PLANNER.key),
    )
    bad(
        "space-in-identifier",
        "profile §1.2",
        'dialog is "dlg vectors", with a space',
        jws(base_offer("space-in-identifier", dialog="dlg vectors"), PLANNER.key),
    )
    bad(
        "bad-hop",
        "profile §1.1",
        "hop is 16 characters (at least 22 needed)",
        jws(base_offer("bad-hop", replace={"hop": "c2hvcnQtaG9wLWlk"}), PLANNER.key),
    )
    bad(
        "iat-after-exp",
        "profile §1.1",
        "iat is after exp",
        jws(base_offer("iat-after-exp", replace={"exp": T0 - 10}), PLANNER.key),
    )
    vs.append(
        one(
            "offer-unknown-member",
            "profile §1.2",
            "an unknown payload member is ignored (forward compatibility)",
            signed("offer-unknown-member", **{"x-priority": "high"}),
            accept(),
        )
    )
    vs.append(
        one(
            "offer-all-members",
            "profile §1.1",
            "task, obo and grant set",
            signed(
                "offer-all-members",
                task="task-0042",
                obo="mailto:alice@example.com",
                grant=hashlib.sha256(b"Bearer example-access-token").digest(),
            ),
            accept(),
        )
    )
    return vs


def receiver_vectors() -> list[Vector]:
    """Profile §6: audience, freshness, replay, dialog."""
    vs: list[Vector] = []
    vs.append(
        one(
            "wrong-audience",
            "profile §6.2",
            "planner -> tester, received by the coder",
            jws(offer(PLANNER, TESTER, name="wrong-audience"), PLANNER.key),
            reject("wrong-audience"),
        )
    )
    vs.append(
        one(
            "stale-expired",
            "profile §6.3",
            "exp was 180 s before the receive time (skew 60 s)",
            signed("stale-expired", iat=AT - 300),
            reject("stale"),
        )
    )
    vs.append(
        one(
            "stale-future",
            "profile §6.3",
            "iat is 120 s after the receive time (skew 60 s)",
            signed("stale-future", iat=AT + 120),
            reject("stale"),
        )
    )
    vs.append(
        one(
            "lifetime-policy",
            "profile §6.3",
            "exp - iat = 301 s, above the 300 s maximum",
            signed("lifetime-policy", lifetime=301),
            reject("policy"),
        )
    )

    token = signed("replay-retransmission")
    vs.append(
        Vector(
            "replay-retransmission",
            "profile §6.4",
            "the same offer octets twice: a retransmission, not processed again",
            [handoff(token), handoff(token)],
            [accept(), duplicate()],
        )
    )
    first = signed("equivocation-content", task="task-1")
    second = signed("equivocation-content", task="task-2")
    vs.append(
        Vector(
            "equivocation-content",
            "profile §6.4",
            "two different offers for one (iss, hop): the second is equivocation, variant content",
            [handoff(first), handoff(second)],
            [accept(), reject("equivocation", equivocation="content")],
        )
    )
    _, token = es256_offer("equivocation-signature-only")
    r, s = es256_rs(token)
    twin = with_signature(token, rs_bytes(r, P256_N - s))
    vs.append(
        Vector(
            "equivocation-signature-only",
            "profile §6.4",
            "the ES256 offer, then its "
            "(r, n-s) twin: the same signed content with another valid signature",
            [handoff(token), handoff(twin)],
            [accept(), reject("equivocation", equivocation="signature-only")],
            receiver=TESTER.iss,
        )
    )
    vs.append(
        one(
            "dialog-mismatch",
            "profile §6.5",
            "the offer names dialog dlg-elsewhere; the carrier's dialog is dlg-vectors",
            signed("dialog-mismatch", dialog="dlg-elsewhere"),
            reject("policy"),
        )
    )
    return vs


def chain_vectors() -> list[Vector]:
    """Profile §7: assistant -> planner -> coder -> tester, received by the tester."""
    vs: list[Vector] = []
    s0, s1, s2 = chain([ASSISTANT, PLANNER, CODER], TESTER, name="chain")
    at_tester: dict[str, Any] = {"receiver": TESTER.iss}

    def chained(
        name: str,
        description: str,
        current: str,
        elements: Sequence[str],
        expect: dict[str, Any],
        rule: str = "profile §7",
        **options: Any,
    ) -> None:
        vs.append(
            Vector(
                name,
                rule,
                description,
                [handoff(current, elements)],
                [expect],
                **{**at_tester, **options},
            )
        )

    chained(
        "chain-full",
        "a full three-offer chain from the origin",
        s2,
        [s0, s1],
        accept(partial=False, checks={"chain": "pass"}),
    )
    chained(
        "partial-chain",
        "chain[0] (the origin's offer) dropped: accepted, but partial",
        s2,
        [s1],
        accept(partial=True, checks={"chain": "pass"}),
    )
    vs.append(
        Vector(
            "prev-without-chain",
            "profile §7",
            "prev is set but no chain is carried: the link cannot be checked here",
            [handoff(s2)],
            [accept(partial=True, checks={"chain": "not-checked"})],
            **at_tester,
        )
    )

    wrong_prev = jws(
        offer(
            CODER,
            TESTER,
            name="broken-chain-prev",
            iat=T0,
            prev=hashlib.sha256(b"not the previous offer").digest(),
        ),
        CODER.key,
    )
    chained(
        "broken-chain-prev",
        "the offer's prev names some other object",
        wrong_prev,
        [s0, s1],
        reject("broken-chain"),
    )
    jump = jws(offer(CODER, TESTER, name="broken-chain-continuity", prev=digest(s0)), CODER.key)
    chained(
        "broken-chain-continuity",
        "chain[0] is addressed to the planner, but the coder issued the next offer",
        jump,
        [s0],
        reject("broken-chain"),
    )
    (old,) = chain([PLANNER], CODER, name="broken-chain-timing", iat=T0 - 400)
    late = jws(
        offer(CODER, TESTER, name="broken-chain-timing", index=1, prev=digest(old)), CODER.key
    )
    chained(
        "broken-chain-timing",
        "the offer was issued 280 s after chain[0] expired",
        late,
        [old],
        reject("broken-chain"),
    )
    chained(
        "dropped-middle", "chain[1] (planner -> coder) removed", s2, [s0], reject("broken-chain")
    )
    chained("swapped", "chain[0] and chain[1] swapped", s2, [s1, s0], reject("broken-chain"))
    chained(
        "duplicated-element", "chain[0] carried twice", s2, [s0, s0, s1], reject("broken-chain")
    )
    tampered = with_signature(
        s0, bytes([b64u_decode(s0.split(".")[2])[0] ^ 1]) + b64u_decode(s0.split(".")[2])[1:]
    )
    chained(
        "chain-element-bad-signature",
        "chain[0]'s signature has one bit flipped",
        s2,
        [tampered, s1],
        reject("bad-signature"),
    )

    c0, c1, c2 = chain([PLANNER, CODER, PLANNER], TESTER, name="cycle-repeat-issuer")
    chained(
        "cycle-repeat-issuer",
        "planner -> coder -> planner -> tester: the planner issues twice",
        c2,
        [c0, c1],
        reject("cycle"),
    )
    c0, c1, c2 = chain([CODER, PLANNER, ASSISTANT], CODER, name="cycle-receiver")
    chained(
        "cycle-receiver",
        "coder -> planner -> assistant -> coder, received by the coder, an earlier issuer",
        c2,
        [c0, c1],
        reject("cycle"),
        receiver=CODER.iss,
    )

    deep = chain([*WORKERS, PLANNER], CODER, name="too-deep", iat=T0 - 80)
    chained(
        "too-deep",
        "17 linked offers (worker-01 .. worker-16, planner): one above the "
        "maximum of 16, refused before any signature work",
        deep[-1],
        deep[:-1],
        reject("too-deep", checks={"signature": "not-run", "chain": "fail"}),
        receiver=CODER.iss,
    )
    ok16 = chain([*WORKERS[1:], PLANNER], CODER, name="chain-16", iat=T0 - 75)
    chained(
        "chain-16",
        "16 linked offers (worker-02 .. worker-16, planner): exactly the maximum",
        ok16[-1],
        ok16[:-1],
        accept(partial=False),
        receiver=CODER.iss,
    )
    return vs


def ref_vectors() -> list[Vector]:
    """Profile §5: prior-context references."""
    vs: list[Vector] = []
    plan = b"# Plan\n1. write the parser\n2. test it\n"
    plan_object = {"name": "plan.md", "content": b64u(plan)}

    def ref_offer(name: str, refs: list[dict[str, Any]]) -> str:
        return signed(name, refs=refs)

    vs.append(
        one(
            "verified-ref",
            "profile §5",
            "a digest ref to plan.md, which is available: verified under ref policy require",
            ref_offer(
                "verified-ref",
                [{"kind": "digest", "digest": hashlib.sha256(plan).digest(), "name": "plan.md"}],
            ),
            accept(refs=["verified"]),
            policy={"ref_policy": "require"},
            objects=[plan_object],
        )
    )
    vs.append(
        one(
            "ref-mismatch",
            "profile §5",
            "a digest ref named plan.md whose digest is that of another version of plan.md",
            ref_offer(
                "ref-mismatch",
                [
                    {
                        "kind": "digest",
                        "digest": hashlib.sha256(b"# Plan v0\n").digest(),
                        "name": "plan.md",
                    }
                ],
            ),
            reject("ref-mismatch", refs=["mismatch"]),
            policy={"ref_policy": "check-available"},
            objects=[plan_object],
        )
    )
    vs.append(
        one(
            "unverifiable-ref",
            "profile §5",
            "a digest ref to notes.md, which is not available, under ref policy require",
            ref_offer(
                "unverifiable-ref",
                [
                    {
                        "kind": "digest",
                        "digest": hashlib.sha256(b"notes").digest(),
                        "name": "notes.md",
                    }
                ],
            ),
            reject("unverifiable-ref", refs=["unverifiable"]),
            policy={"ref_policy": "require"},
            objects=[plan_object],
        )
    )
    salt = _seed("salt for secret.txt")[:16]
    secret = b"customer record 4711\n"
    vs.append(
        one(
            "salted-ref",
            "profile §5",
            "a salted-digest ref: SHA-256(salt || content), the "
            "16-octet salt travelling with the object",
            ref_offer(
                "salted-ref",
                [
                    {
                        "kind": "salted-digest",
                        "digest": hashlib.sha256(salt + secret).digest(),
                        "name": "secret.txt",
                    }
                ],
            ),
            accept(refs=["verified"]),
            policy={"ref_policy": "require"},
            objects=[{"name": "secret.txt", "content": b64u(secret), "salt": b64u(salt)}],
        )
    )
    vs.append(
        one(
            "uri-kind-ref",
            "profile §5",
            "a ref kind named by an absolute URI this receiver "
            "does not know: not-checked, and the offer is accepted",
            ref_offer(
                "uri-kind-ref",
                [
                    {
                        "kind": "https://example.org/ref-kinds/ticket",
                        "digest": hashlib.sha256(b"T-1").digest(),
                        "uri": "https://tickets.example.org/T-1",
                    }
                ],
            ),
            accept(refs=["not-checked"]),
            policy={"ref_policy": "check-available"},
        )
    )
    vs.append(
        one(
            "unknown-ref-kind",
            "profile §5",
            'ref kind "blob": neither a listed kind nor an absolute URI',
            ref_offer(
                "unknown-ref-kind", [{"kind": "blob", "digest": hashlib.sha256(plan).digest()}]
            ),
            reject("malformed"),
        )
    )
    return vs


def status_vectors() -> list[Vector]:
    """Profile §1.2, §6 (last paragraph), 11: statuses."""
    vs: list[Vector] = []

    def answered(name: str) -> tuple[dict[str, Any], str]:
        payload = base_offer(name)
        return payload, jws(payload, PLANNER.key)

    def pair(
        name: str,
        description: str,
        status_token: str,
        expect: dict[str, Any],
        rule: str = "profile §6",
    ) -> None:
        vs.append(
            Vector(
                name,
                rule,
                description,
                [handoff(tokens[name]), {"status": status_token}],
                [accept(), expect],
            )
        )

    tokens: dict[str, str] = {}
    for name in (
        "status-accepted",
        "status-wrong-parties",
        "status-hop-mismatch",
        "status-canceled-by-delegator",
        "status-reason-on-accepted",
    ):
        payload, tokens[name] = answered(name)
        if name == "status-accepted":
            pair(
                name,
                "the coder accepts the planner's offer",
                jws(status(payload, tokens[name], "accepted"), CODER.key),
                accept(),
            )
        elif name == "status-wrong-parties":
            pair(
                name,
                "an accepted signed by the planner (the delegator) instead of the coder",
                jws(
                    status(payload, tokens[name], "accepted", iss=PLANNER.iss, aud=CODER.iss),
                    PLANNER.key,
                ),
                reject("policy", checks={"parties": "fail"}),
            )
        elif name == "status-hop-mismatch":
            pair(
                name,
                "the status names the offer's digest but another hop",
                jws(
                    status(payload, tokens[name], "accepted", hop=hop("some other hop")), CODER.key
                ),
                reject("policy", checks={"offer": "fail", "parties": "not-run"}),
            )
        elif name == "status-canceled-by-delegator":
            pair(
                name,
                "the planner (the delegator) cancels its own offer",
                jws(status(payload, tokens[name], "canceled"), PLANNER.key),
                accept(),
            )
        else:
            pair(
                name,
                'an accepted that carries reason "policy"',
                jws(status(payload, tokens[name], "accepted", reason="policy"), CODER.key),
                reject("malformed"),
                rule="profile §1.2",
            )

    payload, token = answered("status-pending")
    orphan = jws(status(payload, token, "accepted"), CODER.key)
    vs.append(
        Vector(
            "status-pending",
            "profile §6, §11",
            "a status whose offer never appears",
            [{"status": orphan}],
            [pending()],
        )
    )
    payload, token = answered("status-before-offer")
    early = jws(status(payload, token, "completed"), CODER.key)
    vs.append(
        Vector(
            "status-before-offer",
            "profile §6, §11",
            "the status arrives before its offer: "
            "it is judged once the offer is known (ingest order never changes results)",
            [{"status": early}, handoff(token)],
            [accept(), accept()],
        )
    )
    payload, token = answered("status-retransmission")
    sent = jws(status(payload, token, "accepted"), CODER.key)
    vs.append(
        Vector(
            "status-retransmission",
            "profile §6.4, §11",
            "the same status octets twice",
            [handoff(token), {"status": sent}, {"status": sent}],
            [accept(), accept(), duplicate()],
        )
    )
    payload, token = answered("offer-and-status-both")
    both = {"offer": token, "status": jws(status(payload, token, "accepted"), CODER.key)}
    vs.append(
        Vector(
            "offer-and-status-both",
            "profile §1.4",
            "one object carrying both offer and status",
            [both],
            [reject("malformed", element=None)],
        )
    )
    return vs


def cose_vectors() -> list[Vector]:
    """Profile §3: the CBOR form."""
    vs: list[Vector] = []

    def cbor_vector(
        name: str,
        description: str,
        items: list[dict[str, Any]],
        expect: list[dict[str, Any]],
        **options: Any,
    ) -> None:
        vs.append(
            Vector(
                name,
                "profile §3",
                description,
                [cbor_item(i) for i in items],
                expect,
                input_format="cbor",
                **options,
            )
        )

    p = base_offer("cose-valid-offer")
    cbor_vector(
        "cose-valid-offer",
        "a COSE_Sign1 offer planner -> coder, alg -19 (Ed25519)",
        [{"offer": cose(p, PLANNER.key)}],
        [accept()],
    )
    p = base_offer("cose-status-accepted")
    element = cose(p, PLANNER.key)
    answer = cose(status(p, element, "accepted"), CODER.key)
    cbor_vector(
        "cose-status-accepted",
        "a COSE offer and the coder's ES256 (alg -7) accepted",
        [{"offer": element}, {"status": answer}],
        [accept(), accept()],
    )
    cs = chain([ASSISTANT, PLANNER, CODER], TESTER, name="cose-chain", form="cose")
    cbor_vector(
        "cose-chain",
        "a full three-offer COSE chain",
        [{"offer": cs[-1], "chain": cs[:-1]}],
        [accept(partial=False)],
        receiver=TESTER.iss,
    )
    cbor_vector(
        "cose-tag-998",
        "a correctly signed offer under CBOR tag 998 instead of 18",
        [{"offer": cose(base_offer("cose-tag-998"), PLANNER.key, tag=998)}],
        [reject("malformed")],
    )
    p = base_offer("cose-duplicate-key")
    pairs = [(k, p[k]) for k in sorted(p, key=lambda k: (len(k), k))]
    pairs.append(("aud", MALLORY.iss))
    cbor_vector(
        "cose-duplicate-key",
        "aud twice in the CBOR payload map (coder, then mallory)",
        [{"offer": cose(cbor_map_with_pairs(pairs), PLANNER.key)}],
        [reject("malformed")],
    )
    cbor_vector(
        "cose-alg-unprotected",
        "alg in the unprotected header only",
        [
            {
                "offer": cose(
                    base_offer("cose-alg-unprotected"),
                    PLANNER.key,
                    protected={3: OFFER_CT, 4: PLANNER.key.kid.encode()},
                    unprotected={1: COSE_ALG["Ed25519"]},
                )
            }
        ],
        [reject("malformed")],
    )
    cbor_vector(
        "cose-x5chain",
        "signed by the attacker, with an x5chain (33) in the protected header",
        [
            {
                "offer": cose(
                    base_offer("cose-x5chain"),
                    MALLORY.key,
                    protected={
                        1: COSE_ALG["Ed25519"],
                        3: OFFER_CT,
                        4: PLANNER.key.kid.encode(),
                        33: _seed("fake certificate") * 4,
                    },
                )
            }
        ],
        [reject("untrusted-key")],
    )
    return vs


def ed25519_identity() -> bytes:
    """The identity point (0, 1): a small-order key that verifies (R = identity, S = 0)."""
    return (1).to_bytes(32, "little")


def trust_vectors() -> list[Vector]:
    """Profile §4: trust files that must be refused at load."""
    small = "spiffe://evil.example/agent/small-order"
    forged_offer = offer(small, CODER, name="small-order-ed25519")
    forged = jws(forged_offer, MALLORY.key, kid="small-1")
    forged = with_signature(forged, ed25519_identity() + bytes(32))
    vectors = []
    for name, encoded, problem, what in (
        (
            "small-order-ed25519",
            ed25519_identity(),
            "small order",
            "the identity point, which verifies the forged signature (R = identity, S = 0) over "
            "any message; the input is such a forgery",
        ),
        (
            "noncanonical-ed25519",
            (ED25519_P + 1).to_bytes(32, "little"),
            "non-canonical",
            "y = p + 1, a non-canonical spelling of the identity point",
        ),
    ):
        trust = {
            "issuers": [
                {
                    "id": small,
                    "keys": [
                        {"kty": "OKP", "crv": "Ed25519", "kid": "small-1", "x": b64u(encoded)}
                    ],
                }
            ]
        }
        vectors.append(
            Vector(
                name,
                "profile §4",
                f"a trust file whose Ed25519 key is {what}",
                [handoff(forged)],
                [],
                trust=trust,
                expect_trust_error=problem,
            )
        )
    return vectors


# A word the rejection's detail must contain (case-insensitive): it pins WHY a vector is
# rejected, so that a vector which breaks for another reason (a typo in the generator, a
# check that moved) fails instead of passing by accident. Kept to the culprit's name so that
# rewording a detail does not break the vectors.
WHY = {
    "alg-none": "none",
    "hmac-with-public-key": "HS256",
    "embedded-jwk": "jwk",
    "jku": "jku",
    "x5u": "x5u",
    "x5c": "x5c",
    "crit": "crit",
    "b64-false": "b64",
    "zip": "zip",
    "extra-header-member": "cty",
    "json-serialization-general": "serialization",
    "json-serialization-flattened": "serialization",
    "padding": "base64url",
    "plus-slash-base64": "base64url",
    "unused-bits": "canonical",
    "bom-header": "byte order mark",
    "utf16-payload": "UTF-8",
    "duplicate-header-member": "duplicate",
    "duplicate-payload-member": "duplicate",
    "missing-typ": "typ",
    "typ-mismatch": "typ",
    "kid-unknown": "planner-ed9",
    "kid-other-key": "planner-ed2",
    "alg-key-mismatch": "planner-ed1",
    "untrusted-issuer": MALLORY.iss,
    "nan": "NaN",
    "infinity": "Infinity",
    "huge-number": "exp",
    "float-iat": "iat",
    "bool-v": "integer",
    "string-iat": "iat",
    "deep-nesting": "nest",
    "oversize-element": "larger",
    "nul-in-identifier": "aud",
    "newline-in-identifier": "aud",
    "bidi-in-identifier": "aud",
    "space-in-identifier": "dialog",
    "bad-hop": "hop",
    "iat-after-exp": "exp",
    "wrong-audience": TESTER.iss,
    "stale-expired": "expired",
    "stale-future": "future",
    "lifetime-policy": "lifetime",
    "dialog-mismatch": "dialog",
    "broken-chain-prev": "prev",
    "broken-chain-continuity": "aud",
    "broken-chain-timing": "chain[0]",
    "dropped-middle": "prev",
    "swapped": "prev",
    "duplicated-element": "prev",
    "chain-element-bad-signature": "chain[0]",
    "cycle-repeat-issuer": PLANNER.iss,
    "cycle-receiver": "receiver",
    "too-deep": "17",
    "ref-mismatch": "plan.md",
    "unverifiable-ref": "refs[0]",
    "unknown-ref-kind": "blob",
    "status-wrong-parties": "delegate",
    "status-hop-mismatch": "hop",
    "status-reason-on-accepted": "reason",
    "offer-and-status-both": "both",
    "cose-tag-998": "tag",
    "cose-duplicate-key": "duplicate",
    "cose-alg-unprotected": "unprotected",
    "cose-x5chain": "x5chain",
}


def build_vectors() -> list[Vector]:
    vectors = [
        *header_vectors(),
        *signature_vectors(),
        *payload_vectors(),
        *receiver_vectors(),
        *chain_vectors(),
        *ref_vectors(),
        *status_vectors(),
        *cose_vectors(),
        *trust_vectors(),
    ]
    names = [v.name for v in vectors]
    if len(names) != len(set(names)):
        raise AssertionError("two vectors share a name")
    for v in vectors:
        if v.name in WHY:
            last = v.expect[-1]
            if last["outcome"] != "reject":
                raise AssertionError(f"{v.name}: WHY applies to rejections only")
            last["detail"] = WHY[v.name]
    unknown = set(WHY) - set(names)
    if unknown:
        raise AssertionError(f"WHY names unknown vectors: {sorted(unknown)}")
    return vectors


# --- checking a vector with the core ------------------------------------------------------


def check_document(doc: dict[str, Any], directory: Path = HERE) -> list[str]:
    """Everything in which the library's verdicts differ from the vector's expectations."""
    from handoff_context.conformance import check_vector

    return check_vector(doc, directory)


# --- writing ----------------------------------------------------------------------------

README_HEAD = """\
# The project's own test vectors

Written by `generate.py` beside this README (this README too: edit the generator, then run
`make vectors`). They ship inside the library (`handoff_context/vectors/`) as its published
vectors: `python -m handoff_context.conformance` runs them against any implementation's verify
command (see the library's README). `make test` runs `generate.py --check`, which regenerates
everything into a temporary folder, compares every file byte for byte with the committed one,
and verifies every committed vector with the library;
`lib/handoff-context/tests/test_vectors_own.py` does both again under pytest, and
`tests/test_vectors_service.py` judges every vector through `handoff-trace verify`'s own path.
Third-party vectors (Wycheproof, COSE WG) are vendored in
`lib/handoff-context/tests/vectors/public/` (see its README); regression vectors found by
fuzzing the service are in `tests/vectors/fuzz/` (see its README).

## Provenance and determinism
- Keys: the Ed25519 seed is SHA-256(`"handoff-trace test vectors v1: " + kid`); the P-256
  private scalar is that digest as a big-endian integer, reduced mod n-1, plus 1. The public
  halves are in `trust.json`; the private halves are never written (they follow from the kid).
- Times: offers are issued around iat 1793000000 and judged at 1793000030 unless a vector says
  otherwise; hop identifiers are the first 16 octets of SHA-256(`"hop <vector> <index>"`).
- Signatures: Ed25519 is deterministic (RFC 8032). **ES256 route: deterministic ECDSA**
  (RFC 6979, `cryptography`'s `ECDSA(..., deterministic_signing=True)`; the generator checks
  the RFC 6979 A.2.5 P-256/SHA-256 example first). So every file, ES256 ones included, is
  reproducible byte for byte and `--check` compares all of them; it also re-verifies each
  stored vector, so a change in the core that alters a verdict fails even when the files are
  unchanged. The ES256 signature variants (DER, r = 0, s = 0, r = n, high S, truncated,
  (r, n-s) twin) are derived from those deterministic signatures.
- Elements are built by the generator with `cryptography` and `cbor2` directly, not with
  the library's signing toolkit, so the vectors check the implementation instead of mirroring it.

## Format
One JSON file per rule, named after the attack it stops or the rule it shows: `valid/` holds
vectors with no rejection, `invalid/` the rest.
- `trust`: `"trust.json"` (the shared trust file beside this README), or an inline trust
  document for the trust-file vectors, which carry `expect_trust_error` (a substring of the
  load error) instead of verdicts.
- `receiver`, `at`, `dialog`, `policy` (`skew`, `max_lifetime`, `max_chain`, `ref_policy`):
  the profile §12 verify parameters. `objects`: files available for ref checks (`content` and
  `salt` in base64url).
- `input_format` `jsonl`: `input` is a list of profile §10 payloads (handoff and status objects),
  one capture line each. `cbor`: `input` is a list of base64url CBOR items (a CBOR sequence).
- `expect`: one entry per verdict, in order: `outcome` and `reason` (profile §11), optionally
  `equivocation` (variant), `partial` (chain.partial), `checks` (check -> result),
  `refs` (ref outcomes), `element`, `detail` (a word the detail must contain, case-insensitive:
  it pins why the element is rejected, not the wording).

Identities: assistant (Ed25519), planner (two Ed25519 keys: planner-ed1, planner-ed2), coder
(ES256), tester (ES256), worker-01 .. worker-16 (Ed25519); mallory is not trusted.
"""


def must_produce(vector: Vector) -> str:
    if vector.expect_trust_error is not None:
        return f"trust file refused ({vector.expect_trust_error})"
    parts = []
    for e in vector.expect:
        text = e["outcome"] + (f" {e['reason']}" if e["reason"] else "")
        if "equivocation" in e:
            text += f" ({e['equivocation']})"
        if e.get("partial"):
            text += " (partial)"
        if e.get("checks", {}).get("chain") == "not-checked":
            text += " (chain not-checked)"
        if "refs" in e:
            text += f" (refs {', '.join(e['refs'])})"
        parts.append(text)
    return ", then ".join(parts)


def readme(vectors: Sequence[Vector]) -> str:
    lines = [README_HEAD]
    for folder, valid in (("valid", True), ("invalid", False)):
        lines.append(
            f"\n## {folder}/\n\n| vector | rule | must produce | what it is |\n|---|---|---|---|\n"
        )
        for v in sorted((v for v in vectors if v.valid is valid), key=lambda v: v.name):
            lines.append(
                f"| [{v.name}]({folder}/{v.name}.json) | {v.rule} | "
                f"{must_produce(v)} | {v.description} |\n"
            )
    return "".join(lines)


def dump(doc: Any) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=True) + "\n"


def rendered() -> dict[str, str]:
    """Every generated file, by path relative to the vectors folder."""
    vectors = build_vectors()
    files = {"trust.json": dump(trust_document()), "README.md": readme(vectors)}
    for v in vectors:
        files[f"{'valid' if v.valid else 'invalid'}/{v.name}.json"] = dump(v.document())
    return files


def write(out: Path) -> dict[str, str]:
    files = rendered()
    for rel, text in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
    return files


def stored_vectors(directory: Path = HERE) -> list[Path]:
    return sorted([*directory.glob("valid/*.json"), *directory.glob("invalid/*.json")])


def rfc6979_selftest() -> None:
    """RFC 6979 A.2.5 (P-256, SHA-256, "sample"): deterministic ECDSA really is RFC 6979."""
    private = ec.derive_private_key(
        0xC9AFA9D845BA75166B5C215767B1D6934E50C3DB36E89B127B8A622B120F6721, ec.SECP256R1()
    )
    r, s = decode_dss_signature(
        private.sign(b"sample", ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
    )
    if (r, s) != (
        0xEFD48B2AACB6A8FD1140DD9CD45E81D69D2C877B56AAF991C34D0EA84EAF3716,
        0xF7CB1C942D657C41D436C7A1B6E29F65F3E900DBB9AFF4064DC4AB2F843ACDA8,
    ):
        raise SystemExit("deterministic ECDSA does not reproduce RFC 6979 A.2.5")


def check(directory: Path = HERE) -> list[str]:
    """Regenerate and compare byte for byte, then re-verify every stored vector."""
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        fresh = write(Path(tmp))
        for rel in sorted(fresh):
            stored = directory / rel
            if not stored.is_file():
                problems.append(f"{rel}: missing (run make vectors)")
            elif stored.read_bytes() != (Path(tmp) / rel).read_bytes():
                problems.append(f"{rel}: differs from what the generator writes")
    for path in stored_vectors(directory):
        rel = path.relative_to(directory).as_posix()
        if rel not in fresh:
            problems.append(f"{rel}: not written by the generator (stale?)")
        problems.extend(check_document(json.loads(path.read_bytes()), directory))
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="regenerate into a temporary folder, compare, re-verify",
    )
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: here)")
    args = parser.parse_args(argv)
    rfc6979_selftest()
    if args.check:
        problems = check(args.out)
        for problem in problems:
            print(problem, file=sys.stderr)
        count = len(stored_vectors(args.out))
        print(f"{count} vectors checked: {'FAILED' if problems else 'ok'}")
        return 1 if problems else 0
    files = write(args.out)
    print(f"wrote {len(files)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
