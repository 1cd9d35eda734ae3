"""The reporter ships only what the service keeps: for each payload, the reporter's
``worth_reporting`` says yes exactly when the service's own reading of a capture record
(``read_capture``: carried objects, item errors, host task states) finds something."""

from __future__ import annotations

import json
from typing import Any

import pytest
from handoff_context.reporter import worth_reporting
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.capture.carriers import A2A_EXTENSION_URI, MCP_META_KEY, Carried, read_capture

KEY = {A2A_EXTENSION_URI: {"offer": "e30.e30.c2ln"}}
MESSAGE = {"messageId": "m-1", "contextId": "c-1", "role": "ROLE_USER", "metadata": KEY}
TASK = {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}

NOT_KEPT: dict[str, Any] = {
    "an A2A ListTasks answer": {"jsonrpc": "2.0", "id": 1, "result": {"tasks": [TASK]}},
    "a Task whose history alone holds the offer": {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"task": {"id": "t-1", "history": [MESSAGE], "status": {"state": "?"}}},
    },
    "a status update in an unknown state": {"statusUpdate": {**TASK, "status": {"state": "X"}}},
    "metadata outside any message": {"metadata": KEY},
    "an MCP result without our key": {"jsonrpc": "2.0", "id": 2, "result": {"_meta": {}}},
    "an MCP ping": {"jsonrpc": "2.0", "id": 3, "method": "ping"},
    "an error answer": {"jsonrpc": "2.0", "id": 4, "error": {"code": -1, "message": "no"}},
    "a batch of nothing": [{"jsonrpc": "2.0", "method": "ping"}],
    "a malformed carrying place (only counted as an error)": {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {**MESSAGE, "metadata": {A2A_EXTENSION_URI: "not a map"}}},
    },
    "a capture record inside the record": {"payload": {"statusUpdate": TASK}},
}
KEPT: dict[str, Any] = {
    "an A2A send with an offer": {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": MESSAGE},
    },
    "an HTTP+JSON send body": {"message": MESSAGE},
    "a malformed offer (kept as evidence)": {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {**MESSAGE, "metadata": {A2A_EXTENSION_URI: {"offer": 7}}}},
    },
    "a host task state": {"jsonrpc": "2.0", "id": 1, "result": {"task": TASK}},
    "an A2A 0.3 status update": {
        "kind": "status-update",
        "taskId": "t-1",
        "status": {"state": "completed"},
    },
    "an MCP result with our key": {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {"_meta": {MCP_META_KEY: {"status": "e30.e30.c2ln"}}},
    },
    "an A2A cancel with a canceled": {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "CancelTask",
        "params": {"id": "t-1", "metadata": KEY},
    },
    "a batch holding one": [{"jsonrpc": "2.0", "method": "ping"}, {"statusUpdate": TASK}],
}


def kept_by_the_service(payload: Any) -> bool:
    """Whether the service's reading of a capture record finds anything it stores: a
    carried object (stored even when malformed) or a host task state. Item errors are
    counted in its answer, not stored."""
    record = {"id": "o-1", "received_at": 1_700_000_000, "payload": payload}
    line = json.dumps(record).encode() + b"\n"
    host: list[Any] = []
    found = list(read_capture(line, name="r.jsonl", on_host=host.append))
    return bool(host) or any(isinstance(f, Carried) for f in found)


@pytest.mark.parametrize(
    ("name", "kept"), [(n, False) for n in NOT_KEPT] + [(n, True) for n in KEPT]
)
def test_the_reporter_ships_exactly_what_the_service_keeps(name: str, kept: bool) -> None:
    payload = {**NOT_KEPT, **KEPT}[name]
    assert kept_by_the_service(payload) == kept
    assert worth_reporting(payload) == kept


# --- any message built from the carriers' own words ---------------------------------------

WORDS = [
    "jsonrpc", "id", "method", "params", "result", "error", "message", "task", "statusUpdate",
    "status_update", "status", "state", "metadata", "_meta", "messageId", "taskId", "contextId",
    "kind", "tasks", "history", "role", "payload", "offer", A2A_EXTENSION_URI, MCP_META_KEY,
]  # fmt: skip
TEXTS = [
    "SendMessage", "message/send", "CancelTask", "tasks/cancel", "tools/call", "ListTasks",
    "TASK_STATE_WORKING", "completed", "X", "task", "status-update", "message", "ROLE_USER",
    "agent", "t-1", "e30.e30.c2ln",
]  # fmt: skip

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from(TEXTS),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(WORDS), inner, max_size=5)
    ),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=json_values)
def test_the_reporter_agrees_with_the_service_on_any_payload(payload: Any) -> None:
    assert worth_reporting(payload) == kept_by_the_service(payload)
