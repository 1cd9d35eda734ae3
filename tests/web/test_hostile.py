"""Hostile HTTP against the real app (issue 6, item 4): what an attacker can put in a request
gets a clear 4xx, never a 5xx, and the service goes on serving.

In process (TestClient, on SQLite and PostgreSQL, with every route's token and a logged-in
admin): oversize bodies and elements, wrong content types, malformed multipart, path
traversal and SQL metacharacters in every path and query parameter of every parameterised
route (API and pages), very long query strings and headers, thousands of items in one
request. Against a real ``serve`` process (tests/web/test_served.py starts one): very long
request lines and headers at the socket, chunked bodies over the limit, and slow clients
that trickle their headers or body while other clients are answered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from handoff_context import b64url_encode
from handoff_context.carry import A2A_EXTENSION_URI

from app.store import db
from app.store.tokens import Role
from app.store.users import create_user
from tests.conftest import T0, World
from tests.databases import DB_KINDS, Databases
from tests.store.builders import bundle, jsonl, offer, rec, twin
from tests.web.conftest import Api, start, write_trust

PASSWORD = "a long enough password"
LIMIT = 256 * 1024  # the request body limit of these tests' app

# Path traversal, SQL metacharacters, LIKE wildcards, NUL and other bytes a parameter may
# carry. Written as they appear in a URL: each is percent-encoded where it must be.
HOSTILE = {
    "dotdot": "..",
    "traversal": "../../../../etc/passwd",
    "encoded-traversal": "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "double-encoded": "%252e%252e%252fetc%252fpasswd",
    "backslash-traversal": "..%5c..%5cwindows%5cwin.ini",
    "absolute": "%2fetc%2fpasswd",
    "sql-or": quote("' OR 1=1 --", safe=""),
    "sql-semicolon": quote("x'; DROP TABLE hops; --", safe=""),
    "sql-union": quote("1 UNION SELECT password_hash FROM users", safe=""),
    "like-percent": "%25",
    "like-underscore": "_",
    "nul": "a%00b",
    "nul-only": "%00",
    "bad-utf8": "%ff%fe",
    "lone-surrogate-utf8": "%ed%a0%80",
    "bidi": quote("\u202etxt.exe", safe=""),
    "huge-number": "9" * 40,
    "negative": "-1",
    "float": "1e999",
    "long": "a" * 5000,
}


@pytest.fixture(scope="module", params=DB_KINDS)
def hostile_api(
    request: pytest.FixtureRequest,
    databases: Databases,
    world: World,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Api]:
    """The service on each database (one per module: these tests only add to it), its
    client holding an admin token and an admin's dashboard session (so one request reaches
    both the API and the pages)."""
    trust = write_trust(world, tmp_path_factory.mktemp("hostile") / "trust.json")
    for api in start(databases.new(request.param), trust, max_request_bytes=LIMIT):
        with db.transaction(api.engine) as session:
            create_user(session, username="ada", role=Role.ADMIN, password=PASSWORD, now=T0)
        login = api.client.post(
            "/login",
            data={"username": "ada", "password": PASSWORD, "next": "/"},
            follow_redirects=False,
        )
        assert login.status_code == 303, login.text
        yield api


def csrf(api: Api) -> str:
    found = re.search(r'<meta name="csrf-token" content="([^"]+)">', api.client.get("/").text)
    assert found
    return found.group(1)


def answered_4xx_or_ok(response: Any) -> None:
    """Refused with a 4xx, or answered; never a server error; an API error in the one shape."""
    assert response.status_code < 500, (response.status_code, response.text[:300])
    if response.status_code >= 400 and response.request.url.path.startswith("/api/"):
        assert response.json()["error"]["code"], response.text[:300]


# --- path and query parameters ---------------------------------------------------------

PATH_ROUTES = [
    "/api/v1/hops/{}",
    "/api/v1/dialogs/{}",
    "/api/v1/elements/{}",
    "/api/v1/flags/{}",
    "/dialogs/{}",
    "/hops/{}",
    "/elements/{}",
    "/flags/{}",
    "/upload/reports/{}.json",
    "/static/{}",
]
QUERY_ROUTES = {
    "/api/v1/hops": ["state", "flag", "dialog", "agent", "since", "until", "limit", "cursor"],
    "/api/v1/flags": ["kind", "status", "iss", "hop", "limit", "cursor"],
    "/api/v1/dialogs": ["limit", "cursor"],
    "/hops": ["state", "agent", "dialog", "page"],
    "/dialogs": ["after"],
    "/flags": ["kind", "severity", "status", "agent", "dialog", "assignee", "sort", "page"],
    "/search": ["q"],
    "/login": ["next"],
}


@pytest.mark.parametrize("route", PATH_ROUTES)
def test_hostile_path_parameters(hostile_api: Api, route: str) -> None:
    for value in HOSTILE.values():
        response = hostile_api.get(route.format(value), follow_redirects=False)
        answered_4xx_or_ok(response)
        # Nothing outside the app's own data is ever served.
        assert "root:" not in response.text and "[fonts]" not in response.text


@pytest.mark.parametrize("route", sorted(QUERY_ROUTES))
def test_hostile_query_parameters(hostile_api: Api, route: str) -> None:
    for name in QUERY_ROUTES[route]:
        for value in HOSTILE.values():
            response = hostile_api.get(f"{route}?{name}={value}", follow_redirects=False)
            answered_4xx_or_ok(response)


def test_hostile_verify_parameters(hostile_api: Api, world: World) -> None:
    body = jsonl([rec(bundle(offer(world.planner, world.coder)), T0 + 1)])
    for name in ("receiver", "dialog", "at", "skew", "max_lifetime", "max_chain", "ref_policy"):
        # The ingest route takes the same parameters through the same model.
        routes = ("/api/v1/verify", "/api/v1/ingest") if name == "receiver" else ("/api/v1/verify",)
        for value in HOSTILE.values():
            for route in routes:
                answered_4xx_or_ok(hostile_api.post(f"{route}?{name}={value}", body))


def test_hostile_patch_and_form_targets(hostile_api: Api) -> None:
    token = csrf(hostile_api)
    for value in HOSTILE.values():
        answered_4xx_or_ok(
            hostile_api.client.patch(
                f"/api/v1/flags/{value}",
                json={"action": "acknowledge"},
                headers=hostile_api.auth("admin"),
            )
        )
        answered_4xx_or_ok(
            hostile_api.client.post(
                f"/flags/{value}/action",
                data={"action": "acknowledge", "csrf": token},
                follow_redirects=False,
            )
        )
        answered_4xx_or_ok(
            hostile_api.client.post(
                "/flags/bulk",
                content=f"ids={value}&action=acknowledge&csrf={token}".encode(),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
                follow_redirects=False,
            )
        )


def test_like_wildcards_match_only_themselves(hostile_api: Api, world: World) -> None:
    """``%`` and ``_`` in a search or filter are text, not SQL LIKE wildcards."""
    body = jsonl([rec(bundle(offer(world.planner, world.coder, dialog="ctx-1")), T0 + 1)])
    assert hostile_api.post("/api/v1/ingest", body).status_code == 200
    for wildcard in ("%25", "_", "ctx_1", "ctx%251"):
        assert hostile_api.get(f"/api/v1/hops?dialog={wildcard}").json()["hops"] == []
        assert "ctx-1" not in hostile_api.get(f"/hops?dialog={wildcard}").text
    assert len(hostile_api.get("/api/v1/hops?dialog=ctx-1").json()["hops"]) == 1


# --- bodies ---------------------------------------------------------------------------


def test_a_body_over_the_limit_is_413(hostile_api: Api) -> None:
    big = b"{}\n" * (LIMIT // 3 + 1)
    for route in ("/api/v1/ingest", "/api/v1/verify"):
        response = hostile_api.post(route, big)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "payload-too-large"


def test_a_chunked_body_over_the_limit_is_413(hostile_api: Api) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(LIMIT // 4096 + 2):
            yield b"{}\n" * 1365

    for route in ("/api/v1/ingest", "/api/v1/verify"):
        response = hostile_api.client.post(
            route,
            content=chunks(),
            headers={**hostile_api.auth("admin"), "Content-Type": "application/x-ndjson"},
        )
        assert response.status_code == 413, response.text[:200]


def test_a_lying_content_length_is_refused(hostile_api: Api) -> None:
    for length in ("-1", "1e9", "0x10", "99999999999999999999999"):
        response = hostile_api.client.post(
            "/api/v1/ingest",
            content=b"{}",
            headers={
                **hostile_api.auth("admin"),
                "Content-Type": "application/json",
                "Content-Length": length,
            },
        )
        assert response.status_code in (400, 413), (length, response.status_code)


def test_an_oversize_element_is_rejected_and_the_rest_goes_on(
    hostile_api: Api, world: World
) -> None:
    good = rec(bundle(offer(world.planner, world.coder)), T0 + 1)
    huge = {"offer": "A" * (64 * 1024 + 1)}
    huge_cbor_in_json = {"status": "e" * (100 * 1024)}
    body = jsonl([huge, good, huge_cbor_in_json])
    for route in ("/api/v1/ingest", "/api/v1/verify"):
        verdicts = hostile_api.post(route, body).json()["verdicts"]
        assert [(v["outcome"], v["reason"]) for v in verdicts] == [
            ("reject", "malformed"),
            ("accept" if route.endswith("verify") else verdicts[1]["outcome"], None),
            ("reject", "malformed"),
        ]
        assert "larger than" in verdicts[0]["detail"]


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/xml", "multipart/form-data; boundary=x", "application/jso"],
)
def test_a_wrong_content_type_is_415(hostile_api: Api, content_type: str | None) -> None:
    headers = {**hostile_api.auth("admin")}
    if content_type is not None:
        headers["Content-Type"] = content_type
    for route in ("/api/v1/ingest", "/api/v1/verify"):
        response = hostile_api.client.post(route, content=b"{}", headers=headers)
        assert response.status_code == 415
        assert response.json()["error"]["code"] == "unsupported-media-type"


def test_a_patch_that_is_not_json_is_refused(hostile_api: Api) -> None:
    for content_type, body in (
        ("text/plain", b"action=acknowledge"),
        ("application/json", b"{not json"),
        ("application/json", b"\xff\xfe"),
        ("application/x-www-form-urlencoded", b"action=acknowledge"),
    ):
        response = hostile_api.client.patch(
            "/api/v1/flags/1",
            content=body,
            headers={**hostile_api.auth("admin"), "Content-Type": content_type},
        )
        assert 400 <= response.status_code < 500, response.text
        assert response.json()["error"]["code"]


MALFORMED_MULTIPART = {
    "no-boundary": ("multipart/form-data", b"--x\r\n\r\n"),
    "wrong-boundary": (
        "multipart/form-data; boundary=abc",
        b'--xyz\r\nContent-Disposition: form-data; name="paste"\r\n\r\n{}\r\n--xyz--\r\n',
    ),
    "truncated": (
        "multipart/form-data; boundary=abc",
        b'--abc\r\nContent-Disposition: form-data; name="file"; filename="a.jsonl"\r\n\r\n{}',
    ),
    "no-disposition": ("multipart/form-data; boundary=abc", b"--abc\r\n\r\nx\r\n--abc--\r\n"),
    "garbage": ("multipart/form-data; boundary=abc", b"\x00\xff" * 100),
    "huge-boundary": ("multipart/form-data; boundary=" + "b" * 5000, b"--b\r\n"),
    "many-parts": (
        "multipart/form-data; boundary=abc",
        b"".join(
            b'--abc\r\nContent-Disposition: form-data; name="f%d"\r\n\r\nx\r\n' % i
            for i in range(2000)
        )
        + b"--abc--\r\n",
    ),
    "many-files": (
        "multipart/form-data; boundary=abc",
        b"".join(
            b'--abc\r\nContent-Disposition: form-data; name="file"; filename="%d"\r\n\r\nx\r\n' % i
            for i in range(2000)
        )
        + b"--abc--\r\n",
    ),
}


# A multipart body cut off inside a file part: Starlette's parser ends without an error and
# the unfinished part's SpooledTemporaryFile (in memory below 1 MiB) is never handed to the
# form, so only the garbage collector closes it (a ResourceWarning, not a leak: CPython
# frees it when the request ends). The answer is still a 4xx (no file was received).
_UNFINISHED_PART = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=_UNFINISHED_PART) if c == "truncated" else c
        for c in sorted(MALFORMED_MULTIPART)
    ],
)
def test_malformed_multipart_on_upload_is_4xx(hostile_api: Api, case: str) -> None:
    content_type, body = MALFORMED_MULTIPART[case]
    for with_token in (False, True):
        headers = {"Content-Type": content_type}
        if with_token:
            headers["X-CSRF-Token"] = csrf(hostile_api)
        response = hostile_api.client.post(
            "/upload", content=body, headers=headers, follow_redirects=False
        )
        assert 400 <= response.status_code < 500, (case, response.status_code, response.text[:300])
    assert hostile_api.get("/api/v1/healthz").status_code == 200


def test_very_long_query_strings_and_headers(hostile_api: Api) -> None:
    long = "a" * 60_000
    for path in (f"/api/v1/hops?dialog={long}", f"/api/v1/hops?{long}=1", f"/search?q={long}"):
        answered_4xx_or_ok(hostile_api.get(path))
    many = "&".join(f"p{i}=1" for i in range(5000))
    answered_4xx_or_ok(hostile_api.get(f"/api/v1/hops?{many}"))
    answered_4xx_or_ok(hostile_api.get(f"/hops?{many}"))
    repeated = "&".join("state=offered" for _ in range(4000))
    answered_4xx_or_ok(hostile_api.get(f"/api/v1/hops?{repeated}"))
    for name, value in (
        ("Authorization", "Bearer " + "x" * 100_000),
        ("Cookie", "ht_session=" + "x" * 100_000),
        ("X-CSRF-Token", "x" * 100_000),
        ("Origin", "http://" + "x" * 100_000),
        ("Accept", "text/html;" * 10_000),
    ):
        response = hostile_api.client.get("/api/v1/hops", headers={name: value})
        assert response.status_code < 500


# --- thousands of items in one request ----------------------------------------------------


def test_thousands_of_items_in_one_request(hostile_api: Api, world: World) -> None:
    """A clear answer for each, bounded by the body limit: never a hang or a 500."""
    one = rec(bundle(offer(world.planner, world.coder)), T0 + 1)
    line = json.dumps(one)
    copies = (LIMIT - 1) // (len(line) + 1)
    response = hostile_api.post("/api/v1/verify", jsonl([one] * copies))
    assert response.status_code == 200
    counts = response.json()["counts"]
    assert (counts["accept"], counts["duplicate"]) == (1, copies - 1)
    # Empty objects, a JSON-RPC batch of thousands, a chain of thousands.
    answered_4xx_or_ok(hostile_api.post("/api/v1/ingest", b"{}\n" * 50_000))
    batch = json.dumps([{"jsonrpc": "2.0", "method": "x"}] * 20_000).encode()
    answered_4xx_or_ok(hostile_api.post("/api/v1/ingest", batch, content_type="application/json"))
    chain = {"offer": "a.b.c", "chain": ["a.b.c"] * 20_000}
    verdicts = hostile_api.post("/api/v1/ingest", jsonl([chain])).json()["verdicts"]
    assert [v["outcome"] for v in verdicts] == ["reject"]
    ids = "&".join(f"ids={i}" for i in range(1, 20_000))
    response = hostile_api.client.post(
        "/flags/bulk",
        content=f"{ids}&action=acknowledge&csrf={csrf(hostile_api)}".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert 400 <= response.status_code < 500


def test_digests_with_the_right_shape_but_no_element(hostile_api: Api) -> None:
    missing = b64url_encode(bytes(32))
    for path in (
        f"/api/v1/hops/{missing}",
        f"/api/v1/elements/{missing}",
        f"/hops/{missing}",
        f"/elements/{missing}",
    ):
        assert hostile_api.get(path).status_code == 404


def test_nul_and_metacharacters_in_bodies(hostile_api: Api, world: World) -> None:
    """Text from a body that reaches the store: a flag note and assignee (API and form), a
    login name, a carrier's dialog. PostgreSQL refuses NUL in text, so NUL must be refused
    (or never stored) before the store sees it."""
    first = offer(world.planner, world.coder)
    flagged = [
        rec(bundle(first), T0 + 1),
        rec(bundle(twin(world.planner, first, task="t")), T0 + 2),
    ]
    hostile_api.post("/api/v1/ingest", jsonl(flagged))
    flag_id = hostile_api.get("/api/v1/flags").json()["flags"][0]["id"]
    token = csrf(hostile_api)
    for text in ("a\x00b", "' OR 1=1 --", "%_\\", "\ud800"):
        # A lone surrogate cannot be form-encoded at all, so only JSON bodies carry it.
        in_forms = text != "\ud800"
        for body in (
            {"action": "note", "note": text},
            {"action": "assign", "assignee": text},
            {"action": "resolve", "note": text},
        ):
            answered_4xx_or_ok(
                hostile_api.client.patch(
                    f"/api/v1/flags/{flag_id}",
                    content=json.dumps(body).encode(),
                    headers={**hostile_api.auth("admin"), "Content-Type": "application/json"},
                )
            )
        for form in (
            [{"action": "note", "note": text}, {"action": "assign", "assignee": text}]
            if in_forms
            else []
        ):
            answered_4xx_or_ok(
                hostile_api.client.post(
                    f"/flags/{flag_id}/action",
                    data={**form, "csrf": token},
                    follow_redirects=False,
                )
            )
        if in_forms:
            answered_4xx_or_ok(
                hostile_api.client.post(
                    "/upload", data={"paste": text, "csrf": token}, follow_redirects=False
                )
            )
        message = {
            "messageId": "m",
            "contextId": text,
            "role": "ROLE_USER",
            "metadata": {A2A_EXTENSION_URI: bundle(offer(world.coder, world.tester))},
        }
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
        record = rec(rpc, T0 + 3, by=world.tester.iss)
        response = hostile_api.post("/api/v1/ingest", jsonl([record]))
        answered_4xx_or_ok(response)
        assert response.json()["errors"] == []
    for name in ("a\x00b", "' OR 1=1 --"):
        response = hostile_api.client.post(
            "/login",
            data={"username": name, "password": "x", "next": "/"},
            follow_redirects=False,
        )
        assert response.status_code < 500


def _segment(value: Any) -> str:
    return b64url_encode(json.dumps(value).encode())


def test_nul_and_surrogates_inside_elements_and_carriers_are_stored_or_refused(
    hostile_api: Api, world: World
) -> None:
    """Text from inside an element or its carrier that a verdict or an observation echoes
    (a header member's name, a contextId, a taskId, a file name) must not make the store
    fail: every item is judged, none is an error."""
    typ = {"alg": "Ed25519", "typ": "handoff-offer+jws"}
    good = bundle(offer(world.coder, world.tester))
    for text in ("x\x00y", "x\ud800y"):
        elements = [
            f"{_segment({**typ, text: 1})}.{_segment({})}.AA",
            f"{_segment({**typ, 'kid': text})}.{_segment({})}.AA",
            f"{_segment({**typ, 'alg': text})}.{_segment({})}.AA",
            f"{_segment(typ)}.{_segment({'v': 1, 'type': 'offer', text: 1})}.AA",
        ]
        message = {
            "messageId": text,
            "contextId": text,
            "taskId": text,
            "role": "ROLE_USER",
            "metadata": {A2A_EXTENSION_URI: good},
        }
        payloads: list[Any] = [{"offer": e} for e in elements]
        payloads.append({"jsonrpc": "2.0", "method": "SendMessage", "params": {"message": message}})
        payloads.append({"jsonrpc": "2.0", "result": {"kind": "task", "id": text, "status": {}}})
        payloads.append({text: {"offer": text}})
        payloads.append(rec({"offer": good["offer"]}, T0 + 1, by=text))
        body = "".join(json.dumps(p) + "\n" for p in payloads).encode()
        response = hostile_api.post("/api/v1/ingest", body)
        assert response.status_code == 200, response.text[:300]
        assert response.json()["errors"] == []
