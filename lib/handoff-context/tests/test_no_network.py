"""Profile §2, §9: no URL in an element is ever fetched, and verifying makes no network request.

Every stored vector (including `jku`, `x5u`, refs with a `uri` and carriers naming extension
URIs) is judged again with every way of opening a connection made to fail loudly.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from handoff_context.conformance import check_vector
from handoff_context.vectors import stored_vectors


class NetworkUsed(AssertionError):
    pass


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise NetworkUsed(f"network use attempted: {args!r}")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", _refuse)
    monkeypatch.setattr(socket, "create_connection", _refuse)
    monkeypatch.setattr(socket, "getaddrinfo", _refuse)


def test_every_vector_is_judged_without_the_network(no_network: None) -> None:
    with pytest.raises(NetworkUsed):  # the guard itself works
        socket.getaddrinfo("example.org", 443)
    vectors = stored_vectors()
    assert len(vectors) > 90
    for path in vectors:
        problems = check_vector(json.loads(path.read_text()))
        assert problems == [], path.name
