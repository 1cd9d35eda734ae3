"""What a trust source publishes, fetched and judged before any key of it is used.

Three kinds of source (issue 21): a JWKS URL (RFC 7517; an MCP authorization server's
``jwks_uri``, RFC 8414), a SPIFFE trust bundle endpoint (a JWKS with ``spiffe_sequence`` and
``spiffe_refresh_hint``; SPIFFE Trust Domain and Bundle, section 4), and a signed A2A Agent
Card (JWS ``signatures`` over the card's RFC 8785 form). Each document is refused whole,
with a clear ``SourceError``, when anything in it could make a forgery verify or hide one:
the caller then keeps the last good key set.

Only URLs the trust configuration lists are fetched, with the standard library, no
redirect followed and a size limit read, not trusted from a header.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import urlsplit

from handoff_context._encoding import b64url_decode, strict_json_loads
from handoff_context._signature import KTY_FOR_ALG, verify_raw
from handoff_context._trust import TrustedKey, import_key
from handoff_context.errors import MalformedError, TrustConfigError

# The A2A extension this profile is carried under (profile §9); an Agent Card lists the agent's
# handoff keys in that extension's params.
A2A_EXTENSION = "https://quantumlearningmachines.com/a2a/ext/agent-handoff/v1"
SPIFFE_JWT_USE = "jwt-svid"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


class SourceKind(Enum):
    JWKS = "jwks"
    SPIFFE_BUNDLE = "spiffe-bundle"
    AGENT_CARD = "agent-card"


class SourceError(Exception):
    """A source could not be used this time: down (``refused`` False), or its answer was
    refused. ``detail`` says why, in one line."""

    def __init__(self, detail: str, *, refused: bool = True) -> None:
        super().__init__(detail)
        self.detail = detail
        self.refused = refused


@dataclass(frozen=True, slots=True)
class PublishedKey:
    """One public key as a source published it: ``jwk`` is its canonical public JWK text."""

    kid: str
    thumbprint: str
    jwk: str


@dataclass(frozen=True, slots=True)
class Published:
    """A source's answer, accepted: its keys, and the refresh hint and sequence it gave."""

    keys: tuple[PublishedKey, ...]
    refresh_hint: int | None = None
    sequence: int | None = None


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """One entry of the trust configuration's ``sources`` (see ``TrustConfig``)."""

    name: str
    kind: SourceKind
    url: str
    identifiers: tuple[str, ...] = ()  # JWKS, Agent Card: the identifiers its keys speak for
    trust_domain: str | None = None  # SPIFFE: keys speak for spiffe://<trust_domain>/...
    refresh: int = 300  # seconds, unless the source gives a hint (SPIFFE)
    max_bytes: int = 256 * 1024
    timeout: float = 10.0
    signers: tuple[TrustedKey, ...] = ()  # Agent Card: the keys its signature must verify with


def check_source_url(url: object, *, where: str) -> str:
    """An https URL, or http to a loopback address only: keys fetched in clear text from
    anywhere else could be replaced on the way. Raises TrustConfigError."""
    if not isinstance(url, str) or not url:
        raise TrustConfigError(f"{where}: url must be a string")
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS:
        return url
    raise TrustConfigError(
        f"{where}: url {url!r} must be https (plain http only to a loopback address)"
    )


# --- fetching --------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A source that redirects is refused: only the configured URL is ever fetched."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        raise SourceError(
            f"answered {code} redirecting to {newurl!r}; only the configured URL is fetched"
        )


_OPENER = urllib.request.build_opener(_NoRedirect)


def fetch(config: SourceConfig) -> bytes:
    """GET the source's URL; the body, at most ``max_bytes``. Raises SourceError."""
    request = urllib.request.Request(
        config.url,
        headers={"Accept": "application/json", "User-Agent": "handoff-context trust source"},
    )
    try:
        with _OPENER.open(request, timeout=config.timeout) as response:
            body = _read_bounded(response, config)
    except SourceError:
        raise
    except urllib.error.HTTPError as exc:
        raise SourceError(f"answered HTTP {exc.code}", refused=False) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = getattr(exc, "reason", None) or exc
        raise SourceError(f"cannot be reached: {why}", refused=False) from exc
    if len(body) > config.max_bytes:
        raise SourceError(f"answered more than {config.max_bytes} octets; refused")
    return body


