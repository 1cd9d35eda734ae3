"""The RFC 6962 / RFC 9162 SHA-256 Merkle tree the evidence log is (C2SP tlog-tiles uses the
same hashing), computed from stored complete subtrees.

The store keeps one hash per complete, aligned subtree: node ``(level, index)`` covers the
leaves ``index * 2**level`` up to ``(index + 1) * 2**level``, and exists once the tree holds
them all (x/mod's ``tlog.StoredHashIndex`` numbers the same nodes differently). Every range
the RFC's recursions meet starts at a multiple of the largest power of two not above its
width, so its hash folds the complete subtrees of its width's binary decomposition, from
the right (``range_nodes`` and ``fold``). Nothing here reads the store: callers look nodes
up in bulk and pass them in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from app.log.errors import ProofError

HASH_SIZE = 32
Node = tuple[int, int]  # (level, index)


def leaf_hash(data: bytes) -> bytes:
    """RFC 9162 s2.1.1: SHA-256(0x00 || leaf)."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 s2.1.1: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(width: int) -> int:
    """The largest power of two smaller than ``width`` (``width`` > 1)."""
    return 1 << ((width - 1).bit_length() - 1)


def range_nodes(lo: int, hi: int) -> list[Node]:
    """The complete subtrees that make up the leaves ``[lo, hi)``, left to right."""
    nodes: list[Node] = []
    while lo < hi:
        level = (hi - lo).bit_length() - 1
        # The range's start must be aligned to each subtree taken from it.
        while lo % (1 << level):
            level -= 1
        nodes.append((level, lo >> level))
        lo += 1 << level
    return nodes


def fold(hashes: Sequence[bytes]) -> bytes:
    """The hash of a range from its complete subtrees' hashes (left to right)."""
    if not hashes:
        raise ValueError("an empty range has no hash")
    acc = hashes[-1]
    for h in reversed(hashes[:-1]):
        acc = node_hash(h, acc)
    return acc


def range_hash(lo: int, hi: int, nodes: Mapping[Node, bytes]) -> bytes:
    return fold([nodes[n] for n in range_nodes(lo, hi)])


def root_nodes(size: int) -> list[Node]:
    """The stored nodes the root of a tree of ``size`` leaves is folded from."""
    return range_nodes(0, size)


def frontier_nodes(size: int) -> list[Node]:
    """The nodes an append to a tree of ``size`` leaves combines with (its right edge)."""
    return root_nodes(size)


def append(
    size: int, leaves: Sequence[bytes], frontier: Mapping[Node, bytes]
) -> list[tuple[int, int, bytes]]:
    """The nodes that appending ``leaves`` (leaf hashes) to a tree of ``size`` completes:
    ``(level, index, hash)``, leaves first. ``frontier``: the hashes of
    ``frontier_nodes(size)``."""
    pending = {level: frontier[(level, index)] for level, index in frontier_nodes(size)}
    made: list[tuple[int, int, bytes]] = []
    for offset, h in enumerate(leaves):
        index, level, current = size + offset, 0, h
        made.append((0, index, current))
        while index & 1:
            current = node_hash(pending.pop(level), current)
            index, level = index >> 1, level + 1
            made.append((level, index, current))
        pending[level] = current
    return made


# --- proofs (RFC 9162 s2.1.3 and s2.1.4) -----------------------------------------------------


def inclusion_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """The ranges whose hashes make the inclusion proof of leaf ``index`` in a tree of
    ``size`` (RFC 9162 s2.1.3.1, PATH), in proof order."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of {size}")
    out: list[tuple[int, int]] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            out.append((lo + k, hi))
            hi = lo + k
        else:
            out.append((lo, lo + k))
            lo = lo + k
    out.reverse()
    return out


def consistency_ranges(old: int, size: int) -> list[tuple[int, int]]:
    """The ranges of the consistency proof from a tree of ``old`` leaves to one of ``size``
    (RFC 9162 s2.1.4.1, SUBPROOF), in proof order."""
    if not 0 < old <= size:
        raise ProofError(f"no consistency proof from {old} to {size} leaves")
    out: list[tuple[int, int]] = []
    lo, hi, m, whole = 0, size, old, True
    while True:
        width = hi - lo
        if m == width:
            if not whole:
                out.append((lo, hi))
            break
        k = _split(width)
        if m <= k:
            out.append((lo + k, hi))
            hi = lo + k
        else:
            out.append((lo, lo + k))
            lo, m, whole = lo + k, m - k, False
    out.reverse()
    return out


def nodes_of(ranges: Sequence[tuple[int, int]]) -> set[Node]:
    return {n for lo, hi in ranges for n in range_nodes(lo, hi)}


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """RFC 9162 s2.1.3.2: the root an inclusion proof leads to. Raises ProofError."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of {size}")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if len(p) != HASH_SIZE:
            raise ProofError("a proof hash is not 32 octets")
        if sn == 0:
            raise ProofError("the inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("the inclusion proof is too short")
    return r


def check_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Raises ProofError unless the proof leads from ``leaf`` to ``root``."""
    if root_from_inclusion(index, size, leaf, proof) != root:
        raise ProofError(f"leaf {index} is not included in the tree of {size} with that root")


def check_consistency(
    old: int, old_root: bytes, size: int, root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 s2.1.4.2: raises ProofError unless the tree of ``size`` leaves with ``root``
    extends the tree of ``old`` leaves with ``old_root``."""
    if old > size:
        raise ProofError(f"the tree shrank from {old} to {size} leaves")
    if old == size:
        if proof or old_root != root:
            raise ProofError(f"two different roots for the same size {size}")
        return
    if old == 0:
        if proof:
            raise ProofError("a consistency proof from an empty tree must be empty")
        return
    if any(len(p) != HASH_SIZE for p in proof):
        raise ProofError("a proof hash is not 32 octets")
    path = list(proof)
    if old & (old - 1) == 0:  # a power of two: the old root starts the path
        path.insert(0, old_root)
    if not path:
        raise ProofError("the consistency proof is empty")
    fn, sn = old - 1, size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is too long")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("the consistency proof is too short")
    if fr != old_root or sr != root:
        raise ProofError(f"the tree of {size} leaves does not extend the tree of {old}")


class Frontier:
    """A tree's right edge in memory: append leaf hashes, read the root. What the
    self-check and ``log verify`` rebuild a tree from its leaves with."""

    def __init__(self) -> None:
        self.size = 0
        self._pending: dict[int, bytes] = {}

    def add(self, leaf: bytes) -> None:
        index, level, current = self.size, 0, leaf
        while index & 1:
            current = node_hash(self._pending.pop(level), current)
            index, level = index >> 1, level + 1
        self._pending[level] = current
        self.size += 1

    def root(self) -> bytes:
        acc: bytes | None = None
        for level in sorted(self._pending):
            h = self._pending[level]
            acc = h if acc is None else node_hash(h, acc)
        return hashlib.sha256(b"").digest() if acc is None else acc
