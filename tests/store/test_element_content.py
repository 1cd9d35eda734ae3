"""An element row's ``content`` and the replay memory's fingerprint of an offer are both the
fingerprint of what was signed (``content_fingerprint``: the SHA-256 of the header and
payload), whether it was taken once for both (a batch that buffers its element rows,
``StoreMemory.store`` then ``remember``) or for each: every stored element and replay row
of the simulator's mixed capture."""

from __future__ import annotations

from pathlib import Path

from handoff_context import Form, RefPolicy, TrustStore, content_fingerprint, parse_element
from sqlalchemy import Engine

from app.demo import DemoConfig, DemoPaths, write_demo
from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import VerifyOptions, load_objects


def test_element_and_replay_rows_hold_the_fingerprint_of_the_signed_content(
    engine: Engine, tmp_path: Path
) -> None:
    paths = DemoPaths.beside(tmp_path / "capture.jsonl", trust=None, answers=None)
    summary = write_demo(DemoConfig(seed=5, dialogs=12, agents=6, fault_rate=0.3), paths)
    now = summary.suggested_now
    pipeline = Pipeline(
        engine=engine,
        trust=TrustStore.load(paths.trust),
        options=VerifyOptions(at=now, ref_policy=RefPolicy.CHECK_AVAILABLE),
        objects=load_objects(paths.objects),
    )
    for path in (paths.out, paths.cbor):
        assert not ingest(pipeline, [(str(path), path.read_bytes())], now=now).errors
    with engine.connect() as connection:
        elements = connection.exec_driver_sql("SELECT digest, octets, form, content FROM element")
        fingerprints = {}
        for digest, octets, form, content in elements.all():
            fingerprints[bytes(digest)] = content_fingerprint(
                parse_element(bytes(octets), Form(form))
            )
            assert bytes(content) == fingerprints[bytes(digest)]
        replay = connection.exec_driver_sql("SELECT digest, content FROM replay").all()
    assert replay, "offers were remembered"
    for digest, content in replay:
        assert bytes(content) == fingerprints[bytes(digest)]
