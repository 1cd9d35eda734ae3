"""Every parser of the evidence log either succeeds or raises its declared error
(``LogError``), whatever the input; and any single-byte change of a signed checkpoint, a
tlog-proof file or a receipt fails verification, or (a receipt's unsigned tree size) still
proves the leaf in the tree with the signed root (STYLE.md habit 10)."""

from __future__ import annotations

import base64
import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.log import merkle
from app.log.checkpoint import Checkpoint, open_checkpoint
from app.log.errors import LogError
from app.log.leaf import Leaf
from app.log.note import Signer
from app.log.proofs import InclusionProof
from app.log.receipts import make_receipt, verify_receipt
from app.log.tiles import decode_entries, parse_path

SIGNER = Signer.generate("handoff-trace.test/properties")
LEAVES = [f"leaf {i}".encode() for i in range(13)]


def _tree() -> tuple[dict[tuple[int, int], bytes], bytes]:
    nodes = {(lv, i): h for lv, i, h in merkle.append(0, [merkle.leaf_hash(x) for x in LEAVES], {})}
    return nodes, merkle.range_hash(0, len(LEAVES), nodes)


NODES, ROOT = _tree()
NOTE = Checkpoint(SIGNER.name, len(LEAVES), ROOT).sign(SIGNER)
PATH = tuple(merkle.range_hash(lo, hi, NODES) for lo, hi in merkle.inclusion_ranges(5, 13))
PROOF = InclusionProof(5, PATH, NOTE).text().encode()
RECEIPT = make_receipt(SIGNER, size=13, index=5, path=PATH, root=ROOT)
LEAF = merkle.leaf_hash(LEAVES[5])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_parsers_succeed_or_raise_their_error(data: bytes) -> None:
    for parse in (
        Leaf.decode,
        decode_entries,
        InclusionProof.parse,
        lambda d: open_checkpoint(d, SIGNER.verifier),
        lambda d: verify_receipt(d, LEAF, SIGNER.verifier),
        lambda d: parse_path(d.decode("utf-8", "replace")),
    ):
        with contextlib.suppress(LogError):
            parse(data)


def _flip(data: bytes, at: int, bit: int) -> bytes:
    i = at % len(data)
    return data[:i] + bytes([data[i] ^ (1 << bit)]) + data[i + 1 :]


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0), st.integers(min_value=0, max_value=7))
def test_any_single_byte_change_fails_verification(at: int, bit: int) -> None:
    assert InclusionProof.parse(PROOF).verify(LEAF, SIGNER.verifier).root == ROOT
    assert verify_receipt(RECEIPT, LEAF, SIGNER.verifier).root == ROOT
    for data, check in (
        (NOTE.encode(), lambda d: open_checkpoint(d, SIGNER.verifier)),
        (PROOF, lambda d: InclusionProof.parse(d).verify(LEAF, SIGNER.verifier)),
        (RECEIPT, lambda d: verify_receipt(d, LEAF, SIGNER.verifier)),
    ):
        changed = _flip(data, at, bit)
        try:
            result = check(changed)
        except LogError:
            continue
        # RFC 9942 signs the root only: a receipt's tree size is a claim, and some other
        # sizes lead the same path to the same root. Such a change may verify, but it proves
        # nothing false: the leaf is in the tree with the signed root (docs/evidence-log.md).
        assert data is RECEIPT and result.root == ROOT, f"a changed byte verified: {result!r}"


def test_base64_spelt_with_unused_bits_set_is_refused() -> None:
    """A 32-octet hash in base64 leaves two bits of its last character unused: set, they
    decode to the same hash, so a proof file (its hashes are not signed) or a note's
    signature line would verify with changed octets. Only the canonical spelling is read."""
    text = PROOF.decode()
    lines = text.split("\n")
    hashes = [i for i, line in enumerate(lines) if len(line) == 44 and line.endswith("=")]
    assert hashes, text
    line = lines[hashes[0]]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    spare = alphabet[alphabet.index(line[42]) ^ 1]  # the same 4 used bits, one unused set
    lines[hashes[0]] = line[:42] + spare + "="
    assert base64.b64decode(lines[hashes[0]]) == base64.b64decode(line)
    with pytest.raises(LogError, match="canonical"):
        InclusionProof.parse("\n".join(lines).encode()).verify(LEAF, SIGNER.verifier)