def _read_bounded(response: Any, config: SourceConfig) -> bytes:
    """The body, read no further than ``max_bytes`` + 1 octets and for no longer than the
    timeout in all: a socket timeout bounds each read, and a source that trickles a byte
    at a time would otherwise hold the refresher for as long as it likes."""
    deadline = time.monotonic() + config.timeout
    chunks: list[bytes] = []
    size = 0
    while size <= config.max_bytes:
        if time.monotonic() > deadline:
            raise SourceError(f"took longer than {config.timeout:g} s to answer", refused=False)
        chunk: bytes = response.read1(64 * 1024)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


# --- judging what was fetched ------------------------------------------------------------


def judge(config: SourceConfig, body: bytes, *, last_sequence: int | None) -> Published:
    """Parse and check a source's answer. Raises SourceError saying what was refused."""
    if len(body) > config.max_bytes:
        raise SourceError(f"answered more than {config.max_bytes} octets; refused")
    try:
        doc = strict_json_loads(body, what="the document")
    except MalformedError as exc:
        raise SourceError(
            f"answered something that is not a usable JSON document: {exc.detail}"
        ) from exc
    if not isinstance(doc, Mapping):
        raise SourceError("answered a JSON value that is not an object")
    if config.kind is SourceKind.AGENT_CARD:
        return _agent_card(config, doc)
    if config.kind is SourceKind.SPIFFE_BUNDLE:
        return _spiffe_bundle(config, doc, last_sequence=last_sequence)
    return Published(keys=_jwks_keys(config, doc.get("keys")))


def _jwks_keys(
    config: SourceConfig, keys: object, *, use: str | None = None
) -> tuple[PublishedKey, ...]:
    """The keys of a JWKS ``keys`` list; with ``use``, only the keys for that use (SPIFFE:
    keys for other uses are ignored). A private key, a key or algorithm this profile does
    not allow, or two keys under one kid refuse the whole set."""
    if not isinstance(keys, list):
        raise SourceError('answered a document without a "keys" list')
    found: dict[str, PublishedKey] = {}
    for i, jwk in enumerate(keys):
        where = f"keys[{i}]"
        if not isinstance(jwk, Mapping):
            raise SourceError(f"{where} is not a JWK object")
        if use is not None and jwk.get("use") != use:
            continue
        try:
            key = import_key(jwk, issuer=config.name, where=where)
        except TrustConfigError as exc:
            raise SourceError(f"refused: {exc}") from exc
        published = PublishedKey(key.kid, key.thumbprint, _canonical_jwk(jwk))
        earlier = found.get(key.kid)
        if earlier is not None and earlier.thumbprint != key.thumbprint:
            raise SourceError(
                f"refused: kid {key.kid!r} names two different keys; "
                "an element naming it could be judged under either"
            )
        found[key.kid] = published
    return tuple(found.values())


def _canonical_jwk(jwk: Mapping[str, Any]) -> str:
    """The public members that make the key, in one spelling (what the history stores)."""
    members = ("kty", "crv", "x", "y") if jwk.get("kty") == "EC" else ("kty", "crv", "x")
    public = {m: jwk[m] for m in members}
    public["kid"] = jwk["kid"]
    return json.dumps(public, sort_keys=True, separators=(",", ":"))


def _spiffe_bundle(
    config: SourceConfig, doc: Mapping[str, Any], *, last_sequence: int | None
) -> Published:
    sequence = doc.get("spiffe_sequence")
    if sequence is not None and (type(sequence) is not int or sequence < 0):
        raise SourceError("refused: spiffe_sequence is not a non-negative integer")
    if sequence is not None and last_sequence is not None and sequence < last_sequence:
        # A lower sequence is an older bundle replayed (SPIFFE bundle section 4.1): taking it
        # would bring back keys the trust domain has withdrawn.
        raise SourceError(
            f"refused: spiffe_sequence went down from {last_sequence} to {sequence} "
            "(an older bundle served again)"
        )
    hint = doc.get("spiffe_refresh_hint")
    if hint is not None and (type(hint) is not int or hint <= 0):
        raise SourceError("refused: spiffe_refresh_hint is not a positive integer")
    keys = _jwks_keys(config, doc.get("keys"), use=SPIFFE_JWT_USE)
    return Published(keys=keys, refresh_hint=hint, sequence=sequence)


