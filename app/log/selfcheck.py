"""The store checks itself against its log: every leaf is rebuilt from the octets stored
now, and the tree from the leaves, and both are compared with what was logged and signed.

An edited row (other octets, time, type or form), a deleted row, or an altered log table
is a finding, and each finding opens a critical ``log-mismatch`` flag (once per
condition). Rows not yet sequenced are counted, not judged: the sequencer is behind.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from handoff_context import digest_text
from sqlalchemy import Engine
from sqlmodel import Session

from app.log.checkpoint import open_checkpoint
from app.log.errors import LogError
from app.log.leaf import Leaf, Source
from app.log.merkle import Frontier, leaf_hash
from app.log.note import Verifier
from app.store import db, tlog

FLAG_KIND = "log-mismatch"


@dataclass(frozen=True, slots=True)
class Finding:
    what: str  # edited | deleted | tree | checkpoint
    index: int | None
    digest: bytes | None
    detail: str
    source: int = tlog.ELEMENT

    def line(self) -> str:
        where = "" if self.index is None else f"leaf {self.index}: "
        return f"{self.what}: {where}{self.detail}"


@dataclass
class CheckReport:
    size: int = 0
    checked: int = 0
    unlogged: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings


def self_check(engine: Engine, verifier: Verifier, *, now: int, flag: bool = True) -> CheckReport:
    """Compare the store with its log (one read-only snapshot), then open a flag for each
    finding when ``flag``. Returns the report; raises only for database errors."""
    with db.transaction(db.read_only(engine)) as session:
        report = _check(session, verifier)
    if flag and report.findings:
        db.run(engine, lambda session: _flag(session, report.findings, now=now))
    return report


def _check(session: Session, verifier: Verifier) -> CheckReport:
    size, root = tlog.state(session)
    report = CheckReport(size=size, unlogged=tlog.unlogged_count(session))
    latest = tlog.latest_checkpoint(session)
    if size:
        _check_checkpoint(report, latest.note if latest else None, verifier, size, root)
    tree = Frontier()
    for rows in tlog.iter_logged(session, size=size):
        for row in rows:
            if row.idx != tree.size:
                report.findings.append(
                    Finding("tree", tree.size, None, "a leaf is missing from the log table")
                )
                return report
            tree.add(leaf_hash(row.leaf))
            report.checked += 1
            finding = _check_row(row)
            if finding is not None:
                report.findings.append(finding)
    if tree.size != size or tree.root() != root:
        report.findings.append(
            Finding("tree", None, None, "the log's leaves no longer rebuild its signed root")
        )
    return report


def _check_checkpoint(
    report: CheckReport, note: str | None, verifier: Verifier, size: int, root: bytes
) -> None:
    if note is None:
        report.findings.append(Finding("checkpoint", None, None, "no checkpoint is stored"))
        return
    try:
        checkpoint = open_checkpoint(note, verifier)
    except LogError as exc:
        report.findings.append(Finding("checkpoint", None, None, str(exc)))
        return
    if (checkpoint.size, checkpoint.root) != (size, root):
        report.findings.append(
            Finding("checkpoint", None, None, "the latest checkpoint is not the log's state")
        )


def _check_row(row: tlog.LoggedRow) -> Finding | None:
    digest = digest_text(row.digest)
    if row.octets is None or row.form is None or row.first_seen is None:
        return Finding(
            "deleted", row.idx, row.digest, f"the stored row {digest} is gone", row.source
        )
    try:
        now = Leaf(
            Source(row.source),
            row.form,
            row.type,
            row.first_seen,
            hashlib.sha256(row.octets).digest(),
        ).encode()
    except LogError:
        now = b""
    if now != row.leaf:
        return Finding(
            "edited", row.idx, row.digest, f"the stored row {digest} was changed", row.source
        )
    return None


def _flag(session: Session, findings: list[Finding], *, now: int) -> None:
    for f in findings:
        canon = json.dumps([FLAG_KIND, f.what, f.index, f.digest.hex() if f.digest else None])
        iss, hop = (
            tlog.hop_of(session, source=f.source, digest=f.digest)
            if f.digest is not None
            else ("(evidence log)", "-")
        )
        tlog.raise_flag(
            session,
            key=hashlib.sha256(canon.encode()).hexdigest(),
            kind=FLAG_KIND,
            iss=iss,
            hop=hop,
            evidence=[digest_text(f.digest)] if f.digest else [],
            detail=f.line(),
            now=now,
        )
