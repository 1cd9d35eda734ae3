"""Trust rotation (issue 15, item 4): the service reads its trust file again when it
changes; what was refused ``bad-signature`` (a kid the old trust did not hold) is judged
again under the new one, the ``rejected-element`` flag that no longer holds is resolved
with audit entries saying why, and an element a withdrawn key signed is refused but stays
stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from handoff_context import trust_document
from sqlalchemy import select

import app.ingest.rejudge as rejudge_module
from app.settings import Settings
from app.store.db import transaction
from app.store.derived import ReplaceError
from app.store.models import ActionRow, ElementRow, FlagRow, TrustRejudgeRow, VerdictRow
from app.web.app import create_app
from tests.conftest import World
from tests.store.builders import T0, bundle, digest, jsonl, offer, rec
from tests.web.conftest import Api, Clock, start


def write(world: World, path: Path, *, with_alt: bool) -> None:
    doc = trust_document([world.assistant, world.planner, world.coder, world.tester])
    if with_alt:
        doc["issuers"][1]["keys"].append(world.planner_alt.trust_entry()["keys"][0])
    path.write_text(json.dumps(doc))


def flag_of(api: Api, kind: str) -> FlagRow | None:
    with transaction(api.engine) as session:
        return session.execute(select(FlagRow).where(FlagRow.kind == kind)).scalars().first()


def test_a_key_rollout_is_judged_again_and_its_flag_closes(
    databases: object, world: World, tmp_path: Path
) -> None:
    trust = tmp_path / "trust.json"
    write(world, trust, with_alt=False)
    for api in start(databases.new("sqlite"), trust):  # type: ignore[attr-defined]
        rolled = offer(world.planner_alt, world.coder)  # signed with the key not yet trusted
        before = api.post("/api/v1/ingest", jsonl([rec(bundle(rolled), T0 + 1)])).json()
        assert before["verdicts"][0]["reason"] == "bad-signature"  # no key of that kid
        flag = flag_of(api, "rejected-element")
        assert flag is not None and flag.status == "open"
        old = api.get("/api/v1/readyz", role=None).json()["trust_fingerprint"]

        write(world, trust, with_alt=True)  # the rollout
        api.app.state.service.check_trust(force=True)
        ready = api.get("/api/v1/readyz", role=None).json()
        assert ready["trust_fingerprint"] != old

        assert verdicts(api, rolled) == [("accept", None)]
        flag = flag_of(api, "rejected-element")
        assert flag is not None and flag.status == "resolved"
        with transaction(api.engine) as session:
            audit = session.execute(
                select(ActionRow.action, ActionRow.note).where(ActionRow.flag_id == flag.id)
            ).all()
            claimed = session.get(TrustRejudgeRow, ready["trust_fingerprint"])
        assert [a for a, _ in audit] == ["rejudge", "resolve"]
        assert "trust file changed" in audit[0][1] and old[:12] in audit[0][1]
        assert claimed is not None and claimed.judged >= 1 and claimed.closed == 1

        # Withdrawing the key again: the element is refused and stays stored as evidence.
        write(world, trust, with_alt=False)
        api.app.state.service.check_trust(force=True)
        with transaction(api.engine) as session:
            kept = session.get(ElementRow, digest(rolled))
        assert kept is not None and kept.octets == rolled
        assert verdicts(api, rolled) == [("reject", "bad-signature")]


def test_an_unusable_trust_file_keeps_the_old_trust(
    databases: object, world: World, tmp_path: Path
) -> None:
    trust = tmp_path / "trust.json"
    write(world, trust, with_alt=False)
    for api in start(databases.new("sqlite"), trust):  # type: ignore[attr-defined]
        old = api.get("/api/v1/readyz", role=None).json()["trust_fingerprint"]
        trust.write_text("{ half written")
        assert api.app.state.service.check_trust(force=True) is None
        assert api.get("/api/v1/readyz", role=None).json()["trust_fingerprint"] == old


def verdicts(api: Api, octets: bytes) -> list[tuple[str, str | None]]:
    """The stored verdicts of an element, as (outcome, reason)."""
    with transaction(api.engine) as session:
        rows = session.execute(
            select(VerdictRow.outcome, VerdictRow.reason).where(VerdictRow.digest == digest(octets))
        ).all()
    return [(o, r) for o, r in rows]


def test_a_restart_with_the_new_file_judges_the_store_again(
    databases: object, world: World, tmp_path: Path
) -> None:
    """An instance stopped before the rollout and started after it: the store holds a
    rejection made under the old keys, so the new instance judges it again at start."""
    url = databases.new("sqlite")  # type: ignore[attr-defined]
    trust = tmp_path / "trust.json"
    write(world, trust, with_alt=False)
    rolled = offer(world.planner_alt, world.coder)
    for api in start(url, trust):
        api.post("/api/v1/ingest", jsonl([rec(bundle(rolled), T0 + 1)]))
        assert verdicts(api, rolled) == [("reject", "bad-signature")]
    write(world, trust, with_alt=True)
    app = create_app(Settings(database_url=url, trust_file=trust), clock=Clock())
    with TestClient(app) as client:
        again = Api(app, client, Clock())
        app.state.service.rejudge_if_stale()  # the watcher's first step, if not done yet
        assert verdicts(again, rolled) == [("accept", None)]
        flag = flag_of(again, "rejected-element")
        assert flag is not None and flag.status == "resolved"
        assert app.state.service.rejudge_if_stale() is None  # once per trust store


def test_a_failed_rejudgement_is_tried_again(
    databases: object, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Receipts arriving during the replay (or a database error) fail the re-judgement: the
    claim is given up and the next check of the same file tries again."""
    real = rejudge_module.rederive
    calls: list[int] = []

    def once_failing(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise ReplaceError("the re-derived receipts do not match the stored ones")
        return real(*args, **kw)

    trust = tmp_path / "trust.json"
    write(world, trust, with_alt=False)
    for api in start(databases.new("sqlite"), trust):  # type: ignore[attr-defined]
        rolled = offer(world.planner_alt, world.coder)
        api.post("/api/v1/ingest", jsonl([rec(bundle(rolled), T0 + 1)]))
        monkeypatch.setattr(rejudge_module, "rederive", once_failing)
        write(world, trust, with_alt=True)
        service = api.app.state.service
        assert service.check_trust(force=True) is None  # failed, given up
        with transaction(api.engine) as session:
            assert session.execute(select(TrustRejudgeRow)).first() is None
        assert verdicts(api, rolled) == [("reject", "bad-signature")]
        done = service.check_trust()  # the file is unchanged: the pending one is retried
        assert done is not None and done.closed == 1
        assert verdicts(api, rolled) == [("accept", None)]
