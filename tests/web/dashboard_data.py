"""A store for the dashboard tests: a small demo run (every fault kind, equivocation
included) plus hostile traffic, ingested through the one pipeline into a SQLite file.

Hostile traffic: an agent whose identifier is markup (``<img src=x onerror=...>`` spelt
without spaces, since identifiers are printable ASCII), a dialog that is a script tag, a
status whose ``detail`` carries a bidi override, and an offer from that agent to an
identity the trust store does not know, and one the policy rejects (so the hostile issuer
reaches the triage queue and the overview), and a copy of its offer with a key in the
header (refused before parsing, kept as evidence).

Envelope traffic: the demo run's cases, and the seed's worked example (tests/web/case_data.py)
starting with the run, its transcript among the run's objects.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from handoff_context import (
    Form,
    RefPolicy,
    Signer,
    TrustStore,
    make_offer,
    make_status,
    parse_element,
    trust_document,
)
from sqlalchemy import select

from app.demo import DemoConfig, DemoPaths, write_demo
from app.demo.elements import embedded_key_offer
from app.ingest.build import build_pipeline, verify_options
from app.ingest.pipeline import ingest
from app.ingest.verifying import load_objects
from app.settings import Settings
from app.store import db
from app.store.models import FlagRow
from tests.web import case_data

HOSTILE_AGENT = "spiffe://evil.example/<img/src=x/onerror=alert(document.domain)>"
HOSTILE_DIALOG = "ctx-<script>alert(2)</script>"
BIDI_DETAIL = "done \u202egnp.exe\u202c see log"
HELPER = "spiffe://b.example/agent/helper-9"
STRANGER = "spiffe://nowhere.example/<svg/onload=alert(3)>"


@dataclass(frozen=True)
class Dataset:
    db: Path  # a template: copy it before a test writes
    trust: Path
    capture: Path  # the demo's JSON Lines capture, for upload tests
    now: int  # the store clock the data was ingested at
    equivocation_flag: int


def _hostile(start: int) -> tuple[list[Signer], bytes]:
    evil = Signer.generate(HOSTILE_AGENT, "Ed25519", kid="evil-1")
    helper = Signer.generate(HELPER, "ES256", kid="helper-1")
    iat = start + 60
    offer = make_offer(evil, aud=HELPER, dialog=HOSTILE_DIALOG, iat=iat, lifetime=240)
    accepted = make_status(helper, offer_octets=offer, state="accepted", iat=iat + 5)
    completed = make_status(
        helper, offer_octets=offer, state="completed", iat=iat + 9, detail=BIDI_DETAIL
    )
    stray = make_offer(evil, aud=STRANGER, dialog=HOSTILE_DIALOG, iat=iat + 20)
    # Rejected (a lifetime over the 300 s policy), so the hostile issuer reaches triage.
    too_long = make_offer(evil, aud=HELPER, dialog=HOSTILE_DIALOG, iat=iat + 30, lifetime=900)
    # The same offer with the signer's key in its header (profile §2): refused before parsing,
    # kept as evidence under the hostile hop.
    keyed = embedded_key_offer(dict(parse_element(offer, Form.JWS).raw_payload), evil)
    records = [
        {"received_at": iat + 1, "received_by": HELPER, "payload": {"offer": offer.decode()}},
        {"received_at": iat + 2, "received_by": HELPER, "payload": {"offer": keyed.decode()}},
        {"received_at": iat + 6, "payload": {"status": accepted.decode()}},
        {"received_at": iat + 10, "payload": {"status": completed.decode()}},
        {"received_at": iat + 21, "payload": {"offer": stray.decode()}},
        {"received_at": iat + 31, "payload": {"offer": too_long.decode()}},
    ]
    lines = "".join(json.dumps(r) + "\n" for r in records).encode()
    return [evil, helper], lines


REFUSED_DIALOG = "ctx-refused-only"


def refused_only(now: int) -> bytes:
    """A capture whose every element is refused, in a dialog of its own: an offer from an
    issuer the trust store does not know (parsed, ``untrusted-key``) and a copy of it with
    the key in its header (never parsed), carried by a record that names the dialog."""
    ghost = Signer.generate("spiffe://ghost.example/agent/nobody", "Ed25519", kid="ghost-1")
    offer = make_offer(ghost, aud=HELPER, dialog=REFUSED_DIALOG, iat=now - 60, lifetime=240)
    keyed = embedded_key_offer(dict(parse_element(offer, Form.JWS).raw_payload), ghost)
    records = [
        {"received_at": now - 59, "received_by": HELPER, "payload": {"offer": offer.decode()}},
        {"received_at": now - 58, "dialog": REFUSED_DIALOG, "payload": {"offer": keyed.decode()}},
    ]
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def ingest_more(store: Path, trust: Path, now: int, name: str, capture: bytes) -> None:
    """Ingest ``capture`` into the SQLite file ``store`` as the dataset was (a test's copy)."""
    engine = db.make_engine(f"sqlite:///{store}")
    try:
        settings = Settings(database_url=f"sqlite:///{store}", trust_file=trust)
        pipeline = build_pipeline(
            settings,
            engine,
            TrustStore.load(trust),
            options=verify_options(settings, at=now, ref_policy=RefPolicy.CHECK_AVAILABLE),
        )
        report = ingest(pipeline, [(name, capture)], now=now)
        assert not report.errors, report.errors
    finally:
        engine.dispose()


def build(root: Path, *, dialogs: int = 10, seed: int = 1) -> Dataset:
    """Write the run under ``root`` and ingest it into ``root/store.db``."""
    paths = DemoPaths.beside(root / "capture.jsonl", trust=None, answers=None)
    summary = write_demo(DemoConfig(seed=seed, dialogs=dialogs, fault_rate=0.3), paths)
    assert summary.suggested_now is not None and summary.first is not None
    now = summary.suggested_now
    signers, hostile = _hostile(summary.first)
    doc = json.loads(paths.trust.read_text())
    doc["issuers"].extend(trust_document(signers)["issuers"])
    trust_path = root / "trust.json"
    trust_path.write_text(json.dumps(doc))
    trust_path.chmod(0o644)
    (paths.objects / case_data.TRANSCRIPT).write_bytes(case_data.TRANSCRIPT_TEXT)
    worked = "".join(json.dumps(r) + "\n" for r in case_data.records(summary.first)).encode()
    url = f"sqlite:///{root / 'store.db'}"
    engine = db.make_engine(url)
    try:
        db.ensure_schema(engine)
        settings = Settings(database_url=url, trust_file=trust_path)
        pipeline = build_pipeline(
            settings,
            engine,
            TrustStore.load(trust_path),
            options=verify_options(settings, at=now, ref_policy=RefPolicy.CHECK_AVAILABLE),
            objects=load_objects(paths.objects),
        )
        inputs = [
            (str(paths.out), paths.out.read_bytes()),
            (str(paths.cbor), paths.cbor.read_bytes()),
            ("hostile.jsonl", hostile),
            ("worked-example.jsonl", worked),
        ]
        report = ingest(pipeline, inputs, now=now)
        assert not report.errors, report.errors
        with db.transaction(engine) as session:
            flag_id = session.execute(
                select(FlagRow.id).where(FlagRow.kind == "equivocation").order_by(FlagRow.id)
            ).scalar()
    finally:
        engine.dispose()
    assert flag_id is not None, "the demo run must hold an equivocation"
    return Dataset(root / "store.db", trust_path, paths.out, now, int(flag_id))


def copy(data: Dataset, into: Path) -> Dataset:
    """``data`` with a store of its own in ``into`` (a copy of the template's, for a test
    that writes to it; the trust file, the capture and the objects are only read)."""
    into.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(data.db, into / "store.db")
    return replace(data, db=into / "store.db")
