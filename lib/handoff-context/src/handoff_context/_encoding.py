"""Strict encodings shared by both forms: canonical base64url, digests, strict JSON.

JOSE libraries are lenient about several of these (profile §2); the profile is not, so the
checks live here and run before and after any library call.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from handoff_context.errors import MalformedError

try:  # optional (the ``fast`` extra): the same answers, read by a parser written in C
    import orjson
except ImportError:  # pragma: no cover - the service and the tests install it
    orjson = None  # type: ignore[assignment]

# Profile §1.2 [profile]: every element is refused above 64 KiB before any decoding work, and
# nesting deeper than 32 levels is malformed.
MAX_ELEMENT_OCTETS = 64 * 1024
MAX_DEPTH = 32

DIGEST_OCTETS = 32
_B64URL_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_B64_VALUE = {chr(ch): i for i, ch in enumerate(_B64URL_ALPHABET)}
_URLSAFE_TO_STANDARD = bytes.maketrans(b"-_", b"+/")
# The largest integer JSON can carry without loss in every implementation (profile §1.1).
MAX_SAFE_INT = 2**53 - 1


def b64url_encode(data: bytes) -> str:
    """Encode as base64url without padding (RFC 7515 section 2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str, *, what: str) -> bytes:
    """Decode canonical base64url without padding.

    Raises MalformedError for padding, characters outside the url-safe alphabet, an
    impossible length, or unused trailing bits that are not zero (profile §2).
    """
    # Every element costs three of these: the checks are done with bytes methods that run
    # in C (what ``translate`` leaves is outside the alphabet), not a regex and the base64
    # module's wrappers.
    if not text.isascii():
        raise MalformedError(f"{what} is not base64url without padding")
    data = text.encode("ascii")
    if data.translate(None, _B64URL_ALPHABET):
        raise MalformedError(f"{what} is not base64url without padding")
    rem = len(data) % 4
    if rem == 1:
        raise MalformedError(f"{what} has an impossible base64url length")
    # Canonical form: the unused low bits of the last character are zero, so no second
    # spelling of the same octets exists (RFC 4648 section 3.5).
    if rem and _B64_VALUE[text[-1]] & (0x0F if rem == 2 else 0x03):
        raise MalformedError(f"{what} is not canonical base64url (unused bits set)")
    try:
        return binascii.a2b_base64(data.translate(_URLSAFE_TO_STANDARD) + b"=" * (-rem % 4))
    except (binascii.Error, ValueError) as exc:  # pragma: no cover - alphabet checked above
        raise MalformedError(f"{what} is not valid base64url") from exc


def handoff_digest(octets: bytes) -> bytes:
    """SHA-256 over the element's octets exactly as received (profile §1.3, §2, §3)."""
    return hashlib.sha256(octets).digest()


def digest_text(digest: bytes) -> str:
    """The JSON form of a digest: 43 characters of base64url (profile §1.3)."""
    return b64url_encode(digest)


def parse_digest_text(text: object, *, what: str) -> bytes:
    """Parse the JSON form of a digest; raises MalformedError unless canonical 32 octets."""
    if not isinstance(text, str):
        raise MalformedError(f"{what} must be a base64url string")
    if len(text) != 43:
        raise MalformedError(f"{what} must be 43 base64url characters (a SHA-256 digest)")
    return b64url_decode(text, what=what)


def check_depth(data: bytes | str, *, what: str) -> None:
    """Refuse JSON nested deeper than MAX_DEPTH before the parser sees it.

    A linear scan that skips string contents; it bounds the parser's recursion so hostile
    input cannot exhaust the stack.
    """
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    if text.count("{") + text.count("[") <= MAX_DEPTH:
        return  # cannot nest deeper than the brackets it has: skip the scan
    depth = 0
    in_string = False
    escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise MalformedError(f"{what} nests deeper than {MAX_DEPTH} levels")
        elif ch in "]}":
            depth -= 1


def _reject_constant(name: str) -> Any:
    raise MalformedError(f"JSON constant {name} is not allowed")


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # The dict is built in C; only an object that lost a member to a repeated name is
    # walked again, to name the first repetition.
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise MalformedError(f"duplicate member name {key!r}")
            seen.add(key)
    return result


_STRICT_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs_without_duplicates, parse_constant=_reject_constant
)
# The C scanner; StopIteration when no value starts at the index.
_SCAN: Callable[[str, int], tuple[Any, int]] = _STRICT_DECODER.scan_once  # type: ignore[attr-defined]
_SPACE = re.compile(r"[ \t\n\r]*").match  # JSON's whitespace, as json.decoder skips it


