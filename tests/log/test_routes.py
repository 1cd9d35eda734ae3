"""The evidence log's routes answer bad requests with the one error shape, never a 5xx:
no token, an unknown tile, a malformed path or digest, an element not yet logged, a
deployment without a log key; and a service refuses a log key others may read. Receipts and
proof files that were tampered with fail to verify."""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from handoff_context import digest_text

from app.log.audit import DirectoryFetcher, audit
from app.log.checkpoint import Checkpoint
from app.log.errors import FormatError, SignatureError
from app.log.keys import load_signer, write_key
from app.log.merkle import leaf_hash
from app.log.note import Signer
from app.log.proofs import InclusionProof
from app.log.receipts import verify_receipt
from app.log.sequencer import sequence_all
from app.settings import Settings
from app.web.app import create_app
from app.web.service import ServiceConfigError
from tests.conftest import World
from tests.databases import Databases
from tests.store.builders import T0, bundle, jsonl, offer, rec
from tests.web.accounts import ACCOUNTS, create_accounts, log_in
from tests.web.conftest import Api, start, write_trust


@pytest.fixture
def logged(databases: Databases, world: World, tmp_path: Path) -> Iterator[tuple[Api, bytes]]:
    signer = write_key(tmp_path / "log.key", "handoff-trace.test/routes")
    trust = write_trust(world, tmp_path / "trust.json")
    url = databases.new("sqlite")
    for api in start(url, trust, log_key_file=tmp_path / "log.key", log_seconds=60):
        octets = offer(world.planner, world.coder, iat=T0)
        assert api.post("/api/v1/ingest", jsonl([rec(bundle(octets), T0 + 1)])).status_code == 200
        sequence_all(api.engine, signer, now=T0 + 2)
        yield api, octets


def _error(response: object, status: int, code: str) -> None:
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    assert response.json()["error"]["code"] == code  # type: ignore[attr-defined]


def test_bad_requests_get_clear_errors(logged: tuple[Api, bytes], world: World) -> None:
    api, octets = logged
    assert api.get("/api/v1/log/checkpoint", role=None).status_code == 401
    assert api.get("/api/v1/log/checkpoint", role="read").status_code == 200
    assert api.get("/api/v1/log/tile/0/000.p/1", role="read").status_code == 200
    _error(api.get("/api/v1/log/tile/0/000", role="read"), 404, "not-found")  # not full yet
    _error(api.get("/api/v1/log/tile/0/1", role="read"), 404, "not-found")
    _error(api.get("/api/v1/log/tile/9/000", role="read"), 404, "not-found")
    _error(api.get("/api/v1/log/tile/entries/x000/001", role="read"), 404, "not-found")
    _error(api.get("/api/v1/elements/nope/proof", role="read"), 422, "invalid-request")
    other = digest_text(leaf_hash(b"never stored"))
    _error(api.get(f"/api/v1/elements/{other}/proof", role="read"), 404, "not-in-log")
    digest = digest_text(hashlib.sha256(octets).digest())
    _error(
        api.get(f"/api/v1/elements/{digest}/proof?format=x", role="read"), 422, "invalid-request"
    )
    _error(api.get(f"/api/v1/elements/{digest}/proof?size=1", role="read"), 422, "invalid-request")
    assert api.get(f"/api/v1/elements/{digest}/proof", role="read").status_code == 200


def test_tampered_proofs_and_receipts_fail(logged: tuple[Api, bytes], tmp_path: Path) -> None:
    api, octets = logged
    verifier = load_signer(tmp_path / "log.key").verifier
    digest = digest_text(hashlib.sha256(octets).digest())
    text = api.get(f"/api/v1/elements/{digest}/proof", role="read").content
    receipt = api.get(f"/api/v1/elements/{digest}/proof?format=receipt", role="read").content
    proof = InclusionProof.parse(text)
    leaf = leaf_hash(api.get("/api/v1/log/tile/entries/000.p/1", role="read").content[2:])
    proof.verify(leaf, verifier)
    assert verify_receipt(receipt, leaf, verifier).size == 1
    with pytest.raises(SignatureError):
        verify_receipt(receipt, leaf_hash(b"another leaf"), verifier)
    with pytest.raises(SignatureError):
        verify_receipt(receipt[:-1] + bytes([receipt[-1] ^ 1]), leaf, verifier)
    with pytest.raises(FormatError):
        verify_receipt(receipt[:-1], leaf, verifier)
    with pytest.raises(FormatError):
        InclusionProof.parse(text.replace(b"index 0", b"index x"))


