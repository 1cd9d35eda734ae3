"""C2SP tlog-checkpoint: the note text ``<origin>\\n<size>\\n<base64 root>\\n``, signed by the
log key (``app.log.note``). The origin is the log key's name."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from app.log.errors import FormatError
from app.log.note import Signer, Verifier, open_note, unb64

_SIZE = re.compile(r"0|[1-9][0-9]{0,18}")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes

    def text(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"

    def sign(self, signer: Signer) -> str:
        return signer.sign_note(self.text())

    @classmethod
    def parse_text(cls, text: str) -> Checkpoint:
        """Raises FormatError. Extension lines after the root are allowed and ignored."""
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "":
            raise FormatError("a checkpoint has an origin, a size and a root hash")
        origin, size, root = lines[:3]
        if not origin:
            raise FormatError("the checkpoint's origin is empty")
        if not _SIZE.fullmatch(size):
            raise FormatError("the checkpoint's size is not a decimal number")
        digest = unb64(root, "the checkpoint's root hash")
        if len(digest) != 32:
            raise FormatError("the checkpoint's root hash is not 32 octets")
        return cls(origin, int(size), digest)


def open_checkpoint(note: str | bytes, verifier: Verifier) -> Checkpoint:
    """The checkpoint of a signed note, after checking its signature and that its origin is
    the key's name. Raises FormatError or SignatureError."""
    checkpoint = Checkpoint.parse_text(open_note(note, verifier))
    if checkpoint.origin != verifier.name:
        raise FormatError(
            f"the checkpoint's origin {checkpoint.origin!r} is not the key's {verifier.name!r}"
        )
    return checkpoint
