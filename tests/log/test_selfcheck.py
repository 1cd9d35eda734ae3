"""The store checks itself (issue 24, fourth "Done when"), on SQLite and PostgreSQL: after
the sequencer has logged a small store, editing one element's octets by SQL, or its first
time, or a refused row's octets, is found by the self-check and ``log check`` and opens one
critical ``log-mismatch`` flag naming the element; an untouched store has no finding.
Refused octets are logged like elements, and a leaf never holds the octets."""

from __future__ import annotations

from pathlib import Path

import pytest
from handoff_context import digest_text
from sqlalchemy import Engine, select, update

from app.cli.root import main
from app.log.keys import write_key
from app.log.leaf import Leaf, Source
from app.log.selfcheck import FLAG_KIND, self_check
from app.log.sequencer import sequence_all
from app.store.db import transaction
from app.store.models import ElementRow, FlagRow, LogLeafRow, RejectedOctetsRow
from tests.conftest import World
from tests.store.builders import T0, bundle, offer, rec, run


def _store(engine: Engine, world: World) -> list[bytes]:
    offers = [offer(world.planner, world.coder, iat=T0 + i) for i in range(5)]
    records = [rec(bundle(o), T0 + 10 + i, world.coder.iss) for i, o in enumerate(offers)]
    run(engine, world.trust, [*records, rec({"offer": 5}, T0 + 20)])
    return offers


def _edit(octets: bytes) -> bytes:
    """The octets with their last two characters changed; always different (the signature's
    last characters are random, so a fixed replacement can be what was there)."""
    tail = b"AA" if octets[-2:] != b"AA" else b"BB"
    return octets[:-2] + tail


def test_an_edited_row_is_found_and_flagged(
    engine: Engine,
    db_url: str,
    world: World,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _store(engine, world)
    signer = write_key(tmp_path / "log.key", "handoff-trace.test/check")
    assert sequence_all(engine, signer, now=T0 + 40) == 6
    with transaction(engine) as session:
        leaves = {r.digest: r for r in session.scalars(select(LogLeafRow))}
        rows = list(session.scalars(select(ElementRow).order_by(ElementRow.first_seen)))
        refused = session.scalars(select(RejectedOctetsRow)).one()
    assert Leaf.decode(leaves[refused.digest].leaf).source is Source.REJECTED
    for row in rows:
        assert row.octets not in leaves[row.digest].leaf  # the hash, never the octets
    assert self_check(engine, signer.verifier, now=T0 + 50).ok

    edited, moved = rows[1], rows[3]
    with transaction(engine) as session:
        session.execute(
            update(ElementRow)
            .where(ElementRow.digest == edited.digest)
            .values(octets=_edit(edited.octets))
        )
        session.execute(
            update(ElementRow).where(ElementRow.digest == moved.digest).values(first_seen=T0 - 999)
        )
        session.execute(update(RejectedOctetsRow).values(octets=b'{"offer":6}'))
    report = self_check(engine, signer.verifier, now=T0 + 60)
    found = {(f.what, f.digest) for f in report.findings}
    assert found == {
        ("edited", edited.digest),
        ("edited", moved.digest),
        ("edited", refused.digest),
    }
    with transaction(engine) as session:
        flags = list(session.scalars(select(FlagRow).where(FlagRow.kind == FLAG_KIND)))
    assert len(flags) == 3 and {f.severity for f in flags} == {"critical"}
    assert digest_text(edited.digest) in {e for f in flags for e in f.evidence}

    # The command says the same, exits 1, and a second run opens no second flag.
    monkeypatch.setenv("HANDOFF_TRACE_LOG_KEY_FILE", str(tmp_path / "log.key"))
    assert main(["log", "check", "--db", db_url]) == 1
    out = capsys.readouterr().out
    assert out.count("CRITICAL  edited") == 3
    with transaction(engine) as session:
        assert len(list(session.scalars(select(FlagRow).where(FlagRow.kind == FLAG_KIND)))) == 3


def test_a_rewritten_log_table_is_found(engine: Engine, world: World, tmp_path: Path) -> None:
    _store(engine, world)
    signer = write_key(tmp_path / "log.key", "handoff-trace.test/check")
    sequence_all(engine, signer, now=T0 + 40)
    # Someone edits a row and its leaf to match: the leaves no longer rebuild the signed root.
    with transaction(engine) as session:
        row = session.scalars(select(ElementRow)).first()
        assert row is not None
        leaf = session.scalars(select(LogLeafRow).where(LogLeafRow.digest == row.digest)).one()
        old = Leaf.decode(leaf.leaf)
        new = Leaf(old.source, old.form, old.type, old.first_seen + 1, old.sha256)
        session.execute(
            update(LogLeafRow).where(LogLeafRow.idx == leaf.idx).values(leaf=new.encode())
        )
        session.execute(
            update(ElementRow)
            .where(ElementRow.digest == row.digest)
            .values(first_seen=old.first_seen + 1)
        )
    report = self_check(engine, signer.verifier, now=T0 + 50)
    assert [f.what for f in report.findings] == ["tree"]
