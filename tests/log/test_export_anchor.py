"""Export and import carry the evidence log (issue 24, item 5), on SQLite and PostgreSQL: an
export's header carries the checkpoint it is consistent with, and its element and refused
octets records, in log order, rebuild that checkpoint's tree. A truncated, reordered or
edited export, or one with an edited checkpoint, is refused by ``import`` (nothing is left
in the store) and by ``log verify`` (exit 1), even when whoever holds the export key signed
the forged header again, so only the log can tell."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from handoff_context import (
    b64url_decode,
    b64url_encode,
    digest_text,
    new_key,
    public_jwk,
    trust_document,
)
from sqlalchemy import func, select

from app.log.keys import write_key
from app.log.note import Signer
from app.log.sequencer import sequence_all
from app.store.db import make_engine, transaction
from app.store.models import ElementRow, RejectedOctetsRow
from app.store.transfer import RecordsDigest, header_line, sign_header
from tests.conftest import World
from tests.databases import Databases
from tests.log.test_selfcheck import _store
from tests.store.builders import T0, bundle, offer, rec, run
from tests.store.test_transfer import _cli

Lines = list[dict[str, Any]]


@pytest.fixture
def exported(db_url: str, world: World, tmp_path: Path) -> dict[str, Any]:
    """A small store (five offers, one refused), exported with the log key set: the export
    first sequences what is pending, then anchors itself to that checkpoint."""
    engine = make_engine(db_url)
    try:
        _store(engine, world)
    finally:
        engine.dispose()
    signer = write_key(tmp_path / "log.key", "handoff-trace.test/export")
    key = new_key("Ed25519", kid="export-1")
    (tmp_path / "export.jwk").write_text(json.dumps(key.as_dict(private=True)))
    (tmp_path / "export.pub.jwk").write_text(json.dumps(public_jwk(key)))
    doc = trust_document([world.assistant, world.planner, world.coder, world.tester])
    doc["issuers"][1]["keys"].append(world.planner_alt.trust_entry()["keys"][0])
    (tmp_path / "trust.json").write_text(json.dumps(doc))
    out = tmp_path / "export.jsonl"
    code, _, err = _cli(
        ["export", "--db", db_url, "--out", str(out), "--sign-key", str(tmp_path / "export.jwk")],
        HANDOFF_TRACE_LOG_KEY_FILE=str(tmp_path / "log.key"),
    )
    assert code == 0, err
    return {"path": out, "root": tmp_path, "key": key, "signer": signer, "url": db_url}


def _lines(path: Path) -> tuple[dict[str, Any], Lines]:
    first, *rest = path.read_bytes().splitlines()
    return json.loads(first), [json.loads(line) for line in rest]


Change = Callable[[dict[str, Any], Lines], None]


def _forge(exported: dict[str, Any], name: str, change: Change) -> Path:
    """The export changed by ``change``, its counts and digest made to match and its header
    signed again with the export key: what an exporter who lies could write."""
    first, records = _lines(exported["path"])
    change(first, records)
    digest = RecordsDigest()
    body = b""
    for record in records:
        line = (json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        digest.add(line, record["t"])
        body += line
    first = {k: v for k, v in first.items() if k != "signature"}
    first["counts"] = {k: digest.counts.get(k, 0) for k in first["counts"]}
    first["records"] = digest.value
    path = exported["root"] / f"{name}.jsonl"
    path.write_bytes(header_line(sign_header(first, exported["key"])) + body)
    return path


def _elements(records: Lines) -> list[int]:
    return [i for i, r in enumerate(records) if r["t"] == "element"]


def truncated(first: dict[str, Any], records: Lines) -> None:
    del records[_elements(records)[-1]]


def reordered(first: dict[str, Any], records: Lines) -> None:
    a, b = _elements(records)[:2]
    records[a], records[b] = records[b], records[a]


def edited_octets(first: dict[str, Any], records: Lines) -> None:
    record = records[_elements(records)[2]]
    octets = bytearray(b64url_decode(record["octets"], what="octets"))
    octets[-1] ^= 1
    record["octets"] = b64url_encode(bytes(octets))


def edited_checkpoint(first: dict[str, Any], records: Lines) -> None:
    note: str = first["log"]["checkpoint"]
    origin, size, root, rest = note.split("\n", 3)
    other = base64.b64decode(root)
    forged = bytes([other[0] ^ 1]) + other[1:]
    first["log"]["checkpoint"] = "\n".join([origin, size, base64.b64encode(forged).decode(), rest])


TAMPERING = [truncated, reordered, edited_octets, edited_checkpoint]
CUT, TREE, SIGNATURE = "it was cut short", "do not rebuild", "does not verify"
# Why each is refused: without the log's key (the checkpoint as signed in the header), and
# with it (``log verify`` always has it).
WHY = {
    "truncated": (CUT, CUT),
    "reordered": (TREE, TREE),
    "edited_octets": (TREE, TREE),
    "edited_checkpoint": (TREE, SIGNATURE),
}


def _import(exported: dict[str, Any], url: str, path: Path, *extra: str) -> tuple[int, str]:
    root = exported["root"]
    code, out, err = _cli(
        ["import", "--db", url, "--trust", str(root / "trust.json"),
         "--trust-key", str(root / "export.pub.jwk"), *extra, str(path)],
    )  # fmt: skip
    return code, out + err


def _verify(exported: dict[str, Any], path: Path, *extra: str) -> tuple[int, str]:
    vkey = exported["signer"].verifier.text()
    code, out, err = _cli(["log", "verify", str(path), "--key", vkey, *extra])
    return code, out + err


def _kind(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else "postgresql"


def _stored(url: str) -> int:
    engine = make_engine(url)
    try:
        with transaction(engine) as session:
            return sum(
                session.execute(select(func.count()).select_from(t)).scalar_one()
                for t in (ElementRow, RejectedOctetsRow)
            )
    finally:
        engine.dispose()


def test_an_export_carries_its_checkpoint_and_imports(
    exported: dict[str, Any], databases: Databases, db_url: str
) -> None:
    first, records = _lines(exported["path"])
    assert records[0]["t"] == "element"
    assert first["crit"] == ["log"]
    assert first["log"]["checkpoint"].startswith("handoff-trace.test/export\n6\n")
    assert sorted(b64url_decode(first["log"]["sources"], what="s")) == [1, 1, 1, 1, 1, 2]
    code, out = _verify(exported, exported["path"])
    assert code == 0, out
    assert "6 elements and refused octets rebuild the signed root" in out
    assert "FAIL" not in out
    digest = b64url_decode(records[0]["digest"], what="digest")
    state = exported["root"] / "saved.checkpoint"
    state.write_text(first["log"]["checkpoint"])
    code, out = _verify(exported, exported["path"], "--state", str(state), "--element",
                        digest_text(digest))  # fmt: skip
    assert code == 0, out
    assert "consistency: 6 -> 6" in out and "inclusion: 1 elements found" in out
    vkey = exported["signer"].verifier.text()
    target = databases.new(_kind(db_url))
    code, out = _import(exported, target, exported["path"], "--log-key", vkey)
    assert code == 0, out
    assert "rebuild the export's checkpoint (its signature verified); 0 records" in out
    assert _stored(target) == 6


@pytest.mark.parametrize("change", TAMPERING, ids=lambda f: f.__name__)
def test_a_forged_export_is_refused_by_import_and_log_verify(
    exported: dict[str, Any], databases: Databases, db_url: str, change: Callable[..., None]
) -> None:
    forged = _forge(exported, change.__name__, change)
    unkeyed, keyed = WHY[change.__name__]
    code, out = _verify(exported, forged)
    assert code == 1, out
    assert "FAIL" in out and keyed in out, out
    kind = _kind(db_url)
    vkey = exported["signer"].verifier.text()
    for extra, why in (([], unkeyed), (["--log-key", vkey], keyed)):
        target = databases.new(kind)
        code, out = _import(exported, target, forged, *extra)
        assert code == 2, out
        assert why in out and "nothing was imported" in out, out
        assert _stored(target) == 0


def test_an_untouched_export_still_imports_after_a_reforge(
    exported: dict[str, Any], databases: Databases, db_url: str
) -> None:
    """The forging helper itself changes nothing that matters: an export re-signed as it is
    imports and verifies (so the refusals above are the log's doing)."""
    same = _forge(exported, "same", lambda first, records: None)
    assert _verify(exported, same)[0] == 0
    target = databases.new(_kind(db_url))
    code, out = _import(exported, target, same)
    assert code == 0, out
    assert _stored(target) == 6


def test_log_verify_wants_the_log_key_and_a_checkpoint(exported: dict[str, Any]) -> None:
    other = Signer.generate("handoff-trace.test/export")
    code, out, _ = _cli(["log", "verify", str(exported["path"]), "--key", other.verifier.text()])
    assert code == 1
    assert "FAIL  the note carries no signature of handoff-trace.test/export" in out

    def drop_log(first: dict[str, Any], records: Lines) -> None:
        del first["log"]
        first["crit"] = []

    bare = _forge(exported, "bare", drop_log)
    code, out = _verify(exported, bare)
    assert code == 1 and "carries no checkpoint" in out

    garbage = exported["root"] / "garbage.jsonl"
    garbage.write_bytes(b"\x00\xffnot an export\n")
    code, out = _verify(exported, garbage)
    assert code == 1 and "FAIL" in out and "not JSON" in out


def test_records_stored_after_the_checkpoint(
    db_url: str, world: World, tmp_path: Path, databases: Databases
) -> None:
    """Without the log key, ``export`` anchors to the checkpoint there is: records the
    sequencer had not reached are imported and counted, and ``log verify`` fails on them."""
    engine = make_engine(db_url)
    try:
        _store(engine, world)
        signer = write_key(tmp_path / "log.key", "handoff-trace.test/behind")
        assert sequence_all(engine, signer, now=T0 + 40) == 6
        late = offer(world.planner, world.coder, iat=T0 + 50)
        run(engine, world.trust, [rec(bundle(late), T0 + 60, world.coder.iss)], now=T0 + 60)
    finally:
        engine.dispose()
    key = new_key("Ed25519", kid="export-2")
    (tmp_path / "export.jwk").write_text(json.dumps(key.as_dict(private=True)))
    (tmp_path / "export.pub.jwk").write_text(json.dumps(public_jwk(key)))
    doc = trust_document([world.assistant, world.planner, world.coder, world.tester])
    (tmp_path / "trust.json").write_text(json.dumps(doc))
    out = tmp_path / "export.jsonl"
    code, _, err = _cli(
        ["export", "--db", db_url, "--out", str(out), "--sign-key", str(tmp_path / "export.jwk")]
    )
    assert code == 0, err
    exported = {"root": tmp_path, "signer": signer}
    code, text = _verify(exported, out)
    assert code == 1 and "FAIL  1 records of the export are not in the checkpoint" in text, text
    target = databases.new(_kind(db_url))
    code, text = _import(exported, target, out, "--log-key", signer.verifier.text())
    assert code == 0, text
    assert "(its signature verified); 1 records were stored after it" in text
    assert _stored(target) == 7