def _after_space(text: str, index: int) -> int:
    match = _SPACE(text, index)  # the pattern matches everywhere, if only the empty string
    return match.end() if match else index


def strict_json_loads(data: bytes, *, what: str) -> Any:
    """Parse strict UTF-8 JSON: no BOM, no UTF-16, no duplicate members, no NaN/Infinity,
    bounded depth. Raises MalformedError with ``what`` named in the detail.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        raise MalformedError(f"{what} starts with a byte order mark")
    if orjson is not None:
        value = _fast_loads(data)
        if value is not _NOT_FAST:
            return value
    return _strict_loads(data, what=what)


def _strict_loads(data: bytes, *, what: str) -> Any:
    """``strict_json_loads`` by the standard library's scanner, a Python hook per object
    refusing duplicate members: the reference, and the one path that words every error."""
    if data.startswith(b"\xef\xbb\xbf"):
        raise MalformedError(f"{what} starts with a byte order mark")
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        raise MalformedError(f"{what} is not strict UTF-8") from exc
    check_depth(text, what=what)
    try:
        # ``JSONDecoder.decode`` without its two Python frames (a line, a header and a
        # payload per element): one value, nothing but whitespace around it.
        obj, end = _SCAN(text, _after_space(text, 0))
        if _after_space(text, end) != len(text):
            raise ValueError("extra data")
        return obj
    except MalformedError as exc:
        raise MalformedError(f"{what}: {exc.detail}") from exc
    except (ValueError, RecursionError, StopIteration) as exc:
        raise MalformedError(f"{what} is not valid JSON") from exc


# ``_fast_loads``: what it cannot vouch for.
_NOT_FAST = object()
_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19  # an integer of 19 digits may be beyond 64 bits


def _fast_loads(data: bytes) -> Any:
    """The value ``_strict_loads`` returns for ``data``, read by orjson (a fifth of the
    instructions), or ``_NOT_FAST`` wherever the two could differ; then the strict path
    reads it and gives its value or its exact error. orjson refuses what the strict path
    refuses by itself (invalid UTF-8, a lone surrogate in the octets, NaN and Infinity,
    trailing data, control characters, any syntax error) and parses numbers and strings to
    the same values, except for:

    - nesting deeper than ``MAX_DEPTH``, which orjson allows up to 1024: text with more
      brackets than that goes the strict way.
    - a duplicate member name, whose last value orjson keeps silently, and an integer
      beyond 64 bits, which orjson reads as a float. Neither can be in text that orjson
      writes back octet for octet (compact, as captures and elements are mostly
      written), which then needs no other check; other text is checked for both
      (``_plain``).
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _NOT_FAST
    # Two ``count``s: a C loop over the octets each, half the instructions of mapping
    # every byte with ``translate`` to count both brackets at once.
    if data.count(b"{") + data.count(b"[") > MAX_DEPTH:
        return _NOT_FAST
    written = orjson.dumps(value)
    if written == data or _plain(data, written):
        return value
    return _NOT_FAST


def _plain(data: bytes, written: bytes) -> bool:
    """Whether non-canonical text ``data``, which orjson read and wrote back as ``written``,
    holds no duplicate member and no integer beyond 64 bits.

    (A canonical text needs neither check: orjson writes each member of an object once,
    so the text has no member it lost, and writes every float with a ``.`` or an
    exponent, so no run of digits in it was read as a float.)

    - Every ``:`` outside a string separates a member; ``written`` holds one per member
      orjson kept, besides the same ``:`` inside strings, so the counts of ``:`` in the two
      texts are equal exactly when no member was dropped. A ``\\u003a`` escape (a ``:``
      spelled in six characters) breaks that count: any text with one goes the strict way.
    - Any run of 19 digits goes the strict way (the longest 64-bit integers have 19 and 20
      digits).
    """
    # ``find``, not ``in``: CPython 3.11's ``bytes.__contains__`` first reads its operand as
    # an integer, raising and clearing a TypeError with a formatted message (~900
    # instructions more a search).
    if data.translate(_DIGITS).find(_LONG_DIGITS) >= 0:
        return False
    if data.find(b"\\") >= 0 and (data.find(b"\\u003a") >= 0 or data.find(b"\\u003A") >= 0):
        return False
    return data.count(b":") == written.count(b":")
