"""A demo deployment with its evidence log, for the referee and receipt tests: a demo run
ingested into a SQLite store, the service on it with a log key, and a second, smaller run
to ingest later ("more ingest")."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fastapi.testclient import TestClient
from handoff_context import digest_text
from sqlalchemy import Engine, select

from app.demo import DemoConfig, DemoPaths, write_demo
from app.demo.load import load_run
from app.log.keys import write_key
from app.log.note import Signer
from app.settings import Settings
from app.store.db import transaction
from app.store.models import ElementRow
from app.web.app import create_app
from tests.web.conftest import make_tokens

# Written out here rather than taken from app.log.leaf: the auditor's own reading of the
# documented format (docs/evidence-log.md), so a change to either is caught.
FORMS = {"jws": 1, "cose": 2, "json": 3, "cbor": 4}
TYPES = {None: 0, "offer": 1, "status": 2}


def expected_leaf(row: ElementRow) -> bytes:
    import hashlib

    return struct.pack(
        ">BBBBQ32s",
        1,
        1,
        FORMS[row.form],
        TYPES[row.type],
        row.first_seen,
        hashlib.sha256(row.octets).digest(),
    )


def demo_run(directory: Path, *, seed: int, dialogs: int) -> DemoPaths:
    paths = DemoPaths.beside(directory / "capture.jsonl", trust=None, answers=None)
    directory.mkdir(parents=True, exist_ok=True)
    start = int(time.time()) - 3600
    write_demo(DemoConfig(seed=seed, dialogs=dialogs, fault_rate=0.1, start=start), paths)
    return paths


def ingest_run(paths: DemoPaths, url: str) -> None:
    assert load_run(paths, now=None, settings=Settings(), url=url) == 0


@dataclass
class Deployment:
    url: str
    client: TestClient
    token: str
    signer: Signer
    later: DemoPaths  # the run ingested "after"

    def get(self, path: str, **params: str) -> bytes:
        response = self.client.get(
            path, params=params, headers={"Authorization": f"Bearer {self.token}"}
        )
        assert response.status_code == 200, (path, response.text)
        return response.content

    @property
    def engine(self) -> Engine:
        engine: Engine = self.client.app.state.service.engine  # type: ignore[attr-defined]
        return engine

    def elements(self) -> list[ElementRow]:
        with transaction(self.engine) as session:
            return list(session.scalars(select(ElementRow)))


def deploy(root: Path, *, dialogs: int) -> Iterator[Deployment]:
    first = demo_run(root / "first", seed=7, dialogs=dialogs)
    later = demo_run(root / "later", seed=8, dialogs=6)
    url = f"sqlite:///{root / 'store.db'}"
    ingest_run(first, url)
    signer = write_key(root / "log.key", "handoff-trace.test/log")
    settings = Settings(
        database_url=url, trust_file=first.trust, log_key_file=root / "log.key", log_seconds=60
    )
    with TestClient(create_app(settings)) as client:
        token = make_tokens(client.app.state.service.engine)["read"]  # type: ignore[attr-defined]
        yield Deployment(url, client, token, signer, later)


def digest_of(row: ElementRow) -> str:
    return digest_text(row.digest)
