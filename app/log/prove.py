"""Reading the log out of the store: checkpoints, tiles, entry bundles and proofs."""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session

from app.log import merkle
from app.log.errors import LogError, NotInLog
from app.log.note import Signer
from app.log.proofs import InclusionProof
from app.log.receipts import make_receipt
from app.log.tiles import HEIGHT, TileRef, encode_entries
from app.store import tlog


class TileNotFound(LogError):
    """A tile or entry bundle the log does not hold (yet)."""

    reason = "not-found"


@dataclass(frozen=True, slots=True)
class Included:
    """A leaf's inclusion in the latest checkpoint."""

    index: int
    leaf: bytes
    size: int
    root: bytes
    path: tuple[bytes, ...]
    checkpoint: str  # the signed note

    def tlog_proof(self) -> str:
        return InclusionProof(self.index, self.path, self.checkpoint).text()

    def receipt(self, signer: Signer) -> bytes:
        return make_receipt(
            signer, size=self.size, index=self.index, path=self.path, root=self.root
        )


def latest_note(session: Session) -> str | None:
    row = tlog.latest_checkpoint(session)
    return None if row is None else row.note


def read_tile(session: Session, ref: TileRef) -> bytes:
    """A tile's hashes or an entry bundle. Raises TileNotFound unless all of it exists."""
    lo = ref.index * (1 << HEIGHT)
    hi = lo + ref.width
    if ref.entries:
        leaves = tlog.leaf_range(session, lo=lo, hi=hi)
        if len(leaves) != ref.width:
            raise TileNotFound(f"the log holds no {ref.path()}")
        return encode_entries(leaves)
    hashes = tlog.node_range(session, level=ref.level * HEIGHT, lo=lo, hi=hi)
    if len(hashes) != ref.width:
        raise TileNotFound(f"the log holds no {ref.path()}")
    return b"".join(hashes)


def inclusion(session: Session, *, digest: bytes) -> Included:
    """The inclusion of a stored row's leaf in the latest checkpoint. Raises NotInLog."""
    found = tlog.leaf_of(session, digest=digest)
    checkpoint = tlog.latest_checkpoint(session)
    if found is None or checkpoint is None or found[0] >= checkpoint.size:
        raise NotInLog("that element is not in the log yet (the sequencer runs every few seconds)")
    index, leaf = found
    ranges = merkle.inclusion_ranges(index, checkpoint.size)
    known = tlog.nodes(session, wanted=merkle.nodes_of(ranges))
    path = tuple(merkle.range_hash(lo, hi, known) for lo, hi in ranges)
    return Included(index, leaf, checkpoint.size, bytes(checkpoint.root), path, checkpoint.note)


def consistency(session: Session, *, old: int, size: int) -> list[bytes]:
    """The consistency proof between two sizes the log has reached."""
    ranges = merkle.consistency_ranges(old, size)
    known = tlog.nodes(session, wanted=merkle.nodes_of(ranges))
    return [merkle.range_hash(lo, hi, known) for lo, hi in ranges]
