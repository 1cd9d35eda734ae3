"""Webhook notifications end to end: a receiver on loopback gets the alert for a new
critical flag (an equivocation ingested through the API), signed with HMAC-SHA256, in the
Alertmanager shape; a failing receiver is retried with backoff; the delivery log shows it
all. Plus the targets file's checks and the three body shapes."""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from handoff_context import Signer, make_offer, trust_document

from app.notify.bodies import render_body
from app.notify.targets import Target, TargetError, parse_targets
from app.settings import Settings
from app.store import db
from app.store.models import FlagRow
from app.store.tokens import Role, create_token
from app.store.users import create_user
from app.web.app import create_app

SECRET = "a webhook secret of some length"
NOW = 1_800_000_000
ISSUER = "spiffe://a.example/agent/planner"
DELEGATE = "spiffe://b.example/agent/coder"


class Receiver:
    """An HTTP server on loopback that records each call; ``fail`` answers 500 that many
    times first."""

    def __init__(self, fail: int = 0) -> None:
        self.calls: queue.Queue[tuple[dict[str, str], bytes]] = queue.Queue()
        self.fail = fail
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                failing = outer.fail > 0
                outer.fail -= 1
                self.send_response(500 if failing else 204)
                self.end_headers()
                outer.calls.put(({k.lower(): v for k, v in self.headers.items()}, body))

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def next(self) -> tuple[dict[str, str], bytes]:
        return self.calls.get(timeout=30)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def _serve(tmp: Path, targets: list[dict[str, Any]]) -> tuple[TestClient, Signer, str]:
    signer = Signer.generate(ISSUER, "Ed25519", kid="planner-1")
    coder = Signer.generate(DELEGATE, "Ed25519", kid="coder-1")
    trust = tmp / "trust.json"
    trust.write_text(json.dumps(trust_document([signer, coder])))
    hooks = tmp / "webhooks.json"
    hooks.write_text(json.dumps({"targets": targets}))
    url = f"sqlite:///{tmp / 'store.db'}"
    settings = Settings(
        database_url=url,
        trust_file=trust,
        webhooks_file=hooks,
        webhook_seconds=1,
        webhook_allow_private=True,  # the receivers are on loopback
    )
    app = create_app(settings, clock=lambda: NOW)
    client = TestClient(app)
    client.__enter__()
    engine = app.state.service.engine
    with db.transaction(engine) as session:
        token = create_token(session, name="ingest", role=Role.ADMIN, now=NOW)
        create_user(
            session, username="otto", role=Role.OPERATOR, password="a long enough password", now=NOW
        )
    return client, signer, token


def _equivocate(client: TestClient, signer: Signer, token: str) -> None:
    lines = [
        {"received_at": NOW - 50 + i, "received_by": DELEGATE, "payload": {"offer": make_offer(
            signer, aud=DELEGATE, dialog="ctx-1", iat=NOW - 60, hop="hopEquivocatingOnce0123456",
            task=f"task-{i}").decode()}}
        for i in range(2)
    ]  # fmt: skip
    response = client.post(
        "/api/v1/ingest",
        content="".join(json.dumps(line) + "\n" for line in lines).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
    )
    assert response.status_code == 200, response.text


def test_a_new_critical_flag_reaches_a_receiver_on_loopback(
    tmp_path: Path, receiver: Receiver
) -> None:
    # Credentials in the URL (user-info, a secret query) as some receivers want them.
    url = receiver.url.replace("http://", "http://hook:pw-in-url-123@") + "?token=path-secret-9"
    target = {
        "name": "pager",
        "url": url,
        "shape": "alertmanager",
        "min_severity": "critical",
        "secret": SECRET,
        "link_base": "https://trace.example",
    }
    client, signer, token = _serve(tmp_path, [target])
    try:
        _equivocate(client, signer, token)
        headers, body = receiver.next()
        stamp, mac = headers["x-handoff-trace-signature"].split(",")
        timestamp = stamp.removeprefix("t=")
        expected = hmac.new(SECRET.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
        assert mac == "v1=" + expected.hexdigest()
        alert = json.loads(body)
        assert alert["version"] == "4" and alert["status"] == "firing"
        [one] = alert["alerts"]
        assert one["labels"]["severity"] == "critical"
        assert one["labels"]["kind"] == "equivocation"
        assert one["generatorURL"].startswith("https://trace.example/flags/")
        # The delivery log says so.
        login = {"username": "otto", "password": "a long enough password", "next": "/"}
        client.post("/login", data=login)
        page = client.get("/notifications").text
        assert "pager" in page and "badge delivery delivered" in page
        assert SECRET not in page
        assert "pw-in-url-123" not in page and "path-secret-9" not in page
        assert headers["authorization"].startswith("Basic ")  # the user-info still used
    finally:
        client.__exit__(None, None, None)


def test_a_failing_receiver_is_tried_again(tmp_path: Path) -> None:
    failing = Receiver(fail=1)
    target = {"name": "flaky", "url": failing.url, "min_severity": "high", "retry_seconds": 1}
    client, signer, token = _serve(tmp_path, [target])
    try:
        _equivocate(client, signer, token)
        first_headers, first = failing.next()
        second_headers, second = failing.next()
        assert first == second  # a retry sends the same body
        assert "x-handoff-trace-signature" not in first_headers  # no secret, no signature
        assert (
            first_headers["x-handoff-trace-delivery"] == second_headers["x-handoff-trace-delivery"]
        )
        event = json.loads(second)
        assert event["event"] == "flag.opened" and event["flag"]["severity"] == "critical"
    finally:
        client.__exit__(None, None, None)
        failing.close()


def test_the_targets_file_is_checked() -> None:
    ok = parse_targets({"targets": [{"name": "a", "url": "https://hooks.example/x"}]})
    assert ok[0].shape == "generic" and ok[0].min_severity == "high"
    for bad, message in (
        ({"targets": [{"name": "a", "url": "ftp://x"}]}, "http"),
        ({"targets": [{"name": "a", "url": "https://x", "shape": "xml"}]}, "shape"),
        ({"targets": [{"name": "a", "url": "https://x", "secret": "short"}]}, "16 characters"),
        (
            {"targets": [{"name": "a", "url": "https://x", "min_severity": "urgent"}]},
            "min_severity",
        ),
        ({"targets": [{"name": "a", "url": "https://x", "colour": "red"}]}, "unknown member"),
        (
            {"targets": [{"name": "a", "url": "https://x"}, {"name": "a", "url": "https://y"}]},
            "same name",
        ),
        ({"hooks": []}, "targets"),
    ):
        with pytest.raises(TargetError, match=message):
            parse_targets(bad)


def test_severity_thresholds() -> None:
    target = Target("t", "https://x", min_severity="high")
    assert target.wants("critical") and target.wants("high")
    assert not target.wants("medium") and not target.wants("nonsense")


def test_the_slack_shape_escapes_what_signers_chose() -> None:
    flag = FlagRow(
        id=7, key="k" * 64, kind="equivocation", severity="critical", evidence=[],
        iss="spiffe://evil/<!channel>", hop="h", opened_at=NOW, detail="a & b", updated_at=NOW,
    )  # fmt: skip
    body = json.loads(render_body(Target("s", "https://x", shape="slack"), "opened", flag, now=NOW))
    text = body["blocks"][0]["text"]["text"]
    assert "&lt;!channel&gt;" in text and "a &amp; b" in text and "<!channel>" not in text
