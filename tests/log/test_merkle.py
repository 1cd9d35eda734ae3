"""The tree, the proofs, the leaf, the note and the tile paths against their definitions:
RFC 9162's MTH written out by recursion, every size up to 70, and tampering of each kind."""

from __future__ import annotations

import hashlib

import pytest

from app.log import merkle
from app.log.checkpoint import Checkpoint, open_checkpoint
from app.log.errors import FormatError, LogKeyError, ProofError, SignatureError
from app.log.leaf import Leaf, Source
from app.log.note import Signer, Verifier, open_note
from app.log.tiles import TileRef, decode_entries, encode_entries, encode_index, parse_path

N = 70


def mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 s2.1.1, literally."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return merkle.leaf_hash(leaves[0])
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return merkle.node_hash(mth(leaves[:k]), mth(leaves[k:]))


def build(n: int) -> tuple[list[bytes], dict[tuple[int, int], bytes]]:
    leaves = [f"leaf {i}".encode() for i in range(n)]
    nodes: dict[tuple[int, int], bytes] = {}
    size = 0
    for chunk in (leaves[:3], leaves[3:17], leaves[17:]):  # appends of uneven sizes
        made = merkle.append(size, [merkle.leaf_hash(x) for x in chunk], nodes)
        nodes.update({(lv, i): h for lv, i, h in made})
        size += len(chunk)
    return leaves, nodes


def test_stored_nodes_give_the_rfc_root_at_every_size() -> None:
    leaves, nodes = build(N)
    for size in range(1, N + 1):
        assert merkle.range_hash(0, size, nodes) == mth(leaves[:size])
        tree = merkle.Frontier()
        for x in leaves[:size]:
            tree.add(merkle.leaf_hash(x))
        assert tree.root() == mth(leaves[:size])


def test_inclusion_and_consistency_proofs_verify_and_tampering_fails() -> None:
    leaves, nodes = build(N)
    for size in range(1, N + 1):
        root = mth(leaves[:size])
        for index in range(size):
            path = [
                merkle.range_hash(lo, hi, nodes) for lo, hi in merkle.inclusion_ranges(index, size)
            ]
            leaf = merkle.leaf_hash(leaves[index])
            merkle.check_inclusion(index, size, leaf, path, root)
            with pytest.raises(ProofError):
                merkle.check_inclusion(index, size, merkle.leaf_hash(b"other"), path, root)
            if path:
                with pytest.raises(ProofError):
                    merkle.check_inclusion(index, size, leaf, path[:-1], root)
        for old in range(1, size + 1):
            proof = [
                merkle.range_hash(lo, hi, nodes) for lo, hi in merkle.consistency_ranges(old, size)
            ]
            merkle.check_consistency(old, mth(leaves[:old]), size, root, proof)
            if old < size:
                with pytest.raises(ProofError):
                    merkle.check_consistency(old, mth([b"x", *leaves[1:old]]), size, root, proof)


def test_a_leaf_is_44_fixed_octets_and_refuses_anything_else() -> None:
    leaf = Leaf(Source.ELEMENT, "cose", "status", 1_700_000_000, b"\x07" * 32)
    data = leaf.encode()
    assert len(data) == 44 and data[:4] == b"\x01\x01\x02\x02"
    assert Leaf.decode(data) == leaf
    for bad in (data[:-1], b"\x02" + data[1:], data[:1] + b"\x09" + data[2:]):
        with pytest.raises(FormatError):
            Leaf.decode(bad)


def test_a_signed_checkpoint_opens_only_with_its_key_and_text() -> None:
    signer = Signer.generate("example.test/log")
    note = Checkpoint("example.test/log", 5, b"\x01" * 32).sign(signer)
    verifier = Verifier.parse(signer.verifier.text())
    assert open_checkpoint(note, verifier) == Checkpoint("example.test/log", 5, b"\x01" * 32)
    with pytest.raises(SignatureError):
        open_note(note.replace("\n5\n", "\n6\n"), verifier)
    with pytest.raises(SignatureError):
        open_note(note, Signer.generate("example.test/log").verifier)
    assert Signer.parse(signer.private_text()).verifier == signer.verifier
    assert "PRIVATE" not in repr(signer)
    with pytest.raises(LogKeyError):
        Verifier.parse(signer.verifier.text().replace("+", "+0", 1))


def test_tile_paths_follow_tlog_tiles() -> None:
    assert encode_index(1234067) == "x001/x234/067"
    assert encode_index(5) == "005"
    assert TileRef(1, 1234067, 3).path() == "tile/1/x001/x234/067.p/3"
    assert TileRef(-1, 0, 256).path() == "tile/entries/000"
    for ref in (TileRef(0, 1234067, 256), TileRef(2, 7, 9), TileRef(-1, 1000, 1)):
        assert parse_path(ref.path()) == ref
    for bad in ("tile/0/1", "tile/0/x000/001", "tile/0/001.p/0", "tile/0/001.p/256", "tile/a/001"):
        with pytest.raises(FormatError):
            parse_path(bad)
    assert decode_entries(encode_entries([b"a", b"", b"bc"])) == [b"a", b"", b"bc"]
