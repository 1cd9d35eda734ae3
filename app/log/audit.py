"""What ``handoff-trace log verify`` checks: a deployment's log, fetched over HTTP or read
from a mirror directory, rebuilt from its entries and compared with its signed checkpoint,
its tiles, a checkpoint saved before, and the elements asked about."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx
from handoff_context import digest_text

from app.log.checkpoint import Checkpoint, open_checkpoint
from app.log.errors import FormatError, LogError
from app.log.leaf import Leaf
from app.log.merkle import Frontier, leaf_hash, node_hash
from app.log.note import Verifier
from app.log.tiles import HEIGHT, WIDTH, decode_entries, tiles_for

_MAX_FILE = 1 << 24


class Fetcher(Protocol):
    def get(self, path: str) -> bytes: ...


class DirectoryFetcher:
    """A mirror: the log's files at their tlog-tiles paths under a directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def get(self, path: str) -> bytes:
        try:
            return (self.root / path).read_bytes()
        except OSError as exc:
            raise LogError(f"cannot read {path}: {exc.strerror}") from None


class HttpFetcher:
    """A deployment: ``base`` is its log prefix (``https://host/api/v1/log``)."""

    def __init__(self, base: str, client: httpx.Client) -> None:
        self.base = base.rstrip("/")
        self.client = client

    def get(self, path: str) -> bytes:
        """The file's octets; read at most 16 MiB of an answer (a hostile server cannot make
        the auditor hold more). Raises LogError."""
        try:
            with self.client.stream("GET", f"{self.base}/{path}") as response:
                if response.status_code != 200:
                    raise LogError(f"fetching {path} answered HTTP {response.status_code}")
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > _MAX_FILE:
                        raise LogError(f"{path} is larger than {_MAX_FILE} octets")
        except httpx.HTTPError as exc:
            raise LogError(f"cannot fetch {path}: {exc}") from None
        return bytes(data)


@dataclass
class AuditReport:
    checked: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    checkpoint: str | None = None  # the signed note checked, to save for the next run

    @property
    def ok(self) -> bool:
        return not self.failures


def audit(
    fetch: Fetcher,
    verifier: Verifier,
    *,
    saved: str | None = None,
    elements: Sequence[bytes] = (),
) -> AuditReport:
    """Check everything; never raises for what it finds (each is a failure line)."""
    report = AuditReport()
    try:
        _audit(report, fetch, verifier, saved, elements)
    except LogError as exc:
        report.failures.append(str(exc))
    return report


def _audit(
    report: AuditReport,
    fetch: Fetcher,
    verifier: Verifier,
    saved: str | None,
    elements: Sequence[bytes],
) -> None:
    note = fetch.get("checkpoint")
    checkpoint = open_checkpoint(note, verifier)
    report.checkpoint = note.decode()
    report.checked.append(
        f"checkpoint: {checkpoint.origin}, {checkpoint.size} leaves, signature verified"
    )
    leaves = _leaves(fetch, checkpoint)
    levels = _levels([leaf_hash(x) for x in leaves])
    tiles = 0
    for ref in tiles_for(checkpoint.size):
        if ref.entries:
            continue
        lo = ref.index * WIDTH
        want = b"".join(levels[ref.level * HEIGHT][lo : lo + ref.width])
        if fetch.get(ref.path()) != want:
            raise LogError(f"{ref.path()} does not match the tree the entries build")
        tiles += 1
    tree = Frontier()
    for x in leaves:
        tree.add(leaf_hash(x))
    if tree.root() != checkpoint.root:
        raise LogError("the entries do not rebuild the checkpoint's root")
    report.checked.append(
        f"tree: {len(leaves)} entries rebuild the signed root; {tiles} tiles match"
    )
    if saved is not None:
        check_consistent(report, open_checkpoint(saved, verifier), checkpoint, leaves)
    if elements:
        check_included(report, leaves, elements)


def _leaves(fetch: Fetcher, checkpoint: Checkpoint) -> list[bytes]:
    leaves: list[bytes] = []
    for ref in tiles_for(checkpoint.size):
        if not ref.entries:
            continue
        bundle = decode_entries(fetch.get(ref.path()))
        if len(bundle) != ref.width:
            raise FormatError(f"{ref.path()} holds {len(bundle)} entries, not {ref.width}")
        for entry in bundle:
            Leaf.decode(entry)
        leaves += bundle
    return leaves


def _levels(hashes: list[bytes]) -> list[list[bytes]]:
    """Every complete subtree's hash, by level (level 0: the leaves)."""
    levels = [hashes]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append([node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)])
    return levels


def check_consistent(
    report: AuditReport, old: Checkpoint, new: Checkpoint, leaves: list[bytes]
) -> None:
    """The first ``old.size`` of ``leaves`` rebuild ``old``'s root (history only appended
    to). Raises LogError."""
    if old.size > new.size:
        raise LogError(f"the log shrank: {old.size} leaves before, {new.size} now")
    tree = Frontier()
    for x in leaves[: old.size]:
        tree.add(leaf_hash(x))
    if tree.root() != old.root:
        raise LogError(f"the first {old.size} leaves changed since the saved checkpoint")
    report.checked.append(f"consistency: {old.size} -> {new.size}, history only appended to")


def check_included(report: AuditReport, leaves: list[bytes], elements: Sequence[bytes]) -> None:
    """Each of ``elements`` (handoff digests) is the hash of one of ``leaves``. Raises
    LogError."""
    where = {Leaf.decode(x).sha256: i for i, x in enumerate(leaves)}
    missing = [digest_text(d) for d in elements if d not in where]
    if missing:
        raise LogError(f"not in the log: {', '.join(missing[:5])}")
    report.checked.append(f"inclusion: {len(elements)} elements found in the log")
