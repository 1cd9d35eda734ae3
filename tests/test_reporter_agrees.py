"""The reporter ships only what the service keeps: for each payload, the reporter's
``worth_reporting`` says yes exactly when the service's own reading of a capture record
(``read_capture``: carried objects, item errors, host task states) finds something."""

from __future__ import annotations

import json
from typing import Any

import pytest
from handoff_context.reporter import worth_reporting

from app.capture.carriers import A2A_EXTENSION_URI, MCP_META_KEY, read_capture

KEY = {A2A_EXTENSION_URI: {"offer": "e30.e30.c2ln"}}
MESSAGE = {"messageId": "m-1", "contextId": "c-1", "role": "ROLE_USER", "metadata": KEY}
TASK = {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}

PAYLOADS: dict[str, Any] = {
    # Nothing the service keeps.
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
    # What the service keeps.
    "an A2A send with an offer": {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": MESSAGE},
    },
    "an HTTP+JSON send body": {"message": MESSAGE},
    "a malformed carrying place": {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {**MESSAGE, "metadata": {A2A_EXTENSION_URI: "not a map"}}},
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
    record = {"id": "o-1", "received_at": 1_700_000_000, "payload": payload}
    line = json.dumps(record).encode() + b"\n"
    host: list[Any] = []
    found = list(read_capture(line, name="r.jsonl", on_host=host.append))
    return bool(found or host)


@pytest.mark.parametrize("name", PAYLOADS)
def test_the_reporter_ships_exactly_what_the_service_keeps(name: str) -> None:
    payload = PAYLOADS[name]
    assert worth_reporting(payload) == kept_by_the_service(payload)
    # The list is not one-sided: half of it is kept, half is not.
    assert kept_by_the_service(payload) == (list(PAYLOADS).index(name) >= 8)
