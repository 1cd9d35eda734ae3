"""The trust configuration (profile §4): which public keys speak for which identifier.

Loading fails closed: a file that could let a forged element verify (a private key, a
small-order Ed25519 key, a key that does not fit its algorithm, no issuer at all) is a
configuration error with a message that says what to fix, never a silent pass.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from handoff_context._encoding import b64url_decode, b64url_encode, strict_json_loads
from handoff_context._model import MAX_KID, check_identifier
from handoff_context.errors import MalformedError, TrustConfigError

# Members a public JWK may carry besides its key material; anything private is refused.
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
_MAX_TRUST_FILE = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class TrustedKey:
    """One configured public key, imported once (importing costs about one verify).

    ``public`` is the ``cryptography`` key that verifies; ``key`` gives it as a joserfc key
    for code that wants joserfc's API. Verifying never loads joserfc: with it comes
    ``cryptography``'s X.509 layer, about 0.04 s of every checking process's start. Two
    keys compare equal when every member but ``public`` does (``thumbprint``
    stands for the key material)."""

    issuer: str
    kid: str
    kty: str  # "EC" (P-256, for ES256) or "OKP" (Ed25519, for Ed25519/EdDSA)
    public: ec.EllipticCurvePublicKey | Ed25519PublicKey = field(compare=False, repr=False)
    thumbprint: str  # RFC 7638, SHA-256
    # Key history (trust sources, explicit revocations). None: no end. ``not_after``: the
    # time the key was last seen at its source before it went away; ``revoked_at``: an
    # explicit revocation. Elements are judged against the keys valid at their ``iat``.
    not_after: int | None = None
    revoked_at: int | None = None
    source: str | None = None  # the trust source it came from; None for a listed key

    @property
    def jwk(self) -> dict[str, str]:
        """The public JWK: its key members (RFC 7518 section 6.2.1, RFC 8037 section 2)
        and ``kid``."""
        return {**_key_members(self.public), "kid": self.kid}

    @property
    def key(self) -> Any:
        """The key as a joserfc ``ECKey`` or ``OKPKey`` (public only), made on each access."""
        from joserfc.jwk import ECKey, OKPKey

        jwk: dict[str, str | list[str]] = {**self.jwk}
        return ECKey.import_key(jwk) if self.kty == "EC" else OKPKey.import_key(jwk)

    def invalid_at(self, iat: int, skew: int) -> str | None:
        """Why this key cannot speak for an element issued at ``iat``; None when it can.

        The end of a source's window gets the skew (``not_after`` is when this receiver
        noticed the key was gone, a little after it was withdrawn); an explicit revocation
        does not: it names the moment itself, and a key that may be in other hands earns
        no leeway."""
        if self.revoked_at is not None and iat > self.revoked_at:
            return f"key {self.kid!r} was revoked at {self.revoked_at} (the element's iat is {iat})"
        if self.not_after is not None and iat > self.not_after + skew:
            return (
                f"key {self.kid!r} stopped being valid at {self.not_after} "
                f"(gone from its source; the element's iat is {iat})"
            )
        return None


@dataclass(frozen=True, slots=True)
class TrustStore:
    """Identifiers mapped to their keys. ``fingerprint`` changes whenever any key or
    identifier changes, so caches of verification results can be keyed by it."""

    issuers: Mapping[str, tuple[TrustedKey, ...]]
    fingerprint: str
    # SPIFFE trust domains (``a.example``) mapped to the keys of their bundle: they speak for
    # every ``spiffe://a.example/...`` identifier (trust sources, ``handoff_context.sources``).
    domains: Mapping[str, tuple[TrustedKey, ...]] = field(default_factory=dict)

    def keys_for(self, identifier: str) -> tuple[TrustedKey, ...] | None:
        """The keys that may speak for ``identifier``: listed for it, or for its SPIFFE trust
        domain; None when there is none."""
        listed = self.issuers.get(identifier)
        if not self.domains:  # no trust domains (most stores): nothing more to look up
            return listed
        domain = spiffe_trust_domain(identifier)
        bundle = self.domains.get(domain) if domain is not None else None
        if bundle is None:
            return listed
        return bundle if listed is None else listed + bundle

    def __contains__(self, identifier: object) -> bool:
        return isinstance(identifier, str) and self.keys_for(identifier) is not None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TrustStore:
        """Read and validate a trust file. Raises TrustConfigError.

        A trust configuration that lists ``sources`` (``handoff_context.sources``) gives a
        ``TrustSources``: a store whose keys follow its sources, fetched once here (each
        source's answer, or its failure, is in ``status()``); call its ``start()`` to keep
        them fresh in the background, or ``refresh()`` on your own schedule."""
        data = read_trust_file(path)
        if _lists_sources(data):
            from handoff_context.sources import TrustConfig, TrustSources

            live = TrustSources(TrustConfig.from_bytes(data, source=str(path)))
            live.refresh(force=True)
            return live
        return cls.from_bytes(data, source=str(path))

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str = "trust configuration") -> TrustStore:
        """Parse the JSON form. Raises TrustConfigError."""
        try:
            doc = strict_json_loads(data, what=source)
        except MalformedError as exc:
            raise TrustConfigError(exc.detail) from exc
        return cls.from_mapping(doc, source=source)

    @classmethod
    def from_mapping(cls, doc: object, *, source: str = "trust configuration") -> TrustStore:
        """Validate an already-decoded document. Raises TrustConfigError."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("issuers"), list):
            raise TrustConfigError(f'{source}: expected {{"issuers": [...]}}')
        issuers: dict[str, tuple[TrustedKey, ...]] = {}
        for i, entry in enumerate(doc["issuers"]):
            where = f"{source}: issuers[{i}]"
            if not isinstance(entry, Mapping):
                raise TrustConfigError(f"{where} must be an object")
            try:
                ident = check_identifier(entry.get("id"), what="id")
            except MalformedError as exc:
                raise TrustConfigError(f"{where}: {exc.detail}") from exc
            if ident in issuers:
                raise TrustConfigError(f"{where}: issuer {ident!r} is listed twice")
            keys = entry.get("keys")
            if not isinstance(keys, list) or not keys:
                raise TrustConfigError(f"{where} ({ident}) must list at least one key")
            imported = tuple(
                _import_key(jwk, issuer=ident, where=f"{where}.keys[{j}]")
                for j, jwk in enumerate(keys)
            )
            kids = [k.kid for k in imported]
            if len(set(kids)) != len(kids):
                raise TrustConfigError(f"{where} ({ident}) has two keys with one kid")
            issuers[ident] = imported
        if not issuers:
            raise TrustConfigError(f"{source} lists no issuer: refusing to verify against nothing")
        return cls(issuers=issuers, fingerprint=fingerprint_of(issuers))


def read_trust_file(path: str | os.PathLike[str]) -> bytes:
    """The octets of a trust file, refused when it is not a regular file, when every user
    may write it (anyone who can write it can make any forgery verify) or when it is too
    large. Raises TrustConfigError."""
    p = Path(path)
    try:
        info = p.stat()
    except OSError as exc:
        raise TrustConfigError(f"cannot read trust file {p}: {exc.strerror}") from exc
    if not stat.S_ISREG(info.st_mode):
        raise TrustConfigError(f"trust file {p} is not a regular file")
    if info.st_mode & stat.S_IWOTH:
        raise TrustConfigError(
            f"trust file {p} is writable by every user; refusing it (chmod o-w {p})"
        )
    if info.st_size > _MAX_TRUST_FILE:
        raise TrustConfigError(f"trust file {p} is larger than {_MAX_TRUST_FILE} octets")
    try:
        return p.read_bytes()
    except OSError as exc:
        raise TrustConfigError(f"cannot read trust file {p}: {exc.strerror}") from exc


def _lists_sources(data: bytes) -> bool:
    try:
        doc = strict_json_loads(data, what="trust file")
    except MalformedError:
        return False  # from_bytes says what is wrong with it
    return isinstance(doc, Mapping) and ("sources" in doc or "revoked" in doc)


def spiffe_trust_domain(identifier: str) -> str | None:
    """``a.example`` for ``spiffe://a.example/agent/planner``; None for any other identifier.
    SPIFFE IDs are lower case in scheme and trust domain (SPIFFE-ID section 2.1), so an
    identifier that spells them otherwise names no trust domain."""
    if not identifier.startswith("spiffe://"):
        return None
    domain, slash, _path = identifier[len("spiffe://") :].partition("/")
    if not domain or not slash:
        return None
    return domain


def fingerprint_of(
    issuers: Mapping[str, tuple[TrustedKey, ...]],
    domains: Mapping[str, tuple[TrustedKey, ...]] | None = None,
) -> str:
    """A digest of every identifier, key and validity window: it changes whenever any of
    them does (a rotation, a revocation), so caches of verification results keyed by it
    never outlive the keys they were computed under."""

    def keys(group: tuple[TrustedKey, ...]) -> list[tuple[Any, ...]]:
        def end(at: int | None) -> int:
            return -1 if at is None else at

        windows = [(k.kid, k.thumbprint, end(k.not_after), end(k.revoked_at)) for k in group]
        # A listed key with no history keeps the pair the fingerprint always had, so a
        # trust file's fingerprint does not change with this version.
        return sorted(w[:2] if w[2:] == (-1, -1) else w for w in windows)

    canon: list[Any] = sorted((ident, keys(group)) for ident, group in issuers.items())
    if domains:
        canon.append(["domains", sorted((d, keys(group)) for d, group in domains.items())])
    return hashlib.sha256(json.dumps(canon, separators=(",", ":")).encode()).hexdigest()


def _b64_member(jwk: Mapping[str, Any], name: str, *, where: str, size: int) -> bytes:
    value = jwk.get(name)
    if not isinstance(value, str):
        raise TrustConfigError(f"{where}: member {name!r} is missing")
    try:
        raw = b64url_decode(value, what=name)
    except MalformedError as exc:
        raise TrustConfigError(f"{where}: {exc.detail}") from exc
    if len(raw) != size:
        raise TrustConfigError(f"{where}: member {name!r} must be {size} octets")
    return raw


def import_key(jwk: object, *, issuer: str, where: str) -> TrustedKey:
    """Validate and import one public JWK (profile §4). Raises TrustConfigError."""
    return _import_key(jwk, issuer=issuer, where=where)


def _import_key(jwk: object, *, issuer: str, where: str) -> TrustedKey:
    if not isinstance(jwk, Mapping):
        raise TrustConfigError(f"{where} must be a JWK object")
    private = sorted(_PRIVATE_MEMBERS & set(jwk))
    if private:
        raise TrustConfigError(
            f"{where} ({issuer}) holds private key material ({', '.join(private)}); "
            "a trust file must contain public keys only"
        )
    try:
        kid = check_identifier(jwk.get("kid"), what="kid", limit=MAX_KID)
    except MalformedError as exc:
        raise TrustConfigError(f"{where} ({issuer}): every key needs a kid: {exc.detail}") from exc
    kty, crv = jwk.get("kty"), jwk.get("crv")
    public: ec.EllipticCurvePublicKey | Ed25519PublicKey
    if kty == "EC" and crv == "P-256":
        x = _b64_member(jwk, "x", where=where, size=32)
        y = _b64_member(jwk, "y", where=where, size=32)
        try:
            public = ec.EllipticCurvePublicNumbers(
                int.from_bytes(x, "big"), int.from_bytes(y, "big"), ec.SECP256R1()
            ).public_key()
        except ValueError as exc:
            raise TrustConfigError(f"{where} ({issuer}): the point is not on P-256") from exc
    elif kty == "OKP" and crv == "Ed25519":
        x = _b64_member(jwk, "x", where=where, size=32)
        problem = ed25519_key_problem(x)
        if problem:
            raise TrustConfigError(f"{where} ({issuer}): {problem}")
        public = Ed25519PublicKey.from_public_bytes(x)
    else:
        raise TrustConfigError(
            f"{where} ({issuer}): unsupported key kty={kty!r} crv={crv!r}; "
            "this profile accepts EC P-256 (ES256) and OKP Ed25519 only"
        )
    alg = jwk.get("alg")
    allowed = {"EC": {"ES256"}, "OKP": {"Ed25519", "EdDSA"}}[str(kty)]
    if alg is not None and alg not in allowed:
        raise TrustConfigError(f"{where} ({issuer}): alg {alg!r} does not fit a {kty} {crv} key")
    return TrustedKey(
        issuer=issuer, kid=kid, kty=str(kty), public=public, thumbprint=thumbprint(public)
    )


def _key_members(public: ec.EllipticCurvePublicKey | Ed25519PublicKey) -> dict[str, str]:
    """The members that make up a public key's JWK, as RFC 7638 section 3.2 lists them."""
    if isinstance(public, Ed25519PublicKey):
        return {"crv": "Ed25519", "kty": "OKP", "x": b64url_encode(public.public_bytes_raw())}
    numbers = public.public_numbers()
    return {
        "crv": "P-256",
        "kty": "EC",
        "x": b64url_encode(numbers.x.to_bytes(32, "big")),
        "y": b64url_encode(numbers.y.to_bytes(32, "big")),
    }


def thumbprint(public: ec.EllipticCurvePublicKey | Ed25519PublicKey) -> str:
    """The key's JWK thumbprint (RFC 7638, SHA-256): its required members in lexical order,
    no white space, hashed, base64url without padding."""
    members = _key_members(public)
    text = json.dumps(members, sort_keys=True, separators=(",", ":"))
    return b64url_encode(hashlib.sha256(text.encode()).digest())


# --- Ed25519 public key validation (RFC 8032 5.1.3) -------------------------------------
# cryptography accepts any 32 octets as an Ed25519 public key. A small-order key verifies a
# forged signature (R = identity, S = 0) over every message, and a non-canonical encoding
# (y >= p) names the same point under another spelling; both are refused at load.

_P = 2**255 - 19
_D = (-121665 * pow(121666, -1, _P)) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _edwards_add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    x1, y1 = a
    x2, y2 = b
    t = _D * x1 * x2 * y1 * y2 % _P
    x3 = (x1 * y2 + x2 * y1) * pow(1 + t, -1, _P) % _P
    y3 = (y1 * y2 + x1 * x2) * pow(1 - t, -1, _P) % _P
    return x3, y3


def ed25519_key_problem(encoded: bytes) -> str | None:
    """Return why ``encoded`` is unsafe as an Ed25519 public key, or None when it is fine."""
    if len(encoded) != 32:
        return "an Ed25519 key is 32 octets"
    value = int.from_bytes(encoded, "little")
    sign = value >> 255
    y = value & ((1 << 255) - 1)
    if y >= _P:
        return "non-canonical Ed25519 key encoding (y >= p)"
    u = (y * y - 1) % _P
    v = (_D * y * y + 1) % _P
    x2 = u * pow(v, -1, _P) % _P
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P != 0:
        x = x * _SQRT_M1 % _P
    if (x * x - x2) % _P != 0:
        return "not a point on Ed25519"
    if x == 0 and sign == 1:
        return "non-canonical Ed25519 key encoding (x = 0 with the sign bit set)"
    if x & 1 != sign:
        x = _P - x
    point = (x, y)
    for _ in range(3):  # multiply by the cofactor 8
        point = _edwards_add(point, point)
    if point == (0, 1):
        return "Ed25519 key of small order: it would verify forged signatures"
    return None