def test_without_a_key_there_is_no_log_and_a_readable_key_is_refused(
    databases: Databases, world: World, tmp_path: Path
) -> None:
    trust = write_trust(world, tmp_path / "trust.json")
    url = databases.new("sqlite")
    for api in start(url, trust):
        _error(api.get("/api/v1/log/checkpoint", role="read"), 404, "log-disabled")
    write_key(tmp_path / "log.key", "handoff-trace.test/routes")
    os.chmod(tmp_path / "log.key", 0o644)
    app = create_app(
        Settings(database_url=url, trust_file=trust, log_key_file=tmp_path / "log.key")
    )
    with pytest.raises(ServiceConfigError, match="readable by others"), TestClient(app):
        pass


def test_the_hop_page_offers_the_evidence_bundle(logged: tuple[Api, bytes], tmp_path: Path) -> None:
    api, octets = logged
    create_accounts(api.engine)
    login = log_in(api.engine, ACCOUNTS["read"])
    digest = digest_text(hashlib.sha256(octets).digest())
    page = api.client.get(f"/hops/{digest}", headers=login.headers)
    assert f'href="/elements/{digest}/evidence"' in page.text
    response = api.client.get(f"/elements/{digest}/evidence", headers=login.headers)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(response.content)) as bundle:
        assert bundle.read(f"{digest}.jws") == octets
        leaf = bundle.read("leaf")
        assert leaf[-32:] == hashlib.sha256(octets).digest()
        verifier = load_signer(tmp_path / "log.key").verifier
        checkpoint = InclusionProof.parse(bundle.read("proof.tlog-proof")).verify(
            leaf_hash(leaf), verifier
        )
        assert verify_receipt(bundle.read("receipt.cose"), leaf_hash(leaf), verifier).root == (
            checkpoint.root
        )
        assert bundle.read("checkpoint").decode() in bundle.read("proof.tlog-proof").decode()
    other = digest_text(leaf_hash(b"never stored"))
    assert api.client.get(f"/elements/{other}/evidence", headers=login.headers).status_code == 404
    api.client.cookies.clear()


def test_log_verify_refuses_a_rewritten_or_shrunk_history(
    logged: tuple[Api, bytes], tmp_path: Path
) -> None:
    api, _ = logged
    signer = load_signer(tmp_path / "log.key")
    mirror = tmp_path / "mirror"
    (mirror / "tile" / "0").mkdir(parents=True)
    (mirror / "tile" / "entries").mkdir(parents=True)
    (mirror / "checkpoint").write_bytes(api.get("/api/v1/log/checkpoint", role="read").content)
    for path in ("tile/0/000.p/1", "tile/entries/000.p/1"):
        (mirror / path).parent.mkdir(parents=True, exist_ok=True)
        (mirror / path).write_bytes(api.get(f"/api/v1/log/{path}", role="read").content)
    fetch = DirectoryFetcher(mirror)
    assert audit(fetch, signer.verifier).ok
    rewritten = Checkpoint(signer.name, 1, leaf_hash(b"another first leaf")).sign(signer)
    report = audit(fetch, signer.verifier, saved=rewritten)
    assert report.failures == ["the first 1 leaves changed since the saved checkpoint"]
    longer = Checkpoint(signer.name, 5, leaf_hash(b"x")).sign(signer)
    report = audit(fetch, signer.verifier, saved=longer)
    assert report.failures == ["the log shrank: 5 leaves before, 1 now"]
    other = Signer.generate(signer.name)
    report = audit(fetch, other.verifier)
    assert report.failures and "signature" in report.failures[0]
