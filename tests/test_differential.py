"""One capture, every path, the same verdicts (issue 13): ``verify``, ``ingest`` and
``POST /api/v1/ingest`` on the simulator's mixed capture (JWS and COSE, chains, statuses,
envelope items, faults), in one process and, on PostgreSQL, in several ``handoff-trace
ingest`` processes at once.

One difference is the profile's, not a path's, and is pinned exactly: an offer that names
``prev`` but carries no chain is reported ``chain: not-checked`` by the database-less
``verify``, while ingest checks it against the earlier offers the store holds (profile §7, "a
party that holds the earlier offer can still check the link") and says ``carried: false``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cbor2
import pytest
from fastapi.testclient import TestClient
from handoff_context import (
    Element,
    Offer,
    RefPolicy,
    StatusObject,
    TrustStore,
    parse_element,
    parse_object,
)
from handoff_context.errors import HandoffError
from sqlalchemy import Engine
from sqlmodel import SQLModel, select

from app.capture.carriers import Carried, read_capture
from app.ingest import memory
from app.ingest.cases import KnownItems
from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import VerifyOptions, load_objects
from app.settings import Settings
from app.store.db import transaction
from app.store.derived import snapshot
from app.store.models import CaseRow
from app.store.tokens import Role, create_token
from app.web.app import create_app
from tests.databases import Databases
from tests.demo.helpers import Run, make_run

PROCESSES = 3
Verdicts = dict[str, dict[str, Any]]  # by source, as the verify command names it


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return make_run(tmp_path_factory.mktemp("mixed"), seed=11, dialogs=24, fault_rate=0.1)


@pytest.fixture(scope="module")
def verified(run: Run) -> Verdicts:
    return _by_source(v.to_json() for v in run.verify().verdicts)


def _by_source(verdicts: Iterator[dict[str, Any]] | list[dict[str, Any]]) -> Verdicts:
    found: Verdicts = {}
    for v in verdicts:
        assert v["source"] not in found
        found[v["source"]] = v
    return found


def _options() -> VerifyOptions:
    return VerifyOptions(at=0, ref_policy=RefPolicy.CHECK_AVAILABLE)


def _pipeline(run: Run, engine: Engine) -> Pipeline:
    return Pipeline(
        engine=engine,
        trust=TrustStore.load(run.paths.trust),
        options=_options(),
        objects=load_objects(run.paths.objects),
    )


def _stored_chain(verdict: dict[str, Any]) -> bool:
    """An offer whose chain ingest built from stored offers (profile §7)."""
    chain = verdict.get("chain")
    return bool(chain) and not chain["carried"] and chain["length"] > 1


def _check(verdict: dict[str, Any], name: str) -> str:
    return str(next(c["result"] for c in verdict["checks"] if c["check"] == name))


def _apart_from_chain(verdict: dict[str, Any]) -> dict[str, Any]:
    checks = [c for c in verdict["checks"] if c["check"] != "chain"]
    return {k: v for k, v in verdict.items() if k != "chain"} | {"checks": checks}


def assert_same_as_verify(verified: Verdicts, ingested: Verdicts) -> None:
    assert ingested.keys() == verified.keys()
    stored_chains = 0
    for source, mine in ingested.items():
        theirs = verified[source]
        if not _stored_chain(mine):
            assert mine == theirs, source
            continue
        # verify holds no earlier offers: the link is not checked there (or not reached).
        stored_chains += 1
        assert _check(theirs, "chain") in ("not-checked", "not-run"), source
        assert (theirs["chain"]["carried"], theirs["chain"]["length"]) == (False, 1), source
        if _check(mine, "chain") != "fail":
            assert _apart_from_chain(mine) == _apart_from_chain(theirs), source
    # The capture exercises that rule, and most items are judged identically.
    assert 0 < stored_chains < len(ingested) // 4


def test_ingest_finds_the_verdicts_verify_finds(
    run: Run, verified: Verdicts, engine: Engine
) -> None:
    report = ingest(_pipeline(run, engine), run.inputs(), now=run.summary.last + 60)
    assert report.errors == []
    assert_same_as_verify(verified, _by_source(v.to_json() for v in report.verdicts))


def test_http_ingest_finds_the_verdicts_ingest_finds(
    run: Run, verified: Verdicts, db_url: str, engine: Engine, tmp_path: Path
) -> None:
    report = ingest(_pipeline(run, engine), run.inputs(), now=run.summary.last + 60)
    ingested = _by_source(v.to_json() for v in report.verdicts)
    served = _post_all(run, tmp_path, tmp_path / "http.db")
    assert served == ingested


def _post_all(run: Run, tmp_path: Path, database: Path) -> Verdicts:
    """Both capture files through ``POST /api/v1/ingest`` of a fresh service; the verdicts
    renamed from ``request:N`` to the file's own source names."""
    settings = Settings(
        database_url=f"sqlite:///{database}",
        trust_file=run.paths.trust,
        objects_dir=run.paths.objects,
        ref_policy=RefPolicy.CHECK_AVAILABLE,
    )
    app = create_app(settings, clock=lambda: run.summary.last + 60)
    found: Verdicts = {}
    with TestClient(app, raise_server_exceptions=False) as client:
        with transaction(app.state.service.engine) as session:
            token = create_token(session, name="ingest", role=Role.INGEST, now=0)
        for path, media, sep in (
            (run.paths.out, "application/x-ndjson", ":"),
            (run.paths.cbor, "application/cbor-seq", "#"),
        ):
            answer = client.post(
                "/api/v1/ingest",
                content=path.read_bytes(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": media},
            )
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["errors"] == []
            for v in body["verdicts"]:
                v["source"] = v["source"].replace("request" + sep, f"{path}{sep}", 1)
                found[v["source"]] = v
    return found


# --- several ingest processes on one PostgreSQL ---------------------------------------------


def _dialog_of_line(path: Path, sep: str) -> dict[int, str]:
    """The dialog of each capture record that carries a signed object (1-based): the
    carrier's or the record's, else the one the offer names (for a status, the dialog of
    the offer it names), so that a dialog's records stay together."""
    items = [i for i in read_capture(path.read_bytes(), name="x") if isinstance(i, Carried)]
    elements = {i.source: _element(i.value) for i in items}
    offer_dialog = {
        e.digest: e.payload.dialog for e in elements.values() if e and isinstance(e.payload, Offer)
    }
    dialogs: dict[int, str] = {}
    for item in items:
        index = int(item.source.split(sep, 1)[1])
        dialog = item.dialog or item.record_dialog
        element = elements[item.source]
        if dialog is None and element is not None:
            p = element.payload
            dialog = p.dialog if isinstance(p, Offer) else offer_dialog.get(p.offer)
        dialogs.setdefault(index, dialog or "")
    return dialogs


def _element(value: object) -> Element | None:
    try:
        obj = parse_object(value)
        octets = obj.status if isinstance(obj, StatusObject) else obj.offer
        return parse_element(octets, obj.form)
    except HandoffError:
        return None


def _records(path: Path) -> list[Any]:
    if path.suffix == ".cbor":
        data = io.BytesIO(path.read_bytes())
        records = []
        while data.tell() < len(data.getvalue()):
            records.append(cbor2.load(data))
        return records
    return path.read_text().splitlines()


def split_by_dialog(
    run: Run, directory: Path, parts: int
) -> tuple[list[list[Path]], dict[str, str]]:
    """The capture cut into ``parts`` captures, each dialog whole and in order in one of
    them (so no order-dependent verdict depends on how the processes interleave); and the
    original source name of each part's records."""
    files: list[list[Path]] = [[] for _ in range(parts)]
    names: dict[str, str] = {}
    for path, sep in ((run.paths.out, ":"), (run.paths.cbor, "#")):
        dialogs = _dialog_of_line(path, sep)
        chunks: list[list[Any]] = [[] for _ in range(parts)]
        for index, record in enumerate(_records(path), 1):
            dialog = dialogs.get(index, "")
            part = sum(dialog.encode()) % parts
            chunks[part].append(record)
            names[f"{directory}/part{part}{path.suffix}{sep}{len(chunks[part])}"] = (
                f"{path}{sep}{index}"
            )
        for part, records in enumerate(chunks):
            out = directory / f"part{part}{path.suffix}"
            if path.suffix == ".cbor":
                out.write_bytes(b"".join(cbor2.dumps(r) for r in records))
            else:
                out.write_text("".join(line + "\n" for line in records))
            files[part].append(out)
    return files, names


def _ingest_processes(run: Run, url: str, files: list[list[Path]]) -> list[Any]:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "HANDOFF_TRACE_TRUST_FILE": str(run.paths.trust),
        "HANDOFF_TRACE_OBJECTS_DIR": str(run.paths.objects),
        "HANDOFF_TRACE_REF_POLICY": "check-available",
    }
    command = [str(Path(sys.executable).with_name("handoff-trace")), "ingest", "--json"]
    procs = [
        subprocess.Popen(
            [*command, *map(str, part)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for part in files
    ]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode in (0, 1), stderr.decode()
        out.extend(json.loads(stdout))
    return out


def test_several_ingest_processes_find_what_one_finds(
    run: Run, databases: Databases, tmp_path: Path
) -> None:
    one_url, many_url = databases.new("postgresql"), databases.new("postgresql")
    files, names = split_by_dialog(run, tmp_path, PROCESSES)
    alone = _by_source(_ingest_processes(run, one_url, [[run.paths.out, run.paths.cbor]]))
    together = _ingest_processes(run, many_url, files)
    for v in together:
        v["source"] = names[v["source"]]
    assert _by_source(together) == alone
    # And the stores they leave hold the same derived state (the tables that name no
    # receipt by its source or its place in ingest order).
    alone_state, together_state = _derived(one_url), _derived(many_url)
    for table in ("links", "replay memory", "seen statuses", "hops", "flags"):
        assert alone_state[table] == together_state[table], table
    assert alone_state["hops"] and alone_state["flags"]


def _derived(url: str) -> dict[str, Any]:
    from app.store.db import make_engine

    engine = make_engine(url)
    try:
        with transaction(engine) as session:
            return snapshot(session)
    finally:
        engine.dispose()


# --- many small requests to one service ------------------------------------------------------


def test_small_requests_leave_what_requests_reading_every_item_leave(
    run: Run, databases: Databases, db_url: str
) -> None:
    """A service keeps the stored envelope items it has read for the requests after
    (``Service.known``): the verdicts, case rows and flags that many small requests leave
    are those the same requests leave when each reads every item of its cases from the
    store again (a fresh ``KnownItems`` per request, as before)."""
    kind = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    lines = run.paths.out.read_bytes().splitlines(keepends=True)
    bodies = [b"".join(lines[i : i + 12]) for i in range(0, len(lines), 12)]
    shared = _post_parts(run, db_url, bodies)
    fresh = _post_parts(run, databases.new(kind), bodies, fresh=True)
    assert shared == fresh
    assert shared["cases"] and shared["flags"] and shared["kept"]


def _post_parts(run: Run, url: str, bodies: list[bytes], *, fresh: bool = False) -> dict[str, Any]:
    settings = Settings(
        database_url=url,
        trust_file=run.paths.trust,
        objects_dir=run.paths.objects,
        ref_policy=RefPolicy.CHECK_AVAILABLE,
    )
    app = create_app(settings, clock=lambda: run.summary.last + 60)
    answers = []
    with TestClient(app, raise_server_exceptions=False) as client:
        service = app.state.service
        with transaction(service.engine) as session:
            token = create_token(session, name="ingest", role=Role.INGEST, now=0)
        for body in bodies:
            if fresh:
                service.known = KnownItems()
            answer = client.post(
                "/api/v1/ingest",
                content=body,
                headers={
                    "Authorization": f"Bearer {token}",
                    "Content-Type": "application/x-ndjson",
                },
            )
            assert answer.status_code == 200, answer.text
            answers.append(answer.json())
        with transaction(service.engine) as session:
            rows = session.exec(select(CaseRow).order_by(CaseRow.case_id))  # type: ignore[arg-type]
            cases = [c.model_dump() for c in rows]
            flags = snapshot(session)["flags"]
        kept = len(service.known.items)
    return {"answers": answers, "cases": cases, "flags": flags, "kept": kept > 0}


def test_two_services_taking_turns_leave_what_one_service_leaves(
    run: Run, databases: Databases, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ``serve`` workers over one database (two engines, each with the envelope items
    it has read, ``Service.known``), taking turns with the requests, give the answers one
    worker gives and leave the same rows: what a worker knows from its own earlier requests
    (the items it read, the keys its cases held) never stands in for what the other stored
    in between."""
    kind = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    lines = run.paths.out.read_bytes().splitlines(keepends=True)
    bodies = [b"".join(lines[i : i + 12]) for i in range(0, len(lines), 12)]
    # Each run starts without the signatures this process verified before (a process-wide
    # memory), so that both write the same signature cache rows.
    monkeypatch.setattr(memory, "_VERIFIED", set())
    one = _post_in_turns(run, [db_url], bodies)
    monkeypatch.setattr(memory, "_VERIFIED", set())
    two = _post_in_turns(run, [databases.new(kind)] * 2, bodies)
    assert one == two
    assert one["rows"]["envelope_case"] and one["rows"]["flag"] and one["rows"]["hop"]


def _post_in_turns(run: Run, urls: list[str], bodies: list[bytes]) -> dict[str, Any]:
    """POST the bodies to one service per URL in turn; the answers and every stored row
    (but the bearer tokens', which are random, and a hop's change mark, which on PostgreSQL
    is the id of the transaction that wrote it)."""
    apps = [
        create_app(
            Settings(
                database_url=url,
                trust_file=run.paths.trust,
                objects_dir=run.paths.objects,
                ref_policy=RefPolicy.CHECK_AVAILABLE,
            ),
            clock=lambda: run.summary.last + 60,
        )
        for url in urls
    ]
    with contextlib.ExitStack() as stack:
        clients = [stack.enter_context(TestClient(app)) for app in apps]
        engine = apps[0].state.service.engine
        with transaction(engine) as session:
            token = create_token(session, name="ingest", role=Role.INGEST, now=0)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
        answers = []
        for n, body in enumerate(bodies):
            answer = clients[n % len(clients)].post("/api/v1/ingest", content=body, headers=headers)
            assert answer.status_code == 200, answer.text
            answers.append(answer.json())
        assert all(len(app.state.service.known.items) for app in apps)
        rows = {}
        with engine.connect() as connection:
            for table in sorted(SQLModel.metadata.tables):
                if table != "api_token":
                    found = connection.exec_driver_sql(f'SELECT * FROM "{table}"')
                    names = list(found.keys())
                    rows[table] = sorted(
                        repr([v for name, v in zip(names, row, strict=True) if name != "change"])
                        for row in found
                    )
    return {"answers": answers, "rows": rows}
