"""Trust sources in the service (issue 21, "Done when"): rotation, revocation and outage
drills against a loopback JWKS server, and three instances on one PostgreSQL agreeing on the
key history. Each trust check is driven by ``check_trust()`` and the store's clock is moved
by hand: nothing waits for a refresher."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from handoff_context import Signer
from keyservers import KeyServer, jwks, key_server
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from app.cli import main as cli_main
from app.settings import Settings
from app.store.db import transaction
from app.store.models import FlagRow, TrustEventRow, TrustRejudgeRow, VerdictRow
from app.store.tokens import Role
from app.store.users import create_user
from app.web.app import create_app
from tests.store.builders import T0, bundle, digest, jsonl, offer, rec
from tests.web.conftest import Api, Clock, make_tokens

PLANNER = "spiffe://a.example/agent/planner"
CODER = "spiffe://b.example/agent/coder"
HINT = 60
PASSWORD = "a long enough password"


@pytest.fixture
def server() -> Iterator[KeyServer]:
    with key_server() as s:
        yield s


def config(server: KeyServer, path: Path, **extra: Any) -> Path:
    coder = Signer.generate(CODER, "ES256", kid="c1")  # a listed issuer beside the source
    doc = {
        "issuers": [coder.trust_entry()],
        "sources": [
            {
                "name": "planner-jwks",
                "kind": "jwks",
                "url": server.url("/planner/jwks.json"),
                "identifiers": [PLANNER],
                "refresh_seconds": HINT,
            }
        ],
        **extra,
    }
    path.write_text(json.dumps(doc))
    return path


@contextlib.contextmanager
def service(
    url: str, trust: Path, clock: Clock, tokens: dict[str, str] | None = None
) -> Iterator[Api]:
    app = create_app(Settings(database_url=url, trust_file=trust), clock=clock)
    with TestClient(app, raise_server_exceptions=False) as client:
        api = Api(app, client, clock)
        api.tokens = make_tokens(api.engine) if tokens is None else tokens
        yield api


def ingest(api: Api, octets: bytes, at: int) -> dict[str, Any]:
    response = api.post("/api/v1/ingest", jsonl([rec(bundle(octets), at)]))
    assert response.status_code == 200, response.text
    verdict: dict[str, Any] = response.json()["verdicts"][0]
    return verdict


def stored(api: Api, octets: bytes) -> list[tuple[str, str | None]]:
    with transaction(api.engine) as session:
        rows = session.execute(
            select(VerdictRow.outcome, VerdictRow.reason).where(VerdictRow.digest == digest(octets))
        ).all()
    return [(o, r) for o, r in rows]


def flags(api: Api) -> list[tuple[str, str, str]]:
    with transaction(api.engine) as session:
        rows = session.execute(select(FlagRow.kind, FlagRow.variant, FlagRow.status)).all()
    return [(k, v or "", s) for k, v, s in rows]


def check(api: Api, advance: int = 0) -> None:
    api.clock.now += advance
    api.app.state.service.check_trust()


def history(api: Api) -> list[tuple[str, int, int | None]]:
    return [(w.kid, w.first_seen, w.stopped_at) for w in api.app.state.service.sources.windows()]


def trust_page(api: Api) -> str:
    """The trust page, as an operator signed in to the dashboard sees it."""
    with transaction(api.engine) as session:
        create_user(session, username="ada", role=Role.ADMIN, password=PASSWORD, now=T0)
    form = {"username": "ada", "password": PASSWORD, "next": "/"}
    assert api.client.post("/login", data=form, follow_redirects=False).status_code == 303
    page = api.client.get("/trust")
    assert page.status_code == 200
    return str(page.text)


def gauge(api: Api, name: str, **labels: str) -> float | None:
    text = api.get("/api/v1/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def test_rotation_drill_in_the_service(
    databases: Any, server: KeyServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = Signer.generate(PLANNER, "ES256", kid="p1")
    new = Signer.generate(PLANNER, "Ed25519", kid="p2")
    server.serve("/planner/jwks.json", jwks(old))
    url, trust = databases.new("sqlite"), config(server, tmp_path / "trust.json")
    clock = Clock(T0)
    with service(url, trust, clock) as api:
        before = offer(old, CODER, iat=T0)
        assert ingest(api, before, T0 + 1)["outcome"] == "accept"

        server.serve("/planner/jwks.json", jwks(old, new))  # the new key, published
        check(api, HINT)  # one refresh hint later: no restart
        fresh = offer(new, CODER, iat=clock.now)
        assert ingest(api, fresh, clock.now + 1)["outcome"] == "accept"

        server.serve("/planner/jwks.json", jwks(new))  # the old key, dropped
        check(api, HINT)
        dropped = clock.now
        assert history(api) == [("p1", T0, dropped), ("p2", T0 + HINT, None)]
        assert stored(api, before) == [("accept", None)]  # judged again: still verifies
        assert [f for f in flags(api) if f[0] == "rejected-element"] == []

        late = offer(old, CODER, iat=dropped + 120)
        verdict = ingest(api, late, dropped + 121)
        assert (verdict["outcome"], verdict["reason"]) == ("reject", "untrusted-key")

        page = trust_page(api)
        assert "planner-jwks" in page and "Key history" in page and "p2" in page
    # rederive (the CLI) judges with the store's key history: the old offer still verifies.
    capsys.readouterr()
    code = cli_main(["rederive", "--db", url, "--trust", str(trust), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0, out  # 0: rederiving changes nothing


def test_revocation_drill_in_the_service(databases: Any, server: KeyServer, tmp_path: Path) -> None:
    key = Signer.generate(PLANNER, "ES256", kid="p1")
    server.serve("/planner/jwks.json", jwks(key))
    trust = config(server, tmp_path / "trust.json")
    clock = Clock(T0 + 100)
    with service(databases.new("sqlite"), trust, clock) as api:
        revoked_at = T0 + 20
        before, after = offer(key, CODER, iat=T0 + 10), offer(key, CODER, iat=T0 + 30)
        for o, at in ((before, T0 + 11), (after, T0 + 31)):
            assert ingest(api, o, at)["outcome"] == "accept"
        thumbprint = api.app.state.service.sources.windows()[0].thumbprint
        body = json.dumps({"thumbprint": thumbprint, "at": revoked_at, "reason": "leaked"})
        refused = api.post(
            "/api/v1/trust/revocations",
            body.encode(),
            content_type="application/json",
            role="operator",
        )
        assert refused.status_code == 403
        bad = api.post("/api/v1/trust/revocations", b'{"at": 5}', content_type="application/json")
        assert bad.status_code == 422 and "thumbprint or kid" in bad.text
        done = api.post("/api/v1/trust/revocations", body.encode(), content_type="application/json")
        assert done.status_code == 201, done.text
        assert done.json()["by"].startswith("token:")

        # At the edge: a new offer under the key is refused at once.
        new = offer(key, CODER, iat=clock.now)
        verdict = ingest(api, new, clock.now + 1)
        assert (verdict["outcome"], verdict["reason"]) == ("reject", "untrusted-key")
        # The store, judged again by the next trust check: after T flagged, before untouched.
        check(api)
        assert stored(api, before) == [("accept", None)]
        assert stored(api, after) == [("reject", "untrusted-key")]
        assert ("rejected-element", "untrusted-key", "open") in flags(api)
        with transaction(api.engine) as session:
            kinds = [e.kind for e in session.execute(select(TrustEventRow)).scalars()]
        assert kinds[:1] == ["fetched"] and "revoked" in kinds
        page = trust_page(api)
        assert "Revoked keys" in page and "leaked" in page


def test_outage_drill_in_the_service(databases: Any, server: KeyServer, tmp_path: Path) -> None:
    key = Signer.generate(PLANNER, "ES256", kid="p1")
    server.serve("/planner/jwks.json", jwks(key))
    trust = config(server, tmp_path / "trust.json")
    clock = Clock(T0)
    with service(databases.new("sqlite"), trust, clock) as api:
        assert gauge(api, "handoff_trace_trust_source_stale", source="planner-jwks") == 0
        server.down("/planner/jwks.json")
        for _ in range(10):
            check(api, HINT)
            o = offer(key, CODER, iat=clock.now)
            assert ingest(api, o, clock.now + 1)["outcome"] == "accept"
        server.serve("/planner/jwks.json", b"\xff\xfe garbage")
        check(api, HINT)
        o = offer(key, CODER, iat=clock.now)
        assert ingest(api, o, clock.now + 1)["outcome"] == "accept"
        assert gauge(api, "handoff_trace_trust_source_stale", source="planner-jwks") == 1
        last = "handoff_trace_trust_source_last_success_timestamp_seconds"
        assert gauge(api, last, source="planner-jwks") == T0
        page = trust_page(api)
        assert "stale" in page and "the last good key set is kept" in page
        assert history(api) == [("p1", T0, None)]
        with transaction(api.engine) as session:
            kinds = [e.kind for e in session.execute(select(TrustEventRow)).scalars()]
        # The audit log holds the changes, not one entry per failed fetch.
        assert kinds == ["fetched", "unreachable", "refused"]


def test_three_instances_on_one_postgresql_share_the_key_history(
    databases: Any, server: KeyServer, tmp_path: Path
) -> None:
    old = Signer.generate(PLANNER, "ES256", kid="p1")
    new = Signer.generate(PLANNER, "ES256", kid="p2")
    server.serve("/planner/jwks.json", jwks(old))
    url, trust = databases.new("postgresql"), config(server, tmp_path / "trust.json")
    clock = Clock(T0)
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(service(url, trust, clock))
        b, c = (stack.enter_context(service(url, trust, clock, a.tokens)) for _ in range(2))
        before = offer(old, CODER, iat=T0)
        assert ingest(a, before, T0 + 1)["outcome"] == "accept"
        server.serve("/planner/jwks.json", jwks(old, new))
        check(b, HINT)  # only b fetches the new set...
        server.serve("/planner/jwks.json", jwks(new))
        check(c, HINT)  # ...and only c sees the old key go
        for api in (a, b, c):
            check(api)  # each takes in what the others recorded
        histories = [history(api) for api in (a, b, c)]
        assert histories[0] == [("p1", T0, T0 + 2 * HINT), ("p2", T0 + HINT, None)]
        assert histories[0] == histories[1] == histories[2]
        prints = {api.app.state.service.trust.fingerprint for api in (a, b, c)}
        assert len(prints) == 1
        with transaction(a.engine) as session:
            judged = session.get(TrustRejudgeRow, prints.pop())
        assert judged is not None  # judged again once, by one of them
        for api in (a, b, c):
            late = offer(old, CODER, iat=clock.now + 100)
            assert ingest(api, late, clock.now + 101)["reason"] == "untrusted-key"
        assert stored(a, before) == [("accept", None)]
