"""Per-element proofs in two standard shapes: a C2SP ``tlog-proof`` file and an RFC 9942
COSE receipt (``app.log.receipts``); both carry the inclusion path of one leaf in one
checkpointed tree.

tlog-proof (c2sp.org/tlog-proof):

    c2sp.org/tlog-proof@v1
    index <N>
    <base64 hash>            one line per proof hash, leaf to root
    <blank line>
    <the signed checkpoint>
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from app.log.checkpoint import Checkpoint, open_checkpoint
from app.log.errors import FormatError
from app.log.merkle import check_inclusion
from app.log.note import Verifier, unb64

HEADER = "c2sp.org/tlog-proof@v1"
_INDEX = re.compile(r"index (0|[1-9][0-9]{0,18})")
_MAX_PROOF = 1 << 16


@dataclass(frozen=True, slots=True)
class InclusionProof:
    index: int
    hashes: tuple[bytes, ...]
    checkpoint_note: str  # the signed checkpoint the proof is for

    def text(self) -> str:
        lines = [HEADER, f"index {self.index}"]
        lines += [base64.b64encode(h).decode() for h in self.hashes]
        return "\n".join(lines) + "\n\n" + self.checkpoint_note

    @classmethod
    def parse(cls, data: str | bytes) -> InclusionProof:
        """Raises FormatError."""
        if isinstance(data, bytes):
            if len(data) > _MAX_PROOF:
                raise FormatError("the proof file is too large")
            try:
                data = data.decode("utf-8")
            except UnicodeDecodeError:
                raise FormatError("the proof file is not UTF-8") from None
        head, sep, note = data.partition("\n\n")
        lines = head.split("\n")
        if not sep or lines[0] != HEADER:
            raise FormatError(f"not a {HEADER} file")
        body = lines[1:]
        if body and body[0].startswith("extra "):
            body = body[1:]  # application data; this log writes none
        if not body or not (m := _INDEX.fullmatch(body[0])):
            raise FormatError("the proof file has no index line")
        hashes = []
        for line in body[1:]:
            h = unb64(line, "a proof hash")
            if len(h) != 32:
                raise FormatError("a proof hash is not 32 octets")
            hashes.append(h)
        return cls(int(m.group(1)), tuple(hashes), note)

    def verify(self, leaf_hash: bytes, verifier: Verifier) -> Checkpoint:
        """Check the checkpoint's signature and the leaf's inclusion in it; returns the
        checkpoint. Raises FormatError, SignatureError or ProofError."""
        checkpoint = open_checkpoint(self.checkpoint_note, verifier)
        check_inclusion(self.index, checkpoint.size, leaf_hash, self.hashes, checkpoint.root)
        return checkpoint
