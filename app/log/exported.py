"""An export anchored to the evidence log (docs/export.md, "The evidence log"): the header's
``log`` member carries the signed checkpoint the export is consistent with and the source
of each of its leaves, in log order; the export's ``element`` and ``rejected_octets``
records come in log order too, so the leaves are rebuilt from the records themselves
(``Rebuild``), and the tree from the leaves. A record cut, moved or edited changes the
tree, and the tree is the signed checkpoint's or the export is refused, by ``import`` and
by ``log verify`` alike (``check``, ``verify_export``).

Records stored after the checkpoint (the sequencer had not reached them) follow the
anchored ones of their kind; they are counted as not anchored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from handoff_context import b64url_decode, b64url_encode
from handoff_context.errors import HandoffError

from app.log.audit import AuditReport, check_consistent, check_included
from app.log.checkpoint import Checkpoint, open_checkpoint
from app.log.errors import FormatError, LogError, ProofError
from app.log.leaf import Leaf, Source
from app.log.merkle import Frontier, leaf_hash
from app.log.note import Verifier

MEMBER = "log"
KINDS = {"element": Source.ELEMENT, "rejected_octets": Source.REJECTED}


@dataclass(frozen=True, slots=True)
class Anchor:
    checkpoint: str  # the signed note
    sources: bytes  # one octet a leaf, in log order: app.log.leaf.Source

    def to_json(self) -> dict[str, str]:
        return {"checkpoint": self.checkpoint, "sources": b64url_encode(self.sources)}

    @classmethod
    def from_json(cls, value: Any) -> Anchor:
        """Raises FormatError."""
        if not isinstance(value, dict) or set(value) != {"checkpoint", "sources"}:
            raise FormatError("the header's log member is not {checkpoint, sources}")
        note, sources = value["checkpoint"], value["sources"]
        if not isinstance(note, str) or not isinstance(sources, str):
            raise FormatError("the header's log member holds a non-string")
        try:
            raw = b64url_decode(sources, what="sources")
        except HandoffError as exc:
            raise FormatError(str(exc)) from None
        if any(s not in (Source.ELEMENT, Source.REJECTED) for s in raw):
            raise FormatError("the header's log sources name an unknown source")
        return cls(note, raw)

    def unverified(self) -> Checkpoint:
        """The checkpoint as written, its signature not checked (an import without the
        log's key relies on the export's own signature over the header)."""
        split = self.checkpoint.rfind("\n\n")
        if split < 0:
            raise FormatError("the header's checkpoint is not a signed note")
        return Checkpoint.parse_text(self.checkpoint[: split + 1])


class Rebuild:
    """The leaves of an export's records, fed in file order (``add``)."""

    def __init__(self) -> None:
        self._leaves: dict[int, list[bytes]] = {s: [] for s in Source}

    def add(self, kind: str, record: Mapping[str, Any], number: int) -> None:
        """A record of the file (line ``number``); kinds without a leaf are skipped.
        Raises FormatError for a record a leaf cannot be built from."""
        source = KINDS.get(kind)
        if source is None:
            return
        try:
            octets = b64url_decode(record["octets"], what="octets")
            leaf = Leaf(
                source, record["form"], record.get("type"), int(record["first_seen"]),
                hashlib.sha256(octets).digest(),
            )  # fmt: skip
        except (HandoffError, LogError, AttributeError, KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"line {number}: no leaf can be built from this {kind}") from exc
        self._leaves[source].append(leaf.encode())

    def leaves(self, anchor: Anchor) -> tuple[list[bytes], int]:
        """The leaves in log order, and how many records are not anchored (stored after
        the checkpoint). Raises ProofError when the records are fewer than the leaves."""
        taken = {s: 0 for s in Source}
        out: list[bytes] = []
        for index, source in enumerate(anchor.sources):
            have = self._leaves[source]
            if taken[source] >= len(have):
                kind = "element" if source == Source.ELEMENT else "rejected_octets"
                raise ProofError(
                    f"the export lacks leaf {index} of the checkpoint (its {kind} record): "
                    "it was cut short"
                )
            out.append(have[taken[source]])
            taken[source] += 1
        rest = sum(len(self._leaves[s]) - taken[s] for s in Source)
        return out, rest


def check(anchor: Anchor, rebuild: Rebuild, checkpoint: Checkpoint) -> tuple[list[bytes], int]:
    """The records rebuild the checkpoint's tree: returns its leaves and the number of
    records not anchored. Raises ProofError."""
    if len(anchor.sources) != checkpoint.size:
        raise ProofError(
            f"the header lists {len(anchor.sources)} leaves for a checkpoint of {checkpoint.size}"
        )
    leaves, rest = rebuild.leaves(anchor)
    tree = Frontier()
    for leaf in leaves:
        tree.add(leaf_hash(leaf))
    if tree.root() != checkpoint.root:
        raise ProofError(
            "the export's records do not rebuild the checkpoint's tree "
            "(records cut, reordered or edited)"
        )
    return leaves, rest


def verify_export(
    header: Mapping[str, Any],
    records: Iterable[tuple[str, Mapping[str, Any], int]],
    verifier: Verifier,
    *,
    saved: str | None = None,
    elements: Sequence[bytes] = (),
) -> AuditReport:
    """``log verify`` of an export file: the checkpoint's signature with ``verifier``, the
    tree rebuilt from the records, every record anchored, the saved checkpoint a prefix,
    each of ``elements`` among the leaves. Never raises for what it finds."""
    report = AuditReport()
    try:
        if MEMBER not in header:
            raise LogError("the export carries no checkpoint (its store kept no evidence log)")
        anchor = Anchor.from_json(header[MEMBER])
        checkpoint = open_checkpoint(anchor.checkpoint, verifier)
        report.checkpoint = anchor.checkpoint
        report.checked.append(
            f"checkpoint: {checkpoint.origin}, {checkpoint.size} leaves, signature verified"
        )
        rebuild = Rebuild()
        for kind, record, number in records:
            rebuild.add(kind, record, number)
        leaves, rest = check(anchor, rebuild, checkpoint)
        report.checked.append(
            f"tree: the export's {len(leaves)} elements and refused octets rebuild the signed "
            "root, so each is included in it"
        )
        if rest:
            raise LogError(f"{rest} records of the export are not in the checkpoint")
        if saved is not None:
            check_consistent(report, open_checkpoint(saved, verifier), checkpoint, leaves)
        if elements:
            check_included(report, leaves, elements)
    except LogError as exc:
        report.failures.append(str(exc))
    return report