# --- A2A Agent Cards ---------------------------------------------------------------------


def _agent_card(config: SourceConfig, card: Mapping[str, Any]) -> Published:
    """A card is used only when one of its ``signatures`` verifies with a configured signer
    key over the card's RFC 8785 form, and its handoff extension names the configured
    agent. A ``jku`` in a signature's header is never fetched."""
    _check_card_signature(config, card)
    extension = _handoff_extension(card)
    params = extension.get("params")
    if not isinstance(params, Mapping):
        raise SourceError("refused: the card's handoff extension has no params")
    named = params.get("id")
    if named not in config.identifiers:
        raise SourceError(
            f"refused: the card names agent {named!r}, not {', '.join(config.identifiers)}"
        )
    return Published(keys=_jwks_keys(config, params.get("keys")))


def _handoff_extension(card: Mapping[str, Any]) -> Mapping[str, Any]:
    capabilities = card.get("capabilities")
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    for extension in extensions if isinstance(extensions, list) else ():
        if isinstance(extension, Mapping) and extension.get("uri") == A2A_EXTENSION:
            return extension
    raise SourceError(f"refused: the card does not declare the extension {A2A_EXTENSION}")


def _check_card_signature(config: SourceConfig, card: Mapping[str, Any]) -> None:
    signatures = card.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise SourceError("refused: the card is not signed")
    unsigned = {k: v for k, v in card.items() if k != "signatures"}
    payload = _b64(jcs(unsigned))
    problems: list[str] = []
    for i, sig in enumerate(signatures):
        try:
            _verify_card_signature(config, sig, payload)
            return
        except SourceError as exc:
            problems.append(f"signatures[{i}]: {exc.detail}")
    raise SourceError("refused: no card signature verifies (" + "; ".join(problems) + ")")


def _verify_card_signature(config: SourceConfig, sig: object, payload: str) -> None:
    if not isinstance(sig, Mapping):
        raise SourceError("not an object")
    protected, signature = sig.get("protected"), sig.get("signature")
    if not isinstance(protected, str) or not isinstance(signature, str):
        raise SourceError("protected and signature must be base64url strings")
    try:
        header = strict_json_loads(b64url_decode(protected, what="protected"), what="header")
        raw = b64url_decode(signature, what="signature")
    except MalformedError as exc:
        raise SourceError(exc.detail) from exc
    if not isinstance(header, Mapping):
        raise SourceError("the protected header is not an object")
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in KTY_FOR_ALG:
        raise SourceError(f"alg {alg!r} is not allowed (ES256, Ed25519, EdDSA)")
    signers = [k for k in config.signers if kid is None or k.kid == kid]
    signers = [k for k in signers if k.kty == KTY_FOR_ALG[str(alg)]]
    if not signers:
        raise SourceError(f"kid {kid!r} names no configured signer key for {alg}")
    signing_input = f"{protected}.{payload}".encode("ascii")
    if not any(verify_raw(str(alg), k.public, signing_input, raw) for k in signers):
        raise SourceError("the signature does not verify")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def jcs(value: object) -> bytes:
    """RFC 8785 JSON Canonicalization of a decoded JSON value: members sorted by their
    UTF-16 code units, no whitespace, strings escaped as ECMAScript does. Numbers: integers
    (what cards carry) exactly; a finite float in the shortest round-trip form Python and
    ECMAScript share for the common cases."""
    return _jcs(value).encode("utf-8")


def _jcs(value: object) -> str:
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 2**53:
            return str(int(value))
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Sequence):
        return "[" + ",".join(_jcs(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = sorted(value.items(), key=lambda kv: str(kv[0]).encode("utf-16-be"))
        return "{" + ",".join(f"{_jcs(str(k))}:{_jcs(v)}" for k, v in items) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")
