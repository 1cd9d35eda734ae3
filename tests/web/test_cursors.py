"""Crafted pagination cursors (issue #25): a cursor is base64url JSON the API gave out, and
one it never gave out is a 400 ``bad-cursor`` on both databases, never a 500 from deep in
the driver (an integer past a 64-bit column, a lone surrogate, NUL, deep nesting)."""

from __future__ import annotations

import base64
import json

import pytest

from tests.web.conftest import Api


def _cursor(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode("utf-8", "surrogatepass")).rstrip(b"=").decode()


CRAFTED = {
    "int-2^63": ("/api/v1/flags", json.dumps([2**63])),
    "int-below-min": ("/api/v1/flags", json.dumps([-(2**63) - 1])),
    "hops-int-2^63": ("/api/v1/hops", json.dumps([2**63, "a", "b"])),
    "lone-surrogate": ("/api/v1/dialogs", '["\\ud800"]'),
    "nul": ("/api/v1/dialogs", '["a\\u0000b"]'),
    "hops-nul": ("/api/v1/hops", '[1, "a\\u0000", "b"]'),
    "hops-surrogate": ("/api/v1/hops", '[1, "a", "\\udfff"]'),
    "deep": ("/api/v1/flags", "[" * 1500 + "]" * 1500),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_a_crafted_cursor_is_a_400(api: Api, name: str) -> None:
    path, raw = CRAFTED[name]
    answer = api.get(path, params={"cursor": _cursor(raw)}, role="read")
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "bad-cursor"


def test_a_cursor_the_api_gave_out_still_works(api: Api) -> None:
    answer = api.get("/api/v1/flags", params={"cursor": _cursor("[0]")}, role="read")
    assert answer.status_code == 200, answer.text
