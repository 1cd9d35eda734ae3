"""C2SP signed-note with Ed25519 keys (the format of Go's golang.org/x/mod/sumdb/note).

- A key's name: non-empty UTF-8 without ``+`` or white space.
- Key hash: the first 4 octets of SHA-256(name || 0x0A || 0x01 || public key), big-endian.
- Verifier key text: ``<name>+<hash, 8 hex>+<base64(0x01 || public key)>``.
- Private key text: ``PRIVATE+KEY+<name>+<hash>+<base64(0x01 || 32-octet seed)>``.
- A note: its text (lines, each ending in ``\\n``), a blank line, then one line per
  signature: ``— <name> <base64(key hash || 64-octet signature)>``; the signature covers
  the text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from app.log.errors import FormatError, LogKeyError, SignatureError

ALG_ED25519 = 0x01
_DASH = "\u2014 "
_MAX_NOTE = 1 << 20


def check_name(name: str) -> str:
    if not name or "+" in name or any(ch.isspace() for ch in name) or not name.isprintable():
        raise LogKeyError(f"a log key name must be non-empty, without '+' or spaces: {name!r}")
    return name


def key_hash(name: str, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([ALG_ED25519]) + public).digest()[:4]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str, what: str) -> bytes:
    """Standard base64 in its one canonical spelling. A spelling that sets the unused low
    bits of its last character decodes to the same octets, so a proof hash or a signature
    written that way would let changed octets verify: refused (as Go's StrictEncoding)."""
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise FormatError(f"{what}: not base64") from None
    if _b64(data) != text:
        raise FormatError(f"{what}: not base64 in its canonical form")
    return data


@dataclass(frozen=True)
class Verifier:
    name: str
    public: bytes  # the 32-octet Ed25519 public key

    @property
    def hash(self) -> bytes:
        return key_hash(self.name, self.public)

    def text(self) -> str:
        return f"{self.name}+{self.hash.hex()}+{_b64(bytes([ALG_ED25519]) + self.public)}"

    @classmethod
    def parse(cls, text: str) -> Verifier:
        """Raises LogKeyError for anything but an Ed25519 verifier key."""
        parts = text.strip().split("+", 2)
        if len(parts) != 3:
            raise LogKeyError("a verifier key is NAME+HASH+KEY")
        name, hash_hex, key_b64 = parts
        check_name(name)
        try:
            key = unb64(key_b64, "verifier key")
        except FormatError as exc:
            raise LogKeyError(str(exc)) from None
        if len(key) != 33 or key[0] != ALG_ED25519:
            raise LogKeyError("the verifier key is not an Ed25519 key")
        verifier = cls(name, key[1:])
        if hash_hex.lower() != verifier.hash.hex() or len(hash_hex) != 8:
            raise LogKeyError("the verifier key's hash does not match its name and key")
        return verifier

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


class Signer:
    """An Ed25519 note signer. Its private half is never printed: ``repr`` names it only."""

    def __init__(self, name: str, seed: bytes) -> None:
        check_name(name)
        if len(seed) != 32:
            raise LogKeyError("an Ed25519 private key is 32 octets")
        self.name = name
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        public = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.verifier = Verifier(name, public)

    def __repr__(self) -> str:
        return f"Signer({self.verifier.text()!r})"

    @classmethod
    def generate(cls, name: str) -> Signer:
        seed = Ed25519PrivateKey.generate().private_bytes_raw()
        return cls(name, seed)

    @classmethod
    def parse(cls, text: str) -> Signer:
        """Read a ``PRIVATE+KEY+...`` line. Raises LogKeyError (never quoting the key)."""
        parts = text.strip().split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise LogKeyError("the log key is not a PRIVATE+KEY+NAME+HASH+KEY line")
        name, hash_hex, key_b64 = parts[2:]
        try:
            key = unb64(key_b64, "log key")
        except FormatError:
            raise LogKeyError("the log key is not base64") from None
        if len(key) != 33 or key[0] != ALG_ED25519:
            raise LogKeyError("the log key is not an Ed25519 key")
        signer = cls(name, key[1:])
        if hash_hex.lower() != signer.verifier.hash.hex():
            raise LogKeyError("the log key's hash does not match its name and key")
        return signer

    def private_text(self) -> str:
        """The key file's content; written to a file, never printed."""
        seed = self._key.private_bytes_raw()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.hash.hex()}+{_b64(bytes([1]) + seed)}"

    def sign_raw(self, message: bytes) -> bytes:
        return self._key.sign(message)

    def sign_note(self, text: str) -> str:
        """The signed note of ``text`` (which must end in a newline)."""
        body = check_text(text)
        sig = self.verifier.hash + self._key.sign(body.encode())
        return f"{body}\n{_DASH}{self.name} {_b64(sig)}\n"


def check_text(text: str) -> str:
    if not text.endswith("\n") or "\n\n" in text or text.startswith("\n"):
        raise FormatError("a note's text is non-empty lines, each ending in a newline")
    if any(ord(ch) < 0x20 and ch != "\n" for ch in text):
        raise FormatError("a note's text holds control characters")
    return text


def open_note(note: str | bytes, verifier: Verifier) -> str:
    """The text of a note signed by ``verifier``. Raises FormatError for a malformed note,
    SignatureError when no signature line of that key verifies. Other keys' lines (a
    witness's cosignature) are skipped."""
    if isinstance(note, bytes):
        if len(note) > _MAX_NOTE:
            raise FormatError("the note is too large")
        try:
            note = note.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError("the note is not UTF-8") from None
    split = note.rfind("\n\n")
    if split < 0 or not note.endswith("\n"):
        raise FormatError("the note has no signature block")
    text, block = note[: split + 1], note[split + 2 :]
    check_text(text)
    found = False
    for line in block.splitlines():
        if not line.startswith(_DASH):
            raise FormatError("a note's signature line must start with an em dash")
        name, _, sig_b64 = line[len(_DASH) :].partition(" ")
        sig = unb64(sig_b64, "note signature")
        if name != verifier.name or len(sig) != 68 or sig[:4] != verifier.hash:
            continue
        if not verifier.verify(text.encode(), sig[4:]):
            raise SignatureError(f"the signature of {name} does not verify")
        found = True
    if not found:
        raise SignatureError(f"the note carries no signature of {verifier.name}")
    return text
