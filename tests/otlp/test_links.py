"""Links both ways (issue 23): the hop and flag pages show the OTLP trace id and span id the
export gives the hop, and link to the tracing tool through ``HANDOFF_TRACE_TRACE_URL``;
search takes a trace id (to the dialog) or a span id (to the hop)."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from handoff_context import digest_text

from app.otlp.ids import span_hex, trace_hex
from app.store.db import transaction
from app.store.queries import list_flags
from tests.conftest import World
from tests.store.builders import DIALOG, T0, bundle, digest, jsonl, offer, rec, twin
from tests.web.accounts import ACCOUNTS, create_accounts, log_in
from tests.web.conftest import NOW, Api, start

TRACE_URL = "http://jaeger.example:16686/trace/{trace_id}?uiFind={span_id}"


@pytest.fixture
def linked(databases: object, trust_file: Path) -> Iterator[Api]:
    yield from start(databases.new("sqlite"), trust_file, trace_url=TRACE_URL)  # type: ignore[attr-defined]


def load(api: Api, w: World) -> tuple[bytes, bytes]:
    p = offer(w.planner, w.coder, iat=T0)
    x1 = offer(w.planner, w.coder, iat=T0 + 3, dialog="ctx/split&one")
    x2 = twin(w.planner, x1, aud=w.tester.iss)
    records = [
        rec(bundle(p), T0 + 1, w.coder.iss),
        rec(bundle(x1), T0 + 4, w.coder.iss),
        rec(bundle(x2), T0 + 5, w.tester.iss),
    ]
    assert api.post("/api/v1/ingest", jsonl(records), role="ingest").status_code == 200
    create_accounts(api.engine)
    return p, x1


def page(api: Api, path: str) -> str:
    login = log_in(api.engine, ACCOUNTS["read"])
    response = api.client.get(path, headers=login.headers, follow_redirects=False)
    assert response.status_code == 200, response.text
    return response.text


def test_hop_and_flag_pages_link_to_the_trace(linked: Api, world: World) -> None:
    p, x1 = load(linked, world)
    trace, span = trace_hex(DIALOG), span_hex(digest(p))
    text = page(linked, f"/hops/{digest_text(digest(p))}")
    assert f">{trace}</a> · span <span data-span-id>{span}</span>" in text
    link = html.escape(TRACE_URL.replace("{trace_id}", trace).replace("{span_id}", span))
    assert f'<a href="{link}" rel="noreferrer" data-trace-link>' in text
    with transaction(linked.engine) as session:
        (flag,) = list_flags(session, now=NOW)
    text = page(linked, f"/flags/{flag.flag.id}")
    assert f"data-span-id>{span_hex(digest(x1))}</span>" in text
    assert trace_hex("ctx/split&one") in text


def test_without_a_trace_url_the_ids_show_unlinked(sqlite_api: Api, world: World) -> None:
    p, _ = load(sqlite_api, world)
    text = page(sqlite_api, f"/hops/{digest_text(digest(p))}")
    assert f"{trace_hex(DIALOG)} · span" in text and "data-trace-link" not in text


def test_search_takes_a_trace_id_or_a_span_id(sqlite_api: Api, world: World) -> None:
    p, _ = load(sqlite_api, world)
    login = log_in(sqlite_api.engine, ACCOUNTS["read"])

    def search(q: str) -> object:
        return sqlite_api.client.get(
            "/search", params={"q": q}, headers=login.headers, follow_redirects=False
        )

    found = search(trace_hex("ctx/split&one").upper())
    assert found.status_code == 303  # type: ignore[attr-defined]
    assert found.headers["location"] == f"/dialogs/{quote('ctx/split&one')}"  # type: ignore[attr-defined]
    found = search(span_hex(digest(p)))
    assert found.headers["location"] == f"/hops/{digest_text(digest(p))}"  # type: ignore[attr-defined]
    missing = search("0" * 31 + "1")  # a trace id of no stored dialog: the ordinary search
    assert missing.status_code == 200  # type: ignore[attr-defined]
