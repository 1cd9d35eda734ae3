"""The CBOR form (profile §3): a tagged COSE_Sign1 (RFC 9052) holding an offer or a status.

cbor2 is lenient where the profile is not (it keeps the last of duplicate map keys, ignores
trailing bytes and decodes dozens of semantic tags, including shared references that can
build cyclic values), so elements are read by the small strict decoder below, which knows
only the subset the profile uses. cbor2 encodes; it reads an element's header and payload
only where the strict reader would read the same value (``_plain_cbor``).

Nothing here verifies a signature: ``parse`` returns the ``signing_input`` (the RFC 9052
s4.4 Sig_structure) and the raw ``signature`` for the signature layer.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from handoff_context._encoding import MAX_DEPTH, MAX_ELEMENT_OCTETS, handoff_digest
from handoff_context._model import (
    MAX_KID,
    Element,
    ElementType,
    Form,
    Header,
    Offer,
    Status,
    check_identifier,
    read_payload,
    try_read_payload,
)
from handoff_context.errors import EmbeddedKeyError, MalformedError

if TYPE_CHECKING:  # joserfc is imported by what signs, never by what only checks
    from joserfc.jwk import ECKey, OKPKey

ALG_BY_LABEL: dict[int, str] = {-7: "ES256", -8: "EdDSA", -19: "Ed25519"}
LABEL_BY_ALG: dict[str, int] = {name: label for label, name in ALG_BY_LABEL.items()}
OFFER_CONTENT_TYPE = "application/handoff-offer+cbor"
STATUS_CONTENT_TYPE = "application/handoff-status+cbor"
_TYPE_BY_CONTENT_TYPE = {
    OFFER_CONTENT_TYPE: ElementType.OFFER,
    STATUS_CONTENT_TYPE: ElementType.STATUS,
}
_CONTENT_TYPE_BY_TYPE = {t.value: ct for ct, t in _TYPE_BY_CONTENT_TYPE.items()}

COSE_SIGN1_TAG = 18
_ALG, _CRIT, _CONTENT_TYPE, _KID = 1, 2, 3, 4
_ALLOWED_LABELS = frozenset({_ALG, _CONTENT_TYPE, _KID})
# RFC 9053 s3.1: HMAC 256/64, 256/256, 384/384, 512/512. Named in the error so that an
# "alg confusion" attempt (an HMAC keyed with a public key) is recognisable in the logs.
_HMAC_ALGS = frozenset({4, 5, 6, 7})
# Profile §2/§3 [profile]: header parameters that carry a key, a certificate or a pointer to one
# (IANA "COSE Header Parameters" and "COSE Header Algorithm Parameters"). They are refused
# as untrusted-key before the allow-list runs, so the reason says why.
_KEY_LABELS: dict[int | str, str] = {
    -1: "an ephemeral COSE_Key (-1)",
    -2: "a static COSE_Key (-2)",
    -27: "x5t-sender (-27)",
    -28: "x5u-sender (-28)",
    -29: "x5chain-sender (-29)",
    13: "kcwt (13)",
    14: "kccs (14)",
    22: "c5t (22)",
    23: "c5u (23)",
    24: "c5b (24)",
    25: "c5c (25)",
    32: "x5bag (32)",
    33: "x5chain (33)",
    34: "x5t (34)",
    35: "x5u (35)",
    257: "CUPHOwnerPubKey (257)",
    # Text labels are legal in COSE; refuse the JOSE and COSE names of key carriers too.
    **{name: name for name in ("jwk", "jku", "x5c", "x5chain", "x5bag", "x5u", "COSE_Key")},
}

# The smallest argument each long head form may carry (RFC 8949 s4.2.1 preferred
# serialization): 1, 2, 4 or 8 argument bytes.
_SHORTEST_MIN = {1: 24, 2: 1 << 8, 4: 1 << 16, 8: 1 << 32}
_FLOAT_FORMATS = {2: ">e", 4: ">f", 8: ">d"}


class Sign1(NamedTuple):
    """The four members of a COSE_Sign1, with the protected header decoded."""

    protected: bytes
    protected_map: dict[int | str, Any]
    unprotected: dict[int | str, Any]
    payload: bytes
    signature: bytes


class _Reader:
    """A strict reader for the CBOR subset the profile uses (RFC 8949 s3).

    Refused as malformed: truncation, reserved additional information, indefinite-length
    items (nothing in the profile needs them, and refusing them keeps one encoding per
    length), duplicate map keys (compared after decoding, so two encodings of one key are
    caught), map keys other than integers and text (text only when ``text_keys``), nesting
    deeper than MAX_DEPTH, simple values other than false/true/null (``undefined`` has no
    JSON counterpart), non-finite floats, and tags unless ``tags`` is set (then a tag
    becomes a ``cbor2.CBORTag`` for the caller to refuse with a better reason).
    """

    def __init__(self, data: bytes, *, what: str, tags: bool, text_keys: bool) -> None:
        self.data = data
        self.pos = 0
        self.what = what
        self.tags = tags
        self.text_keys = text_keys

    def fail(self, problem: str) -> MalformedError:
        return MalformedError(f"{self.what}: {problem}")

    def take(self, count: int) -> bytes:
        if count > len(self.data) - self.pos:
            raise self.fail("the CBOR ends in the middle of an item")
        chunk = self.data[self.pos : self.pos + count]
        self.pos += count
        return chunk

    def head(self, *, shortest: bool = False) -> tuple[int, int, int]:
        """Read an initial byte and its argument: (major type, additional info, argument)."""
        initial = self.take(1)[0]
        major, info = initial >> 5, initial & 0x1F
        if info < 24:
            return major, info, info
        if info == 31:
            raise self.fail("indefinite-length items are not allowed")
        if info > 27:
            raise self.fail(f"reserved CBOR additional information {info}")
        size = 1 << (info - 24)
        argument = int.from_bytes(self.take(size), "big")
        if shortest and major != 7 and argument < _SHORTEST_MIN[size]:
            raise self.fail("the COSE_Sign1 envelope must use the shortest CBOR heads")
        return major, info, argument

    def item(self, depth: int = 0, *, shortest: bool = False) -> Any:
        major, info, argument = self.head(shortest=shortest)
        if major == 0:
            return argument
        if major == 1:
            return -1 - argument
        if major == 2:
            return self.take(argument)
        if major == 3:
            try:
                return self.take(argument).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise self.fail("a text string is not valid UTF-8") from exc
        if major == 7:
            return self.simple(info, argument)
        if depth >= MAX_DEPTH:
            raise self.fail(f"nests deeper than {MAX_DEPTH} levels")
        if major == 4:
            if argument > len(self.data) - self.pos:
                raise self.fail("an array declares more members than there are octets")
            return [self.item(depth + 1) for _ in range(argument)]
        if major == 5:
            return self.map(argument, depth + 1)
        if not self.tags:
            raise self.fail(f"CBOR tags are not allowed (found tag {argument})")
        return cbor2.CBORTag(argument, self.item(depth + 1))

    def map(self, count: int, depth: int) -> dict[Any, Any]:
        if 2 * count > len(self.data) - self.pos:
            raise self.fail("a map declares more entries than there are octets")
        result: dict[Any, Any] = {}
        for _ in range(count):
            key = self.item(depth)
            # type() rather than isinstance(): true and false are not integer labels.
            if type(key) is not str and (self.text_keys or type(key) is not int):
                wanted = "text strings" if self.text_keys else "integers or text strings"
                raise self.fail(f"map keys must be {wanted}")
            if key in result:
                raise self.fail(f"duplicate map key {key!r}")
            result[key] = self.item(depth)
        return result

    def simple(self, info: int, argument: int) -> Any:
        if info in (20, 21, 22):
            return (False, True, None)[info - 20]
        if info in (25, 26, 27):
            size = 1 << (info - 24)
            value: float = struct.unpack(_FLOAT_FORMATS[size], argument.to_bytes(size, "big"))[0]
            if not math.isfinite(value):
                raise self.fail("NaN and infinite floats are not allowed")
            return value
        raise self.fail(f"CBOR simple value {argument} is not allowed")

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self.fail("trailing bytes after the CBOR item")


def _decode_one(data: bytes, *, what: str, tags: bool, text_keys: bool) -> Any:
    value = _plain_cbor(data, text_keys=text_keys)
    if value is not _NOT_PLAIN:
        return value
    reader = _Reader(data, what=what, tags=tags, text_keys=text_keys)
    value = reader.item()
    reader.end()
    return value


_NOT_PLAIN = object()


def _early_refusals() -> dict[str, Any] | None:
    """cbor2's own refusals: indefinite lengths and duplicate keys (which ``_plain_cbor``
    would find out anyway) and, above all, nesting deeper than the strict reader allows,
    so that hostile octets never recurse deep in C. None when the installed cbor2 (older
    than 6) has no such options: then only the strict reader reads an element."""
    wanted: dict[str, Any] = {
        "allow_indefinite": False,
        "allow_duplicate_keys": False,
        "max_depth": MAX_DEPTH + 1,
    }
    try:
        cbor2.loads(b"\xa0", **wanted)
    except TypeError:
        return None
    return wanted


_EARLY_REFUSALS = _early_refusals()
_CBOR_INT_RANGE = range(-(1 << 64), 1 << 64)  # major types 0 and 1; beyond is a bignum tag


def _plain_cbor(data: bytes, *, text_keys: bool) -> Any:
    """The value of ``data`` by cbor2's C decoder when ``_Reader`` would read the same value
    without a complaint, else ``_NOT_PLAIN`` (and ``_Reader`` reads it, raising what it
    raises): the pure-Python reader was some 40 % of parsing a COSE offer, this 2.5 times
    as fast.

    The decoder is lenient (see the module's docstring), so its value is taken only when
    encoding it again gives back exactly ``data``, which rules out duplicate keys (a lost
    member encodes shorter), trailing bytes, indefinite lengths, longer heads than needed,
    and every tag but the bignums (cbor2 writes none of them for a plain value), and when
    the value holds nothing but what the strict reader returns: dicts with integer or text
    keys (text only with ``text_keys``), lists, text, bytes, booleans, null, finite floats
    and integers of major types 0 and 1, nested at most ``MAX_DEPTH`` deep. The value is
    walked only after it encoded again, so a cycle that shared references built is never
    walked."""
    if _EARLY_REFUSALS is None:
        return _NOT_PLAIN
    try:
        value = cbor2.loads(data, **_EARLY_REFUSALS)
        if cbor2.dumps(value) != data and cbor2.dumps(value, canonical=True) != data:
            return _NOT_PLAIN
    except (cbor2.CBORError, ValueError, TypeError, OverflowError, RecursionError):
        return _NOT_PLAIN
    return value if _plain(value, 0, text_keys) else _NOT_PLAIN


def _plain(value: Any, depth: int, text_keys: bool) -> bool:
    kind = type(value)
    if kind is str or kind is bytes or kind is bool or value is None:
        return True
    if kind is int:
        return value in _CBOR_INT_RANGE
    if kind is float:
        return math.isfinite(value)
    if depth >= MAX_DEPTH:
        return False  # the strict reader names the depth
    if kind is list:
        return all(_plain(v, depth + 1, text_keys) for v in value)
    if kind is dict:
        for key, member in value.items():
            if type(key) is not str and (text_keys or type(key) is not int):
                return False
            if type(key) is int and key not in _CBOR_INT_RANGE:
                return False
            if not _plain(member, depth + 1, text_keys):
                return False
        return True
    return False


def decode_sign1(octets: bytes, *, detached: bool = False) -> Sign1:
    """Decode the envelope of a tagged COSE_Sign1: structure only, no profile rules.

    ``detached``: the payload must be nil (RFC 9052 s4.1: a detached payload, as in an
    RFC 9942 receipt, whose payload is the Merkle root the verifier computes); it is
    returned as ``b""``. Elements never have one.

    Raises MalformedError when the octets are over 64 KiB (checked first), not CBOR tag 18
    around an array of exactly [protected bstr, unprotected map, payload bstr, signature
    bstr], carry trailing bytes, break a rule of the strict reader, or use a longer head
    than needed in the unsigned envelope (a relay could otherwise change the handoff digest
    without touching the signature, profile §3).
    """
    if not isinstance(octets, bytes):
        raise MalformedError("a COSE element must be a byte string")
    if len(octets) > MAX_ELEMENT_OCTETS:
        raise MalformedError(f"the element is larger than {MAX_ELEMENT_OCTETS} octets")
    reader = _Reader(octets, what="COSE_Sign1", tags=True, text_keys=False)
    major, _, tag = reader.head(shortest=True)
    if major != 6:
        raise MalformedError("COSE_Sign1: the item is untagged; CBOR tag 18 is required")
    if tag != COSE_SIGN1_TAG:
        raise MalformedError(f"COSE_Sign1: CBOR tag 18 is required, found tag {tag}")
    major, _, count = reader.head(shortest=True)
    if major != 4 or count != 4:
        raise MalformedError("COSE_Sign1: the tagged item must be an array of exactly 4")
    protected, unprotected, payload, signature = (reader.item(1, shortest=True) for _ in range(4))
    reader.end()
    if not isinstance(protected, bytes):
        raise MalformedError("COSE_Sign1: the protected header must be a byte string")
    if not isinstance(unprotected, dict):
        raise MalformedError("COSE_Sign1: the unprotected header must be a map")
    if detached:
        if payload is not None:
            raise MalformedError("COSE_Sign1: the payload must be detached (nil)")
        payload = b""
    elif payload is None:
        raise MalformedError("COSE_Sign1: a detached payload (nil) is not allowed")
    if not isinstance(payload, bytes):
        raise MalformedError("COSE_Sign1: the payload must be a byte string")
    if not isinstance(signature, bytes):
        raise MalformedError("COSE_Sign1: the signature must be a byte string")
    # RFC 9052 s3: a zero-length protected bstr stands for the empty map.
    protected_map = (
        _decode_one(protected, what="protected header", tags=True, text_keys=False)
        if protected
        else {}
    )
    if not isinstance(protected_map, dict):
        raise MalformedError("protected header: must encode a CBOR map")
    return Sign1(protected, protected_map, unprotected, payload, signature)


def sig_structure(protected: bytes, payload: bytes) -> bytes:
    """The RFC 9052 s4.4 Sig_structure for COSE_Sign1, with empty external AAD.

    ``protected`` is the protected header bstr exactly as transmitted.
    """
    return cbor2.dumps(["Signature1", protected, b"", payload])


def _refuse_embedded_keys(sign1: Sign1) -> None:
    for bucket, labels in (("protected", sign1.protected_map), ("unprotected", sign1.unprotected)):
        for label in labels:
            if label in _KEY_LABELS:
                try:
                    doc = _decode_one(sign1.payload, what="payload", tags=False, text_keys=True)
                except MalformedError:
                    doc = None
                raise EmbeddedKeyError(
                    f"the {bucket} header carries {_KEY_LABELS[label]}: a key carried inside"
                    " the message shows nothing about who signed; keys come only from the"
                    " trust configuration",
                    try_read_payload(doc, form=Form.COSE),
                )


def _check_header(sign1: Sign1) -> Header:
    """Profile §3 [profile]: protected {1: alg, 3: content type, 4: kid?}, unprotected empty."""
    protected, unprotected = sign1.protected_map, sign1.unprotected
    if _ALG in unprotected:
        raise MalformedError("alg must be in the protected header, not the unprotected one")
    if unprotected:
        raise MalformedError(f"the unprotected header must be empty (found {[*unprotected]})")
    if not protected:
        raise MalformedError("the protected header is empty; alg is required there")
    if _CRIT in protected:
        raise MalformedError("crit is not allowed: the profile defines no extension")
    for label in protected:
        if label not in _ALLOWED_LABELS:
            raise MalformedError(f"protected header label {label!r} is not allowed")
    if _ALG not in protected:
        raise MalformedError("alg (1) is required in the protected header")
    alg = protected[_ALG]
    if type(alg) is not int:
        raise MalformedError(f"alg must be an integer COSE algorithm, not {alg!r}")
    if alg in _HMAC_ALGS:
        raise MalformedError(f"HMAC algorithms are not allowed (alg {alg})")
    if alg not in ALG_BY_LABEL:
        raise MalformedError(f"alg {alg} is not one of -7 (ES256), -8 (EdDSA), -19 (Ed25519)")
    content_type = protected.get(_CONTENT_TYPE)
    if content_type not in (OFFER_CONTENT_TYPE, STATUS_CONTENT_TYPE):
        raise MalformedError(
            f"content type (3) must be {OFFER_CONTENT_TYPE!r} or {STATUS_CONTENT_TYPE!r}"
        )
    kid = None
    if _KID in protected:
        raw_kid = protected[_KID]
        if not isinstance(raw_kid, bytes):
            raise MalformedError("kid (4) must be a byte string")
        try:
            text = raw_kid.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedError("kid (4) must be UTF-8") from exc
        kid = check_identifier(text, what="kid", limit=MAX_KID)
    return Header(alg=ALG_BY_LABEL[alg], kid=kid, content_type=content_type)


def parse(octets: bytes) -> Element:
    """Parse a tagged COSE_Sign1 holding an offer or status. Does NOT verify the signature.

    Raises MalformedError for anything outside the profile (profile §1, §3), or
    CheckFailed(Reason.UNTRUSTED_KEY) for an embedded key, x5chain, x5bag or other
    key-carrying header in either bucket (profile §2/§3: keys come only from the trust config).
    The signature's length and value are the signature layer's business, not checked here.
    """
    try:
        return _parse(octets)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # The reader and the model raise only MalformedError by design; this is the
        # fail-closed net so that no other exception type ever reaches the pipeline.
        raise MalformedError(f"the COSE element could not be decoded ({exc!r})") from exc


def _parse(octets: bytes) -> Element:
    sign1 = decode_sign1(octets)
    _refuse_embedded_keys(sign1)
    header = _check_header(sign1)
    raw_payload = _decode_one(sign1.payload, what="payload", tags=False, text_keys=True)
    if not isinstance(raw_payload, dict):
        raise MalformedError("payload: must be a CBOR map")
    expected = _TYPE_BY_CONTENT_TYPE[header.content_type]
    if raw_payload.get("type") != expected._value_:  # .value without its descriptor call
        raise MalformedError(
            f"content type {header.content_type!r} does not match the payload type"
            f" {raw_payload.get('type')!r}"
        )
    payload: Offer | Status
    payload = read_payload(raw_payload, form=Form.COSE)
    raw_header = {"alg": header.alg, "content_type": header.content_type}
    if header.kid is not None:
        raw_header["kid"] = header.kid
    # Positional, in Element's order (as ``_jws.parse`` builds it, for the same reason).
    return Element(
        Form.COSE,
        octets,
        handoff_digest(octets),
        header,
        payload,
        sig_structure(sign1.protected, sign1.payload),
        sign1.signature,
        # Header and payload exactly as signed, without the signature (profile §6.4 evidence).
        cbor2.dumps([sign1.protected, sign1.payload]),
        raw_header,
        raw_payload,
    )


def _sign_raw(key: ECKey | OKPKey, alg: str, data: bytes) -> bytes:
    from joserfc.errors import JoseError

    try:
        private = key.get_op_key("sign")
    except JoseError as exc:
        raise ValueError(f"signing needs a private key ({exc})") from exc
    if alg == "ES256":
        if not isinstance(private, ec.EllipticCurvePrivateKey) or not isinstance(
            private.curve, ec.SECP256R1
        ):
            raise ValueError("ES256 needs a P-256 private key")
        r, s = decode_dss_signature(private.sign(data, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")
    if not isinstance(private, ed25519.Ed25519PrivateKey):
        raise ValueError(f"{alg} needs an Ed25519 private key")
    return private.sign(data)


def sign(
    payload: Mapping[str, Any], *, key: ECKey | OKPKey, alg: str, kid: str | None = None
) -> bytes:
    """Sign ``payload`` as a tagged COSE_Sign1 and return its octets (profile §3).

    The payload map is encoded with deterministic CBOR (RFC 8949 s4.2, so equal maps give
    equal octets); digests must already be 32-byte byte strings. The payload is not
    validated against the model, so negative test vectors can be made with it.
    Raises ValueError for an alg outside the profile, a key that does not fit it or is
    public, or a payload ``type`` that is neither ``offer`` nor ``status``.
    """
    if alg not in LABEL_BY_ALG:
        raise ValueError(f"alg must be one of {sorted(LABEL_BY_ALG)}")
    type_name = payload.get("type")
    content_type = _CONTENT_TYPE_BY_TYPE.get(type_name) if isinstance(type_name, str) else None
    if content_type is None:
        raise ValueError('payload["type"] must be "offer" or "status"')
    header: dict[int, Any] = {_ALG: LABEL_BY_ALG[alg], _CONTENT_TYPE: content_type}
    if kid is not None:
        header[_KID] = kid.encode("utf-8")
    protected = cbor2.dumps(header)
    payload_octets = cbor2.dumps(dict(payload), canonical=True)
    signature = _sign_raw(key, alg, sig_structure(protected, payload_octets))
    return cbor2.dumps(cbor2.CBORTag(COSE_SIGN1_TAG, [protected, {}, payload_octets, signature]))
